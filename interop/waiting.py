"""Polling helpers: RabbitMQ (and our reaper) move messages asynchronously."""

from __future__ import annotations

import asyncio
import time


def wait_get(channel, queue: str, timeout: float = 5.0, auto_ack: bool = True):
    """basic.get (with auto-ack unless told otherwise), retried until a
    message comes or `timeout` passes; (method, properties, body), all None
    when nothing came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, props, body = channel.basic_get(queue, auto_ack=auto_ack)
        if method is not None:
            return method, props, body
        time.sleep(0.02)
    return None, None, None


def wait_get_noack(channel, queue: str, timeout: float = 5.0):
    """`wait_get` leaving the message unacknowledged; AssertionError when
    nothing came."""
    method, props, body = wait_get(channel, queue, timeout, auto_ack=False)
    if method is None:
        raise AssertionError(f"nothing in {queue}")
    return method, props, body


def wait_for(condition, seconds: float = 5.0, step=lambda: time.sleep(0.02)) -> bool:
    """Call `step` until `condition()` holds or `seconds` pass; whether it held."""
    deadline = time.monotonic() + seconds
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        step()


async def until(condition, seconds: float = 5.0) -> bool:
    """`wait_for` in a coroutine: whether `condition()` holds within
    `seconds`, polled while the event loop runs."""
    for _ in range(int(seconds / 0.02)):
        if condition():
            return True
        await asyncio.sleep(0.02)
    return condition()


async def next_message(queue, timeout: float = 5.0):
    """The next message of an aio-pika queue, polled for at most `timeout` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        message = await queue.get(no_ack=True, fail=False)
        if message is not None:
            return message
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"nothing arrived in {queue.name}")
        await asyncio.sleep(0.02)
