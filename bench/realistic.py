"""Scenarios in the shapes real clients produce.

pika's `basic_reject(tag)`, aio-pika's `message.reject()` and Celery settle
one delivery per frame, and applications give every message its own id,
timestamp and headers.  The raw generator here does exactly that, cheaply
(frames pre-encoded before the clock starts, one socket write per read),
so the broker stays the bottleneck:

- `dead-letter-reject`: every message has its own message-id, a trace-id
  header, content-type and timestamp; a consumer rejects each delivery with
  its own basic.reject(requeue=false); a second consumer drains the
  dead-letter queue, checks each message carries `x-death`, and acks each
  one with its own basic.ack.
- `transient-distinct`: the same properties, published to a queue whose
  consumer acks with one multiple ack every 100 deliveries.
- `latency`: publishes paced at a fixed rate, each carrying its send time;
  the consumer, in another process reading the same monotonic clock,
  records how long each took.
- `durable-declares`: durable queues with a dead-letter exchange declared
  one after another, the rate measured per window of 2,000 declares.

A run that times out, loses messages or sees a message without `x-death`
is reported with "failed" set and no rate.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import struct
import time
import uuid

from pamqp import commands as spec

from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable

from .client import BenchConnection, connect, encoded_publish
from .scenarios import BATCH, _cleanup, _run

BODY = b"x" * 100
_DELIVER_TAG = struct.Struct(">Q")
# basic.ack (multiple=0) or basic.reject (requeue=0) on channel 1: a method
# frame of 13 octets (class, method, delivery tag, one bit).
_SETTLE_FRAME = struct.Struct(">BHIHHQBB")
_SETTLE_METHOD = {"ack": 80, "reject": 90}


def app_properties(n: int, run: str) -> bytes:
    """What an application sends: its own id, a trace header, a type, a time."""
    return encode_properties(Properties(
        content_type="application/json", message_id=f"{run}-{n}",
        timestamp=int(time.time()),
        headers=FieldTable({"trace-id": uuid.uuid4().hex})))


def distinct_publishes(exchange: str, routing_key: str, first: int, count: int,
                       run: str) -> bytes:
    return b"".join(encoded_publish(1, exchange, routing_key, BODY, 1, app_properties(n, run))
                    for n in range(first, first + count))


class SettleEach(BenchConnection):
    """A consumer that settles every delivery with a frame of its own
    (basic.ack or basic.reject requeue=false), written once per read, and
    can check that each message's header names `x-death`."""

    def __init__(self, settle: str, check_death: bool = False) -> None:
        super().__init__()
        self.settle_kind = settle
        self.check_death = check_death
        self.missing_death = 0
        self._expect_header = False

    def data_received(self, data: bytes) -> None:
        if self.buffer:
            data = self.buffer + data
        pos, end = 0, len(data)
        tags = []
        unpack = frames._FRAME_PREFIX.unpack_from
        while end - pos >= 7:
            frame_type, channel, size = unpack(data, pos)
            frame_end = pos + 7 + size
            if frame_end >= end:
                break
            if frame_type == 1:
                if data[pos + 7:pos + 11] == b"\x00\x3c\x00\x3c":  # basic.deliver
                    tag_at = pos + 12 + data[pos + 11]
                    tags.append(_DELIVER_TAG.unpack_from(data, tag_at)[0])
                    self._expect_header = True
                else:
                    self.replies.put_nowait((channel, decode_method(data[pos + 7:frame_end])))
            elif frame_type == 2 and self._expect_header:
                self._expect_header = False
                if self.check_death and data.find(b"\x07x-death", pos + 7, frame_end) < 0:
                    self.missing_death += 1
            pos = frame_end + 1
        self.buffer = data[pos:]
        if tags:
            self.deliveries += len(tags)
            method = _SETTLE_METHOD[self.settle_kind]
            pack = _SETTLE_FRAME.pack
            self.transport.write(b"".join(
                pack(1, 1, 13, 60, method, tag, 0, frames.FRAME_END) for tag in tags))
            if self.on_delivery_count is not None:
                self.on_delivery_count(self.deliveries)


async def _publish_distinct(url: str, exchange: str, routing_key: str, count: int,
                            start_at: float, run: str) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    batches = [distinct_publishes(exchange, routing_key, first, min(BATCH, count - first), run)
               for first in range(0, count, BATCH)]
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    for batch in batches:
        conn.transport.write(batch)
        await conn.drain()
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)
    await conn.close()


def _publisher_process(*args) -> None:
    _run(_publish_distinct(*args))


def _start_publisher(url: str, exchange: str, routing_key: str, count: int,
                     delay: float) -> mp.Process:
    process = mp.get_context("spawn").Process(
        target=_publisher_process,
        args=(url, exchange, routing_key, count, time.time() + delay, uuid.uuid4().hex[:6]))
    process.start()
    return process


def _finish(process: mp.Process, timeout: float) -> None:
    process.join(timeout)
    if process.is_alive():
        process.kill()


def _outcome(done: int, expected: int, elapsed: float, rate_key: str, **extra) -> dict:
    result = {"messages": done, "seconds": round(elapsed, 3), **extra}
    if done < expected or extra.get("missing_x_death"):
        result["failed"] = f"{done} of {expected} messages arrived"
        return result
    result[rate_key] = round(done / elapsed) if elapsed else 0
    return result


# ---- dead letters, one reject per delivery ----------------------------------

async def _declare_dead_letter_pair(url: str, work: str, dlx: str, dlq: str) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Exchange.Declare, exchange=dlx, exchange_type="fanout"),
                    spec.Exchange.DeclareOk)
    await conn.call(1, make(spec.Queue.Declare, queue=dlq), spec.Queue.DeclareOk)
    await conn.call(1, make(spec.Queue.Bind, queue=dlq, exchange=dlx), spec.Queue.BindOk)
    await conn.call(1, make(spec.Queue.Declare, queue=work, arguments=FieldTable(
        {"x-dead-letter-exchange": dlx})), spec.Queue.DeclareOk)
    await conn.close()


async def _reject_each_and_drain(url: str, work: str, dlq: str, expected: int,
                                 prefetch: int, timeout: float) -> dict:
    rejecter = await connect(url, lambda: SettleEach("reject"))
    drainer = await connect(url, lambda: SettleEach("ack", check_death=True))
    done = asyncio.get_running_loop().create_future()
    first = [0.0]

    def rejected(count: int) -> None:
        if not first[0]:
            first[0] = time.perf_counter()

    def drained(count: int) -> None:
        if count >= expected and not done.done():
            done.set_result(time.perf_counter())

    rejecter.on_delivery_count = rejected
    drainer.on_delivery_count = drained
    for conn, queue in ((rejecter, work), (drainer, dlq)):
        await conn.open_channel(1)
        await conn.call(1, make(spec.Basic.Qos, prefetch_count=prefetch), spec.Basic.QosOk)
        await conn.call(1, make(spec.Basic.Consume, queue=queue), spec.Basic.ConsumeOk)
    try:
        finished = await asyncio.wait_for(asyncio.shield(done), timeout)
    except TimeoutError:
        finished = time.perf_counter()
    result = _outcome(drainer.deliveries, expected, finished - (first[0] or finished),
                      "dead_letters_per_s", missing_x_death=drainer.missing_death)
    await rejecter.close()
    await drainer.close()
    return result


def dead_letter_reject(url: str, count: int, timeout: float, prefetch: int = 100) -> dict:
    tag = uuid.uuid4().hex[:8]
    work, dlx, dlq = f"bench-{tag}-work", f"bench-{tag}-dlx", f"bench-{tag}-dlq"
    _run(_declare_dead_letter_pair(url, work, dlx, dlq))
    publisher = _start_publisher(url, "", work, count, 3.0)
    try:
        return _run(_reject_each_and_drain(url, work, dlq, count, prefetch, timeout))
    finally:
        _finish(publisher, timeout)
        _run(_cleanup(url, dlx, [work, dlq]))


# ---- publish -> consume, a message id each ----------------------------------

async def _consume_multiple(url: str, queue: str, expected: int, timeout: float) -> dict:
    conn = await connect(url)
    done = asyncio.get_running_loop().create_future()
    first = [0.0]

    def progress(count: int) -> None:
        if not first[0]:
            first[0] = time.perf_counter()
        if count >= expected and not done.done():
            done.set_result(time.perf_counter())

    conn.on_delivery_count = progress
    conn.ack_every = 100
    await conn.open_channel(1)
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=1000), spec.Basic.QosOk)
    await conn.call(1, make(spec.Basic.Consume, queue=queue), spec.Basic.ConsumeOk)
    try:
        finished = await asyncio.wait_for(asyncio.shield(done), timeout)
    except TimeoutError:
        finished = time.perf_counter()
    result = _outcome(conn.deliveries, expected, finished - (first[0] or finished),
                      "deliveries_per_s")
    await conn.close()
    return result


async def _declare(url: str, queue: str, durable: bool = False) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Queue.Declare, queue=queue, durable=durable),
                    spec.Queue.DeclareOk)
    await conn.close()


def transient_distinct(url: str, count: int, timeout: float) -> dict:
    queue = f"bench-{uuid.uuid4().hex[:8]}-distinct"
    _run(_declare(url, queue))
    publisher = _start_publisher(url, "", queue, count, 0.5)
    try:
        return _run(_consume_multiple(url, queue, count, timeout))
    finally:
        _finish(publisher, timeout)
        _run(_cleanup(url, None, [queue]))


# ---- latency at a paced rate -------------------------------------------------

_NOT_REPLIES = (b"\x00\x3c\x00\x3c", b"\x00\x3c\x00\x28")  # basic.deliver, basic.publish


class Timing(BenchConnection):
    """Records, for each delivery, now minus the send time in its body."""

    def __init__(self) -> None:
        super().__init__()
        self.latencies: list[float] = []

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.buffer:
            data = self.buffer + data
        pos, end = 0, len(data)
        unpack = frames._FRAME_PREFIX.unpack_from
        while end - pos >= 7:
            frame_type, channel, size = unpack(data, pos)
            frame_end = pos + 7 + size
            if frame_end >= end:
                break
            if frame_type == 3:
                (sent,) = struct.unpack_from(">d", data, pos + 7)
                self.latencies.append(now - sent)
            elif frame_type == 1 and data[pos + 7:pos + 11] not in _NOT_REPLIES:
                self.replies.put_nowait((channel, decode_method(data[pos + 7:frame_end])))
            pos = frame_end + 1
        self.buffer = data[pos:]


async def pace(transport, queue: str, rate: int, total: int, start_at: float) -> None:
    """Publishes in ticks of 1 ms: each message leaves as close to its own
    moment as the loop allows, carrying that moment (perf_counter is the
    system's monotonic clock, the same in the consumer's process)."""
    run = uuid.uuid4().hex[:6]
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    start = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        out = []
        while sent < due:
            body = struct.pack(">d", time.perf_counter()) + BODY[8:]
            out.append(encoded_publish(1, "", queue, body, 1, app_properties(sent, run)))
            sent += 1
        if out:
            transport.write(b"".join(out))
        await asyncio.sleep(0.001)


async def _publish_paced(url: str, queue: str, rate: int, total: int, start_at: float) -> None:
    publisher = await connect(url)
    await publisher.open_channel(1)
    await pace(publisher.transport, queue, rate, total, start_at)
    await publisher.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)
    await publisher.close()


def _paced_publisher_process(*args) -> None:
    _run(_publish_paced(*args))


async def collect(consumer: Timing, total: int, seconds: float) -> list[float]:
    """The latencies, sorted, once `total` arrived or time is up."""
    deadline = time.perf_counter() + seconds + 15
    while len(consumer.latencies) < total and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    return sorted(consumer.latencies)


def latency_summary(latencies: list[float], total: int, rate: int) -> dict:
    if len(latencies) < total:
        return {"messages": len(latencies), "failed": f"{len(latencies)} of {total} arrived"}

    def at(fraction: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(fraction * len(latencies)))] * 1000, 3)

    return {"messages": total, "rate": rate, "p50_ms": at(0.50), "p99_ms": at(0.99),
            "p999_ms": at(0.999), "max_ms": round(latencies[-1] * 1000, 3)}


async def _paced(url: str, rate: int, seconds: float) -> dict:
    """The consumer here, the paced publisher in a process of its own, so
    neither's work delays the other's reads."""
    queue = f"bench-{uuid.uuid4().hex[:8]}-latency"
    consumer = await connect(url, Timing)
    await consumer.open_channel(1)
    await consumer.call(1, make(spec.Queue.Declare, queue=queue), spec.Queue.DeclareOk)
    await consumer.call(1, make(spec.Basic.Consume, queue=queue, no_ack=True),
                        spec.Basic.ConsumeOk)
    total = int(rate * seconds)
    publisher = mp.get_context("spawn").Process(
        target=_paced_publisher_process, args=(url, queue, rate, total, time.time() + 1.0))
    publisher.start()
    latencies = await collect(consumer, total, seconds)
    _finish(publisher, 5)
    await consumer.call(1, make(spec.Queue.Delete, queue=queue), spec.Queue.DeleteOk)
    await consumer.close()
    return latency_summary(latencies, total, rate)


def latency(url: str, rate: int, seconds: float) -> dict:
    return _run(_paced(url, rate, seconds))


# ---- durable queues declared one after another --------------------------------

async def _declare_durable(url: str, count: int, window: int) -> dict:
    tag = uuid.uuid4().hex[:8]
    conn = await connect(url)
    await conn.open_channel(1)
    arguments = FieldTable({"x-dead-letter-exchange": f"bench-{tag}-dlx"})
    rates = []
    started = time.perf_counter()
    mark = started
    for n in range(count):
        await conn.call(1, make(spec.Queue.Declare, queue=f"bench-{tag}-{n}", durable=True,
                                arguments=arguments), spec.Queue.DeclareOk)
        if (n + 1) % window == 0:
            now = time.perf_counter()
            rates.append(round(window / (now - mark)))
            mark = now
    total = time.perf_counter() - started
    for n in range(count):
        conn.send(1, make(spec.Queue.Delete, queue=f"bench-{tag}-{n}", nowait=True))
        if n % 500 == 499:
            await conn.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)
    await conn.close()
    return {"queues": count, "seconds": round(total, 3),
            "declares_per_s": round(count / total), "first_window_per_s": rates[0],
            "last_window_per_s": rates[-1], "window": window, "per_window": rates}


def durable_declares(url: str, count: int) -> dict:
    """Rates per fifth of the run (per 2,000 of 10,000)."""
    return _run(_declare_durable(url, count, max(1, count // 5)))
