"""Carrying out dead-lettering for one virtual host: republish what the
pure decision in `dlx/` planned, count what went nowhere and why.

Messages that died together and carry the same headers table, expiration
and routing share one plan: the death history, the new headers table and the
target queues are computed once, and each message only gets its own content
header spliced (its other properties, such as message-id, kept byte for
byte).  A flood of poison messages then costs little more than a publish.
"""

from __future__ import annotations

import logging
import struct
import time

from dlx.dead_letter import (
    CYCLE,
    DLX_MISSING,
    NO_ROUTE,
    TARGET_FULL,
    Drop,
    dead_letter,
    split_cycles,
)

from ..wire.properties import locate, splice_dead_letter
from .message import HEADER_PREFIX, Message, dead_letter_headers
from .queue import REJECTED

log = logging.getLogger("amqp_server.dlx")

INVALID_HEADER = "invalid_header"  # properties that cannot be read: dropped, counted


class DeadLetterer:
    def __init__(self, vhost) -> None:
        self.vhost = vhost
        self._logged_cycles: set[tuple[str, ...]] = set()

    def dead_letter(self, queue, messages: list[Message], reason: str) -> None:
        settings = queue.settings
        stats = queue.stats
        now = int(time.time())
        plans: dict = {}
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
            planned = plans.get(key)
            if planned is None:
                planned = plans[key] = self._plan(queue, message, reason, now)
                copy = planned[1]
            elif planned[0] is None:
                template = planned[1]
                spliced = (template.header if layout is None
                           else splice_dead_letter(header, HEADER_PREFIX, layout, planned[3]))
                copy = template.sibling(spliced, message.body)
            cause, _, targets, _ = planned
            if cause is None:
                accepted = False
                for target in targets:
                    if target.enqueue(copy) is not REJECTED:
                        accepted = True
                if not accepted:
                    cause = TARGET_FULL
            if cause is None:
                stats["dead_lettered"][reason] += 1
            elif settings.at_least_once and cause in (DLX_MISSING, NO_ROUTE, TARGET_FULL):
                # Kept until a target takes it; the reaper retries.
                queue.hold_dead_letter(message, reason)
            else:
                stats["dropped"][(cause, reason)] += 1

    def _plan(self, queue, message: Message, reason: str, now: int):
        """(drop cause or None, the republished message, its target queues,
        its encoded headers table)."""
        settings = queue.settings
        try:
            letter = message.letter()
        except ValueError:
            return INVALID_HEADER, None, (), b""
        plan = dead_letter(letter, queue.name, reason, settings.dead_letter_exchange,
                           settings.dead_letter_routing_key, now)
        if isinstance(plan, Drop):
            return plan.cause, None, (), b""
        vhost = self.vhost
        exchange = vhost.exchanges.get(plan.exchange)
        if exchange is None:
            return DLX_MISSING, None, (), b""
        new_headers = dead_letter_headers(plan)
        copy = message.dead_lettered(plan, new_headers)
        routed = vhost.route(exchange, list(copy.routing_keys), copy)
        if not routed:
            return NO_ROUTE, None, (), b""
        keep, cycling = split_cycles(reason, plan.history, [q.name for q in routed])
        if cycling:
            self._log_cycle(cycling, plan.history.queue_names())
        if not keep:
            return CYCLE, None, (), b""
        kept = set(keep)
        return None, copy, [target for target in routed if target.name in kept], new_headers

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
