"""Durable definitions at scale: declare, bind and delete rates up to N
durable queues, and how long this broker takes to restart with them.

    python -m bench.definitions --queues 100000

Starts this broker in a subprocess on a fresh data directory; declares N
durable queues (each with a dead-letter exchange argument) one after
another, binds each to a durable topic exchange, restarts the broker and
times it from start until the last queue answers a passive declare, then
deletes them all.  Rates are reported per tenth of the run, so a rate that
falls as the count grows shows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands as spec

from amqp_server.wire.methods import make
from amqp_server.wire.table import FieldTable

from .__main__ import start_our_broker
from .client import connect
from .procinfo import RssSampler
from .scenarios import _run


async def _timed_calls(url: str, count: int, method_for, reply) -> list[int]:
    """One call after another; the rate per tenth of them."""
    conn = await connect(url)
    await conn.open_channel(1)
    window = max(1, count // 10)
    rates = []
    mark = time.perf_counter()
    for n in range(count):
        await conn.call(1, method_for(n), reply)
        if (n + 1) % window == 0:
            now = time.perf_counter()
            rates.append(round(window / (now - mark)))
            mark = now
    await conn.close()
    return rates


async def _restarted(url: str, last_queue: str) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Queue.Declare, queue=last_queue, passive=True),
                    spec.Queue.DeclareOk)
    await conn.close()


def run(count: int) -> dict:
    data_dir = tempfile.mkdtemp(prefix="amqp-bench-defs-")
    names = [f"q-{n}" for n in range(count)]
    dlx = FieldTable({"x-dead-letter-exchange": "dlx"})
    result: dict = {"queues": count, "bindings": count}
    try:
        proc, url = start_our_broker(data_dir)
        try:
            _run(_timed_calls(url, 1, lambda n: make(
                spec.Exchange.Declare, exchange="events", exchange_type="topic", durable=True),
                spec.Exchange.DeclareOk))
            result["declare_per_s_by_tenth"] = _run(_timed_calls(url, count, lambda n: make(
                spec.Queue.Declare, queue=names[n], durable=True, arguments=dlx),
                spec.Queue.DeclareOk))
            result["bind_per_s_by_tenth"] = _run(_timed_calls(url, count, lambda n: make(
                spec.Queue.Bind, queue=names[n], exchange="events", routing_key=f"k.{n}"),
                spec.Queue.BindOk))
            result["rss_mb_holding_them"] = RssSampler(proc.pid).peak_mb()
        finally:
            proc.terminate()
            proc.wait(60)
        result["definitions_log_bytes"] = sum(
            p.stat().st_size for p in Path(data_dir, "definitions").iterdir())
        started = time.perf_counter()
        proc, url = start_our_broker(data_dir)  # prints its port once recovered
        try:
            _run(_restarted(url, names[-1]))
            result["restart_seconds"] = round(time.perf_counter() - started, 3)
            result["delete_per_s_by_tenth"] = _run(_timed_calls(url, count, lambda n: make(
                spec.Queue.Delete, queue=names[n]), spec.Queue.DeleteOk))
        finally:
            proc.terminate()
            proc.wait(60)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.definitions")
    parser.add_argument("--queues", type=int, default=100_000)
    args = parser.parse_args()
    print(json.dumps(run(args.queues), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
