"""Which bindings the management API lists, in RabbitMQ's JSON shape and
order: every binding of a vhost, a queue's, an exchange's as source or as
destination, and those between two ends.

RabbitMQ lists the default exchange's implicit binding of each queue (key:
the queue's name) as a binding like any other, sorts every listing by
vhost, source, destination, routing key and properties key
(rabbit_mgmt_wm_bindings:to_json), and names a binding in URLs by its
properties key (rabbit_mgmt_format:pack_binding_props).  A listing for an
exchange or queue that does not exist is not a 404 there: the default
exchange's implicit binding of a queue name is listed whether or not the
queue exists, and a missing exchange has no bindings.
"""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import quote_plus, unquote

from ..broker.definitions import jsonable
from ..wire.table import FieldTable, encode_table


def _quote(text: str) -> str:
    """rabbit_mgmt_format:quote_binding: a URL query value (space as "+"),
    with "~" escaped too, since it separates the key from the arguments."""
    return quote_plus(text, safe="").replace("~", "%7E")


def _arguments_hash(arguments: FieldTable) -> str:
    # RabbitMQ: base64url of erlang:phash2(Args, 2^32).  The same shape (a
    # 32-bit hash, six characters) from the arguments' encoded bytes; the
    # value differs from RabbitMQ's, and tools only read it from a listing
    # and put it back in a URL.
    digest = hashlib.md5(encode_table(arguments)).digest()[:4]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def properties_key(routing_key: str, arguments: FieldTable) -> str:
    """The name of one binding between two ends, as its URL has it."""
    if not arguments:
        return _quote(routing_key) if routing_key else "~"
    return f"{_quote(routing_key)}~{_arguments_hash(arguments)}"


def named(source, destination, props: str):
    """The binding from exchange `source` to `destination` that a URL's
    last segment names, as the router decoded it: its properties key, or
    that key decoded once more (a client that put the key in the URL
    without encoding it again, as RabbitMQ's router also decodes it)."""
    keyed = [(properties_key(b.routing_key, b.arguments), b)
             for b in source.bindings.values() if b.destination is destination]
    for key, binding in keyed:
        if key == props:
            return binding
    for key, binding in keyed:
        if unquote(key) == props:
            return binding
    return None


def binding_json(vhost: str, source: str, destination, routing_key: str,
                 arguments: FieldTable) -> dict:
    return {
        "source": source,
        "vhost": vhost,
        "destination": destination.name,
        "destination_type": "queue" if destination.is_queue else "exchange",
        "routing_key": routing_key,
        "arguments": jsonable(arguments),
        "properties_key": properties_key(routing_key, arguments),
    }


def _implicit(vhost: str, queue_name: str) -> dict:
    """The default exchange's binding of a queue, by the queue's name."""
    return {"source": "", "vhost": vhost, "destination": queue_name,
            "destination_type": "queue", "routing_key": queue_name, "arguments": {},
            "properties_key": properties_key(queue_name, FieldTable())}


def _shape(vhost, binding) -> dict:
    return binding_json(vhost.name, binding.source.name, binding.destination,
                        binding.routing_key, binding.arguments)


def in_order(bindings: list[dict]) -> list[dict]:
    """RabbitMQ's default order (Erlang compares binaries byte by byte, as
    Python compares the code points of UTF-8 text); a queue and an
    exchange of one name, bound alike, by their type."""
    return sorted(bindings, key=lambda b: (b["vhost"], b["source"], b["destination"],
                                           b["routing_key"], b["properties_key"],
                                           b["destination_type"]))


def of_vhost(vhost) -> list[dict]:
    """Every binding of a vhost."""
    found = [_implicit(vhost.name, name) for name in vhost.queues]
    for exchange in vhost.exchanges.values():
        found.extend(_shape(vhost, binding) for binding in exchange.bindings.values())
    return in_order(found)


def of_queue(vhost, name: str) -> list[dict]:
    """The bindings whose destination is the queue `name`."""
    found = [_implicit(vhost.name, name)]
    queue = vhost.queues.get(name)
    if queue is not None:
        found.extend(_shape(vhost, binding) for binding in queue.bindings.values())
    return in_order(found)


def from_exchange(vhost, name: str) -> list[dict]:
    """The bindings whose source is the exchange `name` ("" the default)."""
    if name == "":
        return in_order([_implicit(vhost.name, queue) for queue in vhost.queues])
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        return []
    return in_order([_shape(vhost, binding) for binding in exchange.bindings.values()])


def to_exchange(vhost, name: str) -> list[dict]:
    """The bindings whose destination is the exchange `name`."""
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        return []
    return in_order([_shape(vhost, binding) for source in vhost.exchanges.values()
                     for binding in source.bindings.values()
                     if binding.destination is exchange])


def between(vhost, source: str, destination_type: str, destination: str) -> list[dict]:
    """The bindings from exchange `source` to the queue or exchange
    `destination`."""
    return [b for b in from_exchange(vhost, source)
            if b["destination_type"] == destination_type and b["destination"] == destination]
