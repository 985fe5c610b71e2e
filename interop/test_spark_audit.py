"""The Spark audit on the dead-letter log the broker itself wrote: pika
produces dead letters of every reason and every drop cause, the audit's
numbers are checked exactly against what was produced, a re-run reads
nothing new, and a standalone Spark cluster on loopback gives the same
output as local mode.

One SparkSession serves every local run (session-scoped fixture)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pika
import pytest

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .waiting import wait_get

pyspark = pytest.importorskip("pyspark")

from spark.audit import parser, run  # noqa: E402
from spark.compact import log_files  # noqa: E402
from spark.session import build_session  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    session = build_session(conf={"spark.default.parallelism": "2"})
    yield session
    session.stop()


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


def produce_every_death(url: str) -> None:
    """3 rejected, 2 expired, 2 maxlen, 1 delivery_limit dead-lettered; drops:
    no_dlx, dlx_missing, no_route, target_full once each, and a message that
    expires in c1, then in c2, whose way back to c1 closes a cycle (dropped)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.exchange_declare("dlx", "fanout")
    ch.queue_declare("dlq")
    ch.queue_bind("dlq", "dlx")
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
    conn.close()


EXPECTED = {
    "events": 3 + 2 + 2 + 1 + 4 + 2,
    "dead_lettered": 3 + 2 + 2 + 1 + 1,
    "dropped": 4 + 1,
    "by_reason": {"rejected": 3 + 4, "expired": 2 + 2, "maxlen": 2, "delivery_limit": 1},
    "drops_by_cause": {"no_dlx": 1, "dlx_missing": 1, "no_route": 1, "cycle": 1,
                       "target_full": 1},
    "messages": 3 + 2 + 2 + 1 + 4 + 1,
    "cycled_messages": 1,
    "queues": 10,
}


@pytest.fixture(scope="module")
def broker_data():
    """A data directory whose dead-letter log holds every kind of death, in
    two files (the broker restarted in between: the first file is sealed)."""
    path = tempfile.mkdtemp(prefix="amqp-audit-")
    config = BrokerConfig(port=0, management_port=0)
    with BrokerThread(config, data_dir=path) as broker:
        produce_every_death(broker.url)
    with BrokerThread(config, data_dir=path) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.exchange_declare("dlx", "fanout")
        ch.queue_declare("dlq")
        ch.queue_bind("dlq", "dlx")
        ch.queue_declare("orders", arguments={"x-dead-letter-exchange": "dlx"})
        publish(ch, "orders", "after-restart")
        reject_all(ch, "orders", 1)
        assert wait_get(ch, "dlq", timeout=0.01)[0] is not None
        conn.close()
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def audit(spark, data_dir: Path, out: Path, *extra: str) -> dict:
    args = parser().parse_args(["--data-dir", str(data_dir), "--out", str(out), *extra])
    return run(spark, args)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_reason_and_drop_cause_is_counted_exactly(spark, broker_data, tmp_path):
    assert len(log_files(broker_data)) == 2
    summary = audit(spark, broker_data, tmp_path, "--replay-candidates")
    written = json.loads((tmp_path / "summary.json").read_text())
    expected = dict(EXPECTED, events=EXPECTED["events"] + 1,
                    dead_lettered=EXPECTED["dead_lettered"] + 1,
                    messages=EXPECTED["messages"] + 1)
    expected["by_reason"] = dict(EXPECTED["by_reason"], rejected=8)
    for key, value in expected.items():
        assert written[key] == value, key
    assert summary["_run"]["compacted_files"] == 1
    assert written["replay_candidates"] == 2 + 2  # the expired and maxlen ones

    tables = tmp_path / "tables"
    drops = {(r["drop_cause"], r["reason"]): int(r["events"])
             for r in read_csv(tables / "drops.csv")}
    assert drops == {("no_dlx", "rejected"): 1, ("dlx_missing", "rejected"): 1,
                     ("no_route", "rejected"): 1, ("target_full", "rejected"): 1,
                     ("cycle", "expired"): 1}
    per_queue = {r["queue"]: r for r in read_csv(tables / "reasons_per_queue.csv")}
    assert per_queue["orders"]["rejected"] == "4" and per_queue["quotes"]["expired"] == "2"
    assert per_queue["c1"]["expired"] == "1" and per_queue["c2"]["expired"] == "1"
    (cycle,) = read_csv(tables / "cycles.csv")
    assert cycle["message"] == "cycling" and cycle["outcome"] == "dropped"
    assert cycle["path"] == "c1 -> c2"
    first_last = {(r["first_death_queue"], r["last_queue"]): int(r["events"])
                  for r in read_csv(tables / "first_to_last.csv")}
    assert first_last[("c1", "c2")] == 1 and first_last[("c1", "c1")] == 1
    ttd = read_csv(tables / "time_to_death.csv")
    assert sum(int(r["events"]) for r in ttd) == 3  # only the stamped ones
    replay = read_csv(tables / "replay_candidates.csv")
    assert {r["message_id"] for r in replay} == {"expired-0", "expired-1", "maxlen-0",
                                                 "maxlen-1"}
    assert {r["original_routing_keys"] for r in replay} == {"quotes", "bounded"}
    top = read_csv(tables / "top_poison.csv")
    assert top[0]["message"] == "cycling" and top[0]["deaths"] == "2"
    by_exchange = read_csv(tables / "by_exchange.csv")
    assert sum(int(r["events"]) for r in by_exchange) == written["events"]
    for name in ("over_time", "by_queue_reason", "delivery_counts"):
        assert (tables / f"{name}.csv").exists()
        assert spark.read.parquet(str(tables / f"{name}.parquet")).count() == len(
            read_csv(tables / f"{name}.csv"))
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 3 and "cycling" in page


def test_rerun_reads_only_what_is_new_and_counts_nothing_twice(spark, broker_data, tmp_path):
    first = audit(spark, broker_data, tmp_path / "a")
    again = audit(spark, broker_data, tmp_path / "b")
    assert again["_run"]["compacted_files"] == 0
    assert {k: v for k, v in first.items() if k != "_run"} == \
        {k: v for k, v in again.items() if k != "_run"}


def test_filters(spark, broker_data, tmp_path):
    only_orders = audit(spark, broker_data, tmp_path / "q", "--queue", "orders")
    assert only_orders["events"] == 4 and only_orders["by_reason"]["rejected"] == 4
    other_vhost = audit(spark, broker_data, tmp_path / "v", "--vhost", "other")
    assert other_vhost["events"] == 0
    future = audit(spark, broker_data, tmp_path / "f", "--since", "2999-01-01")
    assert future["events"] == 0
    past = audit(spark, broker_data, tmp_path / "p", "--until", "2000-01-01")
    assert past["events"] == 0


def test_bad_flags_get_clear_errors(tmp_path, capsys):
    from spark.audit import main
    with pytest.raises(SystemExit) as info:
        parser().parse_args(["--data-dir", "x", "--out", "y", "--since", "yesterday"])
    assert info.value.code == 2
    assert "'yesterday' is not a date or time" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path), "--out", str(tmp_path / "o")]) == 66
    assert "no dead-letter log" in capsys.readouterr().err


# ---- a standalone cluster on loopback ------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listening on {port}")


@pytest.fixture
def standalone_cluster(tmp_path):
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), PYSPARK_PYTHON=sys.executable)
    port = _free_port()
    master = subprocess.Popen(
        [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(_free_port())],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        _wait_port(port)
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.worker.Worker", url,
             "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
             "--webui-port", str(_free_port())],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield url
    finally:
        for process in (worker, master):
            if process is not None:
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()


def test_standalone_cluster_gives_the_same_output(spark, broker_data, tmp_path,
                                                  standalone_cluster):
    local = tmp_path / "local"
    audit(spark, broker_data, local, "--replay-candidates")
    cluster = tmp_path / "cluster"
    result = subprocess.run(
        [sys.executable, "-m", "spark.audit", "--data-dir", str(broker_data),
         "--out", str(cluster), "--master", standalone_cluster, "--replay-candidates",
         "--quiet", "--conf", "spark.executor.memory=512m"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((local / "summary.json").read_text()) == \
        json.loads((cluster / "summary.json").read_text())
    names = sorted(p.name for p in (local / "tables").glob("*.csv"))
    assert names == sorted(p.name for p in (cluster / "tables").glob("*.csv"))
    for name in names:
        assert (local / "tables" / name).read_text() == (cluster / "tables" / name).read_text()


@pytest.fixture
def connect_server(tmp_path):
    sbin = Path(pyspark.__file__).parent / "sbin"
    port = _free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_PID_DIR=str(tmp_path / "pids"), SPARK_IDENT_STRING="audit-test",
               SPARK_HOME=str(sbin.parent))
    subprocess.run([str(sbin / "start-connect-server.sh"),
                    "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                    "--conf", f"spark.connect.grpc.binding.port={port}",
                    "--conf", "spark.ui.enabled=false"],
                   env=env, check=True, capture_output=True, timeout=60)
    try:
        _wait_port(port)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run([str(sbin / "stop-connect-server.sh")], env=env, capture_output=True,
                       timeout=60)


def test_spark_connect_gives_the_same_output(spark, broker_data, tmp_path, connect_server):
    local = tmp_path / "local"
    audit(spark, broker_data, local)
    remote = tmp_path / "remote"
    result = subprocess.run(
        [sys.executable, "-m", "spark.audit", "--data-dir", str(broker_data),
         "--out", str(remote), "--remote", connect_server, "--quiet"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((local / "summary.json").read_text()) == \
        json.loads((remote / "summary.json").read_text())
    for path in sorted((local / "tables").glob("*.csv")):
        assert path.read_text() == (remote / "tables" / path.name).read_text(), path.name
