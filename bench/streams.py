"""Streams: publish with confirms into a stream while one or five consumers
read it from the first offset (a stream's prefetch is its credit); and the
broker's memory while a stream holds N messages nobody consumes (a stream
keeps nothing per message in memory, so it should stay flat).

Two shapes: as applications publish and consume (`distinct`: each message
its own message-id, trace-id header, content-type and timestamp, each
delivery acknowledged with a basic.ack of its own), and the best case (the
same message over and over, a multiple ack per quarter of the prefetch)."""

from __future__ import annotations

import asyncio
import time
import uuid

from pamqp import commands as spec

from amqp_server.wire.methods import make
from amqp_server.wire.table import FieldTable

from .client import connect, encoded_publish
from .procinfo import RssSampler
from .realistic import SettleEach, distinct_publishes
from .scenarios import _run

WINDOW = 2000     # unconfirmed publishes at most
BATCH = 100
PREFETCH = 1000
STREAM = FieldTable({"x-queue-type": "stream"})


async def _declare(url: str, queue: str):
    admin = await connect(url)
    await admin.open_channel(1)
    await admin.call(1, make(spec.Queue.Declare, queue=queue, durable=True, arguments=STREAM),
                     spec.Queue.DeclareOk)
    return admin


def _batches(queue: str, count: int, distinct: bool) -> list[bytes]:
    """The publishes, BATCH a write, encoded before the clock starts."""
    if distinct:
        run = uuid.uuid4().hex[:6]
        return [distinct_publishes("", queue, first, min(BATCH, count - first), run)
                for first in range(0, count, BATCH)]
    batch = encoded_publish(1, "", queue, b"x" * 100, BATCH)
    return [batch] * -(-count // BATCH)


async def _publish(url: str, batches: list[bytes], count: int) -> int:
    """`count` 100-byte messages with confirms; returns the nacks."""
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Confirm.Select), spec.Confirm.SelectOk)
    sent = 0
    for batch in batches:
        while sent - conn.confirmed >= WINDOW:
            conn.confirm_event.clear()
            await asyncio.wait_for(conn.confirm_event.wait(), 60)
        conn.transport.write(batch)
        sent += min(BATCH, count - sent)
        await conn.drain()
    while conn.confirmed < sent:
        conn.confirm_event.clear()
        await asyncio.wait_for(conn.confirm_event.wait(), 60)
    await conn.close()
    return conn.nacked


async def _consumer(url: str, queue: str, count: int, started: asyncio.Event, distinct: bool):
    if distinct:
        conn = await connect(url, lambda: SettleEach("ack"))
    else:
        conn = await connect(url)
        conn.ack_every = PREFETCH // 4
    await conn.open_channel(1)
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=PREFETCH), spec.Basic.QosOk)
    done = asyncio.get_running_loop().create_future()

    def counted(total: int) -> None:
        if total >= count and not done.done():
            done.set_result(None)
    conn.on_delivery_count = counted
    await conn.call(1, make(spec.Basic.Consume, queue=queue,
                            arguments=FieldTable({"x-stream-offset": "first"})),
                    spec.Basic.ConsumeOk)
    started.set()
    return conn, done


async def _publish_consume(url: str, count: int, consumers: int, timeout: float,
                           distinct: bool) -> dict:
    queue = f"bench-{uuid.uuid4().hex[:8]}-stream"
    admin = await _declare(url, queue)
    readers = []
    for _ in range(consumers):
        started = asyncio.Event()
        readers.append(await _consumer(url, queue, count, started, distinct))
    batches = _batches(queue, count, distinct)
    begun = time.perf_counter()
    try:
        nacked = await asyncio.wait_for(_publish(url, batches, count), timeout)
        published = time.perf_counter() - begun
        await asyncio.wait_for(asyncio.gather(*(done for _, done in readers)), timeout)
    except TimeoutError:
        return {"failed": f"timed out after {timeout}s"}
    elapsed = time.perf_counter() - begun
    for conn, _ in readers:
        await conn.close()
    await admin.call(1, make(spec.Queue.Delete, queue=queue), spec.Queue.DeleteOk)
    await admin.close()
    if nacked:
        return {"failed": f"{nacked} publishes nacked"}
    return {"messages": count, "consumers": consumers, "seconds": round(elapsed, 3),
            "publishes_per_s": round(count / published),
            "deliveries_per_s": round(count * consumers / elapsed)}


def stream_publish_consume(url: str, count: int, consumers: int, timeout: float = 180,
                           distinct: bool = False) -> dict:
    return _run(_publish_consume(url, count, consumers, timeout, distinct))


async def _fill(url: str, count: int) -> dict:
    queue = f"bench-{uuid.uuid4().hex[:8]}-stream-mem"
    admin = await _declare(url, queue)
    await asyncio.sleep(0.5)
    sampler = RssSampler.for_url(url)
    half = count // 2
    await _publish(url, _batches(queue, half, False), half)
    sampler.sample()
    at_half = sampler.peak
    await _publish(url, _batches(queue, count - half, False), count - half)
    time.sleep(1.0)  # let lazy work settle before the last sample
    sampler.sample()
    await admin.call(1, make(spec.Queue.Delete, queue=queue), spec.Queue.DeleteOk)
    await admin.close()
    growth = sampler.peak - sampler.baseline
    return {"messages": count, "rss_growth_mb": round(growth / 2**20, 1),
            "bytes_per_message": round(growth / count),
            "second_half_growth_mb": round((sampler.peak - at_half) / 2**20, 1)}


def stream_memory(url: str, count: int) -> dict:
    return _run(_fill(url, count))
