"""Dead-letter scenarios: a consumer rejecting everything, and mass expiry.

`dead_letter_path`: a publisher process sends N messages, each with its own
message-id (so no two dead letters share a header), to a queue whose
consumer nacks every one (requeue=false, multiple); a second consumer drains
the dead-letter queue.  The rate is N over the time from the first rejection
to the last dead letter drained.

`ttl_mass_expiry`: N messages (distinct message-ids again) are published
with per-message TTLs chosen so
that all of them expire at the same instant; the time from that instant until
all N are in the dead-letter queue is measured, with the broker's resident
memory: its peak over the run, and its growth from the start of the run
(growth depends on what the process already holds from earlier runs, so
the peak is the number compared).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
import uuid

from pamqp import commands as spec

from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable

from .client import connect, encoded_publish
from .procinfo import RssSampler
from .scenarios import BATCH, _cleanup, _run


async def _declare_dead_letter_pair(url: str, work: str, dlx: str, dlq: str) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Exchange.Declare, exchange=dlx, exchange_type="fanout"),
                    spec.Exchange.DeclareOk)
    await conn.call(1, make(spec.Queue.Declare, queue=dlq), spec.Queue.DeclareOk)
    await conn.call(1, make(spec.Queue.Bind, queue=dlq, exchange=dlx, routing_key=""),
                    spec.Queue.BindOk)
    await conn.call(1, make(spec.Queue.Declare, queue=work, arguments=FieldTable(
        {"x-dead-letter-exchange": dlx})), spec.Queue.DeclareOk)
    await conn.close()


async def _publish_distinct(url: str, queue: str, count: int, start_at: float) -> None:
    """`count` messages with distinct message-ids, encoded before the start."""
    conn = await connect(url)
    await conn.open_channel(1)
    body = b"x" * 100
    batches = []
    for first in range(0, count, BATCH):
        batches.append(b"".join(
            encoded_publish(1, "", queue, body, 1,
                            encode_properties(Properties(message_id=f"m-{n}")))
            for n in range(first, min(first + BATCH, count))))
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    for batch in batches:
        conn.transport.write(batch)
        await conn.drain()
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)
    await conn.close()


def _distinct_publisher_process(*args) -> None:
    _run(_publish_distinct(*args))


async def _reject_and_drain(url: str, work: str, dlq: str, expected: int,
                            timeout: float) -> tuple[float, int]:
    rejecter = await connect(url)
    drainer = await connect(url)
    done = asyncio.get_running_loop().create_future()
    first = [0.0]

    def rejected(count: int) -> None:
        if not first[0]:
            first[0] = time.perf_counter()

    def drained(count: int) -> None:
        if count >= expected and not done.done():
            done.set_result(time.perf_counter())

    rejecter.on_delivery_count = rejected
    rejecter.reject = True
    drainer.on_delivery_count = drained
    for conn, queue in ((rejecter, work), (drainer, dlq)):
        conn.ack_every = 500
        await conn.open_channel(1)
        await conn.call(1, make(spec.Basic.Qos, prefetch_count=1000), spec.Basic.QosOk)
        await conn.call(1, make(spec.Basic.Consume, queue=queue), spec.Basic.ConsumeOk)


    async def settle_stragglers() -> None:
        # The last partial window would otherwise wait forever for a multiple ack.
        while not done.done():
            await asyncio.sleep(0.02)
            rejecter.settle_pending()
            drainer.settle_pending()

    ticker = asyncio.ensure_future(settle_stragglers())
    try:
        finished = await asyncio.wait_for(asyncio.shield(done), timeout)
    except TimeoutError:
        finished = time.perf_counter()
    ticker.cancel()
    count = drainer.deliveries
    await rejecter.close()
    await drainer.close()
    return finished - first[0], count


def dead_letter_path(url: str, count: int, timeout: float) -> dict:
    tag = uuid.uuid4().hex[:8]
    work, dlx, dlq = f"bench-{tag}-work", f"bench-{tag}-dlx", f"bench-{tag}-dlq"
    _run(_declare_dead_letter_pair(url, work, dlx, dlq))
    publisher = mp.get_context("spawn").Process(
        target=_distinct_publisher_process, args=(url, work, count, time.time() + 3.0))
    publisher.start()
    try:
        elapsed, delivered = _run(_reject_and_drain(url, work, dlq, count, timeout))
    finally:
        publisher.join(timeout)
        if publisher.is_alive():
            publisher.kill()
    _run(_cleanup(url, dlx, [work, dlq]))
    result = {"dead_lettered": delivered, "seconds": round(elapsed, 3)}
    if delivered < count:
        result["failed"] = f"{delivered} of {count} dead letters arrived"
    else:
        result["dead_letters_per_s"] = round(delivered / elapsed) if elapsed else 0
    return result


async def _expire_all_at_once(url: str, work: str, dlq: str, count: int,
                              timeout: float) -> dict:
    sampler = RssSampler.for_url(url)
    conn = await connect(url)
    await conn.open_channel(1)
    # All messages expire at `at`, whatever moment each was published in.
    at = time.time() + max(3.0, count / 15_000)
    sent = 0
    body = b"x" * 100
    while sent < count:
        n = min(BATCH, count - sent)
        ttl_ms = str(max(0, int((at - time.time()) * 1000)))
        conn.transport.write(b"".join(
            encoded_publish(1, "", work, body, 1, encode_properties(
                Properties(expiration=ttl_ms, message_id=f"m-{sent + i}")))
            for i in range(n)))
        sent += n
        await conn.drain()
        sampler.sample()
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)
    if time.time() > at:
        raise RuntimeError("publishing took longer than the TTL budget; lower --scale")
    while time.time() < at:
        sampler.sample()
        await asyncio.sleep(0.01)
    deadline = at + timeout
    dead = 0
    while time.time() < deadline:
        ok = await conn.call(1, make(spec.Queue.Declare, queue=dlq, passive=True),
                             spec.Queue.DeclareOk)
        sampler.sample()
        dead = ok.message_count
        if dead >= count:
            break
        await asyncio.sleep(0.005)
    elapsed = time.time() - at
    await conn.close()
    result = {"expired": dead, "rss_growth_mb": sampler.growth_mb(),
              "peak_rss_mb": sampler.peak_mb()}
    if dead < count:
        result["failed"] = f"{dead} of {count} expired messages reached the DLQ"
    else:
        result["seconds"] = round(elapsed, 3)
    return result


def ttl_mass_expiry(url: str, count: int, timeout: float) -> dict:
    tag = uuid.uuid4().hex[:8]
    work, dlx, dlq = f"bench-{tag}-work", f"bench-{tag}-dlx", f"bench-{tag}-dlq"
    _run(_declare_dead_letter_pair(url, work, dlx, dlq))
    try:
        return _run(_expire_all_at_once(url, work, dlq, count, timeout))
    finally:
        _run(_cleanup(url, dlx, [work, dlq]))
