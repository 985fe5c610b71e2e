"""A minimal blocking AMQP client over a real socket, for tests that need to
send exact (or deliberately broken) bytes that no real client would."""

from __future__ import annotations

import socket
import struct

import pika
from pamqp import commands as spec

from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make
from amqp_server.wire.table import FieldTable


class RawClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buffer = b""

    @classmethod
    def opened(cls, port: int, queue: str | None = None) -> RawClient:
        """Connected, logged in, channel 1 open, and `queue` declared if given."""
        client = cls(port)
        client.handshake()
        client.open_channel()
        if queue is not None:
            client.send_method(1, make(spec.Queue.Declare, queue=queue))
            _, ok = client.read_method()
            assert isinstance(ok, spec.Queue.DeclareOk)
        return client

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method) -> None:
        self.send(frames.method_frame(channel, method))

    def recv_exact(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed by broker")
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def read_frame(self) -> tuple[int, int, bytes]:
        frame_type, channel, size = struct.unpack(">BHI", self.recv_exact(7))
        payload = self.recv_exact(size)
        assert self.recv_exact(1) == b"\xce"
        return frame_type, channel, payload

    def read_method(self, skip_heartbeats: bool = True):
        while True:
            frame_type, channel, payload = self.read_frame()
            if frame_type == frames.FRAME_HEARTBEAT and skip_heartbeats:
                continue
            assert frame_type == frames.FRAME_METHOD, f"expected a method, got type {frame_type}"
            return channel, decode_method(payload)

    def closed_by_peer(self) -> bool:
        """True when the broker has closed the socket (EOF)."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buffer += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def handshake(self, heartbeat: int = 0, frame_max: int = 131072,
                  vhost: str = "/", capabilities: dict | None = None,
                  channel_max: int = 0) -> None:
        self.send(frames.PROTOCOL_HEADER)
        _, start = self.read_method()
        assert isinstance(start, spec.Connection.Start)
        props = FieldTable({"capabilities": FieldTable(capabilities or {
            "authentication_failure_close": True, "consumer_cancel_notify": True})})
        self.send_method(0, make(spec.Connection.StartOk, client_properties=props,
                                 mechanism="PLAIN", response=b"\x00guest\x00guest",
                                 locale="en_US"))
        _, tune = self.read_method()
        assert isinstance(tune, spec.Connection.Tune)
        self.send_method(0, make(spec.Connection.TuneOk,
                                 channel_max=channel_max or tune.channel_max,
                                 frame_max=frame_max, heartbeat=heartbeat))
        self.send_method(0, make(spec.Connection.Open, virtual_host=vhost))
        _, opened = self.read_method()
        assert isinstance(opened, spec.Connection.OpenOk)

    def open_channel(self, number: int = 1) -> None:
        self.send_method(number, make(spec.Channel.Open))
        _, ok = self.read_method()
        assert isinstance(ok, spec.Channel.OpenOk)

    def publish(self, channel: int, exchange: str, routing_key: str, header: bytes,
                body: bytes, mandatory: bool = False) -> None:
        self.send_method(channel, make(spec.Basic.Publish, exchange=exchange,
                                       routing_key=routing_key, mandatory=mandatory))
        self.send(frames.frame(frames.FRAME_HEADER, channel, header))
        if body:
            self.send(frames.frame(frames.FRAME_BODY, channel, body))

    @classmethod
    def for_url(cls, url: str) -> RawClient:
        """Connected to the broker at an amqp:// URL (guest/guest), channel 1 open."""
        from urllib.parse import urlparse
        parsed = urlparse(url)
        client = cls(parsed.port or 5672, parsed.hostname or "127.0.0.1")
        client.handshake()
        client.open_channel()
        return client

    def get(self, queue: str, channel: int = 1):
        """basic.get with no_ack: (get-ok, typed Properties, body), or None if
        the queue is empty.  Properties keep every wire type."""
        from amqp_server.wire.properties import decode_properties
        self.send_method(channel, make(spec.Basic.Get, queue=queue, no_ack=True))
        _, reply = self.read_method()
        if isinstance(reply, spec.Basic.GetEmpty):
            return None
        assert isinstance(reply, spec.Basic.GetOk), reply
        _, _, header = self.read_frame()
        (size,) = struct.unpack_from(">Q", header, 4)
        body = b""
        while len(body) < size:
            _, _, chunk = self.read_frame()
            body += chunk
        return reply, decode_properties(header[12:]), body


def other_connections_still_work(broker):
    """What a raw client broke closed its own connection only: a new one
    declares, publishes and gets."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.queue_declare("still-fine")
    channel.basic_publish("", "still-fine", b"ok")
    assert channel.basic_get("still-fine", auto_ack=True)[2] == b"ok"
    conn.close()
