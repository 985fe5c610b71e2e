"""Archive throughput: how fast retention moves dead letters out of a dead
letter queue into the archive, durably.

    python -m bench.archive --messages 20000 --body 1024 [--compare URL]

Three numbers:
- `writer`: the archive's encoding and writing alone (archive_records,
  then ArchiveFiles.write: one Parquet file per 1,000 records, fsync of
  file and directory), in this process (pyarrow imported before the
  clock starts): records/s and MB/s of archive;
- `retention`: this broker (a subprocess, fresh data directory) holding N
  dead letters in a durable queue, given a retention by a policy; the time
  from the policy until the queue is empty and the archive holds all N.
  The dead letters are published with an `x-death` (the broker decodes
  each, as after a restart), and in `retention_dead_lettered` rejected
  into the queue by the broker itself (their history is known);
- `drain-to-file`: what an application does on a broker without
  retention: a pika consumer (prefetch 1,000) writes each dead letter to a
  JSON-lines file, fsyncs it every 1,000 and acknowledges them with one
  multiple ack; on this broker and, with --compare, on that broker (a
  RabbitMQ), in the same run.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pika
import pyarrow.parquet as pq

from amqp_server.broker.archiving import archive_records
from amqp_server.storage.archive import ARCHIVE_DIR, ArchiveFiles
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable
from dlx.deaths import Death, DeathHistory

from .__main__ import start_our_broker

DIED = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
BATCH = 1000


def writer(count: int, body_size: int) -> dict:
    """The archive writer alone, in this process."""
    header = struct.pack(">HHQ", 60, 0, body_size) + encode_properties(Properties(
        content_type="application/octet-stream", delivery_mode=2, message_id="m",
        headers=FieldTable({"trace": "t"})))
    history = DeathHistory((Death("work", "rejected", "", ("work",), 1, 1577836800),),
                           ("rejected", "work", ""), ("rejected", "work", ""))
    # A body of its own per record (as dead letters have): one body for all
    # would let Parquet's compression store it once a file.
    bodies = [os.urandom(body_size) for _ in range(BATCH)]
    directory = tempfile.mkdtemp(prefix="bench-archive-")
    try:
        files = ArchiveFiles(directory)
        files.open()
        files.write("warm-up", {}, time.time())  # pyarrow imported outside the clock
        started = time.perf_counter()
        written = 0
        for start in range(0, count, BATCH):
            items = [("/", "dlq", ("dlx", ("work",), history, header, bodies[n % BATCH]),
                      f"b-{n}") for n in range(start, min(count, start + BATCH))]
            records, _ = archive_records(items, "bench", time.time())
            path = files.write("bench", records, time.time())
            written += path.stat().st_size
        elapsed = time.perf_counter() - started
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {"records_per_s": round(count / elapsed), "mb_per_s": round(written / elapsed / 1e6, 1),
            "bytes_per_record": written // count}


def fill(url: str, queue: str, count: int, body_size: int, arguments=None) -> None:
    """`count` persistent dead letters (x-death from 2020) into `queue`."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.queue_declare(queue, durable=True, arguments=arguments or {})
    channel.confirm_delivery()
    for n in range(count):
        channel.basic_publish("", queue, os.urandom(body_size), pika.BasicProperties(
            delivery_mode=2, message_id=str(n), headers={"x-death": [{
                "queue": "work", "reason": "rejected", "count": 1, "time": DIED,
                "exchange": "", "routing-keys": ["work"]}]}))
    conn.close()


def depth(url: str, queue: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


def fill_by_dead_lettering(url: str, queue: str, count: int, body_size: int) -> None:
    """`count` persistent messages rejected out of a work queue into
    `queue`: dead letters whose history the broker made (as a dead letter
    queue is filled in practice, before any restart)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.exchange_declare("bench.dlx", "fanout")
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, "bench.dlx")
    channel.queue_declare("bench.work", durable=True,
                          arguments={"x-dead-letter-exchange": "bench.dlx"})
    channel.confirm_delivery()
    for n in range(count):
        channel.basic_publish("", "bench.work", os.urandom(body_size), pika.BasicProperties(
            delivery_mode=2, message_id=str(n)))
    channel.basic_qos(prefetch_count=1000)
    rejected = 0
    for method, _, _ in channel.consume("bench.work", inactivity_timeout=10):
        if method is None:
            break
        channel.basic_reject(method.delivery_tag, requeue=False)
        rejected += 1
        if rejected == count:
            break
    channel.cancel()
    conn.close()


def retention(count: int, body_size: int, dead_lettered: bool = False) -> dict:
    """This broker's retention, end to end, in a subprocess."""
    data_dir = tempfile.mkdtemp(prefix="bench-retention-")
    proc, url, management = start_with_management(data_dir)
    try:
        if dead_lettered:
            fill_by_dead_lettering(url, "bench.dlq", count, body_size)
        else:
            fill(url, "bench.dlq", count, body_size)
        started = time.perf_counter()
        put_policy(management, {"pattern": "^bench\\.dlq$",
                                "definition": {"dead-letter-retention": 1}})
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            queue = get_json(management, "/api/queues/%2F/bench.dlq")
            if queue["messages"] == 0 and queue["dead_letters_archived"] >= count:
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        archived = sum(pq.read_metadata(path).num_rows
                       for path in Path(data_dir, ARCHIVE_DIR).rglob("archive-*.parquet"))
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)
    return {"archived": archived, "seconds": round(elapsed, 2),
            "records_per_s": round(count / elapsed)}


def drain_to_file(url: str, count: int, body_size: int) -> dict:
    """The application-side pattern: consume, write, fsync, ack."""
    queue = f"bench.drain.{os.getpid()}"
    fill(url, queue, count, body_size)
    directory = tempfile.mkdtemp(prefix="bench-drain-")
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=BATCH)
    taken = 0
    started = time.perf_counter()
    with open(Path(directory, "archive.ndjson"), "ab") as handle:
        pending = []
        for method, props, body in channel.consume(queue, inactivity_timeout=5):
            if method is None:
                break
            pending.append(json.dumps({
                "message_id": props.message_id, "headers": {"x-death": "..."},
                "body": base64.b64encode(body).decode()}) + "\n")
            taken += 1
            if len(pending) >= BATCH or taken == count:
                handle.write("".join(pending).encode())
                handle.flush()
                os.fsync(handle.fileno())
                channel.basic_ack(method.delivery_tag, multiple=True)
                pending = []
            if taken == count:
                break
    elapsed = time.perf_counter() - started
    channel.cancel()
    channel.queue_delete(queue)
    conn.close()
    shutil.rmtree(directory, ignore_errors=True)
    return {"records_per_s": round(taken / elapsed), "seconds": round(elapsed, 2)}


# ---- the management API of the subprocess ------------------------------------------

def start_with_management(data_dir: str) -> tuple[subprocess.Popen, str, str]:
    """This broker in a subprocess with its management API on a free port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--management-port", "0",
         "--prometheus-port", "-1", "--data-dir", data_dir, "--log-level", "warning"],
        stdout=subprocess.PIPE, text=True)
    amqp = proc.stdout.readline()
    management = proc.stdout.readline()
    if "listening on" not in amqp or "management API on" not in management:
        proc.kill()
        raise SystemExit(f"broker did not start: {amqp!r} {management!r}")
    port = int(amqp.rsplit(":", 1)[1])
    base = management.split(" on ", 1)[1].strip().removesuffix("/api/")
    return proc, f"amqp://guest:guest@127.0.0.1:{port}/%2F", base


def _request(url: str, method: str = "GET", body=None):
    token = base64.b64encode(b"guest:guest").decode()
    request = urllib.request.Request(url, method=method, headers={
        "Authorization": f"Basic {token}", "Content-Type": "application/json"},
        data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def get_json(base: str, path: str):
    return _request(base + path)


def put_policy(base: str, policy: dict) -> None:
    _request(base + "/api/policies/%2F/bench-retention", "PUT", policy)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.archive")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--body", type=int, default=1024, help="body bytes")
    parser.add_argument("--compare", help="AMQP URL of a reference broker (RabbitMQ)")
    args = parser.parse_args(argv)
    results = {"messages": args.messages, "body": args.body,
               "writer": writer(args.messages, args.body),
               "retention": retention(args.messages, args.body),
               "retention_dead_lettered": retention(args.messages, args.body, True)}
    data_dir = tempfile.mkdtemp(prefix="bench-drain-ours-")
    proc, url = start_our_broker(data_dir)
    try:
        results["drain_to_file_ours"] = drain_to_file(url, args.messages, args.body)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.compare:
        results["drain_to_file_reference"] = drain_to_file(args.compare, args.messages,
                                                           args.body)
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
