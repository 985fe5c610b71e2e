"""Putting recovered persistent messages back into their durable queues,
in their original order; those that were delivered and not acknowledged
come back with redelivered=true.  Past a queue's paging threshold they go
straight to its page file, never becoming objects in memory."""

from __future__ import annotations

import logging

from ..broker.message import Entry, Message
from ..broker.timers import now_ms
from ..wire.frames import shortstr

log = logging.getLogger("amqp_server.storage")


def restore_messages(broker, recovered) -> list[str]:
    problems = []
    store = broker.store
    routes: dict[tuple[str, str], tuple] = {}
    now = now_ms()
    headers: dict[bytes, bytes] = {}
    for (vhost_name, queue_name), stored in recovered.queues.items():
        if not stored:
            continue
        vhost = broker.vhosts.get(vhost_name)
        queue = vhost.queues.get(queue_name) if vhost is not None else None
        if queue is None or not queue.durable:
            # The queue is gone (deleted before its records were): drop them.
            problems.append(f"{len(stored)} stored messages of missing queue "
                            f"'{queue_name}' in vhost '{vhost_name}' dropped")
            store.drop_below(vhost_name, queue_name, stored[-1].seq + 1, stored)
            continue
        # Paging starts only after the newest delayed message, so nothing
        # held in memory is newer than a paged one.
        late = max((item.seq for item in stored if item.due is not None and item.due > now),
                   default=-1)
        for index, item in enumerate(stored):
            if item.seq > late and queue.pages_next():
                queue.page_stored(stored[index:])  # all the rest: nothing overtakes them
                break
            if item.deadline is not None:
                queue.saw_message_ttl = True
            (_, _, _, seq, exchange, routing_key, header, body, keys, bcc,
             deadline) = item.record()
            # Messages routed alike share their route and header objects,
            # as they did before the restart.
            shared = routes.get((exchange, routing_key))
            if shared is None:
                shared = routes[(exchange, routing_key)] = (
                    exchange, routing_key, shortstr(exchange) + shortstr(routing_key),
                    (routing_key,))
            exchange, routing_key, route, default_keys = shared
            header = headers.setdefault(header, header)
            message = Message(exchange, routing_key, route, header, body,
                              tuple(keys) if keys else default_keys)
            if bcc:
                message.bcc = tuple(bcc)
            entry = Entry(seq, message)
            # A counted delivery before the crash is a delivery that failed.
            entry.redelivered = item.delivered or item.deliveries > 0
            entry.returns = item.deliveries
            entry.deadline = deadline
            entry.segment = item.segment
            if entry.returns and queue.is_quorum:
                entry.message = message.with_delivery_count(entry.returns)
            if item.due is not None and item.due > now:
                queue.hold_until(entry, item.due)
                continue
            queue.ready.append(entry)
            queue.ready_bytes += len(body)
        queue.next_seq = max(queue.next_seq, stored[-1].seq + 1)
        log.info("recovered %d messages into queue '%s' in vhost '%s'", len(stored),
                 queue_name, vhost_name)
    return problems
