"""What happens to a delivered message that comes back unsuccessfully
(nack or reject with requeue, recover, a channel closed with it unacked).

Three rule sets meet here, each counted on the same number: how many times
the message has been delivered without success, this time included.
- RabbitMQ quorum queues: past `x-delivery-limit` returns it dies
  (rabbit_fifo: delivery_count > delivery_limit).
- ActiveMQ Artemis: at `max-delivery-attempts` deliveries it goes to the
  dead letter address (QueueImpl.checkRedelivery: deliveryCount >=
  maxDeliveries, maxDeliveries > 0); otherwise it waits `redelivery-delay`,
  grown by the multiplier, jittered, and capped (calculateRedeliveryDelay).
- Qpid: at `x-qpid-maximum-delivery-count` it moves to the DLQ, but only when
  the client gave it back (rollback, recover, reject); a consumer that just
  went away leaves it in the queue (seed 004).
"""

from __future__ import annotations

import random as _random
from dataclasses import dataclass
from typing import Protocol

from .limits import past_delivery_limit

UNLIMITED = -1
# Artemis's default when an address-setting applies without a number.
ARTEMIS_MAX_DELIVERY_ATTEMPTS = 10
_LONG_MAX = 2 ** 63 - 1

DEAD = "dead"    # dead-letter it with reason delivery_limit
LATER = "later"  # invisible until the delay has passed
NOW = "now"      # straight back to the queue


class Random(Protocol):
    def random(self) -> float: ...


@dataclass(frozen=True)
class Redelivery:
    delay: int = 0                    # ms; 0: no delayed redelivery
    multiplier: float = 1.0
    max_delay: int | None = None      # None: delay x 10, Artemis's default
    collision_avoidance: float = 0.0  # 0.0-1.0
    max_attempts: int = UNLIMITED     # Artemis and Qpid; <= 0 is unlimited
    attempts_need_client: bool = False  # Qpid: only a client's give-back counts
    delivery_limit: int | None = None   # RabbitMQ quorum x-delivery-limit

    @property
    def active(self) -> bool:
        return (self.delay > 0 or self.max_attempts > 0
                or self.delivery_limit is not None)


def redelivery_delay(delivery_count: int, delay: int, multiplier: float = 1.0,
                     max_delay: int | None = None, collision_avoidance: float = 0.0,
                     rng: Random | None = None) -> int:
    """The wait before redelivery number `delivery_count` (Artemis: the
    multiplier to the power count-1, then the jitter, then the cap)."""
    if delay <= 0:
        return 0
    cap = delay * 10 if max_delay is None else max_delay
    try:
        raw = delay * multiplier ** max(delivery_count - 1, 0)
    except OverflowError:  # Java's Math.pow gives infinity; (long) saturates
        raw = float("inf")
    value = int(raw) if raw < _LONG_MAX else _LONG_MAX
    if collision_avoidance > 0:
        rng = rng or _random
        # java.util.Random: nextBoolean() picks the sign, nextDouble() the size;
        # `long += double` truncates toward zero.
        sign = collision_avoidance if rng.random() < 0.5 else -collision_avoidance
        value = int(value + value * (sign * rng.random()))
    return min(value, cap)


def past_max_attempts(delivery_count: int, max_attempts: int) -> bool:
    return max_attempts > 0 and delivery_count >= max_attempts


def after_return(delivery_count: int, policy: Redelivery, by_client: bool = True,
                 rng: Random | None = None) -> tuple[str, int]:
    """(DEAD | LATER | NOW, delay in ms) for a message given back for the
    `delivery_count`-th time."""
    if past_delivery_limit(delivery_count, policy.delivery_limit):
        return DEAD, 0
    if past_max_attempts(delivery_count, policy.max_attempts) and (
            by_client or not policy.attempts_need_client):
        return DEAD, 0
    wait = redelivery_delay(delivery_count, policy.delay, policy.multiplier, policy.max_delay,
                            policy.collision_avoidance, rng)
    return (LATER, wait) if wait > 0 else (NOW, 0)


def persists_count(delivery_count: int, max_redelivery_records: int) -> bool:
    """Artemis writes delivery-count and schedule records for a message only
    up to `max-redelivery-records` deliveries (-1: always)."""
    return max_redelivery_records < 0 or delivery_count <= max_redelivery_records
