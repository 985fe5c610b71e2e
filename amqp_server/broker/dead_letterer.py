"""Carrying out dead-lettering for one virtual host: republish what the
pure decision in `dlx/` planned, count what went nowhere and why.

Dead-lettering reads and rewrites only a few headers: the death headers,
CC, BCC and Artemis's `_AMQ_*` stamps.  Every other header of a dying
message (a trace id, say) passes to its dead letter as the bytes it arrived
in, never decoded; nor is any other property.  Messages that died together
the same way (the same death headers, expiration and routing) share one
plan: the death history, its encoded headers and the target queues are
computed once, and each message only gets its own content header spliced
and goes into the target queues through the publish path's enqueue step
(publishing.py).  A dead-letter exchange that routes on headers routes
each message itself.  Dead letters are counted as deaths of the queue they
left, not as publishes (RabbitMQ's global counters do the same).
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import replace
from functools import partial
from typing import NamedTuple

from dlx.addresses import (
    ACTUAL_EXPIRY,
    ORIG_ADDRESS,
    ORIG_QUEUE,
    copy_headers,
    death_target,
    original_address,
)
from dlx.dead_letter import (
    CYCLE,
    DLX_MISSING,
    NO_ROUTE,
    TARGET_FULL,
    Drop,
    Letter,
    dead_letter,
    split_cycles,
)
from dlx.deaths import DEATH_HEADERS, DeathHistory, history_from_headers
from dlx.semantics import is_4x

from ..errors import AMQPError
from ..wire.properties import locate, splice_dead_letter
from ..wire.table import decode_table_body, encode_table_pairs, split_table
from .dead_letter_events import event_common, event_head
from .message import HEADER_PREFIX, Message, death_pairs
from .publishing import enqueue

log = logging.getLogger("amqp_server.dlx")

INVALID_HEADER = "invalid_header"  # properties that cannot be read: dropped, counted
# The headers dead-lettering reads or rewrites, and cheap signs that a
# headers table may hold one of them.
READS = frozenset(name.encode() for name in (
    *DEATH_HEADERS, "CC", "BCC", ORIG_ADDRESS, ORIG_QUEUE, ACTUAL_EXPIRY))
_SIGNS = (b"-death", b"\x02CC", b"\x03BCC", b"_AMQ_")
_U32 = struct.Struct(">I")


class Plan(NamedTuple):
    cause: str | None          # why it goes nowhere, or None: republish
    prototype: Message | None  # the dead letter's routing (exchange, keys, history)
    targets: list              # target queues
    target_names: list         # their names
    pairs: bytes               # encoded headers it writes after the message's own
    event: str                 # the shared part of its dead-letter log line
    per_message: bool = False  # the exchange routes on headers: one plan per message
    held: bool = False         # a delayed exchange on the way holds its dead letter


def _own_and_read(header: bytes, layout) -> tuple[bytes, bytes]:
    """(the message's header entries passed on untouched, the encoded
    entries dead-lettering reads)."""
    start, end = layout[1] + 4, layout[2]
    if end <= start:
        return b"", b""
    for sign in _SIGNS:
        if header.find(sign, start, end) >= 0:
            return split_table(header, start, end, READS)
    return header[start:end], b""


class DeadLetterer:
    def __init__(self, vhost) -> None:
        self.vhost = vhost
        self._logged_cycles: set[tuple[str, ...]] = set()
        self.log = None  # the DeadLetterLog, once the broker has a data directory

    def dead_letter(self, queue, messages: list[Message], reason: str) -> list:
        """Dead-letter `messages` that died in `queue` for `reason`; returns
        the (message, reason) no target took that an at-least-once queue
        holds until one does (the reaper retries them)."""
        settings = queue.settings
        stats = queue.stats
        # 3.13 reads the x-death any message carries (mc_amqpl's
        # recover_deaths); 4.x only the deaths it recorded itself (4.0.1's
        # release notes: a client's republished x-death is not interpreted).
        own_deaths = not is_4x(settings.semantics)
        now = self.vhost.clock() / 1000.0  # seconds, as x-death's time
        held = []
        target = death_target(reason, queue.name, settings)
        plans: dict = {}
        plan_heads: dict = {}  # plan -> log line head, for the usual outcome
        republished = 0
        received: dict[int, list] = {}  # id(targets) -> [targets, dead letters they took]
        for message in messages:
            message = message.origin or message
            header = message.header
            try:
                layout = locate(header, HEADER_PREFIX)
                # Continuation flags (no client sends them): decoded whole.
                own, read = (b"", header) if layout is None else _own_and_read(header, layout)
            except (ValueError, IndexError, struct.error):
                stats["dropped"][(INVALID_HEADER, reason)] += 1
                continue
            # Under 4.x a client's x-death is not read: whether the broker
            # wrote this one is part of what decides.
            key = (read, b"" if layout is None else header[layout[3]:layout[4]],
                   message.exchange, message.routing_keys, message.bcc,
                   own_deaths or message.owns_deaths)
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = self._plan(queue, message, layout, own, read, reason,
                                               target, now, key[5])
                if plan.per_message:  # made from this message's own headers
                    plans[(*key, own)] = plan
            elif plan.per_message:
                key = (*key, own)
                plan = plans.get(key)
                # A plan whose routing handed its dead letter to a delayed
                # exchange served that one message: the next is routed anew.
                if plan is None or plan.held:
                    plan = plans[key] = self._plan(queue, message, layout, own, read,
                                                   reason, target, now, key[5])
            cause = plan.cause
            accepted = plan.target_names
            if cause is None:
                # The publish path's enqueue step; counted here, as deaths.
                outcome = enqueue(plan.targets, self._copy(plan, message, layout, own))
                if outcome.refused:
                    accepted = [t.name for t in plan.targets if t not in outcome.refused]
                    if not outcome.taken:
                        cause = TARGET_FULL
                    for taker in plan.targets:
                        if taker not in outcome.refused:
                            taker.stats["dead_letters_received"][reason] += 1
                else:
                    # Counted per plan below: one addition per target, not per message.
                    taken = received.get(id(plan.targets))
                    if taken is None:
                        received[id(plan.targets)] = [plan.targets, 1]
                    else:
                        taken[1] += 1
            if cause is None:
                republished += 1
            elif settings.at_least_once and cause in (DLX_MISSING, NO_ROUTE, TARGET_FULL):
                # Kept until a target takes it; the reaper retries (logged then).
                held.append((message, reason))
                continue
            else:
                stats["dropped"][(cause, reason)] += 1
            if self.log is not None:
                if accepted is plan.target_names:
                    head = plan_heads.get(id(plan))
                    if head is None:
                        head = plan_heads[id(plan)] = event_head(plan.event, now, plan.cause,
                                                                 accepted)
                else:
                    head = event_head(plan.event, now, cause, accepted)
                self.log.record(head, message.header, message.body)
        if republished:
            stats["dead_lettered"][reason] += republished
        for targets, count in received.values():
            for taker in targets:
                taker.stats["dead_letters_received"][reason] += count
        return held

    @staticmethod
    def _copy(plan: Plan, message: Message, layout, own: bytes) -> Message:
        """This message's dead letter: its own content header with the plan's
        headers after its own entries, no expiration; its body and its
        annotations."""
        if layout is None:
            prototype = plan.prototype
            return prototype.sibling(prototype.header, message.body, message)
        table = own + plan.pairs
        header = splice_dead_letter(message.header, HEADER_PREFIX, layout,
                                    _U32.pack(len(table)) + table)
        return plan.prototype.sibling(header, message.body, message)

    @staticmethod
    def _letter(message: Message, layout, read: bytes, own_deaths: bool) -> Letter:
        """What the decision reads: only the headers it reads are decoded;
        the x-death among them only when `own_deaths` (it is a death
        history, not a client's header)."""
        if layout is None:
            letter = message.letter()
            return letter if own_deaths else replace(letter, history=DeathHistory())
        headers = decode_table_body(read) if read else None
        header = message.header
        expiration = (header[layout[3] + 1:layout[4]].decode("utf-8", "surrogateescape")
                      if layout[4] > layout[3] else None)
        return Letter(message.exchange, message.routing_keys, headers, expiration, message.bcc,
                      history_from_headers(headers) if own_deaths else DeathHistory())

    def _plan(self, queue, message: Message, layout, own: bytes, read: bytes, reason: str,
              target, now: float, own_deaths: bool = True) -> Plan:
        try:
            letter = self._letter(message, layout, read, own_deaths)
        except ValueError:
            unreadable = {"vhost": self.vhost.name, "queue": queue.name, "reason": reason}
            return Plan(INVALID_HEADER, None, [], [], b"", json.dumps(unreadable)[1:-1])
        seconds = int(now)
        address = original_address(letter.exchange, letter.routing_keys[0])
        stamp = None
        if target.stamp:
            stamp = copy_headers(address, queue.name,
                                 int(now * 1000) if target.expiry else None)
        decided = dead_letter(letter, queue.name, reason, target.exchange, target.routing_key,
                              seconds, stamp)
        event = partial(event_common, self.vhost.name, queue.name, reason, letter,
                        target.exchange, seconds)
        if isinstance(decided, Drop):
            return Plan(decided.cause, None, [], [], b"", event())
        vhost = self.vhost
        if target.auto_queue is not None:
            try:
                vhost.ensure_address_queue(decided.exchange, target.auto_queue, address)
            except AMQPError as error:
                log.warning("could not create dead letter resources for address '%s' on "
                            "'%s': %s", address, decided.exchange, error.reply_text)
        exchange = vhost.exchanges.get(decided.exchange)
        if exchange is None:
            return Plan(DLX_MISSING, None, [], [], b"", event(decided))
        pairs = encode_table_pairs(decided.base_headers) + death_pairs(decided.history)
        table = own + pairs
        copy = message.dead_lettered(decided, _U32.pack(len(table)) + table)
        holding = vhost.delayed.accepted
        routed = vhost.route(exchange, list(copy.routing_keys), copy)
        per_message = exchange.routes_by_content
        # Routing it may have handed it to a delayed exchange, which holds
        # it (and routes it when due): taken, though no queue has it yet.
        held = vhost.delayed.accepted != holding
        if not routed:
            if held:
                return Plan(None, copy, [], [], pairs, event(decided), per_message, True)
            return Plan(NO_ROUTE, None, [], [], b"", event(decided), per_message)
        keep, cycling = split_cycles(reason, decided.history, [q.name for q in routed])
        if cycling:
            self._log_cycle(cycling, decided.history.queue_names())
        if not keep:
            return Plan(CYCLE, None, [], [], b"", event(decided), per_message)
        kept = set(keep)
        targets = [target for target in routed if target.name in kept]
        return Plan(None, copy, targets, [target.name for target in targets], pairs,
                    event(decided), per_message, held)

    def _log_cycle(self, cycling: list[str], history: list[str]) -> None:
        for name in cycling:
            cycle = (name, *history)
            if cycle in self._logged_cycles:
                continue
            if len(self._logged_cycles) > 10_000:
                self._logged_cycles.clear()  # bounded, like RabbitMQ's hash
            self._logged_cycles.add(cycle)
            log.warning(
                "Message dropped because the following list of queues (ordered by "
                "death recency) contains a dead letter cycle without reason "
                "'rejected'. This list will not be logged again: %s", list(cycle))
