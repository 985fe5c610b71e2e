"""What happens to a delivered message that comes back unsuccessfully
(nack or reject with requeue, recover, a channel closed with it unacked).

Three rule sets meet here, each counted on the same number: how many times
the message has been delivered without success, this time included.
- RabbitMQ quorum queues: past `x-delivery-limit` returns it dies
  (rabbit_fifo: delivery_count > delivery_limit).  In 4.3's semantics
  only failed deliveries count (`delivery_failed`), the limit is 20 unless
  set, and delayed retry may hold the message (`after_quorum_return`).
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

from .delayed_retry import DelayedRetry, retry_delay
from .limits import past_delivery_limit
from .semantics import DEFAULT as DEFAULT_SEMANTICS, is_4x

UNLIMITED = -1
# Artemis's default when an address-setting applies without a number.
ARTEMIS_MAX_DELIVERY_ATTEMPTS = 10
_LONG_MAX = 2 ** 63 - 1

DEAD = "dead"    # dead-letter it with reason delivery_limit
LATER = "later"  # invisible until the delay has passed
NOW = "now"      # straight back to the queue (a quorum queue's head)
TAIL = "tail"    # back at the queue's tail (4.3: a plain return, no delivery limit)

# How a delivery came back; RabbitMQ 4.3's rabbit_channel maps each to a
# settle operation of its own, which rabbit_fifo counts differently.
REJECTED = "reject"    # basic.reject: modify(delivery_failed=true) or discard
NACKED = "nack"        # basic.nack: a plain return, or modify(false, undeliverable)
RECOVERED = "recover"  # basic.recover: a plain return
CLOSED = "closed"      # its channel closed with it unacknowledged: the consumer is down
TIMED_OUT = "timeout"  # a 4.3 quorum queue's consumer timeout gave it back
# Those a client asked for (Qpid counts only these).
BY_CLIENT = frozenset({REJECTED, NACKED, RECOVERED})


def delivery_failed(how: str, semantics: str = DEFAULT_SEMANTICS) -> bool:
    """Whether a return counts as a failed delivery (x-delivery-count and
    the quorum delivery limit).  3.13's rabbit_fifo counts every return;
    4.3's counts basic.reject (settle(true, false) in rabbit_channel) and a
    consumer gone down (rabbit_fifo:handle_down -> return_all(..., true)),
    not basic.nack or basic.recover (a plain `requeue` settle) nor a
    consumer timeout (return_multiple(..., false))."""
    if not is_4x(semantics):
        return True
    return how in (REJECTED, CLOSED)


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
    semantics: str = DEFAULT_SEMANTICS  # whose quorum rules (dlx/semantics.py)
    delayed_retry: DelayedRetry | None = None  # 4.3's quorum delayed retry

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


def after_quorum_return(delivery_count: int | None, returns: int, how: str,
                        policy: Redelivery, rng: Random | None = None) -> tuple[str, int]:
    """(DEAD | LATER | NOW | TAIL, delay in ms) for a message a 4.3 quorum
    queue got back.  `delivery_count`: its failed deliveries, this return
    counted (None: never counted, nor carried in by dead-lettering);
    `returns`: every return, this one included (what Artemis and Qpid count).

    rabbit_fifo:return_one/8: past the delivery limit it dies, whether this
    return counted or not; else delayed retry may hold it
    (should_delay/5), else it goes to the returns queue, served first.
    Without a delivery limit a plain return (basic.nack, basic.recover)
    is appended instead, as a new enqueue at the default priority
    (handle_aux for #return -> #requeue).  The Artemis and Qpid settings
    this broker adds apply after RabbitMQ's own."""
    limit = policy.delivery_limit
    if delivery_count is not None and limit is not None and delivery_count > limit:
        return DEAD, 0
    if past_max_attempts(returns, policy.max_attempts) and (
            how in BY_CLIENT or not policy.attempts_need_client):
        return DEAD, 0
    if limit is None and how in (NACKED, RECOVERED):
        return TAIL, 0
    wait = retry_delay(policy.delayed_retry, delivery_failed(how, policy.semantics),
                       delivery_count)
    if wait is None:
        wait = redelivery_delay(returns, policy.delay, policy.multiplier, policy.max_delay,
                                policy.collision_avoidance, rng)
    return (LATER, wait) if wait > 0 else (NOW, 0)


def persists_count(delivery_count: int, max_redelivery_records: int) -> bool:
    """Artemis writes delivery-count and schedule records for a message only
    up to `max-redelivery-records` deliveries (-1: always)."""
    return max_redelivery_records < 0 or delivery_count <= max_redelivery_records
