"""The Spark audit over a large dead-letter log: N synthetic events written
by the broker's own writer code (dead_letter_events + LogFiles), then the
audit in local mode, timed with the peak resident memory of its whole
process tree (Python driver and JVM), then again with nothing new.

    python -m bench.audit [--events 1000000] [--keep DIR]
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
from amqp_server.wire.frames import content_header, shortstr
from amqp_server.wire.properties import Properties, encode_properties
from dlx.dead_letter import DROP_CAUSES
from dlx.deaths import REASONS

from .procinfo import rss_bytes

QUEUES = [f"orders.{region}.{n}" for region in ("eu", "us", "ap") for n in range(7)]
DAYS = 3
CHUNK = 10_000


def write_events(directory: Path, count: int, seed: int = 1) -> int:
    """`count` events over DAYS days, 5% of them drops, one message in 50 a
    repeat offender; returns the bytes written."""
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
        message_id = f"poison-{n % 97}" if n % 50 == 0 else f"m-{n}"
        message = _message(queue, message_id, int(moment) - rng.randint(0, 600))
        batch.append((event_head(common, moment, cause, [] if cause else ["dlq"]),
                      message.header, message.body))
        if len(batch) == CHUNK:
            write_batch(files, batch, 64 << 10, "bench")
            batch = []
    if batch:
        write_batch(files, batch, 64 << 10, "bench")
    files.close()
    return sum(p.stat().st_size for p in directory.iterdir())


def _message(queue: str, message_id: str, stamp: int = 0) -> Message:
    body = f'{{"order": "{message_id}", "lines": [1, 2, 3]}}'.encode()
    props = Properties(message_id=message_id, timestamp=stamp or None, delivery_mode=2,
                       content_type="application/json")
    header = content_header(len(body), encode_properties(props))
    return Message("orders", queue, shortstr("orders") + shortstr(queue), header, body)


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += rss_bytes(current)
        except OSError:
            pass
        todo.extend(children.get(current, ()))
    return total


def timed_audit(data_dir: Path, out: Path) -> dict:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "spark.audit", "--data-dir", str(data_dir),
                             "--out", str(out), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.2)
    if proc.returncode != 0:
        raise SystemExit(f"audit failed: {proc.stderr.read()[-2000:]}")
    return {"seconds": round(time.monotonic() - started, 2), "peak_rss_mb": round(peak / 2**20)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audit")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="use (and keep) this data directory")
    args = parser.parse_args()
    data_dir = args.keep or Path(tempfile.mkdtemp(prefix="bench-audit-"))
    try:
        log_dir = data_dir / "dead-letters"
        log_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        size = write_events(log_dir, args.events)
        # The newest file is the live one: a new, empty file seals the rest.
        (log_dir / "dead-letters-99999999T999999-0-000000.ndjson").touch()
        result = {"events": args.events, "log_mb": round(size / 2**20),
                  "write_seconds": round(time.monotonic() - started, 2)}
        result["first_run"] = timed_audit(data_dir, data_dir / "out")
        result["rerun_nothing_new"] = timed_audit(data_dir, data_dir / "out")
        summary = json.loads((data_dir / "out" / "summary.json").read_text())
        assert summary["events"] == args.events, summary["events"]
        result["parquet_mb"] = round(sum(
            p.stat().st_size for p in (data_dir / "dead-letters-parquet").rglob("*")
            if p.is_file()) / 2**20)
        print(json.dumps(result, indent=2))
    finally:
        if args.keep is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
