"""A connection driven in memory, as the sans-IO tests drive it: bytes in,
frames and methods out, no socket; plain objects for what its flow control
reads and pauses (`Resources`, `Transport`)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.protocol.connection import OPEN, Connection
from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable


def split_frames(data: bytes):
    pos = 0
    while pos < len(data):
        frame_type, channel, size = struct.unpack_from(">BHI", data, pos)
        yield frame_type, channel, data[pos + 7:pos + 7 + size]
        pos += size + 8


def methods(data: bytes):
    return [decode_method(p) for t, _, p in split_frames(data) if t == frames.FRAME_METHOD]


def open_connection(broker: Broker, heartbeat: int = 0) -> Connection:
    conn = Connection(broker)
    conn.receive_data(frames.PROTOCOL_HEADER)
    conn.receive_data(frames.method_frame(0, make(
        spec.Connection.StartOk, client_properties=FieldTable(), mechanism="PLAIN",
        response=b"\x00guest\x00guest", locale="en_US")))
    conn.receive_data(frames.method_frame(0, make(spec.Connection.TuneOk, channel_max=100,
                                                  frame_max=131072, heartbeat=heartbeat)))
    conn.receive_data(frames.method_frame(0, make(spec.Connection.Open, virtual_host="/")))
    conn.receive_data(frames.method_frame(1, make(spec.Channel.Open)))
    out = methods(conn.data_to_send())
    assert [type(m) for m in out] == [spec.Connection.Start, spec.Connection.Tune,
                                      spec.Connection.OpenOk, spec.Channel.OpenOk]
    assert conn.state == OPEN
    return conn


def publish(key: str, body: bytes, props: Properties | None = None, exchange: str = "",
            mandatory: bool = False, channel: int = 1) -> bytes:
    properties = encode_properties(props) if props is not None else b"\x00\x00"
    data = (frames.method_frame(channel, make(spec.Basic.Publish, exchange=exchange,
                                              routing_key=key, mandatory=mandatory))
            + frames.frame(2, channel, frames.content_header(len(body), properties)))
    return data + frames.frame(3, channel, body) if body else data


def call(conn, channel: int, method) -> list:
    conn.receive_data(frames.method_frame(channel, method))
    return methods(conn.data_to_send())


def deliveries(data: bytes) -> list[tuple]:
    """(delivery tag, routing key, redelivered, body) for each basic.deliver."""
    out, current, body = [], None, b""
    for frame_type, _, payload in split_frames(data):
        if frame_type == frames.FRAME_METHOD:
            method = decode_method(payload)
            if isinstance(method, spec.Basic.Deliver):
                current, body = method, b""
                out.append(None)
        elif frame_type == frames.FRAME_BODY:
            body += payload
        if current is not None:
            out[-1] = (current.delivery_tag, current.routing_key, current.redelivered, body)
    return out


def consuming(broker, queue: str, prefetch: int = 0, no_ack: bool = False, **arguments):
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue=queue, arguments=FieldTable(arguments)))
    if prefetch:
        call(conn, 1, make(spec.Basic.Qos, prefetch_count=prefetch))
    call(conn, 1, make(spec.Basic.Consume, queue=queue, consumer_tag="c", no_ack=no_ack))
    return conn


@dataclass
class Resources:
    alarms: set = field(default_factory=set)
    store_busy: bool = False


@dataclass
class Transport:
    calls: list = field(default_factory=list)

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")
