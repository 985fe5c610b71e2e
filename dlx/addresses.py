"""Artemis's dead letter and expiry addresses on AMQP 0-9-1 (seeds 001, 003).

Where a message that died goes: the expiry address for an expired message
when one is set, otherwise the dead-letter exchange (`dead-letter-address`
is its other name); a Qpid queue with `x-qpid-dlq-enabled` and no other
target sends to `<queue>_DLE` (seed 004).  With auto-created resources, the
per-address queue is `DLQ.<original address>` (or `EXP.`), bound to receive
only messages whose `_AMQ_ORIG_ADDRESS` is that address.

The original address of an AMQP message is the exchange it was published
to, or its routing key when that was the default exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from amqp_server.wire.table import FieldTable

ORIG_ADDRESS = "_AMQ_ORIG_ADDRESS"
ORIG_QUEUE = "_AMQ_ORIG_QUEUE"
ACTUAL_EXPIRY = "_AMQ_ACTUAL_EXPIRY"

QPID_EXCHANGE_SUFFIX = "_DLE"
QPID_QUEUE_SUFFIX = "_DLQ"


@dataclass(frozen=True)
class Target:
    exchange: str | None
    routing_key: str | None  # replaces the message's keys; None keeps them
    # Artemis copies: stamp the _AMQ_ORIG_* headers (and the expiry time).
    stamp: bool = False
    expiry: bool = False
    # Auto-created per-address queue: (prefix, suffix), or None.
    auto_queue: tuple[str, str] | None = None


class DeathSettings(Protocol):
    """What these rules read of a queue's effective settings
    (policies.effective.QueueSettings, which builds on dlx)."""

    @property
    def dead_letter_exchange(self) -> str | None: ...
    @property
    def dead_letter_routing_key(self) -> str | None: ...
    @property
    def qpid_dlq_enabled(self) -> bool: ...
    @property
    def auto_create_dead_letter_resources(self) -> bool: ...
    @property
    def dead_letter_queue_prefix(self) -> str: ...
    @property
    def dead_letter_queue_suffix(self) -> str: ...
    @property
    def expiry_address(self) -> str | None: ...
    @property
    def auto_create_expiry_resources(self) -> bool: ...
    @property
    def expiry_queue_prefix(self) -> str: ...
    @property
    def expiry_queue_suffix(self) -> str: ...
    @property
    def auto_delete_queues(self) -> bool: ...
    @property
    def auto_delete_queues_delay(self) -> int: ...
    @property
    def auto_delete_queues_message_count(self) -> int: ...


def death_target(reason: str, queue: str, settings: DeathSettings) -> Target:
    """`settings` is a queue's effective settings (policies.effective)."""
    if reason == "expired" and settings.expiry_address is not None:
        auto = settings.auto_create_expiry_resources
        return Target(settings.expiry_address, None, stamp=True, expiry=True,
                      auto_queue=(settings.expiry_queue_prefix, settings.expiry_queue_suffix)
                      if auto else None)
    exchange = settings.dead_letter_exchange
    if exchange is None and settings.qpid_dlq_enabled:
        exchange = qpid_names(queue)[0]
    auto = settings.auto_create_dead_letter_resources and exchange is not None
    return Target(exchange, settings.dead_letter_routing_key, stamp=auto,
                  auto_queue=(settings.dead_letter_queue_prefix,
                              settings.dead_letter_queue_suffix) if auto else None)


def auto_created_queue_unused(settings: DeathSettings, consumers: int, messages: int,
                              consumers_gone_for_ms: float | None) -> bool:
    """Artemis's auto-delete of a queue it auto-created (QueueManagerImpl):
    with `auto-delete-queues` on, no consumers, none for
    `auto-delete-queues-delay` ms (None: it never had one), and at most
    `auto-delete-queues-message-count` messages (-1: any number)."""
    limit = settings.auto_delete_queues_message_count
    return (settings.auto_delete_queues and consumers == 0
            and (consumers_gone_for_ms is None
                 or consumers_gone_for_ms >= settings.auto_delete_queues_delay)
            and (limit == -1 or messages <= limit))


def original_address(exchange: str, routing_key: str) -> str:
    return exchange if exchange else routing_key


def per_address_queue(affixes: tuple[str, str], address: str) -> str:
    prefix, suffix = affixes
    return f"{prefix}{address}{suffix}"


def address_filter(address: str) -> FieldTable:
    """Binding arguments of a headers exchange that pass only messages first
    sent to `address` (Artemis filters on _AMQ_ORIG_ADDRESS)."""
    table = FieldTable({"x-match": "all", ORIG_ADDRESS: address})
    table.types.update({"x-match": "longstr", ORIG_ADDRESS: "longstr"})
    return table


def copy_headers(address: str, queue: str, expired_at_ms: int | None) -> FieldTable:
    """The headers Artemis puts on a message it moves to a dead letter or
    expiry address."""
    table = FieldTable({ORIG_ADDRESS: address, ORIG_QUEUE: queue})
    table.types.update({ORIG_ADDRESS: "longstr", ORIG_QUEUE: "longstr"})
    if expired_at_ms is not None:
        table[ACTUAL_EXPIRY] = int(expired_at_ms)
        table.types[ACTUAL_EXPIRY] = "long"
    return table


def qpid_names(queue: str) -> tuple[str, str]:
    """(exchange, queue) that x-qpid-dlq-enabled declares for `queue`."""
    return queue + QPID_EXCHANGE_SUFFIX, queue + QPID_QUEUE_SUFFIX
