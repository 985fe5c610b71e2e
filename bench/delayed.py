"""Delayed delivery, four ways, side by side with RabbitMQ's.

Applications delay a retry with one of:

- `x-delay`: an `x-delayed-message` exchange (RabbitMQ's delayed-message
  plugin; this broker has it built in);
- `ttl-dlx`: a retry queue whose messages expire into the work queue
  (`x-message-ttl` or a per-message `expiration`, `x-dead-letter-exchange`):
  what applications do on a RabbitMQ without the plugin;
- `artemis-redelivery`: a consumer nacks with requeue and the queue's
  `x-redelivery-delay` holds the message back (ActiveMQ Artemis);
- `scheduled`: Artemis's `_AMQ_SCHED_DELIVERY`, an absolute time.

Each runs against this broker (a subprocess on a fresh data directory) and,
where RabbitMQ has it (Debian's has no plugin, so only `ttl-dlx`), against
RabbitMQ at `--rabbitmq`, in two shapes:

- accuracy: `--count` messages published at `--rate` a second (paced: a
  backlog in the socket buffers would count as lateness of every relative
  delay), each due `--delay-ms` after its publish, so all of them are in
  flight together when the last is published;
  lateness is arrival minus due time (wall clock, one machine), reported at
  p50/p99/max, with the broker's resident memory per delayed message
  (growth from before the publishes to when all are held);
- burst: `--count` messages all due at one instant (x-delay or expiration
  computed per message, the scheduled time the same for all); throughput
  is the count over the time from that instant to the last arrival.

With `--memory N`, instead: N messages held for ten minutes through each
way (this broker restarted fresh for each), the broker's resident memory
growth over N.

Run: `python -m bench.delayed [--count 10000] [--rabbitmq URL]`; prints one
JSON object per (broker, method, shape) and a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import struct
import sys
import tempfile
import time
import uuid

import pika
from pamqp import commands as spec

from amqp_server.wire import frames
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable

from .__main__ import start_our_broker
from .client import BenchConnection, connect, encoded_publish
from .procinfo import RssSampler

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
METHODS = ("x-delay", "ttl-dlx", "artemis-redelivery", "scheduled")
# What a broker without this project's extensions can run.
RABBITMQ_METHODS = ("ttl-dlx",)
BATCH = 100
_HEADER = struct.Struct(">BHI")
_TAG = struct.Struct(">Q")


def now_ms() -> float:
    return time.time() * 1000.0


def product(url: str) -> str | None:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
    except (OSError, pika.exceptions.AMQPError):
        return None
    try:
        name = (conn._impl.server_properties or {}).get("product")
    finally:
        conn.close()
    return name.decode() if isinstance(name, bytes) else name


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class ArrivalClock(BenchConnection):
    """The lean client, noting when each body (a message number) arrives;
    with `nack_first`, a first delivery is nacked with requeue (the Artemis
    redelivery path) and its redelivery is the arrival that counts."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: dict[int, float] = {}
        self.nacked_at: dict[int, float] = {}
        self.nack_first = False
        self._redelivered = False
        self._tag = 0

    def arrived_before(self, when: float) -> bool:
        return any(at < when for at in self.arrived.values())

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        pos, end = 0, len(buffer)
        now = now_ms()
        out = []
        while end - pos >= 7:
            frame_type, _, size = _HEADER.unpack_from(buffer, pos)
            frame_end = pos + 7 + size
            if frame_end >= end:
                break
            if frame_type == 1 and buffer[pos + 7:pos + 11] == b"\x00\x3c\x00\x3c":
                tag_at = pos + 11 + 1 + buffer[pos + 11]
                (self._tag,) = _TAG.unpack_from(buffer, tag_at)
                self._redelivered = bool(buffer[tag_at + 8])
            elif frame_type == 3:
                n = int(buffer[pos + 7:frame_end])
                if self.nack_first:
                    settle = (make(spec.Basic.Ack, delivery_tag=self._tag) if self._redelivered
                              else make(spec.Basic.Nack, delivery_tag=self._tag, requeue=True))
                    out.append(frames.method_frame(1, settle))
                    if not self._redelivered:
                        self.nacked_at[n] = now
                    else:
                        self.arrived[n] = now
                else:
                    self.arrived[n] = now
            pos = frame_end + 1
        if out:
            self.transport.write(b"".join(out))
        super().data_received(data)


def _properties(headers: dict | None, expiration_ms: int | None = None) -> bytes:
    table = FieldTable(headers or {})
    for name in table:
        table.types[name] = "long"  # as pika and Java clients send ints
    return encode_properties(Properties(
        headers=table if headers else None,
        expiration=str(expiration_ms) if expiration_ms is not None else None))


async def _delayed_exchange_to(conn, exchange: str, queue: str) -> None:
    """A direct x-delayed-message exchange bound to `queue` by its name."""
    await conn.call(1, make(spec.Exchange.Declare, exchange=exchange,
                            exchange_type="x-delayed-message",
                            arguments=FieldTable({"x-delayed-type": "direct"})),
                    spec.Exchange.DeclareOk)
    await conn.call(1, make(spec.Queue.Bind, queue=queue, exchange=exchange,
                            routing_key=queue), spec.Queue.BindOk)


async def measure(url: str, method: str, count: int, delay_ms: int, burst: bool,
                  timeout: float, rate: int) -> dict:
    tag = uuid.uuid4().hex[:8]
    work, retry, exchange = f"bench-{tag}-work", f"bench-{tag}-retry", f"bench-{tag}-dx"
    setup = await connect(url)
    await setup.open_channel(1)
    work_args = FieldTable({"x-redelivery-delay": delay_ms}
                           if method == "artemis-redelivery" else {})
    await setup.call(1, make(spec.Queue.Declare, queue=work, arguments=work_args),
                     spec.Queue.DeclareOk)
    target, key = "", work
    if method == "x-delay":
        await _delayed_exchange_to(setup, exchange, work)
        target = exchange
    elif method == "ttl-dlx":
        retry_args = FieldTable({"x-dead-letter-exchange": "",
                                 "x-dead-letter-routing-key": work})
        if not burst:
            retry_args["x-message-ttl"] = delay_ms
        await setup.call(1, make(spec.Queue.Declare, queue=retry, arguments=retry_args),
                         spec.Queue.DeclareOk)
        key = retry
    consumer = await connect(url, ArrivalClock)
    await consumer.open_channel(1)
    consumer.nack_first = method == "artemis-redelivery"
    await consumer.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)
    await consumer.call(1, make(spec.Basic.Consume, queue=work,
                                no_ack=not consumer.nack_first), spec.Basic.ConsumeOk)
    sampler = RssSampler.for_url(url)
    before = sampler.baseline
    due: dict[int, float] = {}
    first_sent = now_ms()
    # Burst: one instant for all, far enough ahead for every publish.
    instant = first_sent + delay_ms + count * 1000.0 / rate
    for first in range(0, count, BATCH):
        # Paced: a publish backlog in the socket buffers would count as
        # lateness of delays that start when the broker reads them.
        pause = (first_sent + first * 1000.0 / rate - now_ms()) / 1000.0
        if pause > 0:
            await asyncio.sleep(pause)
        sent = now_ms()
        chunk = []
        for n in range(first, min(first + BATCH, count)):
            when = instant if burst else sent + delay_ms
            if method == "x-delay":
                props = _properties({"x-delay": int(when - sent)})
                when = sent + int(when - sent)
            elif method == "ttl-dlx":
                props = _properties(None, int(when - sent) if burst else None)
                when = sent + (int(when - sent) if burst else delay_ms)
            elif method == "scheduled":
                props = _properties({"_AMQ_SCHED_DELIVERY": int(when)})
                when = float(int(when))
            else:
                props = b"\x00\x00"
            if method != "artemis-redelivery":
                due[n] = when
            chunk.append(encoded_publish(1, target, key, str(n).encode(), 1, props))
        setup.transport.write(b"".join(chunk))
        await setup.drain()
    published = now_ms()
    await setup.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)  # a sync
    sampler.sample()
    held_rss = sampler.peak
    deadline = time.monotonic() + timeout
    while len(consumer.arrived) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    arrived = dict(consumer.arrived)
    if method == "artemis-redelivery":
        due = {n: at + delay_ms for n, at in consumer.nacked_at.items()}
    result: dict = {"method": method, "shape": "burst" if burst else "accuracy",
                    "count": count, "delay_ms": delay_ms, "arrived": len(arrived),
                    "publish_s": round((published - first_sent) / 1000.0, 2)}
    late = [arrived[n] - due[n] for n in arrived if n in due]
    if len(arrived) < count:
        result["failed"] = f"{len(arrived)} of {count} arrived"
    if late:
        result.update(p50_late_ms=round(_percentile(late, 0.50), 1),
                      p99_late_ms=round(_percentile(late, 0.99), 1),
                      max_late_ms=round(max(late), 1))
    if burst and arrived:
        span = (max(arrived.values()) - instant) / 1000.0
        result["deliveries_per_s"] = round(len(arrived) / span) if span > 0 else None
    if (not burst and method != "artemis-redelivery" and before and held_rss
            and not consumer.arrived_before(published)):
        # Every message was still held when sampled.
        result["rss_bytes_per_delayed"] = round((held_rss - before) / count)
    await consumer.close()
    await setup.call(1, make(spec.Queue.Delete, queue=work), spec.Queue.DeleteOk)
    if method == "ttl-dlx":
        await setup.call(1, make(spec.Queue.Delete, queue=retry), spec.Queue.DeleteOk)
    if method == "x-delay":
        await setup.call(1, make(spec.Exchange.Delete, exchange=exchange),
                         spec.Exchange.DeleteOk)
    await setup.close()
    return result


async def memory(url: str, method: str, count: int) -> dict:
    """Resident memory per held message: `count` messages held for ten
    minutes (never delivered during the run), the broker's RSS growth from
    before the publishes to when it has taken the last, over `count`."""
    tag = uuid.uuid4().hex[:8]
    queue, exchange = f"bench-{tag}-held", f"bench-{tag}-dx"
    hold_ms = 600_000
    conn = await connect(url)
    await conn.open_channel(1)
    args = FieldTable({"x-message-ttl": hold_ms, "x-dead-letter-exchange": "",
                       "x-dead-letter-routing-key": f"bench-{tag}-nowhere"}
                      if method == "ttl-dlx" else {})
    await conn.call(1, make(spec.Queue.Declare, queue=queue, arguments=args),
                    spec.Queue.DeclareOk)
    target = ""
    props = b"\x00\x00"
    if method == "x-delay":
        await _delayed_exchange_to(conn, exchange, queue)
        target = exchange
        props = _properties({"x-delay": hold_ms})
    elif method == "scheduled":
        props = _properties({"_AMQ_SCHED_DELIVERY": int(now_ms() + hold_ms)})
    await asyncio.sleep(0.5)
    sampler = RssSampler.for_url(url)
    batch = encoded_publish(1, target, queue, b"x" * 100, 1000, props)
    for _ in range(count // 1000):
        conn.transport.write(batch)
        await conn.drain()
    await conn.call(1, make(spec.Basic.Qos, prefetch_count=0), spec.Basic.QosOk)  # all taken
    sampler.sample()
    result = {"method": method, "shape": "memory", "count": count // 1000 * 1000,
              "rss_bytes_per_held": round((sampler.peak - sampler.baseline) / count)
              if sampler.baseline else None}
    await conn.call(1, make(spec.Queue.Delete, queue=queue), spec.Queue.DeleteOk)
    if method == "x-delay":
        await conn.call(1, make(spec.Exchange.Delete, exchange=exchange),
                        spec.Exchange.DeleteOk)
    await conn.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--delay-ms", type=int, default=8000)
    parser.add_argument("--rabbitmq", default=RABBITMQ_URL)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--rate", type=int, default=2000, help="publishes per second")
    parser.add_argument("--memory", type=int, default=0, metavar="N",
                        help="instead: RSS per held message, N messages, a fresh broker each")
    args = parser.parse_args()
    if args.memory:
        return memory_main(args)
    data_dir = tempfile.mkdtemp(prefix="bench-delayed-")
    proc, ours = start_our_broker(data_dir)
    urls = {"ours": ours}
    if product(args.rabbitmq) == "RabbitMQ":
        urls["rabbitmq"] = args.rabbitmq
    else:
        print(f"no RabbitMQ at {args.rabbitmq}: ours only", file=sys.stderr)
    results = []
    try:
        for method in args.methods.split(","):
            for burst in (False, True):
                for who, url in urls.items():
                    if who == "rabbitmq" and method not in RABBITMQ_METHODS:
                        continue
                    outcome = asyncio.run(measure(url, method, args.count, args.delay_ms,
                                                  burst, args.timeout, args.rate))
                    outcome["broker"] = who
                    print(json.dumps(outcome), flush=True)
                    results.append(outcome)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(data_dir, ignore_errors=True)
    print("\n| broker | method | shape | p50 late ms | p99 late ms | max late ms | "
          "deliveries/s | RSS B/msg |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['broker']} | {r['method']} | {r['shape']} | {r.get('p50_late_ms', '')} | "
              f"{r.get('p99_late_ms', '')} | {r.get('max_late_ms', '')} | "
              f"{r.get('deliveries_per_s', '')} | {r.get('rss_bytes_per_delayed', '')} |"
              + (f" FAILED: {r['failed']}" if "failed" in r else ""))
    return 0


def memory_main(args) -> int:
    rabbitmq = product(args.rabbitmq) == "RabbitMQ"
    for method in args.methods.split(","):
        data_dir = tempfile.mkdtemp(prefix="bench-delayed-")
        proc, ours = start_our_broker(data_dir)
        try:
            outcome = asyncio.run(memory(ours, method, args.memory))
        finally:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(data_dir, ignore_errors=True)
        print(json.dumps({**outcome, "broker": "ours"}), flush=True)
        if rabbitmq and method in RABBITMQ_METHODS:
            outcome = asyncio.run(memory(args.rabbitmq, method, args.memory))
            print(json.dumps({**outcome, "broker": "rabbitmq"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
