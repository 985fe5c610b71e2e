"""Delayed-message exchanges as the plugin's users declare and publish to them,
and collecting what they release (bounded waits)."""

from __future__ import annotations

import time

import pika

from .waiting import wait_get

LONG = 60_000  # ms: a delay no test outlives


def delayed(channel, name="dx", routing_type="direct", durable=False, **extra):
    channel.exchange_declare(name, "x-delayed-message", durable=durable,
                             arguments={"x-delayed-type": routing_type, **extra})


def publish(channel, exchange, key, body, delay, mandatory=False, **props):
    headers = props.pop("headers", {})
    if delay is not None:
        headers["x-delay"] = delay
    channel.basic_publish(exchange, key, body,
                          pika.BasicProperties(headers=headers, **props), mandatory=mandatory)


def collect(channel, queue, count, seconds=10.0):
    got = []
    deadline = time.monotonic() + seconds
    while len(got) < count and time.monotonic() < deadline:
        method, props, body = wait_get(channel, queue, 0.2)
        if method is not None:
            got.append((body, props))
    return got


def drain(url: str, count: int, seconds: float = 15.0) -> list[bytes]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    got = [body for body, _ in collect(channel, "dq", count, seconds)]
    got += [body for body, _ in collect(channel, "dq", 1, seconds=0.5)]  # nothing more
    conn.close()
    return got
