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

Owns: those notes of (next delivery tag, time).
Needs: the channel's deliveries (the oldest outstanding one and the next
tag) and the broker's config (the default timeout).

Interface: `overdue`.
"""

from __future__ import annotations

from collections import deque

from ...errors import PRECONDITION_FAILED, AMQPError
from .deliveries import Deliveries


class AckDeadline:
    __slots__ = ("number", "_marks", "_deliveries", "_config")

    def __init__(self, number: int, deliveries: Deliveries, config) -> None:
        self.number = number
        self._marks: deque[tuple[int, float]] = deque()  # (next tag, ms)
        self._deliveries = deliveries
        self._config = config

    def overdue(self, now_ms: float) -> AMQPError | None:
        """The 406 that closes this channel when its oldest delivery has
        waited too long for its acknowledgement, else None."""
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

    def _timeout_for(self, queue) -> int | None:
        timeout = queue.settings.consumer_timeout
        if timeout is None:
            timeout = self._config.consumer_timeout
            return timeout if timeout >= 0 else None
        # Only an integer is enforced (a float or a string turns it off).
        return timeout if isinstance(timeout, int) and not isinstance(timeout, bool) else None
