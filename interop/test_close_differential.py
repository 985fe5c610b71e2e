"""How a connection and a channel end, side by side with RabbitMQ 3.10,
over a raw socket that records what the broker sends and when it closes the
socket: after close-ok (to the client's connection.close) or its own
connection.close, the broker leaves the socket to the client and drops it
only when the client answers, closes its end, or after the connection's
bound (its heartbeat here, below RabbitMQ's 30 s); a channel it closed drops
what comes until close-ok but answers a crossing channel.close, and still
holds content frames to their places.

Each transcript is a list of steps; "open after 0.3 s" means the broker
had not closed the socket in that time, "closed" that it did within
`BOUND` seconds (RabbitMQ resets the socket, this broker sends its FIN:
both are a close here).  Heartbeat frames are left out of the transcripts."""

from __future__ import annotations

import socket
import struct
import time
from urllib.parse import urlparse

from pamqp import commands as spec

from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make

from .broken_content import BROKEN_CONTENT, broken_content
from .rawclient import RawClient

OPEN_FOR = 0.3
BOUND = 10.0

CLOSE = make(spec.Connection.Close, reply_code=200, reply_text="done")
CLOSE_OK = make(spec.Connection.CloseOk)


def opened(url: str, heartbeat: int = 0) -> RawClient:
    parsed = urlparse(url)
    client = RawClient(parsed.port or 5672, parsed.hostname or "127.0.0.1")
    client.handshake(heartbeat=heartbeat)
    client.open_channel()
    return client


def described(payload: bytes) -> str:
    method = decode_method(payload)
    code = getattr(method, "reply_code", None)
    return f"{method.name} {code} {method.reply_text}" if code else method.name


def watch(client: RawClient, seconds: float, steps: list[str]) -> bool:
    """Record the frames the broker sends for `seconds` (heartbeats left
    out); True, and "closed" recorded, when it closes the socket."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        client.sock.settimeout(min(left, 0.05))
        try:
            chunk = client.sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:  # RabbitMQ resets the socket (linger 0)
            chunk = b""
        if not chunk:
            steps.append("closed")
            return True
        client.buffer += chunk
        while len(client.buffer) >= 7:
            kind, channel, size = struct.unpack_from(">BHI", client.buffer)
            if len(client.buffer) < size + 8:
                break
            payload, client.buffer = client.buffer[7:7 + size], client.buffer[size + 8:]
            if kind == frames.FRAME_METHOD:
                steps.append(f"got {described(payload)} on {channel}")
    return False


def still_open(client: RawClient, steps: list[str]) -> None:
    if not watch(client, OPEN_FOR, steps):
        steps.append(f"open after {OPEN_FOR} s")


def until_closed(client: RawClient, steps: list[str]) -> None:
    if not watch(client, BOUND, steps):
        steps.append(f"still open after {BOUND} s")


def close_by_client(url: str, then: str, heartbeat: int = 0) -> list[str]:
    """The client's connection.close, then `then`: shut its write side,
    send close-ok, send close again and junk, or nothing."""
    client = opened(url, heartbeat)
    steps = ["sent connection.close"]
    try:
        client.send_method(0, CLOSE)
        still_open(client, steps)
        if then == "close-ok":
            client.send_method(0, CLOSE_OK)
            steps.append("sent close-ok")
        elif then == "close again":
            client.send(frames.method_frame(0, CLOSE)
                        + frames.method_frame(1, make(spec.Queue.Declare, queue="x"))
                        + frames.method_frame(2, make(spec.Channel.Open))
                        + frames.HEARTBEAT_FRAME)
            steps.append("sent close, a declare, a channel.open, a heartbeat")
            still_open(client, steps)
        if then != "nothing":
            client.sock.shutdown(socket.SHUT_WR)
            steps.append("shut the write side")
        until_closed(client, steps)
    finally:
        client.close()
    return steps


def close_by_broker(url: str, then: str, heartbeat: int = 0) -> list[str]:
    """The broker's connection.close (504: a method on a channel never
    opened), then the client's `then`: close-ok, its write side shut, a
    crossing connection.close and then close-ok, or nothing."""
    client = opened(url, heartbeat)
    steps = ["sent a declare on channel 7"]
    try:
        client.send_method(7, make(spec.Queue.Declare, queue="x"))
        still_open(client, steps)
        if then == "close":
            client.send_method(0, CLOSE)
            steps.append("sent connection.close")
            still_open(client, steps)
        if then in ("close-ok", "close"):
            client.send_method(0, CLOSE_OK)
            steps.append("sent close-ok")
        elif then == "shut":
            client.sock.shutdown(socket.SHUT_WR)
            steps.append("shut the write side")
        until_closed(client, steps)
    finally:
        client.close()
    return steps


def test_after_close_ok_the_socket_is_the_clients_to_close_as_rabbitmq(broker, rabbitmq_url):
    for then in ("shut", "close-ok", "close again"):
        ours = close_by_client(broker.url, then)
        assert ours == close_by_client(rabbitmq_url, then), then
        assert ours[1:3] == ["got Connection.CloseOk on 0", f"open after {OPEN_FOR} s"], then
        assert ours[-1] == "closed", then


def test_after_close_ok_the_broker_closes_after_the_heartbeat_as_rabbitmq(
        broker, rabbitmq_url):
    ours = close_by_client(broker.url, "nothing", heartbeat=2)
    assert ours == close_by_client(rabbitmq_url, "nothing", heartbeat=2)
    assert ours == ["sent connection.close", "got Connection.CloseOk on 0",
                    f"open after {OPEN_FOR} s", "closed"]


def test_the_brokers_close_waits_for_the_client_as_rabbitmq(broker, rabbitmq_url):
    for then in ("close-ok", "shut", "close"):
        ours = close_by_broker(broker.url, then)
        assert ours == close_by_broker(rabbitmq_url, then), then
        assert ours[1:3] == [
            "got Connection.Close 504 CHANNEL_ERROR - expected 'channel.open' on 0",
            f"open after {OPEN_FOR} s"], then
        assert ours[-1] == "closed", then


def test_the_brokers_close_is_bounded_by_the_heartbeat_as_rabbitmq(broker, rabbitmq_url):
    ours = close_by_broker(broker.url, "nothing", heartbeat=2)
    assert ours == close_by_broker(rabbitmq_url, "nothing", heartbeat=2)
    assert ours[-2:] == [f"open after {OPEN_FOR} s", "closed"]


def closing_channel(url: str) -> list[str]:
    """Channel 1 closed by the broker (404), then commands on it, a
    crossing channel.close, close-ok and a new channel.open."""
    client = opened(url)
    steps = []
    try:
        client.send_method(1, make(spec.Queue.Declare, queue="cd.ghost", passive=True))
        watch(client, OPEN_FOR, steps)
        header = frames.content_header(2, b"\x00\x00")
        client.send(frames.method_frame(1, make(spec.Queue.Declare, queue="x"))
                    + frames.method_frame(1, make(spec.Basic.Publish, routing_key="k"))
                    + frames.frame(frames.FRAME_HEADER, 1, header)
                    + frames.frame(frames.FRAME_BODY, 1, b"h")
                    + frames.frame(frames.FRAME_BODY, 1, b"i")
                    + frames.method_frame(1, make(spec.Basic.Ack, delivery_tag=9)))
        steps.append("sent a declare, a publish in three frames, an ack")
        watch(client, OPEN_FOR, steps)
        client.send_method(1, make(spec.Channel.Close, reply_code=200, reply_text=""))
        steps.append("sent channel.close")
        watch(client, OPEN_FOR, steps)
        client.send(frames.method_frame(1, make(spec.Channel.CloseOk))
                    + frames.method_frame(1, make(spec.Channel.Open)))
        steps.append("sent close-ok, channel.open")
        watch(client, OPEN_FOR, steps)
    finally:
        client.close()
    return steps


def test_a_closing_channel_takes_only_close_and_close_ok_as_rabbitmq(broker, rabbitmq_url):
    ours = closing_channel(broker.url)
    assert ours == closing_channel(rabbitmq_url)
    assert ours == [
        "got Channel.Close 404 NOT_FOUND - no queue 'cd.ghost' in vhost '/' on 1",
        "sent a declare, a publish in three frames, an ack",
        "sent channel.close", "got Channel.CloseOk on 1",
        "sent close-ok, channel.open", "got Channel.OpenOk on 1"]


def close_channel_1(client: RawClient) -> None:
    client.send_method(1, make(spec.Queue.Declare, queue="cd.ghost", passive=True))
    assert isinstance(client.read_method()[1], spec.Channel.Close)


def broken_content_on_a_closing_channel(url: str) -> dict:
    """The connection.close each broken content stream gets on a channel
    the broker has closed, on its own connection."""
    cases = {**BROKEN_CONTENT, "channel.open": frames.method_frame(1, make(spec.Channel.Open))}
    return broken_content(url, cases, first=close_channel_1)


def test_a_closing_channel_still_holds_content_to_its_place_as_rabbitmq(
        broker, rabbitmq_url):
    ours = broken_content_on_a_closing_channel(broker.url)
    assert ours == broken_content_on_a_closing_channel(rabbitmq_url)
    assert ours["a body with no publish"][:1] == (505,)
    assert ours["channel.open"][:2] == (504, "CHANNEL_ERROR - second 'channel.open' seen")


def answer_to_a_method_only_the_broker_sends(url: str) -> list[str]:
    client = opened(url)
    try:
        client.send_method(1, make(spec.Basic.QosOk))
        channel, method = client.read_method()
        steps = [f"{channel} {method.name} {method.reply_code} {method.reply_text} "
                 f"{method.class_id}.{method.method_id}"]
        client.send_method(0, CLOSE_OK)
        return steps
    finally:
        client.close()


def test_a_method_only_the_broker_sends_closes_the_connection_with_503_as_rabbitmq(
        broker, rabbitmq_url):
    # rabbit_channel's last handle_method clause: command_invalid,
    # "unimplemented method", a connection error naming basic.qos-ok (60, 11).
    ours = answer_to_a_method_only_the_broker_sends(broker.url)
    assert ours == answer_to_a_method_only_the_broker_sends(rabbitmq_url)
    assert ours == ["0 Connection.Close 503 COMMAND_INVALID - unimplemented method 60.11"]
