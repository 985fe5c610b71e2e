"""Carrying out dead-lettering for one virtual host: republish what the
pure decision in `dlx/` planned, count what went nowhere and why.

Messages that died together and carry the same headers table, expiration
and routing share one plan: the death history, the new headers table and the
target queues are computed once, and each message only gets its own content
header spliced (its other properties, such as message-id, kept byte for
byte).  A flood of poison messages then costs little more than a publish.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from functools import partial
from typing import NamedTuple

from dlx.addresses import copy_headers, death_target, original_address
from dlx.dead_letter import (
    CYCLE,
    DLX_MISSING,
    NO_ROUTE,
    TARGET_FULL,
    Drop,
    dead_letter,
    split_cycles,
)

from ..errors import AMQPError
from ..wire.properties import locate, splice_dead_letter
from .dead_letter_events import event_common, event_head
from .message import HEADER_PREFIX, Message, dead_letter_headers
from .queue import REJECTED

log = logging.getLogger("amqp_server.dlx")

INVALID_HEADER = "invalid_header"  # properties that cannot be read: dropped, counted


class Plan(NamedTuple):
    cause: str | None        # why it goes nowhere, or None: republish
    template: Message | None  # the first message, as republished
    targets: list            # target queues
    target_names: list       # their names
    new_headers: bytes       # its encoded headers table
    event: str               # the shared part of its dead-letter log line


class DeadLetterer:
    def __init__(self, vhost) -> None:
        self.vhost = vhost
        self._logged_cycles: set[tuple[str, ...]] = set()
        self.log = None  # the DeadLetterLog, once the broker has a data directory

    def dead_letter(self, queue, messages: list[Message], reason: str) -> None:
        settings = queue.settings
        stats = queue.stats
        now = time.time()
        target = death_target(reason, queue.name, settings)
        plans: dict = {}
        plan_heads: dict = {}  # plan key -> log line head, for the usual outcome
        republished = 0
        for message in messages:
            message = message.origin or message
            header = message.header
            try:
                layout = locate(header, HEADER_PREFIX)
            except (ValueError, IndexError, struct.error):
                stats["dropped"][(INVALID_HEADER, reason)] += 1
                continue
            if layout is None:
                key = (header, message.exchange, message.routing_keys, message.bcc)
            else:
                key = (header[layout[1]:layout[2]], header[layout[3]:layout[4]],
                       message.exchange, message.routing_keys, message.bcc)
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = self._plan(queue, message, reason, target, now)
                copy = plan.template
            elif plan.cause is None:
                spliced = (plan.template.header if layout is None
                           else splice_dead_letter(header, HEADER_PREFIX, layout,
                                                   plan.new_headers))
                copy = plan.template.sibling(spliced, message.body)
            cause = plan.cause
            accepted = plan.target_names
            if cause is None:
                targets = plan.targets
                if len(targets) == 1:  # the usual case, without building lists
                    if targets[0].enqueue(copy) is REJECTED:
                        accepted = []
                        cause = TARGET_FULL
                else:
                    refused = [t for t in targets if t.enqueue(copy) is REJECTED]
                    if refused:
                        accepted = [t.name for t in targets if t not in refused]
                        if not accepted:
                            cause = TARGET_FULL
            if cause is None:
                republished += 1
            elif settings.at_least_once and cause in (DLX_MISSING, NO_ROUTE, TARGET_FULL):
                # Kept until a target takes it; the reaper retries (logged then).
                queue.hold_dead_letter(message, reason)
                continue
            else:
                stats["dropped"][(cause, reason)] += 1
            if self.log is not None:
                if accepted is plan.target_names:
                    head = plan_heads.get(key)
                    if head is None:
                        head = plan_heads[key] = event_head(plan.event, now, plan.cause,
                                                            accepted)
                else:
                    head = event_head(plan.event, now, cause, accepted)
                self.log.record(head, message.header, message.body)
        if republished:
            stats["dead_lettered"][reason] += republished

    def _plan(self, queue, message: Message, reason: str, target, now: float) -> Plan:
        try:
            letter = message.letter()
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
        new_headers = dead_letter_headers(decided)
        copy = message.dead_lettered(decided, new_headers)
        routed = vhost.route(exchange, list(copy.routing_keys), copy)
        if not routed:
            return Plan(NO_ROUTE, None, [], [], b"", event(decided))
        keep, cycling = split_cycles(reason, decided.history, [q.name for q in routed])
        if cycling:
            self._log_cycle(cycling, decided.history.queue_names())
        if not keep:
            return Plan(CYCLE, None, [], [], b"", event(decided))
        kept = set(keep)
        targets = [target for target in routed if target.name in kept]
        return Plan(None, copy, targets, [target.name for target in targets], new_headers,
                    event(decided))

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
