"""A lean asyncio AMQP client for load generation.

Publishes are pre-encoded once and written in large batches, deliveries are
counted by scanning frame headers and acknowledged with one multiple ack per
window, so the client costs far less CPU than the broker it measures.
"""

from __future__ import annotations

import asyncio
import struct
from urllib.parse import unquote, urlparse

from pamqp import commands as spec

from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make
from amqp_server.wire.table import FieldTable

_HEADER = struct.Struct(">BHI")
_IDS = struct.Struct(">HH")
_TAG = struct.Struct(">Q")


class BenchConnection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.replies: asyncio.Queue = asyncio.Queue()
        self.deliveries = 0
        self.returns = 0
        self.acked_upto = 0
        self.confirmed = 0  # highest publisher confirm received
        self.nacked = 0     # publisher nacks received
        self.confirm_event = asyncio.Event()
        self.ack_every = 0
        self.reject = False  # settle with nack(multiple, requeue=false) instead of ack
        self.ack_channel = 1
        self.last_tag = 0
        self.on_delivery_count = None
        self.closed = asyncio.get_event_loop().create_future()
        self._drained = asyncio.Event()
        self._drained.set()

    # ---- asyncio.Protocol ----------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()

    def data_received(self, data: bytes) -> None:
        if self.buffer:
            data = self.buffer + data
        pos, end = 0, len(data)
        deliveries = 0
        last_tag = self.last_tag
        while end - pos >= 7:
            frame_type, channel, size = _HEADER.unpack_from(data, pos)
            frame_end = pos + 7 + size
            if frame_end >= end:
                break
            if frame_type == 1:
                class_id, method_id = _IDS.unpack_from(data, pos + 7)
                if class_id == 60 and method_id == 60:
                    deliveries += 1
                    tag_at = pos + 7 + 4 + 1 + data[pos + 11]
                    (last_tag,) = _TAG.unpack_from(data, tag_at)
                elif class_id == 60 and method_id == 50:
                    self.returns += 1
                elif class_id == 60 and method_id in (80, 120):
                    # publisher confirm (ack or nack): confirms come in order
                    (tag,) = _TAG.unpack_from(data, pos + 11)
                    self.confirmed = max(self.confirmed, tag)
                    if method_id == 120:
                        self.nacked += 1
                    self.confirm_event.set()
                else:
                    self.replies.put_nowait((channel, decode_method(data[pos + 7:frame_end])))
            pos = frame_end + 1
        self.buffer = data[pos:]
        if deliveries:
            self.deliveries += deliveries
            self.last_tag = last_tag
            if self.ack_every and last_tag - self.acked_upto >= self.ack_every:
                self.settle_pending()
            if self.on_delivery_count is not None:
                self.on_delivery_count(self.deliveries)

    def settle_pending(self) -> None:
        """Ack (or nack) every delivery received so far with one frame."""
        last_tag = self.last_tag
        if last_tag <= self.acked_upto or self.transport is None:
            return
        self.acked_upto = last_tag
        settle = (make(spec.Basic.Nack, delivery_tag=last_tag, multiple=True, requeue=False)
                  if self.reject else make(spec.Basic.Ack, delivery_tag=last_tag, multiple=True))
        self.transport.write(frames.method_frame(self.ack_channel, settle))

    # ---- helpers -------------------------------------------------------

    async def drain(self) -> None:
        await self._drained.wait()

    def send(self, channel: int, method) -> None:
        self.transport.write(frames.method_frame(channel, method))

    async def call(self, channel: int, method, reply_type):
        self.send(channel, method)
        while True:
            got_channel, reply = await asyncio.wait_for(self.replies.get(), 30)
            if isinstance(reply, (spec.Connection.Close, spec.Channel.Close)):
                raise RuntimeError(f"broker closed: {reply.reply_code} {reply.reply_text}")
            if isinstance(reply, reply_type):
                return reply

    async def wait_for_depth(self, queue: str, count: int, interval: float = 0.05) -> int:
        """Poll a passive queue.declare until `queue` holds `count` messages."""
        while True:
            ok = await self.call(1, make(spec.Queue.Declare, queue=queue, passive=True),
                                 spec.Queue.DeclareOk)
            if ok.message_count >= count:
                return ok.message_count
            await asyncio.sleep(interval)

    async def open_channel(self, channel: int) -> None:
        await self.call(channel, make(spec.Channel.Open), spec.Channel.OpenOk)

    async def close(self) -> None:
        try:
            await self.call(0, make(spec.Connection.Close, reply_code=200, reply_text="bye"),
                            spec.Connection.CloseOk)
        except (TimeoutError, RuntimeError):
            pass
        self.transport.close()


async def connect(url: str, factory=BenchConnection) -> BenchConnection:
    """Connected and logged in; `factory` makes the protocol object (a
    BenchConnection that reads deliveries its own way)."""
    parsed = urlparse(url)
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(factory, parsed.hostname or "127.0.0.1",
                                           parsed.port or 5672)
    conn.transport.write(frames.PROTOCOL_HEADER)
    await asyncio.wait_for(conn.replies.get(), 30)  # connection.start
    user, password = unquote(parsed.username or "guest"), unquote(parsed.password or "guest")
    conn.send(0, make(spec.Connection.StartOk, client_properties=FieldTable(
        {"product": "amqp-bench"}), mechanism="PLAIN",
        response=f"\x00{user}\x00{password}".encode(), locale="en_US"))
    _, tune = await asyncio.wait_for(conn.replies.get(), 30)
    conn.send(0, make(spec.Connection.TuneOk, channel_max=tune.channel_max,
                      frame_max=tune.frame_max, heartbeat=0))
    vhost = unquote(parsed.path[1:]) if parsed.path and parsed.path != "/" else "/"
    await conn.call(0, make(spec.Connection.Open, virtual_host=vhost), spec.Connection.OpenOk)
    return conn


def encoded_publish(channel: int, exchange: str, routing_key: str, body: bytes,
                    count: int, properties: bytes = b"\x00\x00") -> bytes:
    """`count` publishes of the same message, encoded once."""
    one = (frames.method_frame(channel, make(spec.Basic.Publish, exchange=exchange,
                                             routing_key=routing_key))
           + frames.frame(frames.FRAME_HEADER, channel,
                          frames.content_header(len(body), properties))
           + frames.frame(frames.FRAME_BODY, channel, body))
    return one * count
