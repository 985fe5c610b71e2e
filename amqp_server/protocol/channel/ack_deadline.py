"""The channel's acknowledgement deadline: RabbitMQ's consumer timeout.

As RabbitMQ (rabbit_channel:evaluate_consumer_timeout), only the channel's
oldest unacknowledged delivery (by consume or by basic.get) is looked at,
against the timeout of its queue: the queue's `x-consumer-timeout` argument
or `consumer-timeout` policy (the smaller when both), else the broker's
`consumer_timeout`.  Past it the channel closes with 406 and, as on any
channel close, its deliveries return to their queues.

Deliveries carry no timestamp (that would cost every delivery); each check
instead notes the channel's next delivery tag with the time, so a tag is
known to have been delivered by the first note past it.  A check every
second therefore fires at most a second or two late; RabbitMQ's, on its
60 s channel tick, up to a minute late.

RabbitMQ 4.3 moved the timeout into the queues (its release notes: classic
queues and streams no longer evaluate one): in a virtual host following
4.3, only a quorum queue's deliveries time out, each against its own
consumer's timeout (its `x-consumer-timeout` argument, else the queue's
argument or policy, else the broker's), and what times out goes back to
the queue without counting as a failed delivery (rabbit_fifo v4.3.5,
apply_/3 for `{timeout, evaluate_consumer_timeout}`).  The consumer is then
in a timeout: it stays, takes nothing, and takes messages again once its
client has settled (acked, rejected or nacked) every delivery that timed
out (maybe_untimeout/2); the client hears basic.cancel (nowait), and its
basic.cancel-ok ends the consumer (rabbit_channel:handle_method/3).  A
client that does not take basic.cancel, a consumer the client cancelled
already, or a basic.get closes the channel with 406 instead, as
rabbit_channel:handle_queue_actions/2 does for a `released ... timeout`
action (its "Timeout value used: -1 ms" included).

Owns: those notes of (next delivery tag, time).
Needs: the channel's deliveries (the oldest outstanding one and the next
tag, and giving timed-out ones back), its consumers (putting one in a
timeout), the broker's config (the default timeout) and the vhost's
semantics.

Interface: `overdue`.
"""

from __future__ import annotations

import bisect
from collections import deque

from dlx.semantics import is_4x

from ...errors import PRECONDITION_FAILED, AMQPError
from .deliveries import TIMED_OUT_QUEUE, Deliveries

CONSUMER_TIMEOUT = "x-consumer-timeout"


class AckDeadline:
    __slots__ = ("number", "_marks", "_deliveries", "_config", "_quorum_only", "_consumers")

    def __init__(self, number: int, deliveries: Deliveries, config,
                 semantics: str = "3.13", consumers=None) -> None:
        self.number = number
        self._marks: deque[tuple[int, float]] = deque()  # (next tag, ms)
        self._deliveries = deliveries
        self._config = config
        self._quorum_only = is_4x(semantics)
        # The channel's consuming part (4.3: puts a consumer in a timeout).
        self._consumers = consumers

    def overdue(self, now_ms: float) -> AMQPError | None:
        """The 406 that closes this channel when its oldest delivery has
        waited too long for its acknowledgement, else None."""
        if self._quorum_only:
            return self._quorum_overdue(now_ms)
        marks = self._marks
        unacked = self._deliveries.unacked
        next_tag = self._deliveries.next_tag
        if not unacked:
            marks.clear()
            return None
        if not marks or marks[-1][0] != next_tag:
            marks.append((next_tag, now_ms))
        oldest = next(iter(unacked))
        while marks[0][0] <= oldest:  # notes from before it was delivered
            marks.popleft()
        timeout = self._timeout_for(unacked[oldest][0])
        if timeout is None or now_ms - marks[0][1] <= timeout:
            return None
        return AMQPError(
            PRECONDITION_FAILED,
            f"delivery acknowledgement on channel {self.number} timed out. Timeout value "
            f"used: {timeout} ms. This timeout value can be configured, see consumers doc "
            "guide to learn more")

    def _quorum_overdue(self, now_ms: float) -> AMQPError | None:
        """4.3: each quorum delivery past its consumer's timeout goes back;
        its consumer is cancelled, or the channel closes."""
        marks = self._marks
        unacked = self._deliveries.unacked
        if not unacked:
            marks.clear()
            return None
        next_tag = self._deliveries.next_tag
        if not marks or marks[-1][0] != next_tag:
            marks.append((next_tag, now_ms))
        oldest = next(iter(unacked))
        while marks[0][0] <= oldest:
            marks.popleft()
        tags = [mark[0] for mark in marks]
        overdue: dict = {}  # consumer (None: basic.get) -> its overdue tags
        for tag, (queue, _, consumer) in unacked.items():
            if queue is TIMED_OUT_QUEUE or not queue.settings.is_quorum_4x:
                continue
            timeout = self._quorum_timeout(queue, consumer)
            # Delivered before the first note past its tag was taken.
            delivered_by = marks[bisect.bisect_right(tags, tag)][1]
            if timeout is not None and now_ms - delivered_by > timeout:
                overdue.setdefault(consumer, []).append(tag)
        if not overdue:
            return None
        # The consumers stop first (rabbit_fifo puts them in `timeout`
        # status), so what goes back is not delivered to them again.  The
        # channel hears of each (`released`); one it cannot send
        # basic.cancel for closes it.
        consumers = self._consumers
        closes = not consumers.cancels_notified() or any(
            consumer is None or not consumers.has(consumer) for consumer in overdue)
        if closes:
            consumers.stop_delivering()
        else:
            for consumer, tags_out in overdue.items():
                consumers.timed_out(consumer, tags_out)
        for tags_out in overdue.values():
            self._deliveries.time_out(tags_out)
        if not closes:
            return None
        return AMQPError(
            PRECONDITION_FAILED,
            f"delivery acknowledgement on channel {self.number} timed out. Timeout value "
            "used: -1 ms. This timeout value can be configured, see consumers doc guide to "
            "learn more")

    def _quorum_timeout(self, queue, consumer) -> int | None:
        """rabbit_queue_type:consume/3 and get_consumer_timeout/2: the
        consumer's argument, else the queue's argument or policy (the
        smaller), else the broker's (-1 here: none)."""
        if consumer is not None and consumer.arguments:
            value = consumer.arguments.get(CONSUMER_TIMEOUT)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        timeout = queue.settings.consumer_timeout
        if isinstance(timeout, int) and not isinstance(timeout, bool):
            return timeout
        timeout = self._config.consumer_timeout
        return timeout if timeout >= 0 else None

    def _timeout_for(self, queue) -> int | None:
        timeout = queue.settings.consumer_timeout
        if timeout is None:
            timeout = self._config.consumer_timeout
            return timeout if timeout >= 0 else None
        # Only an integer is enforced (a float or a string turns it off).
        return timeout if isinstance(timeout, int) and not isinstance(timeout, bool) else None
