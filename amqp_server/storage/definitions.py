"""The broker's durable definitions and the definition log's records:
restoring the broker from them at start, writing everything there is as
the first state of a new log, and reading the JSON document that earlier
versions kept instead of the log."""

from __future__ import annotations

import json
from pathlib import Path

from ..broker.permissions import Permission
from ..broker.users import User
from ..errors import AMQPError
from .definition_log import arguments, persists

LEGACY_FILE = "definitions.json"


def restore_definitions(broker, saved: dict[str, list]) -> list[str]:
    """Make the broker hold exactly what the log says (the built-in default
    vhost and user included only if the log has them).  Returns what could
    not be restored, one line each; the rest is restored regardless."""
    problems = []
    broker.vhosts.clear()
    broker.users.clear()
    broker.permissions.clear()
    for _, name in saved["V"]:
        broker.add_vhost(name)
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


def journal_everything(broker) -> None:
    """Every durable definition the broker holds, as records."""
    journal = broker.journal
    for name, vhost in broker.vhosts.items():
        journal.vhost_added(name)
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


def legacy_path(data_dir: Path) -> Path:
    return Path(data_dir) / LEGACY_FILE


def legacy_document(data_dir: Path) -> dict | None:
    """The definitions export an earlier version kept, if there is one."""
    path = legacy_path(data_dir)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
