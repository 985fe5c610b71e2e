"""The floor under the `latency` row: the same clients, pacing and
processes, through a relay that does no broker work at all (it writes each
read from the publisher to the consumer's socket, on uvloop, in a process
of its own).  What it measures is what the machine, the kernel's
scheduler and the Python clients cost; no broker can be faster than this
on the same machine, so a broker's latency is read against it.

    python -m bench.latency_floor                 # 5,000/s for 10 s, 5 runs
    python -m bench.latency_floor --compare amqp://guest:guest@127.0.0.1:5672/
    python -m bench.latency_floor --compare URL --ours   # also this broker

With --compare the runs interleave (floor, then each broker, in turn), so
all of them see the machine over the same minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sys
import tempfile
import time

from .realistic import Timing, _finish, collect, latency, latency_summary, pace
from .scenarios import _run

ROLE_CONSUMER, ROLE_PUBLISHER = b"C", b"P"


class _Relay(asyncio.Protocol):
    """The first octet a client sends names its role; every later read
    from the publisher goes to the consumer as it is."""

    consumer: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.role = None

    def data_received(self, data: bytes) -> None:
        if self.role is None:
            self.role, data = data[:1], data[1:]
            if self.role == ROLE_CONSUMER:
                _Relay.consumer = self.transport
        if data and self.role == ROLE_PUBLISHER and _Relay.consumer is not None:
            _Relay.consumer.write(data)

    def connection_lost(self, exc) -> None:
        if _Relay.consumer is self.transport:
            _Relay.consumer = None


async def _serve(ports: mp.Queue, stop) -> None:
    server = await asyncio.get_running_loop().create_server(_Relay, "127.0.0.1", 0)
    ports.put(server.sockets[0].getsockname()[1])
    while not stop.is_set():
        await asyncio.sleep(0.1)
    server.close()


def _relay_process(ports: mp.Queue, stop) -> None:
    _run(_serve(ports, stop))


async def _publish_raw(port: int, rate: int, total: int, start_at: float) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(ROLE_PUBLISHER)
    await pace(writer.transport, "floor", rate, total, start_at)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


def _publisher_process(*args) -> None:
    _run(_publish_raw(*args))


async def _through_relay(port: int, rate: int, seconds: float) -> dict:
    _, consumer = await asyncio.get_running_loop().create_connection(Timing, "127.0.0.1", port)
    consumer.transport.write(ROLE_CONSUMER)
    await asyncio.sleep(0.1)  # the relay has read the role before the publisher's first write
    total = int(rate * seconds)
    publisher = mp.get_context("spawn").Process(
        target=_publisher_process, args=(port, rate, total, time.time() + 1.0))
    publisher.start()
    latencies = await collect(consumer, total, seconds)
    _finish(publisher, 5)
    consumer.transport.close()
    return latency_summary(latencies, total, rate)


class Floor:
    """The relay, started once, measured as many times as asked."""

    def __enter__(self) -> Floor:
        context = mp.get_context("spawn")
        ports, self._stop = context.Queue(), context.Event()
        self._process = context.Process(target=_relay_process, args=(ports, self._stop))
        self._process.start()
        self.port = ports.get(timeout=30)
        return self

    def measure(self, rate: int, seconds: float) -> dict:
        return _run(_through_relay(self.port, rate, seconds))

    def __exit__(self, *exc) -> None:
        self._stop.set()
        _finish(self._process, 5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_floor",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compare", metavar="URL", help="a broker to measure beside the floor")
    parser.add_argument("--ours", action="store_true",
                        help="also this project's broker, started on a free port")
    args = parser.parse_args(argv)
    from .__main__ import start_our_broker

    brokers = {"reference": args.compare} if args.compare else {}
    with tempfile.TemporaryDirectory() as data_dir, Floor() as floor:
        broker = None
        if args.ours:
            broker, brokers["ours"] = start_our_broker(data_dir)
        runs: dict[str, list[dict]] = {"floor": [], **{who: [] for who in brokers}}
        try:
            for _ in range(args.runs):
                runs["floor"].append(floor.measure(args.rate, args.seconds))
                for who, url in brokers.items():
                    runs[who].append(latency(url, args.rate, args.seconds))
                print(json.dumps({who: outcomes[-1] for who, outcomes in runs.items()}),
                      file=sys.stderr, flush=True)
        finally:
            if broker is not None:
                broker.terminate()
                broker.wait(10)
    print(json.dumps(_medians(runs), indent=2))
    return 0


def _medians(runs: dict[str, list[dict]]) -> dict:
    """Per target, the median of each percentile over the runs that did not
    fail, with the runs' spread of p99."""
    summary = {}
    for who, outcomes in runs.items():
        good = [r for r in outcomes if "failed" not in r]
        if not good:
            summary[who] = {"failed": len(outcomes)}
            continue
        summary[who] = {key: sorted(r[key] for r in good)[len(good) // 2]
                        for key in ("p50_ms", "p99_ms", "p999_ms")}
        summary[who]["p99_spread"] = [min(r["p99_ms"] for r in good),
                                      max(r["p99_ms"] for r in good)]
        summary[who]["runs"] = len(good)
        summary[who]["failed_runs"] = len(outcomes) - len(good)
    return summary


if __name__ == "__main__":
    sys.exit(main())
