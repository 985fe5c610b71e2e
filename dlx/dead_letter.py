"""What dead-lettering does to one message (rabbit_dead_letter.erl, 3.13).

`dead_letter` decides the republish: target exchange, the routing keys to
route with, the new headers and death history.  The broker routes it and
hands the matched queues to `split_cycles`, which keeps the ones that do not
close a fully automatic cycle.  Nothing here looks anything up or sends
anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from amqp_server.wire.table import FieldTable

from .deaths import (
    DeathHistory,
    is_cycle,
    record_death,
    render_headers,
    without_death_headers,
)

# Why a message that died was not republished anywhere.
NO_DLX = "no_dlx"            # the queue has no dead-letter exchange
DLX_MISSING = "dlx_missing"  # it names an exchange that does not exist
NO_ROUTE = "no_route"        # the exchange routed it to no queue
CYCLE = "cycle"              # every queue it routed to would close a cycle
TARGET_FULL = "target_full"  # every target queue refused it (reject-publish)
DROP_CAUSES = (NO_DLX, DLX_MISSING, NO_ROUTE, CYCLE, TARGET_FULL)


@dataclass(frozen=True)
class Letter:
    """The parts of a message that dead-lettering reads."""

    exchange: str
    routing_keys: tuple[str, ...]  # publish key, then CC and BCC keys
    headers: FieldTable | None = None
    expiration: str | None = None
    bcc: tuple[str, ...] = ()
    history: DeathHistory = DeathHistory()


@dataclass(frozen=True)
class Republish:
    exchange: str
    routing_keys: tuple[str, ...]
    # The publisher's headers as they stay (CC/BCC rules applied), without
    # the death headers, which `history` renders.
    base_headers: FieldTable
    history: DeathHistory
    # BCC keys still route (RabbitMQ keeps them in the routing keys) but are
    # never shown in x-death.
    bcc: tuple[str, ...] = ()

    @property
    def headers(self) -> FieldTable:
        """The headers of the republished message."""
        return render_headers(self.base_headers, self.history)


@dataclass(frozen=True)
class Drop:
    cause: str


def dead_letter(letter: Letter, queue: str, reason: str, dlx: str | None,
                dlx_routing_key: str | None, now_seconds: int,
                stamp: FieldTable | None = None) -> Republish | Drop:
    """`stamp`: headers to add (Artemis's _AMQ_ORIG_* on a moved message)."""
    if dlx is None:
        return Drop(NO_DLX)
    bcc = set(letter.bcc)
    # x-death records the keys the publisher could see: CC yes, BCC no.
    recorded = tuple(key for key in letter.routing_keys if key not in bcc)
    history = record_death(letter.history, queue, reason, letter.exchange, recorded,
                           letter.expiration, now_seconds)
    headers = without_death_headers(letter.headers)
    headers.pop("BCC", None)
    if stamp:
        headers.update(stamp)
        headers.types.update(stamp.types)
    if dlx_routing_key is not None:
        # The seed removes CC once the routing key is replaced (3.10 does;
        # 3.13's code keeps it: DESIGN.md "Which RabbitMQ we match").
        headers.pop("CC", None)
        keys: tuple[str, ...] = (dlx_routing_key,)
        bcc_out: tuple[str, ...] = ()
    else:
        keys = letter.routing_keys
        bcc_out = letter.bcc
    return Republish(dlx, keys, headers, history, bcc_out)


def split_cycles(reason: str, history: DeathHistory,
                 queue_names: list[str]) -> tuple[list[str], list[str]]:
    """(queues to deliver to, queues that would close a cycle).

    `history` already holds the death being recorded.  A rejection anywhere
    in the cycle breaks it, and a rejection now is the shortcut RabbitMQ
    takes."""
    if reason == "rejected":
        return list(queue_names), []
    keep: list[str] = []
    cycling: list[str] = []
    for name in queue_names:
        (cycling if is_cycle(history, name) else keep).append(name)
    return keep, cycling
