"""The audit of a fleet: three brokers (distinct node_name) dead-letter real
messages through pika; one audit reads their logs given as a path, a glob
and a file:// URI, with the compacted dataset behind a URI; every table can
be split by node; compaction is incremental broker by broker; and a
standalone cluster (a master and two workers on loopback) and Spark Connect
give the same files as local mode."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from .spark_runs import (
    audit,
    declare_dlq,
    free_port,
    pika_channel,
    publish,
    read_csv,
    reject_all,
    reject_once_more,
    run_command,
    running_broker,
    stop_all,
    wait_depth,
    wait_port,
    write_broker_log,
)

pyspark = pytest.importorskip("pyspark")

from spark.session import HEAVY_SQL_CONF  # noqa: E402

pytestmark = pytest.mark.spark

NODES = ("broker-a", "broker-b", "broker-c")


def publish_three(channel, queue: str, arguments: dict, prefix: str) -> None:
    """Declares `queue` with these arguments and publishes prefix-0..2 to it."""
    channel.queue_declare(queue, arguments=arguments)
    for n in range(3):
        publish(channel, queue, f"{prefix}-{n}")


def produce_poison_and_expiry(url: str) -> None:
    """broker-b: a message rejected in `work`, then in `retry`, then in
    `work` again (three deaths: poison), and three that expire in `slow`
    and wait in `parked` (replay candidates)."""
    with pika_channel(url) as ch:
        for queue, back_to in (("work", "retry"), ("retry", "work")):
            ch.exchange_declare(f"to-{back_to}", "fanout")
            ch.queue_declare(queue, arguments={"x-dead-letter-exchange": f"to-{back_to}"})
        for queue in ("work", "retry"):
            ch.queue_bind(queue, f"to-{queue}")
        publish(ch, "work", "poison-b")
        for queue in ("work", "retry", "work"):
            wait_depth(ch, queue, 1)
            reject_all(ch, queue, 1)
        ch.exchange_declare("parking", "fanout")
        ch.queue_declare("parked")
        ch.queue_bind("parked", "parking")
        publish_three(ch, "slow", {"x-dead-letter-exchange": "parking", "x-message-ttl": 10},
                      "expired-b")
        wait_depth(ch, "parked", 3)


def produce_overflow(url: str) -> None:
    """broker-c: two messages pushed out of a queue of one (maxlen)."""
    with pika_channel(url) as ch:
        declare_dlq(ch)
        publish_three(ch, "bounded", {"x-dead-letter-exchange": "dlx", "x-max-length": 1},
                      "maxlen-c")
        wait_depth(ch, "dlq", 2)


def write_fleet(root: Path) -> None:
    write_broker_log(root / "broker-a", "broker-a")
    for node, produce in (("broker-b", produce_poison_and_expiry),
                          ("broker-c", produce_overflow)):
        with running_broker(root / node, node) as broker:
            produce(broker.url)
        with running_broker(root / node, node) as broker:  # seals the first file
            reject_once_more(broker.url, f"after-restart-{node}")


EVENTS = {"broker-a": 15, "broker-b": 3 + 3 + 1, "broker-c": 2 + 1}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    write_fleet(root)
    return root


def fleet_args(root: Path) -> list[str]:
    """The three brokers, spelled three ways."""
    return ["--data-dir", str(root / "broker-a"), "--data-dir", str(root / "broker-[b]"),
            "--data-dir", (root / "broker-c").as_uri()]


def fleet_audit(spark, root: Path, out: Path, parquet_dir: str, *extra: str) -> dict:
    from spark.audit import parser
    from spark.job import run
    return run(spark, parser().parse_args(
        [*fleet_args(root), "--parquet-dir", parquet_dir, "--out", str(out), *extra]))


def test_one_audit_reads_every_broker_and_splits_by_node(spark, fleet, tmp_path):
    parquet_dir = (tmp_path / "shared").as_uri()
    summary = fleet_audit(spark, fleet, tmp_path / "out", parquet_dir, "--replay-candidates")
    assert summary["nodes"] == 3 and summary["events"] == sum(EVENTS.values())
    assert summary["_run"]["compacted_files"] == 3  # one sealed file per broker
    by_node = {row["node"]: int(row["events"])
               for row in read_csv(tmp_path / "out" / "tables" / "by_node.csv")}
    assert by_node == EVENTS
    events = tmp_path / "shared" / "events"
    assert sorted(p.name for p in events.glob("node=*")) == [f"node={n}" for n in NODES]
    assert all(any(p.name.startswith("day=") for p in (events / f"node={n}").iterdir())
               for n in NODES)
    top = read_csv(tmp_path / "out" / "tables" / "top_poison.csv")
    assert [(r["message"], r["deaths"], r["nodes"]) for r in top] == [
        ("poison-b", "3", "broker-b"), ("cycling", "2", "broker-a")]
    replay = [json.loads(line) for line in
              (tmp_path / "out" / "replay-candidates.ndjson").read_text().splitlines()]
    parked = [line for line in replay if line["node"] == "broker-b"]
    assert sorted(line["message_id"] for line in parked) == [
        "expired-b-0", "expired-b-1", "expired-b-2"]
    assert {(line["queue"], line["died_in"], line["reason"]) for line in parked} == {
        ("parked", "slow", "expired")}
    assert {line["node"] for line in replay} == set(NODES)  # expired and maxlen on a, c


def test_every_table_can_be_split_by_node(spark, fleet, tmp_path):
    fleet_audit(spark, fleet, tmp_path / "out", str(tmp_path / "pq"), "--by-node",
                "--replay-candidates")
    tables = tmp_path / "out" / "tables"
    for path in tables.glob("*.csv"):
        with open(path) as handle:
            header = handle.readline().strip().split(",")
        assert "node" in header, path.name
        if path.stem not in ("replay_candidates", "top_poison"):
            assert header[0] == "node", path.name
    queues = read_csv(tables / "by_queue_reason.csv")
    assert {(r["node"], r["queue"]) for r in queues if r["queue"] == "orders"} == {
        ("broker-a", "orders"), ("broker-b", "orders"), ("broker-c", "orders")}


def test_compaction_is_incremental_per_broker(spark, fleet, tmp_path):
    root = tmp_path / "fleet"
    shutil.copytree(fleet, root)
    parquet_dir = str(tmp_path / "pq")
    first = fleet_audit(spark, root, tmp_path / "one", parquet_dir)
    assert first["_run"]["compacted_files"] == 3
    with running_broker(root / "broker-b", "broker-b") as broker:  # seals one more file
        reject_once_more(broker.url, "later-b")
    again = fleet_audit(spark, root, tmp_path / "two", parquet_dir)
    assert again["_run"]["compacted_files"] == 1
    assert again["events"] == first["events"] + 1
    by_node = {row["node"]: int(row["events"])
               for row in read_csv(tmp_path / "two" / "tables" / "by_node.csv")}
    assert by_node == dict(EVENTS, **{"broker-b": EVENTS["broker-b"] + 1})
    # An audit of one broker reads only its rows of the shared dataset.
    alone = audit(spark, root / "broker-c", tmp_path / "c", "--parquet-dir", parquet_dir)
    assert alone["events"] == EVENTS["broker-c"] and alone["_run"]["compacted_files"] == 0


# ---- the same answer on a cluster --------------------------------------------------

@pytest.fixture
def standalone_cluster(tmp_path):
    """A master and two workers (one core, 1 GB each) on loopback."""
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), PYSPARK_PYTHON=sys.executable)
    port = free_port()
    started = [subprocess.Popen(
        [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(free_port())],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        wait_port(port)
        url = f"spark://127.0.0.1:{port}"
        for _ in range(2):
            started.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", url,
                 "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                 "--webui-port", str(free_port())],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield url
    finally:
        stop_all(started)


# Spark's own planning (code generation, adaptive execution), where the
# command plans a small input the light way: the two must agree.
GENERATED_CODE = [arg for key, value in HEAVY_SQL_CONF.items()
                  for arg in ("--conf", f"{key}={value}")]


def assert_same_files(local: Path, other: Path, html: bool = True) -> None:
    names = sorted(p.relative_to(local) for p in local.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file())
    for name in names:
        if name.suffix == ".parquet":
            assert pq.read_table(local / name).to_pylist() == \
                pq.read_table(other / name).to_pylist(), name
        elif name.suffix != ".html" or html:
            assert (local / name).read_bytes() == (other / name).read_bytes(), name


def test_standalone_cluster_gives_the_same_files(spark, fleet, tmp_path, standalone_cluster):
    flags = ["--replay-candidates", "--by-node"]
    fleet_audit(spark, fleet, tmp_path / "local", str(tmp_path / "pq-local"), *flags,
                *GENERATED_CODE)
    run_command(*fleet_args(fleet), "--parquet-dir", str(tmp_path / "pq-cluster"),
                "--out", str(tmp_path / "cluster"), *flags, "--master", standalone_cluster,
                "--conf", "spark.executor.memory=512m")
    assert_same_files(tmp_path / "local", tmp_path / "cluster")
    assert len(list((tmp_path / "pq-cluster" / "events").glob("node=*"))) == 3


def test_spark_connect_gives_the_same_files(spark, fleet, tmp_path, connect_server):
    fleet_audit(spark, fleet, tmp_path / "local", str(tmp_path / "pq-local"),
                "--replay-candidates")
    run_command(*fleet_args(fleet), "--parquet-dir", str(tmp_path / "pq-remote"),
                "--out", str(tmp_path / "remote"), "--replay-candidates",
                "--remote", connect_server)
    assert_same_files(tmp_path / "local", tmp_path / "remote")


async def _dead_letter_on_a_replicated_leader(root: Path) -> None:
    """A leader (node "a") rejects five messages into its dead-letter queue
    while a follower copies everything, its dead-letter events included."""
    import aio_pika

    from .replication_pair import Leader, follower

    leader = Leader(root / "leader")
    await leader.start()
    replica, following = follower(root / "follower")
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        dlx = await channel.declare_exchange("dlx", aio_pika.ExchangeType.FANOUT)
        dlq = await channel.declare_queue("dlq")
        await dlq.bind(dlx)
        work = await channel.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx"})
        for number in range(5):
            await channel.default_exchange.publish(
                aio_pika.Message(f"poison-{number}".encode(), message_id=f"p{number}"),
                routing_key="work")
        for _ in range(5):
            message = await work.get()
            await message.reject(requeue=False)
        await asyncio.sleep(0.3)  # the log's batch is flushed and shipped
        await channel.declare_queue("sync", durable=True)  # a replicated reply: all shipped
        await connection.close()
    finally:
        following.stop()
        await task
        await leader.stop()
        replica.close()


def test_copies_of_a_leaders_dead_letters_on_its_followers_count_once(spark, tmp_path):
    asyncio.run(_dead_letter_on_a_replicated_leader(tmp_path))
    copied = sorted((tmp_path / "follower" / "dead-letters").glob("*.ndjson"))
    assert copied and sum(len(p.read_text().splitlines()) for p in copied) == 5
    summary = audit(spark, [tmp_path / "leader", tmp_path / "follower"], tmp_path / "out",
                    "--no-compact")
    assert summary["events"] == 5
    by_node = {row["node"]: int(row["events"])
               for row in read_csv(tmp_path / "out" / "tables" / "by_node.csv")}
    assert by_node == {"a": 5}  # the node that dead-lettered them, counted once
