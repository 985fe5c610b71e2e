"""Definitions export and import in RabbitMQ's JSON format (the file
`rabbitmqctl export_definitions` writes), so a topology moves between a
RabbitMQ and this broker in either direction."""

from __future__ import annotations

import datetime
import decimal

from dlx.semantics import semantics_problem

from ..wire.table import FieldTable, Timestamp
from .permissions import Permission
from .users import HASHING_ALGORITHM, User


def jsonable(value):
    """A decoded field value as RabbitMQ renders it in JSON (definitions
    and the management API)."""
    if isinstance(value, dict):
        return {key: jsonable(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Timestamp):
        return int(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value


def export(broker, only_vhost: str | None = None) -> dict:
    """The definitions document (exclusive queues left out, as RabbitMQ)."""
    vhosts = ([broker.vhosts[only_vhost]] if only_vhost is not None
              else list(broker.vhosts.values()))
    scoped = only_vhost is not None
    keep = _not_exclusive

    def tag(item: dict, vhost) -> dict:
        if not scoped:
            item = {**item, "vhost": vhost.name}
        return item

    out: dict = {"rabbit_version": "3.13.0", "rabbitmq_version": "3.13.0",
                 "product_name": "amqp-server"}
    if not scoped:
        out["users"] = [{"name": u.name, "password_hash": u.password_hash,
                         "hashing_algorithm": HASHING_ALGORITHM, "tags": list(u.tags),
                         "limits": {}} for u in broker.users.values()]
        out["vhosts"] = [{"name": v.name, **({"metadata": v.metadata} if v.metadata else {})}
                         for v in vhosts]
        out["permissions"] = [p.as_json(user, vhost)
                              for (user, vhost), p in sorted(broker.permissions.items())]
    out["policies"] = [tag(_policy(p), v) for v in vhosts for p in broker.policies.in_vhost(v.name)]
    out["operator_policies"] = [tag(_policy(p), v) for v in vhosts
                                for p in broker.policies.in_vhost(v.name, operator=True)]
    out["queues"] = [tag({"name": q.name, "durable": q.durable, "auto_delete": q.auto_delete,
                          "arguments": jsonable(q.arguments)}, v)
                     for v in vhosts for q in v.queues.values() if keep(q)]
    out["exchanges"] = [tag({"name": x.name, "type": x.type_name, "durable": x.durable,
                             "auto_delete": x.auto_delete, "internal": x.internal,
                             "arguments": jsonable(x.arguments)}, v)
                        for v in vhosts for x in v.exchanges.values()
                        if x.name and not x.name.startswith("amq.") and keep(x)]
    out["bindings"] = [tag({"source": x.name, "destination": b.destination.name,
                            "destination_type": "queue" if b.destination.is_queue
                            else "exchange",
                            "routing_key": b.routing_key, "arguments": jsonable(b.arguments)}, v)
                       for v in vhosts for x in v.exchanges.values() if x.name
                       for b in x.bindings.values() if keep(x) and keep(b.destination)]
    return out


def _not_exclusive(thing) -> bool:
    return not getattr(thing, "exclusive", False)


def _policy(policy) -> dict:
    item = policy.as_json()
    del item["vhost"]
    return item


def import_(broker, document: dict, only_vhost: str | None = None) -> None:
    """Create what the document names; raises ValueError saying what is wrong.
    Existing objects must be equivalent, as with a redeclare."""
    def where(item: dict) -> str:
        name = only_vhost if only_vhost is not None else item.get("vhost", "/")
        if name not in broker.vhosts:
            raise ValueError(f"vhost '{name}' not found")
        return name

    if only_vhost is None:
        for item in document.get("vhosts", []):
            # RabbitMQ's vhost metadata holds description and tags; ours adds
            # the vhost's semantics (rabbitmq_semantics).
            metadata = item.get("metadata") or {}
            semantics = metadata.get("rabbitmq_semantics") if isinstance(metadata, dict) \
                else None
            problem = semantics_problem(semantics) if semantics is not None else None
            if problem is not None:
                raise ValueError(f"vhost '{item['name']}': {problem}")
            broker.add_vhost(item["name"], semantics)
        for item in document.get("users", []):
            algorithm = item.get("hashing_algorithm", HASHING_ALGORITHM)
            if algorithm != HASHING_ALGORITHM:
                raise ValueError(f"user '{item['name']}': unsupported hashing "
                                 f"algorithm {algorithm}")
            tags = item.get("tags", [])
            if isinstance(tags, str):
                tags = [t for t in tags.split(",") if t]
            broker.put_user(User(item["name"], item["password_hash"], tuple(tags)))
        if "permissions" in document:
            for item in document["permissions"]:
                if item["user"] not in broker.users or item["vhost"] not in broker.vhosts:
                    raise ValueError(f"permissions of user '{item['user']}' in vhost "
                                     f"'{item['vhost']}': no such user or vhost")
                broker.set_permission(item["user"], item["vhost"], Permission(
                    item.get("configure", ""), item.get("write", ""), item.get("read", "")))
        else:
            # Definitions saved before permissions existed: every user had
            # every vhost, and keeps it.
            for item in document.get("users", []):
                for vhost in list(broker.vhosts):
                    if (item["name"], vhost) not in broker.permissions:
                        broker.set_permission(item["name"], vhost, Permission())
    for kind, operator in (("policies", False), ("operator_policies", True)):
        for item in document.get(kind, []):
            broker.set_policy(where(item), item["name"], item["pattern"], item["definition"],
                              item.get("priority", 0), item.get("apply-to", "all"), operator)
    for item in document.get("exchanges", []):
        vhost = broker.vhosts[where(item)]
        vhost.declare_exchange(item["name"], item["type"], False, item.get("durable", True),
                               item.get("auto_delete", False), item.get("internal", False),
                               FieldTable(item.get("arguments") or {}))
    for item in document.get("queues", []):
        vhost = broker.vhosts[where(item)]
        vhost.declare_queue(item["name"], None, durable=item.get("durable", True),
                            auto_delete=item.get("auto_delete", False),
                            arguments=FieldTable(item.get("arguments") or {}))
    for item in document.get("bindings", []):
        vhost = broker.vhosts[where(item)]
        if item.get("destination_type", "queue") == "queue":
            destination = vhost.queue(item["destination"])
        else:
            destination = vhost.exchange(item["destination"])
        vhost.bind(item["source"], destination, item.get("routing_key", ""),
                   FieldTable(item.get("arguments") or {}))
