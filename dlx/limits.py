"""Queue length limits and quorum delivery limits (rabbit_amqqueue_process,
rabbit_fifo in 3.13).

Length limits count ready messages and their body bytes; messages delivered
and not yet acknowledged do not count.  `drop-head` lets a publish in and
then dead-letters from the head until the queue fits again; the two
`reject-publish` modes refuse a publish that would not fit.
"""

from __future__ import annotations

DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"
REJECT_PUBLISH_DLX = "reject-publish-dlx"
OVERFLOW_MODES = (DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX)

ACCEPT = "accept"
REJECT = "reject"          # nack the publisher, the message goes nowhere
REJECT_DLX = "reject_dlx"  # nack the publisher and dead-letter as maxlen


def publish_verdict(overflow: str, count: int, size: int, incoming: int,
                    max_length: int | None, max_bytes: int | None) -> str:
    """Whether a queue holding `count` ready messages of `size` body bytes
    takes one more of `incoming` bytes (RabbitMQ's `will_overflow/2`)."""
    if overflow == DROP_HEAD:
        return ACCEPT
    if not ((max_length is not None and count + 1 > max_length)
            or (max_bytes is not None and size + incoming > max_bytes)):
        return ACCEPT
    return REJECT_DLX if overflow == REJECT_PUBLISH_DLX else REJECT


def over_limit(count: int, size: int, max_length: int | None, max_bytes: int | None) -> bool:
    """True while a drop-head queue must shed its head."""
    return ((max_length is not None and count > max_length)
            or (max_bytes is not None and size > max_bytes))


def past_delivery_limit(returns: int, limit: int | None) -> bool:
    """A quorum queue dead-letters a message returned more than `limit`
    times (rabbit_fifo: delivery_count > delivery_limit)."""
    return limit is not None and returns > limit
