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
- a refused login: nothing more is read while the refusal waits to be sent;
- credit: a queue it publishes into grows faster than its consumers drain
  it (broker/queue/credit.py) and withholds credit: the connection is not
  read until every such queue has drained (`wait_for`, `credit_granted`),
  as RabbitMQ's reader stops reading a connection whose channel ran out
  of credit (credit_flow.erl), without telling the client.  A channel's
  publishes name the connection's flow and their channel to the publish
  path through a `ChannelCredit`.

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

`state()` and `channel_state(number)` are what the management API shows,
RabbitMQ's words: 'blocked' while an alarm blocks it, 'blocking' while an
alarm is in force and it has not published, 'flow' while it is held by
credit or a busy store and for 5 seconds after (rabbit_reader's
i(state)), else 'running'; a channel that published into a queue that
withheld credit shows 'flow' for a second after (credit_flow:state/0).

Needs: a `resources` object with `alarms` (a set of resource names) and
`store_busy` (the broker), a `transport` with pause_reading/resume_reading
once there is one (`attach`), an `announce(reason | None)` hook that
tells the client it is blocked (a reason) or unblocked (None), and a
`clock` (monotonic seconds) for the states.  No socket or event loop:
tests drive it with plain objects.
"""

from __future__ import annotations

import time
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
CREDIT = "credit"

# How long a connection (rabbit_reader: 5 s) and a channel (credit_flow:
# 1 s) still show 'flow' once they are read again.
CONNECTION_FLOW_SHOWN = 5.0
CHANNEL_FLOW_SHOWN = 1.0


class Resources(Protocol):
    alarms: set
    store_busy: bool


class Transport(Protocol):
    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Flow:
    __slots__ = ("_resources", "_announce", "_clock", "_transport", "publishing", "blocked",
                 "writable", "login_refused", "buffered", "starved", "reading",
                 "_paused_channels", "_closing", "withheld", "_flow_at", "_channel_flow_at")

    def __init__(self, resources: Resources,
                 announce: Callable[[str | None], None] = lambda reason: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._resources = resources
        self._announce = announce
        self._clock = clock
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
        # The queues that withhold credit from it -> the channels that
        # published into them meanwhile.
        self.withheld: dict = {}
        self._flow_at: float | None = None  # when it was last held by credit or the store
        self._channel_flow_at: dict[int, float] = {}

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
        if self.withheld:
            reasons.add(CREDIT)
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
        store_busy = self.publishing and self._resources.store_busy
        should_read = self._closing or (
            not self.blocked and self.writable and not self.login_refused
            and not store_busy and not self.withheld)
        if self.withheld or store_busy:
            self._flow_at = self._clock()
        if should_read != self.reading and self._transport is not None:
            self.reading = should_read
            if should_read:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()

    # ---- credit ---------------------------------------------------------

    def wait_for(self, queue, channel: int) -> None:
        """`channel` published into `queue` while it withholds credit: the
        connection is not read until the queue grants it (unless the
        queue is one its own consumers read: `queue.await_credit`)."""
        channels = self.withheld.get(queue)
        if channels is None:
            if not queue.await_credit(self):
                return
            self.withheld[queue] = channels = set()
            if len(self.withheld) == 1:
                self._decide()
        channels.add(channel)

    def credit_granted(self, queue) -> None:
        """`queue` drained (or lost its consumers, or went): read on once
        no queue withholds credit."""
        channels = self.withheld.pop(queue, None)
        if channels is None:
            return
        now = self._clock()
        self._flow_at = now
        for channel in channels:
            self._channel_flow_at[channel] = now
        if not self.withheld:
            self._decide()

    def forget_credit(self) -> None:
        """The connection closes: it waits for no queue any more."""
        withheld, self.withheld = self.withheld, {}
        for queue in withheld:
            queue.forget_sender(self)
        if withheld:
            self._decide()

    # ---- what the management API shows ----------------------------------

    def state(self) -> str:
        """The connection's state in RabbitMQ's words (rabbit_reader's
        i(state)): resource alarms first, then flow."""
        if self.blocked:
            return "blocked"
        if self._resources.alarms:
            return "blocking"  # blocked by the first publish
        if self.withheld or (self.publishing and self._resources.store_busy):
            return "flow"
        if self._flow_at is not None and self._clock() - self._flow_at < CONNECTION_FLOW_SHOWN:
            return "flow"
        return "running"

    def channel_state(self, channel: int) -> str:
        """A channel's: 'flow' while a queue it published into withholds
        credit, and for a second after (credit_flow:state/0)."""
        for channels in self.withheld.values():
            if channel in channels:
                return "flow"
        since = self._channel_flow_at.get(channel)
        if since is not None and self._clock() - since < CHANNEL_FLOW_SHOWN:
            return "flow"
        return "running"

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


class ChannelCredit:
    """What a channel's publishes hand the publish path
    (broker/publishing.py): a queue that withholds credit makes the
    connection wait, in the channel's name."""

    __slots__ = ("_flow", "_channel")

    def __init__(self, flow: Flow, channel: int) -> None:
        self._flow = flow
        self._channel = channel

    def wait_for(self, queue) -> None:
        self._flow.wait_for(queue, self._channel)
