"""Booting the broker from its data directory: definitions first (from the
definition log, or the JSON document an earlier version kept), then the
stored messages put back into their durable queues.

Storage reads and writes records and never builds broker objects; this
module is where records become vhosts, users, exchanges, queues, bindings
and queued messages again.  A clustered follower that takes over restores
itself from its own copy through the same functions.
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from dlx.semantics import MODES as SEMANTICS_MODES

from ..errors import AMQPError
from ..storage.dead_letter_log import DeadLetterLog
from ..storage.definition_log import DefinitionLog, arguments, persists
from ..storage.legacy_definitions import legacy_document, legacy_path
from ..storage.message_store import MessageStore
from ..storage.paging import Paging
from ..wire.frames import shortstr
from . import definitions
from .delayed_messages import exchange_of_stored, stored_name
from .message import Entry, Message
from .permissions import Permission
from .users import User

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("amqp_server")


def load(broker: Broker, data_dir: Path) -> list[str]:
    """Load persisted state from `data_dir` into the broker and keep
    persisting from now on.  Returns what could not be recovered."""
    # Hundreds of thousands of recovered definitions and millions of
    # messages, none of them cyclic: collecting while they are built
    # would only scan them again and again.
    gc.disable()
    try:
        return _recover(broker, data_dir)
    finally:
        gc.enable()


def _recover(broker: Broker, data_dir: Path) -> list[str]:
    problems = broker.policies.open(data_dir)
    journal = DefinitionLog(data_dir)
    saved, damaged = journal.recover()
    problems.extend(damaged)
    fresh = not any(saved.values())
    legacy = legacy_document(data_dir) if fresh else None
    if not fresh:
        problems.extend(restore_definitions(broker, saved))
        problems.extend(broker.drop_policies_their_vhosts_refuse())
    elif legacy is not None:
        definitions.import_(broker, legacy)  # written by an earlier version
    del saved
    config = broker.config
    broker.dead_letter_log = DeadLetterLog(
        data_dir / "dead-letters", config.dead_letter_log_file_bytes,
        config.dead_letter_log_file_seconds, config.dead_letter_log_retention_bytes,
        config.dead_letter_log_body_limit, config.node_name)
    broker.store = MessageStore(data_dir / "messages")
    broker.store.max_redelivery_records = config.max_redelivery_records
    broker.store.log.on_congestion = broker.store_congested
    broker.paging = Paging(data_dir / "paging", max(1, config.paging_threshold),
                           max(1, config.paging_threshold_bytes),
                           max(1, config.paging_pressure_threshold))
    broker.journal = journal
    for vhost in broker.vhosts.values():
        broker.attach(vhost)
    if fresh:
        # A new data directory (or one from before the log): everything
        # there is now, defaults included, is its first state.
        with journal.batch():
            journal_everything(broker)
        if legacy is not None:
            legacy_path(data_dir).unlink()
    recovered = broker.store.recover()
    problems.extend(recovered.problems)
    problems.extend(restore_messages(broker, recovered))
    return problems


def restore_definitions(broker: Broker, saved: dict[str, list]) -> list[str]:
    """Make the broker hold exactly what the log says (the built-in default
    vhost and user included only if the log has them).  Returns what could
    not be restored, one line each; the rest is restored regardless."""
    problems = []
    broker.vhosts.clear()
    broker.users.clear()
    broker.permissions.clear()
    for _, name, *metadata in saved["V"]:
        chosen = metadata[0] if metadata and isinstance(metadata[0], dict) else {}
        semantics = chosen.get("rabbitmq_semantics")
        broker.add_vhost(name, semantics if semantics in SEMANTICS_MODES else None)
    for _, name, password_hash, tags in saved["U"]:
        broker.users[name] = User(name, password_hash, tuple(tags))
    for _, user, vhost, configure, write, read in saved["P"]:
        if user in broker.users and vhost in broker.vhosts:
            broker.permissions[(user, vhost)] = Permission(configure, write, read)
    for record in (*saved["X"], *saved["Q"], *saved["B"]):
        vhost = broker.vhosts.get(record[1])
        try:
            if vhost is None:
                raise KeyError(f"vhost '{record[1]}' not found")
            _restore(vhost, record)
        except (AMQPError, KeyError, ValueError) as exc:
            problems.append(f"definition {record[:3]} not restored: {exc}")
    return problems


def _restore(vhost, record: list) -> None:
    kind = record[0]
    if kind == "X":
        _, _, name, type_name, auto_delete, internal, args = record
        vhost.declare_exchange(name, type_name, False, True, auto_delete, internal,
                               arguments(args))
    elif kind == "Q":
        _, _, name, auto_delete, args, *auto_created = record
        vhost.declare_queue(name, None, durable=True, auto_delete=auto_delete,
                            arguments=arguments(args), auto_created=any(auto_created))
    else:
        _, _, source, kind, destination, routing_key, args = record
        target = vhost.queue(destination) if kind == "q" else vhost.exchange(destination)
        vhost.bind(source, target, routing_key, arguments(args))


def journal_everything(broker: Broker) -> None:
    """Every durable definition the broker holds, as records."""
    journal = broker.journal
    for name, vhost in broker.vhosts.items():
        journal.vhost_added(name, vhost.metadata)
    for user in broker.users.values():
        journal.user_put(user)
    for (user, vhost), permission in broker.permissions.items():
        journal.permission_set(user, vhost, permission)
    for vhost in broker.vhosts.values():
        for exchange in vhost.exchanges.values():
            if exchange.name and not exchange.name.startswith("amq.") and persists(exchange):
                journal.exchange_declared(exchange)
        for queue in vhost.queues.values():
            if persists(queue):
                journal.queue_declared(queue)
        for exchange in vhost.exchanges.values():
            for binding in exchange.bindings.values():
                if persists(exchange) and persists(binding.destination):
                    journal.binding_added(vhost.name, binding)


def restore_messages(broker: Broker, recovered) -> list[str]:
    """Put recovered persistent messages back into their durable queues, in
    their original order; those that were delivered and not acknowledged
    come back with redelivered=true.  Past a queue's paging threshold they
    go straight to its page file, never becoming objects in memory."""
    problems = []
    store = broker.store
    routes: dict[tuple[str, str], tuple] = {}
    headers: dict[bytes, bytes] = {}
    for (vhost_name, queue_name), stored in recovered.queues.items():
        if not stored:
            continue
        vhost = broker.vhosts.get(vhost_name)
        delayed_by = exchange_of_stored(queue_name)
        if delayed_by is not None:
            problems.extend(_restore_delayed(broker, vhost_name, delayed_by, stored))
            continue
        queue = vhost.queues.get(queue_name) if vhost is not None else None
        if queue is None or not queue.durable:
            # The queue is gone (deleted before its records were): drop them.
            problems.append(f"{len(stored)} stored messages of missing queue "
                            f"'{queue_name}' in vhost '{vhost_name}' dropped")
            store.drop_below(vhost_name, queue_name, stored[-1].seq + 1, stored)
            continue
        now = vhost.clock()
        # Paging starts only after the newest delayed message, so nothing
        # held in memory is newer than a paged one.
        late = max((item.seq for item in stored if item.due is not None and item.due > now),
                   default=-1)
        for index, item in enumerate(stored):
            if item.seq > late and queue.pages_next():
                queue.page_stored(stored[index:])  # all the rest: nothing overtakes them
                break
            (_, _, _, seq, exchange, routing_key, header, body, keys, bcc,
             deadline, annotations) = item.record()
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
            message.annotations = annotations
            entry = Entry(seq, message)
            # A counted delivery before the crash is a delivery that failed.
            entry.redelivered = item.delivered or item.deliveries > 0
            entry.returns = item.deliveries
            entry.failed = item.failed
            entry.deadline = deadline
            entry.segment = item.segment
            queue.restore(entry, item.due if item.due is not None and item.due > now else None)
        queue.restored_up_to(stored[-1].seq)
        log.info("recovered %d messages into queue '%s' in vhost '%s'", len(stored),
                 queue_name, vhost_name)
    return problems


def _restore_delayed(broker: Broker, vhost_name: str, exchange: str, stored: list) -> list[str]:
    """Delayed messages of a durable x-delayed-message exchange wait again
    (routed at once if their time passed while the broker was down).  As
    the plugin, they are kept even if the exchange is gone: when due, they
    route through whatever exchange then has the name (or nowhere)."""
    vhost = broker.vhosts.get(vhost_name)
    if vhost is None:
        broker.store.drop_below(vhost_name, stored_name(exchange), stored[-1].seq + 1, stored)
        return [(f"{len(stored)} delayed messages of exchange '{exchange}' in missing "
                 f"vhost '{vhost_name}' dropped")]
    vhost.delayed.restore(exchange, stored)
    log.info("recovered %d delayed messages of exchange '%s' in vhost '%s'", len(stored),
             exchange, vhost_name)
    return []
