"""LavinMQ's load tool against this broker, RabbitMQ and LavinMQ, each
broker capped at the same CPU share.

    python -m bench.lavinmqperf --tools /work/tools/lavinmq
        [--rabbitmq amqp://guest:guest@127.0.0.1:5672/%2F] [--no-lavinmq]
        [--shape no-ack --shape ack-each --shape persistent-confirm]
        [--seconds 10] [--repeat 2] [--cores 1] [--baseline CHECKOUT ...]

`lavinmqperf` (built with LavinMQ 1.0.1 by ../shared/tools/lavinmq/build.sh
into --tools) is a native client: one publisher without confirms outruns
any Python client, and any broker written in Python.  It runs outside the
cap; each broker's threads (its child processes' too) go into a cgroup v1
CPU controller group whose CFS quota is `--cores` cores, so the brokers
are compared per core whatever else the machine runs.  RabbitMQ, which
other work on the machine uses, is capped for its own runs only and given
back uncapped after each (also when the run fails).  Needs root.

The shapes (lavinmqperf's flags; one publisher, one consumer):

- no-ack: 16 B messages, no acks, no confirms;
- ack-each: 100 B, one basic.ack per delivery, prefetch 1000;
- persistent-confirm: 1 KB persistent, at most 1000 unconfirmed, one ack
  per delivery, prefetch 1000.

Runs are interleaved: each repeat runs every shape on every broker in
turn, so that all see the same minutes of the machine.  Reported per
broker and shape (median of the repeats): the tool's average publish and
consume rates, the steady-state rates (the per-second lines after the
first two seconds), consume / publish, what was left queued when the tool
stopped (what it had written that the broker had not delivered, its
socket buffers' worth included), the broker's resident memory (its whole
process tree) over the run's second half (flat while consumers keep up),
and deliveries per second of the broker's own CPU time (per core, however
busy the machine was).  Ratios are this broker / the reference, on
consume rates.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pika

from .__main__ import start_our_broker
from .procinfo import tree_pids, tree_rss_bytes

SHAPES = {
    "no-ack": ["-s", "16"],
    "ack-each": ["-s", "100", "-a", "1", "-P", "1000"],
    "persistent-confirm": ["-s", "1000", "-p", "-c", "1000", "-a", "1", "-P", "1000"],
}
CGROUP_ROOT = Path("/sys/fs/cgroup/cpu")
CFS_PERIOD_US = 100_000
WARM_UP_SECONDS = 2  # per-second lines left out of the steady state
LINE = re.compile(r"Publish rate: (\d+) msgs/s Consume rate: (\d+) msgs/s")
LAVINMQ_PORT = 5682
LAVINMQ_HTTP_PORT = 15682


class CpuCap:
    """A cgroup v1 CPU group with a CFS quota of `cores` cores."""

    def __init__(self, name: str, cores: float) -> None:
        self.path = CGROUP_ROOT / name
        self.path.mkdir(exist_ok=True)
        (self.path / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (self.path / "cpu.cfs_quota_us").write_text(str(int(cores * CFS_PERIOD_US)))

    def hold(self, pid: int) -> list[int]:
        """Every thread of `pid` and of its descendants into the group
        (threads they start later are born in it); the threads moved."""
        return _move(_threads(pid), self.path / "tasks")

    @staticmethod
    def release(threads: list[int]) -> None:
        """Back into the root group: uncapped."""
        _move(threads, CGROUP_ROOT / "tasks")

    def remove(self) -> None:
        """The group goes once nothing is left in it."""
        try:
            self.path.rmdir()
        except OSError:
            pass


def _threads(pid: int) -> list[int]:
    found = []
    for process in tree_pids(pid):
        try:
            found.extend(int(task) for task in os.listdir(f"/proc/{process}/task"))
        except OSError:
            continue
    return found


def _move(threads: list[int], tasks: Path) -> list[int]:
    moved = []
    for thread in threads:
        try:
            tasks.write_text(str(thread))
            moved.append(thread)
        except OSError:
            continue  # gone meanwhile
    return moved


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of the process and its descendants, all
    their threads."""
    ticks = 0
    for process in tree_pids(pid):
        try:
            with open(f"/proc/{process}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _throttled(cap: CpuCap) -> int:
    """Periods the group's quota ran out in, so far."""
    for line in (cap.path / "cpu.stat").read_text().splitlines():
        if line.startswith("nr_throttled "):
            return int(line.split()[1])
    return 0


def _listening(url: str, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            pika.BlockingConnection(pika.URLParameters(url)).close()
            return True
        except Exception:
            time.sleep(0.2)
    return False


def _pid_of(pattern: str) -> int:
    out = subprocess.run(["pgrep", "-o", "-f", pattern], capture_output=True, text=True)
    if not out.stdout.strip():
        raise SystemExit(f"no process matches {pattern!r}")
    return int(out.stdout.split()[0])


class Broker:
    """A broker under test: its URL, its main process, and whether it is
    capped for its whole life or only during its own runs."""

    def __init__(self, name: str, url: str, pid: int, proc=None, scratch=None,
                 capped_for_life: bool = True) -> None:
        self.name, self.url, self.pid = name, url, pid
        self.proc, self.scratch = proc, scratch
        self.capped_for_life = capped_for_life

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def start_ours(name: str, checkout: str | None) -> Broker:
    scratch = tempfile.mkdtemp(prefix="amqp-perf-")
    proc, url = start_our_broker(scratch, checkout)
    return Broker(name, url, proc.pid, proc, scratch)


def start_lavinmq(tools: Path) -> Broker:
    scratch = tempfile.mkdtemp(prefix="lavinmq-perf-")
    proc = subprocess.Popen(
        [str(tools / "bin" / "lavinmq"), "-D", scratch, "--bind", "127.0.0.1",
         "--amqp-port", str(LAVINMQ_PORT), "--http-port", str(LAVINMQ_HTTP_PORT)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"amqp://guest:guest@127.0.0.1:{LAVINMQ_PORT}/%2F"
    if not _listening(url):
        proc.kill()
        raise SystemExit("LavinMQ did not start")
    return Broker("LavinMQ 1.0.1", url, proc.pid, proc, scratch)


def _delete_queue(url: str, queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        connection.channel().queue_delete(queue)
    finally:
        connection.close()


def _queued(url: str, queue: str) -> int | None:
    try:
        connection = pika.BlockingConnection(pika.URLParameters(url))
    except Exception:
        return None
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    except Exception:
        return None
    finally:
        if connection.is_open:
            connection.close()


def run_once(tool: Path, broker: Broker, shape: str, seconds: int, cap: CpuCap) -> dict:
    """One lavinmqperf run on a fresh queue; the broker's memory sampled
    twice a second meanwhile, its CPU time and the cap's throttling
    counted."""
    queue = f"perf-{shape}"
    _delete_queue(broker.url, queue)
    cpu_before, throttled_before = cpu_seconds(broker.pid), _throttled(cap)
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        began = time.monotonic()
        while not done.wait(0.5):
            try:
                samples.append((time.monotonic() - began, tree_rss_bytes(broker.pid)))
            except OSError:
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = subprocess.run(
        [str(tool), "throughput", "--uri", broker.url.replace("/%2F", ""), "-u", queue,
         "-z", str(seconds), "-x", "1", "-y", "1", "-j", *SHAPES[shape]],
        capture_output=True, text=True, timeout=seconds + 60)
    done.set()
    sampler.join()
    cpu = cpu_seconds(broker.pid) - cpu_before
    throttled = _throttled(cap) - throttled_before
    left = _queued(broker.url, queue)
    _delete_queue(broker.url, queue)
    summaries = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not summaries:
        return {"failed": (out.stdout + out.stderr).strip()[-500:] or f"exit {out.returncode}"}
    summary = json.loads(summaries[-1])
    lines = [(int(p), int(c)) for p, c in LINE.findall(out.stdout)]
    steady = lines[WARM_UP_SECONDS:] or lines
    half = [rss for at, rss in samples if at >= seconds / 2]
    result = {
        "publish": round(summary["avg_pub_rate"]),
        "consume": round(summary["avg_consume_rate"]),
        "steady_publish": round(statistics.mean(p for p, _ in steady)) if steady else None,
        "steady_consume": round(statistics.mean(c for _, c in steady)) if steady else None,
        "left_queued": left,
        "rss_mb_second_half": ([round(min(half) / 2**20, 1), round(max(half) / 2**20, 1)]
                               if half else None),
        # Deliveries per second of the broker's own CPU time: per core,
        # whatever else the machine ran meanwhile.
        "consumed_per_cpu_second": (round(summary["avg_consume_rate"]
                                          * summary["elapsed_seconds"] / cpu) if cpu else None),
        "cpu_seconds": round(cpu, 2),
        "throttled_periods": throttled,
    }
    if result["steady_publish"]:
        result["steady_ratio"] = round(result["steady_consume"] / result["steady_publish"], 3)
    return result


def _median(runs: list[dict]) -> dict:
    """The run with the median consume rate; a failed run gives no rate."""
    ordered = sorted((run for run in runs if "failed" not in run),
                     key=lambda run: run["consume"])
    failed = [run["failed"] for run in runs if "failed" in run]
    if not ordered:
        return {"failed": failed[0], "runs": 0, "failed_runs": len(failed)}
    median = dict(ordered[len(ordered) // 2])
    median["consume_spread"] = [ordered[0]["consume"], ordered[-1]["consume"]]
    median["runs"] = len(ordered)
    median["failed_runs"] = len(failed)
    return median


def _cell(result: dict, key: str) -> str:
    if "failed" in result:
        return "failed"
    value = result.get(key)
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value}"


def table(results: dict, ours: str, references: list[str]) -> str:
    """Markdown: each shape's rates, per broker, and this broker's consume
    rate over each reference's."""
    names = [ours, *references]
    lines = ["| shape | metric | " + " | ".join(names) + " | " + " | ".join(
        f"{ours} / {name}" for name in references) + " |",
        "|" + "---|" * (2 + len(names) + len(references))]
    blank = " |" * len(references)
    for shape in SHAPES:
        if shape not in results[ours]:
            continue
        row = [results[who][shape] for who in names]
        ratios = [f"**{row[0]['consume'] / r['consume']:.2f}x**"
                  if "failed" not in row[0] and "failed" not in r and r["consume"] else "-"
                  for r in row[1:]]
        lines.append(f"| {shape} | consumed/s | " + " | ".join(
            _cell(r, "consume") + ("" if "failed" in r else
                                   " ({:,}-{:,})".format(*r["consume_spread"]))
            for r in row) + " | " + " | ".join(ratios) + " |")
        for label, key in (("published/s", "publish"),
                           ("steady consume / publish", "steady_ratio"),
                           ("consumed per CPU second", "consumed_per_cpu_second"),
                           ("left queued", "left_queued"),
                           ("RSS MB over the 2nd half", "rss_mb_second_half")):
            lines.append(f"| | {label} | " + " | ".join(_cell(r, key) for r in row) + " |"
                         + blank)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lavinmqperf")
    parser.add_argument("--tools", type=Path, required=True,
                        help="where build.sh put bin/lavinmqperf and bin/lavinmq")
    parser.add_argument("--rabbitmq", metavar="URL",
                        help="a running RabbitMQ (capped during its own runs only)")
    parser.add_argument("--rabbitmq-process", default="beam.smp",
                        help="pgrep -f pattern of the RabbitMQ node's process")
    parser.add_argument("--no-lavinmq", action="store_true")
    parser.add_argument("--baseline", metavar="CHECKOUT", action="append", default=[],
                        help="also run the broker of this other checkout (a change's "
                             "before; repeatable), named by its folder")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES))
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--cores", type=float, default=1.0)
    args = parser.parse_args()
    tool = args.tools / "bin" / "lavinmqperf"
    shapes = args.shape or list(SHAPES)
    cap = CpuCap("amqp-bench-broker", args.cores)
    brokers: list[Broker] = []
    try:
        brokers.append(start_ours("this broker", None))
        for checkout in args.baseline:
            brokers.append(start_ours(Path(checkout).name, checkout))
        if not args.no_lavinmq:
            brokers.append(start_lavinmq(args.tools))
        if args.rabbitmq:
            if not _listening(args.rabbitmq, 5):
                raise SystemExit(f"no RabbitMQ at {args.rabbitmq}")
            brokers.append(Broker("RabbitMQ 3.10.8", args.rabbitmq,
                                  _pid_of(args.rabbitmq_process), capped_for_life=False))
        for broker in brokers:
            if broker.capped_for_life:
                cap.hold(broker.pid)
        runs: dict = {broker.name: {shape: [] for shape in shapes} for broker in brokers}
        for repeat in range(args.repeat):
            for shape in shapes:
                for broker in brokers:
                    held = [] if broker.capped_for_life else cap.hold(broker.pid)
                    try:
                        result = run_once(tool, broker, shape, args.seconds, cap)
                    finally:
                        cap.release(held)
                    runs[broker.name][shape].append(result)
                    print(f"  {repeat + 1}/{args.repeat} {shape} {broker.name}: "
                          f"{json.dumps(result)}", file=sys.stderr, flush=True)
        results = {name: {shape: _median(found) for shape, found in by_shape.items()}
                   for name, by_shape in runs.items()}
        print(json.dumps(results, indent=2))
        print(table(results, brokers[0].name, [b.name for b in brokers[1:]]))
    finally:
        for broker in brokers:
            broker.stop()
        cap.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
