"""The queue's credit part: publishers are slowed while the queue grows
faster than its consumers drain it, in the spirit of RabbitMQ's
credit_flow (rabbit_common/src/credit_flow.erl).

In RabbitMQ a queue process grants credit to the channels that send to it
as it takes their messages in, and a connection whose channel ran out of
credit is not read ('flow'), so that no process is handed messages faster
than it works.  Here the queue takes a message in at once, in the same
turn of the loop; what can fall behind is its consumers' share of the
loop.  So a queue grants credit by draining: while it has consumers and
its ready messages stay within a high mark (HIGH_COUNT messages and
HIGH_BYTES bytes by default) of the fewest it has held since its
consumers came (`base`, which follows the backlog down), its publishers
go on; past that it withholds credit, and every connection that publishes
into it stops being read (protocol/flow.py) until it has drained back to
within half of the marks.
A queue with no consumers never withholds credit: it fills as it always
did, up to its limits and the memory alarm.

A queue whose consumers take nothing for a whole tick while it withholds
credit is not slow but stuck (or waiting for acks that a held connection
would send): it grants credit to all and withholds none until it delivers
again, so that no publisher waits on it for good.

Owns: the backlog mark growth is counted from, whether credit is
withheld, the publishers waiting for it (opaque objects with a
`credit_granted(queue)` method: protocol/flow.py's), and the deliveries
counted at the last tick.

Interface (the queue calls it; counts are its ready messages, in memory
and paged, and their body bytes):

    set_limits(count, size)         the high marks (the low ones are half; 0: never withhold)
    consumers_came(count, size)     the first consumer: growth is counted from here
    grew(count, size) -> bool       after an append while it has consumers:
                                    True when it withholds credit from now on
    drained(count, size, delivered) -> senders
                                    after a dispatch (`delivered`: the queue's
                                    delivery count): those to grant credit to
    wait(sender)                    a publisher that published while credit was withheld
    forget(sender)                  a publisher gone
    release() -> senders            no consumers left, purged, deleted: all of them
    tick(delivered) -> senders      once a second, with its delivery count
"""

from __future__ import annotations

from functools import cache

# How far the backlog of a queue with consumers may grow past its base
# before publishers wait (the config's credit_flow_backlog and
# credit_flow_backlog_bytes); they go on once it has drained back to half
# of that, as RabbitMQ grants more credit after half its initial credit.
# Far below the memory alarm; the low mark leaves the consumers enough to
# take while a released publisher is read again.
HIGH_COUNT = 20_000
HIGH_BYTES = 64 << 20

_NONE: tuple = ()


@cache
def _marks(count: int, size: int) -> tuple[int, int, int, int]:
    """(high count, low count, high bytes, low bytes), one tuple shared by
    every queue with the same limits."""
    return (count if count > 0 else 1 << 62, count // 2,
            size if size > 0 else 1 << 62, size // 2)


class Credit:
    __slots__ = ("base_count", "base_bytes", "withholding", "waiting", "stalled",
                 "_delivered", "_quiet_ticks", "_marks", "mark", "mark_bytes")

    def __init__(self, count: int = HIGH_COUNT, size: int = HIGH_BYTES) -> None:
        self.base_count = 0
        self.base_bytes = 0
        self.withholding = False
        # A set once a publisher waits (a broker may have 100,000 queues).
        self.waiting: set | tuple = _NONE
        self.stalled = False  # took nothing for a tick: withholds nothing until it delivers
        self._delivered = -1  # the delivery count at the last tick
        self._quiet_ticks = 0
        self.set_limits(count, size)

    def set_limits(self, count: int, size: int) -> None:
        self._marks = _marks(count, size)
        self._moved()

    def _moved(self) -> None:
        """The base or the limits changed: past `mark` messages or
        `mark_bytes` bytes the queue asks `grew` (checked by the queue
        before the call, once per message appended)."""
        high_count, _, high_bytes, _ = self._marks
        # (From no base, the shared marks themselves: no int objects per queue.)
        self.mark = self.base_count + high_count if self.base_count else high_count
        self.mark_bytes = self.base_bytes + high_bytes if self.base_bytes else high_bytes

    def consumers_came(self, count: int, size: int) -> None:
        self.base_count = count
        self.base_bytes = size
        self._moved()

    def grew(self, count: int, size: int) -> bool:
        if self.withholding or self.stalled:
            return self.withholding
        high_count, _, high_bytes, _ = self._marks
        if count - self.base_count > high_count or size - self.base_bytes > high_bytes:
            self.withholding = True
            self._quiet_ticks = 0
        return self.withholding

    def drained(self, count: int, size: int, delivered: int):
        if self.stalled and delivered != self._delivered:
            self.stalled = False  # it delivers again
        if count < self.base_count or size < self.base_bytes:
            self.base_count = min(count, self.base_count)
            self.base_bytes = min(size, self.base_bytes)
            self._moved()
        if not self.withholding:
            return _NONE
        _, low_count, _, low_bytes = self._marks
        if count - self.base_count <= low_count and size - self.base_bytes <= low_bytes:
            return self.release()
        return _NONE

    def wait(self, sender) -> None:
        waiting = self.waiting
        if not isinstance(waiting, set):
            waiting = self.waiting = set()
        waiting.add(sender)

    def forget(self, sender) -> None:
        if isinstance(self.waiting, set):
            self.waiting.discard(sender)

    def release(self):
        """Credit to every waiting publisher; none is withheld now."""
        self.withholding = False
        waiting, self.waiting = self.waiting, _NONE
        return waiting

    def tick(self, delivered: int):
        """Once a second: a queue that withheld credit and delivered
        nothing over a whole tick is stuck: it releases its publishers."""
        moved = delivered != self._delivered
        self._delivered = delivered
        if moved:
            self.stalled = False
            self._quiet_ticks = 0
            return _NONE
        if not self.withholding:
            return _NONE
        self._quiet_ticks += 1
        if self._quiet_ticks < 2:  # the first tick may come right after it began
            return _NONE
        self.stalled = True
        return self.release()
