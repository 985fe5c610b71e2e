"""RabbitMQ 4.3's delayed retry of a quorum queue: a returned message waits
before it is delivered again, longer each time it failed.

Sources, RabbitMQ 4.3: rabbit_quorum_queue:get_delayed_retry_config/1 (the
configuration from `x-delayed-retry-type`, `-min`, `-max` or the policy
keys), validate_delayed_retry_constraints/1 and fmt_delayed_retry/1;
rabbit_fifo:should_delay0/4 and calculate_ready_at/4 (which returns wait,
and how long).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

RETRY_DISABLED = "disabled"
RETRY_ALL = "all"            # every return waits
RETRY_FAILED = "failed"      # only a failed delivery (basic.reject with requeue)
RETRY_RETURNED = "returned"  # only a plain return (basic.nack with requeue, recover)
# As rabbit_quorum_queue's policy validator lists them.
RETRY_TYPES = (RETRY_ALL, RETRY_FAILED, RETRY_RETURNED, RETRY_DISABLED)


@dataclass(frozen=True)
class DelayedRetry:
    type: str  # RETRY_ALL, RETRY_FAILED or RETRY_RETURNED
    min: int   # ms
    max: int   # ms


def delayed_retry(type_: object, min_delay: object, max_delay: object) -> DelayedRetry | None:
    """The configuration the effective values make, or None (disabled):
    a type other than all/failed/returned, or no positive minimum, turns
    it off; a maximum that is not a positive integer is the minimum."""
    if type_ not in (RETRY_ALL, RETRY_FAILED, RETRY_RETURNED) or not _positive(min_delay):
        return None
    assert isinstance(type_, str) and isinstance(min_delay, int)
    top = max_delay if _positive(max_delay) else min_delay
    assert isinstance(top, int)
    return DelayedRetry(type_, min_delay, top)


def retry_delay(retry: DelayedRetry | None, delivery_failed: bool,
                delivery_count: int | None) -> int | None:
    """How long (ms) a returned message waits, None when it does not:
    `min * delivery_count` (a count under 1 taken as 1), at most `max`.
    `delivery_failed`: the return was a failed delivery."""
    if retry is None:
        return None
    if retry.type == RETRY_FAILED and not delivery_failed:
        return None
    if retry.type == RETRY_RETURNED and delivery_failed:
        return None
    count = max(1, delivery_count or 0)
    return min(retry.min * count, retry.max)


def describe(retry: DelayedRetry | None) -> str:
    """As the management API shows it: `disabled`, or `failed (min: 1000ms,
    max: 60000ms)`."""
    if retry is None:
        return RETRY_DISABLED
    return f"{retry.type} (min: {retry.min}ms, max: {retry.max}ms)"


def constraint_problem(definition: Mapping[str, object]) -> str | None:
    """What a policy's delayed-retry keys say wrong together, in RabbitMQ's
    words (validate_delayed_retry_constraints/1), or None."""
    type_ = definition.get("delayed-retry-type")
    min_delay = definition.get("delayed-retry-min")
    max_delay = definition.get("delayed-retry-max")
    if type_ is not None and type_ != RETRY_DISABLED and min_delay is None:
        return f"delayed-retry-min is required when delayed-retry-type is {type_}"
    if (_integer(min_delay) and _integer(max_delay)
            and max_delay < min_delay):  # type: ignore[operator]
        return (f"delayed-retry-max ({max_delay}) must not be smaller than "
                f"delayed-retry-min ({min_delay})")
    return None


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: object) -> bool:
    return _integer(value) and value > 0  # type: ignore[operator]
