"""Recovery of N queued persistent messages: disk bytes per message, the
time from restart until the queue is back with every message, and the
broker's RSS then.  This broker is restarted as a subprocess; a local
RabbitMQ is restarted with `rabbitmqctl stop_app` / `start_app`.  With
--dead-letters each message carries an x-death history (two deaths and
the first-death headers), as a dead letter queue's do: the paged tail's
dead letters are counted by reason as they are recovered.

    python -m bench.recovery [--count N] [--dead-letters] [--rabbitmq URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands as spec

from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable, Timestamp

from .__main__ import start_our_broker
from .client import connect, encoded_publish
from .procinfo import RssSampler
from .scenarios import BATCH, _run

QUEUE = "bench-recovery"


def _properties(dead_letters: bool) -> Properties:
    if not dead_letters:
        return Properties(delivery_mode=2)
    deaths = [FieldTable({"count": 1, "reason": reason, "queue": "work", "time": Timestamp(
        1_700_000_000), "exchange": "shop", "routing-keys": ["order"]})
        for reason in ("rejected", "expired")]
    return Properties(delivery_mode=2, message_id="m", headers=FieldTable({
        "x-death": deaths, "x-first-death-reason": "expired", "x-first-death-queue": "work",
        "x-first-death-exchange": "shop", "trace-id": "t"}))


async def _fill(url: str, count: int, dead_letters: bool = False) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Queue.Declare, queue=QUEUE, durable=True), spec.Queue.DeclareOk)
    batch = encoded_publish(1, "", QUEUE, b"x" * 100, BATCH,
                            encode_properties(_properties(dead_letters)))
    for _ in range(count // BATCH):
        conn.transport.write(batch)
        await conn.drain()
    await conn.wait_for_depth(QUEUE, count)
    await conn.close()


async def _count_when_up(url: str, count: int, deadline: float) -> float:
    """Wait until the queue is back whole; the broker's RSS (MB) then."""
    while True:
        try:
            conn = await connect(url)
            await conn.open_channel(1)
            await conn.wait_for_depth(QUEUE, count)
            rss = RssSampler.for_url(url).peak / 2**20
            await conn.call(1, make(spec.Queue.Delete, queue=QUEUE), spec.Queue.DeleteOk)
            await conn.close()
            return rss
        except (TimeoutError, OSError, RuntimeError):
            if time.time() > deadline:
                raise
            await asyncio.sleep(0.1)


def ours(count: int, dead_letters: bool = False) -> dict:
    data_dir = tempfile.mkdtemp(prefix="amqp-recovery-")
    try:
        proc, url = start_our_broker(data_dir)
        _run(_fill(url, count, dead_letters))
        time.sleep(1.0)  # the last flush
        disk = sum(p.stat().st_size for p in Path(data_dir, "messages").glob("*.seg"))
        proc.terminate()
        proc.wait(30)
        started = time.perf_counter()
        proc, url = start_our_broker(data_dir)  # returns once recovered and listening
        rss = _run(_count_when_up(url, count, time.time() + 300))
        elapsed = time.perf_counter() - started
        proc.terminate()
        proc.wait(30)
        return {"messages": count, "disk_bytes_per_message": round(disk / count),
                "recovery_seconds": round(elapsed, 2), "rss_mb": round(rss, 1)}
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def rabbitmq(url: str, count: int, dead_letters: bool = False) -> dict:
    _run(_fill(url, count, dead_letters))
    time.sleep(1.0)
    subprocess.run(["rabbitmqctl", "stop_app"], check=True, capture_output=True)
    started = time.perf_counter()
    subprocess.run(["rabbitmqctl", "start_app"], check=True, capture_output=True)
    rss = _run(_count_when_up(url, count, time.time() + 300))
    elapsed = time.perf_counter() - started
    return {"messages": count, "recovery_seconds": round(elapsed, 2), "rss_mb": round(rss, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery")
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--dead-letters", action="store_true",
                        help="each message carries an x-death history")
    parser.add_argument("--rabbitmq", help="also measure the RabbitMQ at this URL "
                        "(restarted with rabbitmqctl stop_app/start_app)")
    args = parser.parse_args()
    result = {"ours": ours(args.count, args.dead_letters)}
    print(json.dumps(result["ours"]), file=sys.stderr)
    if args.rabbitmq:
        result["rabbitmq"] = rabbitmq(args.rabbitmq, args.count, args.dead_letters)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
