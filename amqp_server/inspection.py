"""Reading a running broker for tests: a queue's depth and its messages
without consuming them (from `broker/peek.py`, which the workbench reads
too), and the client connections still open, which tests close.

These functions read the broker's own objects, so they run on the broker's
event loop thread (`EmbeddedBroker` calls them there directly, `BrokerThread`
sends them there).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dlx.deaths import Death
from dlx.text import as_text

from .broker.peek import PeekedMessage, find_queue, find_vhost, peek, queue_depth
from .errors import CONNECTION_FORCED
from .protocol.connection import CLOSED, CLOSING

if TYPE_CHECKING:
    from .protocol.connection import Connection
    from .server import AMQPProtocol, Server

__all__ = ["Death", "PeekedMessage", "find_queue", "find_vhost", "queue_depth", "peek",
           "open_connections", "describe_connection", "close_connections"]


def open_connections(server: Server, vhost: str | None = None) -> list[AMQPProtocol]:
    """Client connections not closed or being closed: all of them, or those
    opened on `vhost` (a connection still in its handshake has no vhost
    yet).  One closing counts as closed, whoever closed it: its socket goes
    when the client answers or closes it, or after the connection's close
    timeout, whatever the client does."""
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
    said = [as_text(properties.get(key)) for key in ("product", "version")]
    client = " ".join(part for part in said if part)
    name = as_text(properties.get("connection_name"))
    if name:
        client = f"{client}, {name!r}" if client else repr(name)
    return f"{conn.name} ({client})" if client else conn.name



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
