"""The Spark audit run on logs brokers wrote: brokers on a data directory
that pika gives dead letters of every kind, the audit run in-process or as
the command, its tables read back, and the Spark processes (a standalone
cluster's, a Spark Connect server) some runs talk to."""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pika
import pytest

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .waiting import wait_get

# A test module that imports these is skipped without the audit extra.
pyspark = pytest.importorskip("pyspark")

from spark.audit import parser  # noqa: E402
from spark.job import run  # noqa: E402


@contextmanager
def running_broker(data_dir: Path, node: str):
    """A broker on `data_dir` whose dead-letter events name `node`."""
    config = BrokerConfig(port=0, management_port=0, node_name=node)
    with BrokerThread(config, data_dir=str(data_dir)) as broker:
        yield broker


@contextmanager
def pika_channel(url: str):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        yield conn.channel()
    finally:
        conn.close()


def publish(channel, queue: str, body: str, **props) -> None:
    channel.basic_publish("", queue, body.encode(),
                          pika.BasicProperties(message_id=body, **props))


def reject_all(channel, queue: str, count: int, requeue: bool = False) -> None:
    for _ in range(count):
        method, _, _ = channel.basic_get(queue)
        assert method is not None, queue
        channel.basic_reject(method.delivery_tag, requeue=requeue)


def queue_depth(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def wait_depth(channel, queue: str, count: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while queue_depth(channel, queue) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert queue_depth(channel, queue) == count, queue


def declare_dlq(channel) -> None:
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("dlq")
    channel.queue_bind("dlq", "dlx")


def produce_every_death(url: str) -> None:
    """3 rejected, 2 expired, 2 maxlen, 1 delivery_limit dead-lettered; drops:
    no_dlx, dlx_missing, no_route, target_full once each, and a message that
    expires in c1, then in c2, whose way back to c1 closes a cycle (dropped)."""
    with pika_channel(url) as ch:
        declare_dlq(ch)
        now = int(time.time())
        ch.queue_declare("orders", arguments={"x-dead-letter-exchange": "dlx"})
        for n in range(3):
            publish(ch, "orders", f"rejected-{n}", timestamp=now)
        reject_all(ch, "orders", 3)
        ch.queue_declare("quotes", arguments={"x-dead-letter-exchange": "dlx",
                                              "x-message-ttl": 10})
        for n in range(2):
            publish(ch, "quotes", f"expired-{n}")
        ch.queue_declare("bounded", arguments={"x-dead-letter-exchange": "dlx",
                                               "x-max-length": 1})
        for n in range(3):
            publish(ch, "bounded", f"maxlen-{n}")
        ch.queue_declare("attempts", arguments={"x-dead-letter-address": "dlx",
                                                "x-max-delivery-attempts": 1})
        publish(ch, "attempts", "poison-0")
        reject_all(ch, "attempts", 1, requeue=True)
        wait_depth(ch, "dlq", 3 + 2 + 2 + 1)
        ch.queue_declare("plain")
        publish(ch, "plain", "no-dlx")
        reject_all(ch, "plain", 1)
        ch.queue_declare("misconfigured", arguments={"x-dead-letter-exchange": "nowhere"})
        publish(ch, "misconfigured", "dlx-missing")
        reject_all(ch, "misconfigured", 1)
        ch.exchange_declare("unbound", "direct")
        ch.queue_declare("unrouted", arguments={"x-dead-letter-exchange": "unbound"})
        publish(ch, "unrouted", "no-route")
        reject_all(ch, "unrouted", 1)
        ch.exchange_declare("to-full", "fanout")
        ch.queue_declare("full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
        ch.queue_bind("full", "to-full")
        ch.queue_declare("overflowing", arguments={"x-dead-letter-exchange": "to-full"})
        publish(ch, "overflowing", "target-full")
        reject_all(ch, "overflowing", 1)
        for name, other in (("c1", "c2"), ("c2", "c1")):
            ch.queue_declare(name, arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": other})
        publish(ch, "c1", "cycling")
        time.sleep(0.3)
        assert queue_depth(ch, "c1") == 0 and queue_depth(ch, "c2") == 0


def reject_once_more(url: str, body: str) -> None:
    """One more rejected message, after a restart (a new log file)."""
    with pika_channel(url) as ch:
        declare_dlq(ch)
        ch.queue_declare("orders", arguments={"x-dead-letter-exchange": "dlx"})
        publish(ch, "orders", body)
        reject_all(ch, "orders", 1)
        assert wait_get(ch, "dlq", timeout=0.01)[0] is not None  # drained: not a candidate


def write_broker_log(data_dir: Path, node: str) -> None:
    """Every kind of death, in two files (the broker restarted in between:
    the first file is sealed)."""
    with running_broker(data_dir, node) as broker:
        produce_every_death(broker.url)
    with running_broker(data_dir, node) as broker:
        reject_once_more(broker.url, "after-restart")


def audit(spark, data_dir, out: Path, *extra: str) -> dict:
    dirs = data_dir if isinstance(data_dir, list) else [data_dir]
    argv = [arg for d in dirs for arg in ("--data-dir", str(d))]
    return run(spark, parser().parse_args([*argv, "--out", str(out), *extra]))


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def logged_events(data_dir: Path) -> int:
    return sum(len(path.read_text().splitlines())
               for path in (data_dir / "dead-letters").glob("*.ndjson"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listening on {port}")


def stop_all(processes) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def run_command(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "spark.audit", *args, "--quiet"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


@contextmanager
def spark_connect_server(tmp_path: Path):
    """A Spark Connect server on a loopback port: its sc:// URL."""
    sbin = Path(pyspark.__file__).parent / "sbin"
    port = free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_PID_DIR=str(tmp_path / "pids"), SPARK_IDENT_STRING="audit-test",
               SPARK_HOME=str(sbin.parent))
    subprocess.run([str(sbin / "start-connect-server.sh"),
                    "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                    "--conf", f"spark.connect.grpc.binding.port={port}",
                    "--conf", "spark.ui.enabled=false"],
                   env=env, check=True, capture_output=True, timeout=60)
    try:
        wait_port(port)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run([str(sbin / "stop-connect-server.sh")], env=env, capture_output=True,
                       timeout=60)
