"""Reading a running broker for tests: a queue's depth, its messages without
consuming them, and the client connections still open.

These functions read the broker's own objects, so they run on the broker's
event loop thread (`EmbeddedBroker` calls them there directly, `BrokerThread`
sends them there).  Reading changes nothing: a peeked message keeps its
place, its redelivered flag and its delivery counts, and its properties are
decoded into a copy, never into the message the broker will deliver.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlx.deaths import Death, history_from_headers

from .broker.message import HEADER_PREFIX
from .errors import CONNECTION_FORCED
from .protocol.connection import CLOSED, CLOSING
from .wire.properties import decode_properties

if TYPE_CHECKING:
    from .broker.broker import Broker
    from .broker.queue import Queue
    from .broker.vhost import VirtualHost
    from .protocol.connection import Connection
    from .server import AMQPProtocol, Server

__all__ = ["Death", "PeekedMessage", "queue_depth", "peek", "open_connections",
           "describe_connection", "close_connections"]


@dataclass(frozen=True)
class PeekedMessage:
    """One ready message as a consumer would receive it next."""

    body: bytes
    exchange: str
    routing_key: str
    # The basic properties that are set, under pika's names (content_type,
    # headers, delivery_mode, ...); headers are a dict.
    properties: dict[str, Any]
    redelivered: bool
    # The parsed `x-death` header, most recent death first (empty for a
    # message that never died).
    deaths: tuple[Death, ...]

    @property
    def headers(self) -> dict[str, Any]:
        return self.properties.get("headers") or {}


def find_vhost(broker: Broker, name: str) -> VirtualHost:
    host = broker.vhosts.get(name)
    if host is None:
        raise KeyError(f"no vhost '{name}'")
    return host


def find_queue(broker: Broker, name: str, vhost: str = "/") -> Queue:
    queue = find_vhost(broker, vhost).queues.get(name)
    if queue is None:
        raise KeyError(f"no queue '{name}' in vhost '{vhost}'")
    return queue


def queue_depth(broker: Broker, name: str, vhost: str = "/") -> int:
    """Ready messages, as queue.declare-ok counts them (in memory and paged;
    not those delivered and unacknowledged, nor those waiting out a
    redelivery delay)."""
    return find_queue(broker, name, vhost).message_count


def peek(broker: Broker, name: str, vhost: str = "/",
         limit: int | None = None) -> list[PeekedMessage]:
    """The ready messages held in memory, in the order they would be
    delivered, at most `limit`.  Messages a long queue has paged to disk
    (past `paging_threshold`) are not read back for this."""
    # Iterating `ready` walks it in delivery order, whatever the queue's
    # ordering part (FIFO, or one FIFO per priority).
    ready = find_queue(broker, name, vhost).ready
    stop = None if limit is None else max(0, limit)
    return [_peeked(entry) for entry in itertools.islice(ready, stop)]


def _peeked(entry) -> PeekedMessage:
    message = entry.message
    properties = decode_properties(message.header[HEADER_PREFIX:]).as_dict()
    headers = properties.get("headers")
    return PeekedMessage(
        body=bytes(message.body), exchange=message.exchange,
        routing_key=message.routing_key, properties=properties,
        redelivered=entry.redelivered, deaths=history_from_headers(headers).deaths)


def open_connections(server: Server, vhost: str | None = None) -> list[AMQPProtocol]:
    """Client connections not closed or being closed: all of them, or those
    opened on `vhost` (a connection still in its handshake has no vhost
    yet).  One the broker has sent connection.close counts as closed: its
    socket goes at close-ok or after `close_timeout`, whatever the client does."""
    return [protocol for protocol in server.protocols
            if (conn := _connection(protocol)).state not in (CLOSING, CLOSED)
            and protocol.transport is not None and not protocol.transport.is_closing()
            and (vhost is None or (conn.vhost is not None and conn.vhost.name == vhost))]


def _connection(protocol: AMQPProtocol) -> Connection:
    # Set in connection_made, before the server lists the protocol.
    assert protocol.conn is not None
    return protocol.conn


def describe_connection(protocol: AMQPProtocol) -> str:
    """`peer -> listener (client product version, connection name)`, as far
    as the client said."""
    conn = _connection(protocol)
    properties = conn.client_properties
    said = [_text(properties.get(key)) for key in ("product", "version")]
    client = " ".join(part for part in said if part)
    name = _text(properties.get("connection_name"))
    if name:
        client = f"{client}, {name!r}" if client else repr(name)
    return f"{conn.name} ({client})" if client else conn.name


def _text(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


async def close_connections(server: Server, vhost: str | None = None,
                            reason: str = "closed by the embedding application",
                            grace: float = 0.25) -> list[str]:
    """Close the client connections still open (on `vhost`, or all) and
    say which they were (`describe_connection`).

    Connections whose client is closing them already get `grace` seconds
    to finish on their own; a client that dropped its socket is only seen
    gone once the loop reads the end of it.  The others get
    connection.close 320 CONNECTION_FORCED, as at a broker shutdown, and
    their sockets are closed without waiting for close-ok: a client that
    is not running (a blocking client the test forgot) would never answer.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while open_connections(server, vhost) and loop.time() < deadline:
        await asyncio.sleep(0.01)
    left = open_connections(server, vhost)
    described = [describe_connection(protocol) for protocol in left]
    for protocol in left:
        _connection(protocol).shutdown(CONNECTION_FORCED, reason)
    # The shutdowns scheduled their flushes: let connection.close go out.
    await asyncio.sleep(0)
    for protocol in left:
        if protocol.transport is not None:
            protocol.transport.close()
    return described
