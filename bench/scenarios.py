"""Benchmark scenarios; each returns a dict of measurements for one target.

Publisher and consumer run in separate processes so the client side has a
core of its own and the broker stays the bottleneck.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
import uuid

from pamqp import commands as spec

from amqp_server.loops import new_event_loop
from amqp_server.wire.methods import make

from .client import connect, encoded_publish

BATCH = 1000


def _run(coro):
    loop = new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def _publishes(exchange: str, routing_key: str, bodies: list[bytes], start: int,
               count: int) -> bytes:
    """`count` publishes, the i-th (from `start`) with body i of `bodies`,
    taken in turn."""
    if len(bodies) == 1:
        return encoded_publish(1, exchange, routing_key, bodies[0], count)
    return b"".join(encoded_publish(1, exchange, routing_key, bodies[i % len(bodies)], 1)
                    for i in range(start, start + count))


async def _publish(url: str, exchange: str, routing_key: str, count: int,
                   bodies: list[bytes], start_at: float) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    # Every full batch starts with the first body (BATCH is a multiple of the
    # scenarios' body counts); a partial batch goes on from where it is.
    batch = _publishes(exchange, routing_key, bodies, 0, BATCH)
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    sent = 0
    while sent < count:
        n = min(BATCH, count - sent)
        conn.transport.write(batch if n == BATCH else _publishes(
            exchange, routing_key, bodies, sent, n))
        sent += n
        await conn.drain()
    # a synchronous round trip proves the broker has read everything
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)
    await conn.close()


def _publisher_process(*args) -> None:
    _run(_publish(*args))


async def _declare(url: str, exchange: str | None, queues: list[str], binding: str) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    if exchange:
        await conn.call(1, make(spec.Exchange.Declare, exchange=exchange, exchange_type="topic",
                                auto_delete=False), spec.Exchange.DeclareOk)
    for queue in queues:
        await conn.call(1, make(spec.Queue.Declare, queue=queue, auto_delete=False),
                        spec.Queue.DeclareOk)
        if exchange:
            await conn.call(1, make(spec.Queue.Bind, queue=queue, exchange=exchange,
                                    routing_key=binding), spec.Queue.BindOk)
    await conn.close()


async def _cleanup(url: str, exchange: str | None, queues: list[str]) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    for queue in queues:
        await conn.call(1, make(spec.Queue.Delete, queue=queue), spec.Queue.DeleteOk)
    if exchange:
        await conn.call(1, make(spec.Exchange.Delete, exchange=exchange), spec.Exchange.DeleteOk)
    await conn.close()


async def _consume(url: str, queues: list[str], expected: int, prefetch: int,
                   timeout: float) -> tuple[float, int]:
    conn = await connect(url)
    done = asyncio.get_running_loop().create_future()
    first = [0.0]

    def progress(count: int) -> None:
        if not first[0]:
            first[0] = time.perf_counter()
        if count >= expected and not done.done():
            done.set_result(time.perf_counter())

    conn.on_delivery_count = progress
    conn.ack_every = max(1, prefetch // 2)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=prefetch), spec.Basic.QosOk)
    for queue in queues:
        await conn.call(1, make(spec.Basic.Consume, queue=queue), spec.Basic.ConsumeOk)
    try:
        finished = await asyncio.wait_for(done, timeout)
    except TimeoutError:
        finished = time.perf_counter()
    delivered = conn.deliveries
    await conn.close()
    return finished - first[0], delivered


def publish_consume(url: str, count: int, body_sizes: tuple[int, ...], queues: int,
                    timeout: float) -> dict:
    """`count` messages published, their body sizes taken in turn from
    `body_sizes`; consumed from `queues` queues bound to a topic exchange
    (1 queue: the default exchange)."""
    tag = uuid.uuid4().hex[:8]
    names = [f"bench-{tag}-{i}" for i in range(queues)]
    exchange = f"bench-{tag}" if queues > 1 else None
    _run(_declare(url, exchange, names, "bench.#"))
    start_at = time.time() + 0.5
    publisher = mp.get_context("spawn").Process(
        target=_publisher_process,
        args=(url, exchange or "", "bench.key" if exchange else names[0], count,
              [b"x" * size for size in body_sizes], start_at))
    publisher.start()
    try:
        elapsed, delivered = _run(_consume(url, names, count * queues, 1000, timeout))
    finally:
        publisher.join(timeout)
        if publisher.is_alive():
            publisher.kill()
    _run(_cleanup(url, exchange, names))
    result = {"deliveries": delivered, "seconds": round(elapsed, 3)}
    if delivered < count * queues:
        result["failed"] = f"{delivered} of {count * queues} deliveries arrived"
    else:
        result["deliveries_per_s"] = round(delivered / elapsed) if elapsed else 0
    return result


async def _many_connections(url: str, count: int) -> dict:
    started = time.perf_counter()
    conns = []
    for start in range(0, count, 50):
        batch = await asyncio.gather(*(connect(url) for _ in range(min(50, count - start))))
        await asyncio.gather(*(c.open_channel(1) for c in batch))
        conns.extend(batch)
    opened = time.perf_counter() - started
    # every connection does one synchronous round trip while all are open
    probe = time.perf_counter()
    await asyncio.gather(*(c.call(1, make(spec.Basic.Qos, prefetch_count=10), spec.Basic.QosOk)
                           for c in conns))
    round_trip = time.perf_counter() - probe
    await asyncio.gather(*(c.close() for c in conns))
    return {"connections": len(conns), "open_seconds": round(opened, 3),
            "connections_per_s": round(len(conns) / opened),
            "round_trip_all_seconds": round(round_trip, 3)}
