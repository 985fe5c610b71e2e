"""Stream scenarios driven by pika over real TCP, run against this broker
(test_streams.py) and side by side against RabbitMQ (test_streams_differential.py).
Each returns plain data (reply codes and texts, offsets, headers, bodies),
so one broker's answers can be compared with another's."""

from __future__ import annotations

import time
import uuid

import pika

STREAM = {"x-queue-type": "stream"}


def unique(prefix: str = "stream") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def closed(error: Exception) -> tuple[int, str]:
    code, text = error.args[0], error.args[1]
    return code, text


def attempt(url: str, action) -> tuple:
    """`action(channel)` on a fresh connection: ("ok", its result) or
    ("error", reply code, reply text) when the broker closed the channel
    or the connection."""
    conn = connect(url)
    try:
        return ("ok", action(conn.channel()))
    except (pika.exceptions.ChannelClosedByBroker,
            pika.exceptions.ConnectionClosedByBroker) as error:
        return ("error", *closed(error))
    finally:
        if conn.is_open:
            conn.close()


def declare(url: str, name: str, durable: bool = True, **arguments) -> tuple:
    def act(channel):
        channel.queue_declare(name, durable=durable, arguments={**STREAM, **arguments})
    return attempt(url, act)


def delete(url: str, name: str) -> None:
    conn = connect(url)
    try:
        conn.channel().queue_delete(name)
    finally:
        conn.close()


def publish(url: str, name: str, count: int, start: int = 0) -> None:
    """`count` messages, each confirmed, with a header `i` and body `m<i>`."""
    conn = connect(url)
    channel = conn.channel()
    channel.confirm_delivery()
    for i in range(start, start + count):
        channel.basic_publish("", name, b"m%d" % i, pika.BasicProperties(headers={"i": i}))
    conn.close()


def consume(url: str, name: str, offset=None, prefetch: int = 100, expect: int = 0,
            ack: bool = True, seconds: float = 5.0, channel=None) -> list[tuple]:
    """(offset header, `i` header, body, redelivered) of the deliveries a
    consumer gets, until `expect` arrived (or a quiet half second when 0),
    within `seconds`."""
    conn = None
    if channel is None:
        conn = connect(url)
        channel = conn.channel()
    channel.basic_qos(prefetch_count=prefetch)
    got: list[tuple] = []

    def on_message(ch, method, props, body):
        headers = props.headers or {}
        got.append((headers.get("x-stream-offset"), headers.get("i"), body, method.redelivered))
        if ack:
            ch.basic_ack(method.delivery_tag)

    arguments = {"x-stream-offset": offset} if offset is not None else {}
    tag = channel.basic_consume(name, on_message, arguments=arguments)
    deadline = time.monotonic() + seconds
    quiet_until = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        before = len(got)
        channel.connection.process_data_events(0.05)
        if expect and len(got) >= expect:
            break
        if len(got) != before:
            quiet_until = time.monotonic() + 0.5
        if not expect and time.monotonic() >= quiet_until:
            break
    channel.basic_cancel(tag)
    if conn is not None:
        conn.close()
    return got


def consume_refusal(url: str, name: str, qos: dict | None, auto_ack: bool = False,
                    arguments: dict | None = None) -> tuple:
    def act(channel):
        if qos is not None:
            channel.basic_qos(**qos)
        channel.basic_consume(name, lambda *a: None, auto_ack=auto_ack,
                              arguments=arguments or {})
        channel.connection.process_data_events(0.2)
    return attempt(url, act)
