"""Scenarios driven by the client libraries applications use, pika and
aio-pika, each in its own process, written the way their documentation
shows: one basic_reject / message.reject() / message.ack() per delivery,
each message with its own id, timestamp and headers.  The clients cost far
more CPU than the raw generator's, so these rows measure what such an
application gets, client and broker together.

- `pika-dead-letter`: a pika publisher; a pika consumer that rejects each
  delivery (requeue=false); an aio-pika consumer that drains the dead-letter
  queue, checks `x-death` and acks each message.
- `aio-pika-publish-consume`: an aio-pika publisher with publisher confirms
  (100 in flight) and an aio-pika consumer acking each message.

A run that times out, loses messages or sees a dead letter without x-death
reports "failed" instead of a rate.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
import uuid

import aio_pika
import pika

PREFETCH = 100
BODY = b"x" * 100


def _properties(n: int, run: str) -> pika.BasicProperties:
    return pika.BasicProperties(content_type="application/json", message_id=f"{run}-{n}",
                                timestamp=int(time.time()),
                                headers={"trace-id": uuid.uuid4().hex})


def _pika_publish(url: str, queue: str, count: int, start_at: float) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    run = uuid.uuid4().hex[:6]
    while time.time() < start_at:
        time.sleep(0.001)
    for n in range(count):
        channel.basic_publish("", queue, BODY, _properties(n, run))
    conn.close()


def _pika_reject(url: str, queue: str, count: int, timeout: float, started) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=PREFETCH)
    seen = 0

    def on_message(ch, method, properties, body) -> None:
        nonlocal seen
        if not seen:
            started.value = time.time()
        seen += 1
        ch.basic_reject(method.delivery_tag, requeue=False)
        if seen >= count:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message)
    conn.call_later(timeout, channel.stop_consuming)
    channel.start_consuming()
    conn.close()


async def _aio_drain(url: str, queue: str, count: int, timeout: float) -> dict:
    conn = await aio_pika.connect(url)
    channel = await conn.channel()
    await channel.set_qos(prefetch_count=PREFETCH)
    dlq = await channel.get_queue(queue)
    done = asyncio.get_running_loop().create_future()
    state = {"count": 0, "missing_x_death": 0}

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        if "x-death" not in (message.headers or {}):
            state["missing_x_death"] += 1
        await message.ack()
        state["count"] += 1
        if state["count"] >= count and not done.done():
            done.set_result(time.time())

    await dlq.consume(on_message)
    try:
        state["finished"] = await asyncio.wait_for(done, timeout)
    except TimeoutError:
        state["finished"] = time.time()
    await conn.close()
    return state


def _declare_dead_letter_pair(url: str, work: str, dlx: str, dlq: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare(dlq)
    channel.queue_bind(dlq, dlx)
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": dlx})
    conn.close()


def _delete(url: str, queues: list[str], exchange: str | None = None) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    for queue in queues:
        channel.queue_delete(queue)
    if exchange:
        channel.exchange_delete(exchange)
    conn.close()


def _outcome(done: int, expected: int, seconds: float, rate_key: str, **extra) -> dict:
    result = {"messages": done, "seconds": round(seconds, 3), **extra}
    if done < expected or extra.get("missing_x_death"):
        result["failed"] = f"{done} of {expected} messages arrived"
    elif seconds > 0:
        result[rate_key] = round(done / seconds)
    return result


def _processes(*targets) -> list:
    context = mp.get_context("spawn")
    processes = [context.Process(target=target, args=args) for target, args in targets]
    for process in processes:
        process.start()
    return processes


def _finish(processes: list, timeout: float) -> None:
    for process in processes:
        process.join(timeout)
        if process.is_alive():
            process.kill()


def pika_dead_letter(url: str, count: int, timeout: float) -> dict:
    tag = uuid.uuid4().hex[:8]
    work, dlx, dlq = f"bench-{tag}-work", f"bench-{tag}-dlx", f"bench-{tag}-dlq"
    _declare_dead_letter_pair(url, work, dlx, dlq)
    started = mp.get_context("spawn").Value("d", 0.0)
    processes = _processes((_pika_reject, (url, work, count, timeout, started)),
                           (_pika_publish, (url, work, count, time.time() + 2.0)))
    try:
        state = asyncio.run(_aio_drain(url, dlq, count, timeout))
    finally:
        _finish(processes, timeout)
        _delete(url, [work, dlq], dlx)
    return _outcome(state["count"], count, state["finished"] - (started.value or
                                                                state["finished"]),
                    "dead_letters_per_s", missing_x_death=state["missing_x_death"])


async def _aio_publish(url: str, queue: str, count: int, start_at: float) -> None:
    conn = await aio_pika.connect(url)
    channel = await conn.channel(publisher_confirms=True)
    run = uuid.uuid4().hex[:6]
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    for first in range(0, count, PREFETCH):
        await asyncio.gather(*(channel.default_exchange.publish(aio_pika.Message(
            BODY, content_type="application/json", message_id=f"{run}-{n}",
            timestamp=time.time(), headers={"trace-id": uuid.uuid4().hex}), queue)
            for n in range(first, min(count, first + PREFETCH))))
    await conn.close()


def _aio_publisher_process(*args) -> None:
    asyncio.run(_aio_publish(*args))


async def _aio_consume(url: str, queue: str, count: int, timeout: float) -> dict:
    conn = await aio_pika.connect(url)
    channel = await conn.channel()
    await channel.set_qos(prefetch_count=PREFETCH)
    target = await channel.declare_queue(queue)
    done = asyncio.get_running_loop().create_future()
    state = {"count": 0, "first": 0.0}

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        if not state["first"]:
            state["first"] = time.time()
        await message.ack()
        state["count"] += 1
        if state["count"] >= count and not done.done():
            done.set_result(time.time())

    await target.consume(on_message)
    try:
        finished = await asyncio.wait_for(done, timeout)
    except TimeoutError:
        finished = time.time()
    await conn.close()
    return _outcome(state["count"], count, finished - (state["first"] or finished),
                    "deliveries_per_s")


def aio_pika_publish_consume(url: str, count: int, timeout: float) -> dict:
    queue = f"bench-{uuid.uuid4().hex[:8]}-aio"
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(queue)
    conn.close()
    processes = _processes((_aio_publisher_process, (url, queue, count, time.time() + 1.0)))
    try:
        return asyncio.run(_aio_consume(url, queue, count, timeout))
    finally:
        _finish(processes, timeout)
        _delete(url, [queue])
