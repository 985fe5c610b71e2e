"""What the embedded broker costs a test suite, against starting Debian's
rabbitmq-server as pytest-rabbitmq does.

    python -m bench.embed [--starts 20] [--tests 200] [--repeat 3] [--no-rabbitmq]

- start to first publish: `run_in_thread()` (what the `amqp_broker` fixture
  runs) until a publish is confirmed, in this process (imports done); the
  same from a fresh interpreter (imports included, as a test session's first
  broker pays them); and a `rabbitmq-server` node of its own
  (`bench/embed_rabbitmq.py`) launched until a publish is confirmed.
- per-test overhead in each scope: a generated project of `--tests` tests
  that only take `amqp_broker`, run by pytest in a subprocess; the fixture's
  part of each test is its setup plus teardown as pytest reports them
  (median over the tests; the first test of a shared broker pays its start).
- a suite of `--tests` small AMQP tests (pika: connect, declare a queue,
  publish with a confirm, get, ack, close) in 10 modules, in each scope:
  the wall time of the pytest subprocess, interpreter start included.

Every number is the median of `--repeat` runs; all loops are bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from amqp_server.embed_thread import run_in_thread

from . import embed_rabbitmq
from .embed_rabbitmq import first_publish

SCOPES = ("function", "module", "session")
MODULES = 10

# Records how long each test's setup and teardown took (the fixture's part).
CONFTEST = """
import json, os

def pytest_runtest_logreport(report):
    if report.when in ("setup", "teardown"):
        with open(os.environ["BENCH_DURATIONS"], "a") as out:
            out.write(json.dumps([report.nodeid, report.when, report.duration]) + "\\n")
"""

EMPTY_TEST = """
def test_{n}(amqp_broker):
    pass
"""

AMQP_TEST = """
def test_{n}(amqp_url):
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("work")
    channel.basic_publish("", "work", b"job {n}")
    method, _, body = channel.basic_get("work")
    assert body == b"job {n}"
    channel.basic_ack(method.delivery_tag)
    connection.close()
"""


def in_process_starts(count: int) -> dict:
    starts, stops = [], []
    for _ in range(count):
        began = time.perf_counter()
        broker = run_in_thread().start()
        first_publish(broker.url)
        started = time.perf_counter()
        broker.stop()
        starts.append(started - began)
        stops.append(time.perf_counter() - started)
    return {"start_to_first_publish_s": statistics.median(starts),
            "spread_s": [min(starts), max(starts)], "stop_s": statistics.median(stops)}


COLD = """
import time
began = time.perf_counter()
from amqp_server.embed_thread import run_in_thread
from bench.embed_rabbitmq import first_publish
broker = run_in_thread().start()
first_publish(broker.url)
print(time.perf_counter() - began)
broker.stop()
"""


def cold_starts(count: int) -> dict:
    """From a fresh interpreter: the broker's imports (and pika's) included."""
    root = Path(__file__).resolve().parent.parent
    times = [float(subprocess.run([sys.executable, "-c", COLD], cwd=root, check=True,
                                  capture_output=True, text=True, timeout=120).stdout)
             for _ in range(count)]
    return {"start_to_first_publish_s": statistics.median(times),
            "spread_s": [min(times), max(times)]}


def rabbitmq_starts(count: int) -> dict:
    starts, stops = [], []
    for _ in range(count):
        node = embed_rabbitmq.RabbitMQNode()
        try:
            starts.append(node.start())
        finally:
            began = time.perf_counter()
            node.stop()
            stops.append(time.perf_counter() - began)
    return {"start_to_first_publish_s": statistics.median(starts),
            "spread_s": [min(starts), max(starts)], "stop_s": statistics.median(stops)}


def write_project(directory: Path, scope: str, tests: int, body: str, header: str) -> None:
    (directory / "pytest.ini").write_text(
        f"[pytest]\namqp_broker_scope = {scope}\nasyncio_default_fixture_loop_scope = "
        "function\naddopts = -p no:cacheprovider\n")
    (directory / "conftest.py").write_text(CONFTEST)
    per_module = -(-tests // MODULES)
    for module in range(MODULES):
        numbers = range(module * per_module, min(tests, (module + 1) * per_module))
        (directory / f"test_m{module}.py").write_text(
            header + "".join(textwrap.dedent(body).format(n=n) for n in numbers))


def run_suite(scope: str, tests: int, body: str, header: str = "") -> dict:
    """One pytest run of a generated project: wall time and the fixture's
    setup + teardown per test."""
    with tempfile.TemporaryDirectory(prefix="bench-embed-") as name:
        directory = Path(name)
        write_project(directory, scope, tests, body, header)
        durations = directory / "durations.jsonl"
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=directory,
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "BENCH_DURATIONS": str(durations)})
        wall = time.perf_counter() - began
        if done.returncode != 0:
            raise RuntimeError(f"the generated suite failed:\n{done.stdout[-3000:]}")
        per_test: dict[str, float] = {}
        for line in durations.read_text().splitlines():
            nodeid, _, seconds = json.loads(line)
            per_test[nodeid] = per_test.get(nodeid, 0.0) + seconds
    overheads = sorted(per_test.values())
    return {"wall_s": wall, "fixture_median_ms": statistics.median(overheads) * 1000,
            "fixture_mean_ms": statistics.mean(overheads) * 1000,
            "fixture_max_ms": overheads[-1] * 1000}


def median_run(runs: list[dict], key: str) -> dict:
    ordered = sorted(runs, key=lambda run: run[key])
    chosen = dict(ordered[len(ordered) // 2])
    chosen["spread"] = [ordered[0][key], ordered[-1][key]]
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.embed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=20,
                        help="in-process starts to time (default 20; 5 cold, 3 RabbitMQ)")
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-rabbitmq", action="store_true",
                        help="skip starting Debian's rabbitmq-server")
    args = parser.parse_args(argv)

    results: dict = {"embedded_in_process": in_process_starts(args.starts),
                     "embedded_cold": cold_starts(max(1, min(5, args.starts)))}
    if not args.no_rabbitmq:
        if embed_rabbitmq.available():
            results["rabbitmq_server"] = rabbitmq_starts(max(1, min(3, args.starts)))
        else:
            print("rabbitmq-server is not installed: its start is not timed", file=sys.stderr)
    for scope in SCOPES:
        results[f"overhead_{scope}"] = median_run(
            [run_suite(scope, args.tests, EMPTY_TEST) for _ in range(args.repeat)],
            "fixture_median_ms")
        results[f"suite_{scope}"] = median_run(
            [run_suite(scope, args.tests, AMQP_TEST, "import pika\n")
             for _ in range(args.repeat)], "wall_s")
        print(f"  {scope}: {json.dumps(results[f'overhead_{scope}'])} "
              f"{json.dumps(results[f'suite_{scope}'])}", file=sys.stderr, flush=True)
    print(json.dumps(results, indent=1))
    print(table(results, args.tests))
    return 0


def table(results: dict, tests: int) -> str:
    rows = ["| measurement | embedded broker | rabbitmq-server |", "|---|---:|---:|"]
    rabbit = results.get("rabbitmq_server")
    rows.append("| start to first confirmed publish, in process (imports done) | "
                f"{results['embedded_in_process']['start_to_first_publish_s'] * 1000:.1f} ms | "
                + (f"{rabbit['start_to_first_publish_s']:.2f} s |" if rabbit else "- |"))
    rows.append("| the same from a fresh interpreter (imports included) | "
                f"{results['embedded_cold']['start_to_first_publish_s'] * 1000:.0f} ms | - |")
    rows.append("| stop | "
                f"{results['embedded_in_process']['stop_s'] * 1000:.1f} ms | "
                + (f"{rabbit['stop_s']:.2f} s |" if rabbit else "- |"))
    for scope in SCOPES:
        overhead = results[f"overhead_{scope}"]
        rows.append(f"| fixture per test, scope {scope} (setup + teardown, median; mean) | "
                    f"{overhead['fixture_median_ms']:.2f} ms; "
                    f"{overhead['fixture_mean_ms']:.2f} ms | - |")
    for scope in SCOPES:
        rows.append(f"| {tests} small AMQP tests, scope {scope}: pytest wall time | "
                    f"{results[f'suite_{scope}']['wall_s']:.2f} s | - |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
