"""A follower is an address too: it forwards AMQP connections and HTTP
requests to the leader, saying who the client really is.

AMQP: the follower opens a connection to the leader's AMQP port, sends one
line before the client's bytes,

    AMQPFWD1 <client host> <client port> <node> <unix time> <nonce> <hex HMAC>\\n

and then copies bytes both ways.  The leader believes the line only when
the HMAC (over the other fields, with the cluster secret) is right, the
time is within FRESH_SECONDS of its own and the nonce was not seen before,
and then treats the connection as coming from the client's address: the
loopback-only `guest` rule and the connection listings see the client, not
the follower.  A captured line cannot be used again (its nonce is kept for
as long as its time would pass), and nodes whose wall clocks disagree by
minutes - an NTP step on one - still forward: the window is wide because
the nonce, not the clock, is what stops a replay.

HTTP: every request is sent on to the leader's management port with the
same facts in an `X-Amqp-Forwarded-For` header, signed the same way;
node-local answers (this node's health checks, its metrics) are the
follower's own and are not forwarded.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from .handshake import proof

log = logging.getLogger("amqp_server.cluster")

PREFIX = b"AMQPFWD1 "
MAX_LINE = 512
FRESH_SECONDS = 900.0
# Nonces seen within the window, at most this many (the oldest go first).
SEEN_LIMIT = 200_000
HEADER = "X-Amqp-Forwarded-For"
# Every forwarded call is bounded: connecting to the leader ...
CONNECT_TIMEOUT = 2.0
# ... and a management request as a whole (a leader cut off mid-answer must
# not hold the follower's handler, or its shutdown, for minutes).
REQUEST_TIMEOUT = 30.0


def _signed(secret: bytes, host: str, port: int, node: str, stamp: int, nonce: str) -> str:
    return proof(secret, "forwarded", host, str(port), node, str(stamp), nonce).hex()


def preamble(secret: bytes, host: str, port: int, node: str) -> bytes:
    stamp = int(time.time())
    nonce = secrets.token_hex(8)
    mac = _signed(secret, host, port, node, stamp, nonce)
    return f"AMQPFWD1 {host} {port} {node} {stamp} {nonce} {mac}\n".encode()


def header_value(secret: bytes, host: str, port: int, node: str) -> str:
    return preamble(secret, host, port, node)[len(PREFIX):-1].decode()


class _Nonces:
    """The nonces believed within the window: a line is believed once."""

    def __init__(self) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()

    def first_time(self, nonce: str, now: float) -> bool:
        seen = self._seen
        while seen and (len(seen) >= SEEN_LIMIT
                        or next(iter(seen.values())) < now - 2 * FRESH_SECONDS):
            seen.popitem(last=False)
        if nonce in seen:
            return False
        seen[nonce] = now
        return True


_nonces = _Nonces()


def verify(secret: bytes, fields: str) -> tuple[str, int, str] | None:
    """(client host, client port, forwarding node) from a forwarded line's
    fields (after the prefix), or None when they are not signed with the
    secret, stale, or seen before."""
    parts = fields.strip().split(" ")
    if len(parts) != 6:
        return None
    host, port_text, node, stamp_text, nonce, mac = parts
    try:
        port, stamp = int(port_text), int(stamp_text)
    except ValueError:
        return None
    now = time.time()
    if abs(now - stamp) > FRESH_SECONDS:
        return None
    if not hmac.compare_digest(mac, _signed(secret, host, port, node, stamp, nonce)):
        return None
    if not _nonces.first_time(nonce, time.monotonic()):
        return None
    return host, port, node


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


class AmqpForwarder:
    """Listens where the node's AMQP listener would, and forwards."""

    def __init__(self, secret: bytes, node: str, target: Callable[[], tuple[str, int] | None]
                 ) -> None:
        self.secret = secret
        self.node = node
        self.target = target
        self.server: asyncio.Server | None = None
        # Each client's pipe: the leader it goes to, and its two ends.
        self._pipes: dict[asyncio.Task, tuple[tuple[str, int], asyncio.StreamWriter,
                                              asyncio.StreamWriter]] = {}

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._client, host, port, reuse_address=True)
        return self.server.sockets[0].getsockname()[1]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
        target = self.target()
        if target is None:
            writer.close()  # nobody leads right now: the client retries
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*target), CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            log.debug("cannot forward a client to the leader at %s:%d: %s", *target, exc)
            writer.close()
            return
        up_writer.write(preamble(self.secret, peer[0], peer[1], self.node))
        task = asyncio.current_task()
        assert task is not None
        self._pipes[task] = (target, writer, up_writer)
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            self._pipes.pop(task, None)

    def retarget(self, target: tuple[str, int] | None) -> None:
        """The leader changed: close the clients forwarded to another one (a
        leader cut off would hold them until their heartbeat times out);
        they connect again and are forwarded to the new leader."""
        for going_to, writer, up_writer in list(self._pipes.values()):
            if going_to != target:
                # Aborted: what waits to go to a leader cut off never will.
                writer.transport.abort()
                up_writer.transport.abort()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for _, writer, up_writer in list(self._pipes.values()):
            writer.transport.abort()
            up_writer.transport.abort()
        if self.server is not None:
            await self.server.wait_closed()
        self.server = None


# Hop-by-hop headers (RFC 9110, 7.6.1) and those aiohttp sets itself.
_NOT_FORWARDED = frozenset({"connection", "keep-alive", "proxy-authenticate",
                            "proxy-authorization", "te", "trailer", "transfer-encoding",
                            "upgrade", "host", "content-length", HEADER.lower()})


class HttpForwarder:
    """Listens where the node's management API would, and forwards every
    request to the leader's (which checks the user's permissions, as for
    a request made to it directly)."""

    def __init__(self, secret: bytes, node: str,
                 target: Callable[[], tuple[str, int] | None]) -> None:
        self.secret = secret
        self.node = node
        self.target = target
        self._runner = None
        self._session = None

    async def start(self, host: str, port: int) -> int:
        from aiohttp import ClientSession, ClientTimeout, web

        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{path:.*}", self._forward)
        # A leader elected here takes these ports over: requests still in
        # flight are cut short rather than waited for.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        self._session = ClientSession(
            timeout=ClientTimeout(total=REQUEST_TIMEOUT, sock_connect=CONNECT_TIMEOUT),
            auto_decompress=False)
        return site._server.sockets[0].getsockname()[1]

    async def _forward(self, request):
        from aiohttp import ClientError, web

        target = self.target()
        if target is None:
            return web.json_response(
                {"error": "service_unavailable",
                 "reason": f"node {self.node} has no leader to forward to right now"},
                status=503)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        host, port = (peer[0], peer[1]) if peer else ("127.0.0.1", 0)
        headers = {name: value for name, value in request.headers.items()
                   if name.lower() not in _NOT_FORWARDED}
        headers[HEADER] = header_value(self.secret, host, port, self.node)
        url = f"http://{target[0]}:{target[1]}{request.rel_url}"
        try:
            async with self._session.request(request.method, url, headers=headers,
                                             data=await request.read(),
                                             allow_redirects=False) as answer:
                body = await answer.read()
                kept = {name: value for name, value in answer.headers.items()
                        if name.lower() not in _NOT_FORWARDED}
                return web.Response(status=answer.status, body=body, headers=kept)
        except (ClientError, OSError, TimeoutError) as exc:
            return web.json_response(
                {"error": "service_unavailable",
                 "reason": f"the leader at {target[0]}:{target[1]} did not answer: {exc}"},
                status=503)

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = self._session = None
