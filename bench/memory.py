"""Resident memory per queued message: N 100-byte messages published to a
queue nobody consumes, the broker's RSS growth divided by N; and how much
RSS still grew over the second half (flat once a queue pages to disk)."""

from __future__ import annotations

import asyncio
import time
import uuid

from pamqp import commands as spec

from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties

from .client import connect, encoded_publish
from .procinfo import RssSampler
from .scenarios import BATCH, _run


async def _fill(url: str, count: int, persistent: bool) -> dict:
    queue = f"bench-{uuid.uuid4().hex[:8]}-mem"
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Queue.Declare, queue=queue, durable=persistent),
                    spec.Queue.DeclareOk)
    props = encode_properties(Properties(delivery_mode=2)) if persistent else b"\x00\x00"
    batch = encoded_publish(1, "", queue, b"x" * 100, BATCH, props)
    await asyncio.sleep(0.5)
    sampler = RssSampler.for_url(url)
    sent = 0
    half = None
    while sent < count:
        conn.transport.write(batch)
        sent += BATCH
        await conn.drain()
        if half is None and sent >= count // 2:
            await conn.wait_for_depth(queue, sent, 0.1)
            sampler.sample()
            half = sampler.peak
    await conn.wait_for_depth(queue, count, 0.1)
    time.sleep(1.0)  # let lazy work settle before the last sample
    sampler.sample()
    await conn.call(1, make(spec.Queue.Delete, queue=queue), spec.Queue.DeleteOk)
    await conn.close()
    growth = sampler.peak - sampler.baseline
    return {"messages": count, "rss_growth_mb": round(growth / 2**20, 1),
            "bytes_per_message": round(growth / count),
            "second_half_growth_mb": round((sampler.peak - half) / 2**20, 1)}


def memory_per_message(url: str, count: int, persistent: bool) -> dict:
    return _run(_fill(url, count, persistent))
