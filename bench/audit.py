"""The Spark audit, timed end to end as a user runs it (`python -m
spark.audit` in local mode, defaults only), with the peak resident memory
of its whole process tree (Python driver and JVM).  The logs are written
by the broker's own writer code (dead_letter_events + LogFiles) into a
temporary directory that is deleted afterwards.

    python -m bench.audit small            # 500 events, one broker
    python -m bench.audit single           # 1M events, one broker
    python -m bench.audit fleet            # 10M events, 10 brokers' logs
    python -m bench.audit fleet --events 2000000 --brokers 4 --runs 3
    python -m bench.audit single --keep /tmp/audit-1m   # logs written once, kept

Each scenario times a first run (compaction of the sealed files and the
whole audit) and a re-run with nothing new, `--runs` times each on fresh
copies of the state.  `small` also times a run without the class-data
archive (a first run on a new machine).  The audit prints its progress
(stage names) to this process's stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amqp_server.broker.dead_letter_events import event_common, event_head
from amqp_server.broker.message import Message
from amqp_server.storage.dead_letter_log import LogFiles, write_batch
from amqp_server.wire.frames import content_header
from amqp_server.wire.properties import Properties, encode_properties
from dlx.dead_letter import DROP_CAUSES
from dlx.deaths import REASONS

from .procinfo import rss_bytes, tree_pids

QUEUES = [f"orders.{region}.{n}" for region in ("eu", "us", "ap") for n in range(7)]
DAYS = 3
CHUNK = 10_000
SCENARIOS = {  # name: (events, brokers)
    "small": (500, 1),
    "single": (1_000_000, 1),
    "fleet": (10_000_000, 10),
}


def write_events(directory: Path, count: int, node: str = "bench", seed: int = 1) -> int:
    """`count` events over DAYS days, 5% of them drops, one message in 50 a
    repeat offender; the newest file is left empty (the live one), so all
    the others are sealed.  Returns the bytes written."""
    rng = random.Random(seed)
    files = LogFiles(directory, 64 << 20, 10**9, 1 << 40)
    start = time.time() - DAYS * 86400
    heads: dict[tuple, str] = {}
    batch = []
    for n in range(count):
        queue = rng.choice(QUEUES)
        reason = rng.choice(REASONS)
        cause = rng.choice(DROP_CAUSES) if rng.random() < 0.05 else None
        key = (queue, reason, cause)
        common = heads.get(key)
        if common is None:
            letter = _message(queue, "x").letter()
            common = heads[key] = event_common("/", queue, reason, letter,
                                               None if cause else "dlx", int(start))
        moment = start + DAYS * 86400 * n / count
        message_id = f"{node}/poison-{n % 97}" if n % 50 == 0 else f"{node}/m-{n}"
        message = _message(queue, message_id, int(moment) - rng.randint(0, 600))
        batch.append((event_head(common, moment, cause, [] if cause else ["dlq"]),
                      message.header, message.body, n))
        if len(batch) == CHUNK:
            write_batch(files, batch, 64 << 10, node, node)
            batch = []
    if batch:
        write_batch(files, batch, 64 << 10, node, node)
    files.close()
    (directory / "dead-letters-99999999T999999-0-000000.ndjson").touch()
    return sum(p.stat().st_size for p in directory.iterdir())


def _message(queue: str, message_id: str, stamp: int = 0) -> Message:
    body = f'{{"order": "{message_id}", "lines": [1, 2, 3]}}'.encode()
    props = Properties(message_id=message_id, timestamp=stamp or None, delivery_mode=2,
                       content_type="application/json")
    header = content_header(len(body), encode_properties(props))
    return Message.to("orders", queue, header, body)


def _rss(pid: int) -> int:
    try:
        return rss_bytes(pid)
    except OSError:
        return 0


def timed_audit(argv: list[str], env: dict | None = None, limit: float = 3600) -> dict:
    """One `amqp-dlq-audit` run: wall seconds and peak RSS of its tree."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "spark.audit", *argv],
                            stdout=subprocess.DEVNULL, env=env)
    peak, seen = 0, set()
    while proc.poll() is None:
        if time.monotonic() - started > limit:
            proc.kill()
            raise SystemExit(f"audit still running after {limit} s")
        pids = tree_pids(proc.pid)
        seen.update(pids)
        peak = max(peak, sum(map(_rss, pids)))
        time.sleep(0.2)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"audit failed with exit code {proc.returncode}")
    # The JVM may outlive the command a moment (writing its class archive):
    # the next run starts once it is gone, so runs do not overlap.
    deadline = time.monotonic() + 120
    while any(os.path.exists(f"/proc/{pid}") for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"seconds": round(seconds, 1), "peak_rss_mb": round(peak / 2**20)}


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def write_fleet(logs: Path, events: int, brokers: int) -> None:
    for n in range(brokers):
        node = f"broker-{n + 1:02d}"
        log_dir = logs / node / "dead-letters"
        log_dir.mkdir(parents=True)
        write_events(log_dir, events // brokers, node=node, seed=n + 1)


def run_scenario(root: Path, events: int, brokers: int, runs: int) -> dict:
    logs = root / "logs"
    started = time.monotonic()
    if not logs.exists():  # --keep: written once, then reused
        write_fleet(logs, events, brokers)
    result = {"events": events, "brokers": brokers, "log_mb": round(du(logs) / 2**20),
              "write_seconds": round(time.monotonic() - started, 1),
              "first_run": [], "rerun_nothing_new": []}
    for _ in range(runs):
        state = root / "state"
        shutil.rmtree(state, ignore_errors=True)
        argv = ["--data-dir", str(logs / "broker-*"), "--parquet-dir", str(state / "parquet"),
                "--out", str(state / "out"), "--quiet"]
        result["first_run"].append(timed_audit(argv))
        result["rerun_nothing_new"].append(timed_audit(argv))
        summary = json.loads((state / "out" / "summary.json").read_text())
        assert summary["events"] == events, summary["events"]
        assert summary["nodes"] == brokers, summary["nodes"]
        result["parquet_mb"] = round(du(state / "parquet") / 2**20)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audit")
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--events", type=int, help="instead of the scenario's")
    parser.add_argument("--brokers", type=int, help="instead of the scenario's")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--keep", type=Path,
                        help="use (and keep) this directory; its logs are written once")
    args = parser.parse_args()
    events, brokers = SCENARIOS[args.scenario]
    events, brokers = args.events or events, args.brokers or brokers
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-audit-"))
    try:
        result = run_scenario(root, events, brokers, args.runs)
        if args.scenario == "small":
            cold = root / "empty-class-cache"
            cold.mkdir()
            env = dict(os.environ, AMQP_DLQ_AUDIT_CACHE=str(cold))
            result["first_run_on_a_new_machine"] = timed_audit(
                ["--data-dir", str(root / "logs" / "broker-01"), "--out", str(root / "cold"),
                 "--no-compact", "--quiet"], env)
        print(json.dumps(result, indent=2))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
