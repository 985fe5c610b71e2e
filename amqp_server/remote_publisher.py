"""A small AMQP 0-9-1 client that publishes to another broker with
publisher confirms: how the workbench moves messages off this broker, as
RabbitMQ's shovel does.

Messages go out with the content header they are held with here, byte for
byte (properties, headers and `x-death` included, never re-encoded), and
mandatory, so one that the other broker routes nowhere comes back as
basic.return and counts as unroutable, not as moved.  The client
properties ask for `authentication_failure_close` (as pika and RabbitMQ's
own clients do), so a refused login is answered with connection.close 403
rather than a dropped socket, and said as such.  Heartbeats are turned
off (tune-ok with 0): a move is short and always has traffic in flight.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from pamqp import commands as spec

from .wire import frames
from .wire.methods import decode_method, encode_method, make
from .wire.table import FieldTable

_FRAME_HEADER = struct.Struct(">BHI")
CHANNEL = 1
ACCESS_REFUSED = 403
FRAME_MAX = 131072


# How the other broker settled a publish.
CONFIRMED, RETURNED, NACKED = "confirmed", "returned", "nacked"


class RemoteError(Exception):
    """The other broker could not be reached or refused us; str() says why."""


@dataclass(frozen=True)
class AmqpUri:
    host: str
    port: int
    username: str
    password: str
    vhost: str
    tls: bool

    @property
    def shown(self) -> str:
        """The URI without its password, for progress and errors."""
        scheme = "amqps" if self.tls else "amqp"
        vhost = self.vhost.replace("%", "%25").replace("/", "%2F")
        return f"{scheme}://{self.username}@{self.host}:{self.port}/{vhost}"


def parse_uri(uri: str) -> AmqpUri:
    """RabbitMQ's URI form: amqp[s]://user:pass@host:port/vhost (the vhost
    URL-encoded; an empty path is "/", as the spec of the URI scheme says)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("amqp", "amqps"):
        raise ValueError(f"not an AMQP URI (amqp:// or amqps://): {uri!r}")
    if not parts.hostname:
        raise ValueError(f"no host in AMQP URI {uri!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in AMQP URI {uri!r}") from None
    tls = parts.scheme == "amqps"
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return AmqpUri(parts.hostname, port or (5671 if tls else 5672),
                   unquote(parts.username or "guest"), unquote(parts.password or "guest"),
                   unquote(path) if parts.path else "/", tls)


class RemotePublisher:
    """One connection and one confirming channel to another broker."""

    def __init__(self, uri: AmqpUri, timeout: float = 30.0) -> None:
        self.uri = uri
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._frame_max = FRAME_MAX
        self._next_tag = 1
        # tag -> (future, what was sent), until the broker confirms it
        self._pending: dict[int, tuple[asyncio.Future, tuple]] = {}
        self._returned: set[int] = set()
        self._closed: str | None = None
        self._pump: asyncio.Task | None = None

    # ---- connecting --------------------------------------------------------

    async def connect(self) -> None:
        uri = self.uri
        context = ssl.create_default_context() if uri.tls else None
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(uri.host, uri.port, ssl=context), self.timeout)
            await asyncio.wait_for(self._handshake(), self.timeout)
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            self.abort()
            raise RemoteError(f"cannot reach {uri.shown}: {exc or type(exc).__name__}") from None
        except RemoteError:
            self.abort()
            raise
        self._pump = asyncio.get_running_loop().create_task(self._read_confirms())

    async def _handshake(self) -> None:
        uri = self.uri
        self._writer.write(frames.PROTOCOL_HEADER)
        await self._expect(spec.Connection.Start)
        properties = FieldTable({"product": "amqp-server workbench",
                                 "capabilities": FieldTable({
                                     "publisher_confirms": True,
                                     "authentication_failure_close": True})})
        response = f"\0{uri.username}\0{uri.password}".encode()
        self._send(0, make(spec.Connection.StartOk, client_properties=properties,
                           mechanism="PLAIN", response=response, locale="en_US"))
        tune = await self._expect(spec.Connection.Tune)
        self._frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        self._send(0, make(spec.Connection.TuneOk, channel_max=1,
                           frame_max=self._frame_max, heartbeat=0))
        self._send(0, make(spec.Connection.Open, virtual_host=uri.vhost))
        await self._expect(spec.Connection.OpenOk)
        self._send(CHANNEL, make(spec.Channel.Open))
        await self._expect(spec.Channel.OpenOk)
        self._send(CHANNEL, make(spec.Confirm.Select))
        await self._expect(spec.Confirm.SelectOk)

    async def _expect(self, cls):
        while True:
            kind, _channel, payload = await self._frame()
            if kind != frames.FRAME_METHOD:
                continue
            method = decode_method(payload)
            if isinstance(method, cls):
                return method
            if isinstance(method, spec.Connection.Close) and method.reply_code == ACCESS_REFUSED \
                    and cls in (spec.Connection.Tune, spec.Connection.OpenOk):
                what = "login" if cls is spec.Connection.Tune else "access to the vhost"
                raise RemoteError(f"{self.uri.shown}: {what} refused ({method.reply_code} "
                                  f"{method.reply_text})")
            if isinstance(method, (spec.Connection.Close, spec.Channel.Close)):
                raise RemoteError(f"{self.uri.shown} refused: {method.reply_code} "
                                  f"{method.reply_text}")

    async def _frame(self) -> tuple[int, int, bytes]:
        head = await self._reader.readexactly(7)
        kind, channel, size = _FRAME_HEADER.unpack(head)
        payload = await self._reader.readexactly(size + 1)
        if payload[-1] != frames.FRAME_END:
            raise RemoteError(f"{self.uri.shown} sent a malformed frame")
        return kind, channel, payload[:-1]

    def _send(self, channel: int, method) -> None:
        self._writer.write(frames.frame(frames.FRAME_METHOD, channel, encode_method(method)))

    # ---- publishing --------------------------------------------------------

    def publish(self, exchange: str, routing_key: str, header: bytes,
                body: bytes) -> asyncio.Future:
        """Send one message; the future's result, once the broker settled
        it, is CONFIRMED (routed somewhere), RETURNED (routed nowhere) or
        NACKED."""
        if self._closed is not None:
            raise RemoteError(self._closed)
        tag = self._next_tag
        self._next_tag += 1
        future = asyncio.get_running_loop().create_future()
        self._pending[tag] = (future, (exchange, routing_key, header, body))
        self._send(CHANNEL, make(spec.Basic.Publish, exchange=exchange,
                                 routing_key=routing_key, mandatory=True))
        self._writer.write(frames.content_frames(CHANNEL, header, body, self._frame_max))
        return future

    @property
    def failure(self) -> str | None:
        """Why the connection ended, if it did."""
        return self._closed

    async def drain(self) -> None:
        await self._writer.drain()

    async def _read_confirms(self) -> None:
        try:
            while True:
                kind, _channel, payload = await self._frame()
                if kind != frames.FRAME_METHOD:
                    continue  # a heartbeat
                method = decode_method(payload)
                if isinstance(method, spec.Basic.Return):
                    await self._returned_message(method)
                elif isinstance(method, (spec.Basic.Ack, spec.Basic.Nack)):
                    self._settle(method.delivery_tag, method.multiple,
                                 isinstance(method, spec.Basic.Ack))
                elif isinstance(method, (spec.Connection.Close, spec.Channel.Close)):
                    self._fail(f"{self.uri.shown} closed the channel: {method.reply_code} "
                               f"{method.reply_text}")
                    return
        except (OSError, asyncio.IncompleteReadError, RemoteError) as exc:
            self._fail(f"lost the connection to {self.uri.shown}: {exc}")

    async def _returned_message(self, method) -> None:
        """basic.return names no delivery tag; it comes before the ack of
        its publish, so it is the oldest unconfirmed publish of the same
        exchange, routing key, header and body (identical messages are
        interchangeable)."""
        kind, _channel, header = await self._frame()
        size = struct.unpack_from(">Q", header, 4)[0] if kind == frames.FRAME_HEADER else 0
        body = bytearray()
        while len(body) < size:
            _kind, _channel, chunk = await self._frame()
            body += chunk
        sent = (method.exchange, method.routing_key, bytes(header), bytes(body))
        for tag, (_future, what) in sorted(self._pending.items()):
            if tag not in self._returned and what == sent:
                self._returned.add(tag)
                return

    def _settle(self, tag: int, multiple: bool, ack: bool) -> None:
        tags = [t for t in self._pending if t <= tag] if multiple else [tag]
        for settled in sorted(tags):
            future = self._pending.pop(settled, (None, None))[0]
            returned = settled in self._returned
            self._returned.discard(settled)
            if future is not None and not future.done():
                # A returned message is acked too: the return says why.
                future.set_result(RETURNED if returned else CONFIRMED if ack else NACKED)

    def _fail(self, reason: str) -> None:
        self._closed = reason
        for future, _sent in self._pending.values():
            if not future.done():
                future.set_exception(RemoteError(reason))
        self._pending.clear()

    # ---- closing -------------------------------------------------------------

    async def close(self) -> None:
        if self._writer is None:
            return
        if self._closed is None:
            try:
                self._send(0, make(spec.Connection.Close, reply_code=200, reply_text="done"))
                await asyncio.wait_for(self._writer.drain(), 5)
            except (TimeoutError, OSError):
                pass
        self.abort()

    def abort(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._closed is None:
            self._closed = "connection closed"
