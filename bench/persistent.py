"""Persistent publishing with confirms to a durable queue: the rate at
which confirms come back, with 1 KB bodies, from one or many publishers.
Each publisher keeps at most WINDOW messages unconfirmed, as a careful
application does."""

from __future__ import annotations

import asyncio
import time
import uuid

from pamqp import commands as spec

from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties

from .client import connect, encoded_publish
from .scenarios import _run

WINDOW = 1000
BATCH = 100


async def _publisher(url: str, queue: str, count: int) -> int:
    """Publishes `count`; returns how many the broker nacked."""
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Confirm.Select), spec.Confirm.SelectOk)
    batch = encoded_publish(1, "", queue, b"x" * 1024, BATCH,
                            encode_properties(Properties(delivery_mode=2)))
    sent = 0
    while sent < count:
        while sent - conn.confirmed >= WINDOW:
            conn.confirm_event.clear()
            await asyncio.wait_for(conn.confirm_event.wait(), 30)
        conn.transport.write(batch)
        sent += BATCH
        await conn.drain()
    while conn.confirmed < sent:
        conn.confirm_event.clear()
        await asyncio.wait_for(conn.confirm_event.wait(), 30)
    await conn.close()
    return conn.nacked


async def _persistent(url: str, count: int, publishers: int) -> dict:
    queue = f"bench-{uuid.uuid4().hex[:8]}-durable"
    admin = await connect(url)
    await admin.open_channel(1)
    await admin.call(1, make(spec.Queue.Declare, queue=queue, durable=True),
                     spec.Queue.DeclareOk)
    each = count // publishers
    started = time.perf_counter()
    nacked = sum(await asyncio.gather(*(_publisher(url, queue, each)
                                        for _ in range(publishers))))
    elapsed = time.perf_counter() - started
    await admin.call(1, make(spec.Queue.Delete, queue=queue), spec.Queue.DeleteOk)
    await admin.close()
    total = each * publishers
    if nacked:
        return {"confirmed": total - nacked, "failed": f"{nacked} publishes nacked"}
    return {"confirmed": total, "seconds": round(elapsed, 3),
            "confirms_per_s": round(total / elapsed)}


def persistent_confirms(url: str, count: int, publishers: int) -> dict:
    return _run(_persistent(url, count, publishers))
