"""Flow control of one connection: whether the broker reads from the peer,
and how much more it may write to it.

Owns every reason to stop reading and the room left for writing, and
decides both in one place (`_decide`), as uvicorn's flow_control.py does
for HTTP:

- a resource alarm (memory, disk) while the connection publishes: the
  client is told with connection.blocked (when it asked to be) and is no
  longer read; consumers keep being served;
- a busy store, or a cluster leader holding publishes until enough copies
  are in sync (broker.store_busy): a publishing connection is not read,
  without being told;
- a peer that does not read its socket (the transport paused our writing):
  its requests are not read either, since their answers would pile up;
- a refused login: nothing more is read while the refusal waits to be sent.

A closing connection is read whatever else holds, as RabbitMQ's reader
leaves its `blocked` state when it closes: the client's close-ok (or the
end of its socket) is all that is awaited then, and nothing else it sends
is taken.

Writing: deliveries stop being queued past OUTPUT_HIGH_WATER bytes of
unsent output (so a consumer without prefetch cannot pull a whole queue
into memory), or while the transport's own buffer is full; `starved` notes
that a delivery was held back, so that the connection redispatches once
the output drains.  A channel the client paused with channel.flow
active=false gets no deliveries until it sends active=true.

Needs: a `resources` object with `alarms` (a set of resource names) and
`store_busy` (the broker), a `transport` with pause_reading/resume_reading
once there is one (`attach`), and an `announce(reason | None)` hook that
tells the client it is blocked (a reason) or unblocked (None).  No socket,
clock or event loop: tests drive it with plain objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

# Bytes of unsent output past which deliveries wait.
OUTPUT_HIGH_WATER = 1 << 20
# The transport's buffer limits, which the shell sets: a peer that does not
# read its socket gets at most this much buffered there; past it the
# transport pauses our writing (deliveries stop, and its requests are no
# longer read: their answers would pile up too) until the buffer drains
# below the low mark.
WRITE_HIGH_WATER = 1 << 20
WRITE_LOW_WATER = 256 << 10

# The reasons to stop reading, as `reasons()` names them.
ALARM = "alarm"
STORE_BUSY = "store busy"
PEER_NOT_READING = "peer not reading"
LOGIN_REFUSED = "login refused"


class Resources(Protocol):
    alarms: set
    store_busy: bool


class Transport(Protocol):
    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Flow:
    __slots__ = ("_resources", "_announce", "_transport", "publishing", "blocked",
                 "writable", "login_refused", "buffered", "starved", "reading",
                 "_paused_channels", "_closing")

    def __init__(self, resources: Resources,
                 announce: Callable[[str | None], None] = lambda reason: None) -> None:
        self._resources = resources
        self._announce = announce
        self._transport: Transport | None = None
        self.publishing = False  # has published: a resource alarm blocks it
        self.blocked = False  # told the client connection.blocked (or would have)
        self.writable = True  # the transport takes more output
        self.login_refused = False
        self.buffered = 0  # bytes of output not yet handed to the transport
        self.starved = False  # a delivery waited for room
        self.reading = True
        self._paused_channels: set[int] = set()  # channel.flow active=false
        self._closing = False

    # ---- reading -------------------------------------------------------

    def attach(self, transport: Transport) -> None:
        """The transport whose reading this object pauses and resumes."""
        self._transport = transport
        self._decide()

    def reasons(self) -> set[str]:
        """Why the connection is not read now (empty: it is read)."""
        reasons: set[str] = set()
        if self._closing:
            return reasons
        if self.blocked:
            reasons.add(ALARM)
        if self.publishing and self._resources.store_busy:
            reasons.add(STORE_BUSY)
        if not self.writable:
            reasons.add(PEER_NOT_READING)
        if self.login_refused:
            reasons.add(LOGIN_REFUSED)
        return reasons

    def resources_changed(self) -> None:
        """An alarm was raised or cleared, or the store got busy or caught up."""
        self._decide()

    def after_read(self) -> None:
        """Bytes were read: a connection that has just started publishing
        while an alarm or a busy store is in force stops being read."""
        resources = self._resources
        if self.publishing and self.reading and (resources.alarms or resources.store_busy):
            self._decide()

    def refuse_login(self) -> None:
        self.login_refused = True
        self._decide()

    def closing(self) -> None:
        """The connection closes: read its client's answer, whatever held
        reading back."""
        self._closing = True
        self._decide()

    def _decide(self) -> None:
        alarms = self._resources.alarms
        if alarms and self.publishing and not self.blocked:
            self.blocked = True
            self._announce("low on " + " and ".join(sorted(alarms)))
        elif not alarms and self.blocked:
            self.blocked = False
            self._announce(None)
        should_read = self._closing or (
            not self.blocked and self.writable and not self.login_refused
            and not (self.publishing and self._resources.store_busy))
        if should_read != self.reading and self._transport is not None:
            self.reading = should_read
            if should_read:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()

    # ---- writing -------------------------------------------------------

    def can_deliver(self, channel: int) -> bool:
        """May another delivery be queued for the peer on `channel` now?"""
        if self._paused_channels and channel in self._paused_channels:
            return False
        if self.writable and self.buffered < OUTPUT_HIGH_WATER:
            return True
        self.starved = True
        return False

    def channel_flow(self, channel: int, active: bool) -> None:
        """channel.flow from the client: deliveries on `channel` pause
        (active=false) or resume.  Also called with True when the channel
        closes, so that its number, reused, starts active."""
        if active:
            self._paused_channels.discard(channel)
        else:
            self._paused_channels.add(channel)

    def room(self) -> int:
        """Bytes that may still be queued for the peer before deliveries wait."""
        return OUTPUT_HIGH_WATER - self.buffered

    def drained(self) -> bool:
        """The output was handed to the transport: True when deliveries
        held back may go on now."""
        if self.starved and self.writable:
            self.starved = False
            return True
        return False

    def pause_writing(self) -> None:
        """The transport's buffer is full: the peer does not read."""
        self.writable = False
        self._decide()

    def resume_writing(self) -> None:
        self.writable = True
        self._decide()
