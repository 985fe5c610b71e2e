"""The Spark audit on the dead-letter log one broker itself wrote: pika
produces dead letters of every reason and every drop cause, the audit's
numbers are checked exactly against what was produced, a re-run reads
nothing new, the replay file names exactly the messages to move back (and
marks those their queue's TTL expires again), a redriven message that
dies again is not a cycle, the charts count in whole numbers, `--quiet`
is quiet, and a broker without dead letters yet is "0 dead letters".

One SparkSession serves every local run (session-scoped fixture); the fleet,
the standalone cluster and Spark Connect are in test_spark_fleet.py."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread
from policies import ctl

from .spark_runs import (
    audit,
    declare_dlq,
    logged_events,
    pika_channel,
    publish,
    queue_depth,
    read_csv,
    reject_all,
    running_broker,
    wait_depth,
    write_broker_log,
)
from .waiting import wait_for, wait_get

pyspark = pytest.importorskip("pyspark")

from spark import charts, report  # noqa: E402
from spark.audit import main, parser  # noqa: E402
from spark.compact import UNIQUE_COLUMNS  # noqa: E402
from spark.sources import local_sources  # noqa: E402

pytestmark = pytest.mark.spark

EXPECTED = {
    "events": 3 + 2 + 2 + 1 + 4 + 2 + 1,
    "dead_lettered": 3 + 2 + 2 + 1 + 1 + 1,
    "dropped": 4 + 1,
    "by_reason": {"rejected": 3 + 4 + 1, "expired": 2 + 2, "maxlen": 2, "delivery_limit": 1},
    "drops_by_cause": {"no_dlx": 1, "dlx_missing": 1, "no_route": 1, "cycle": 1,
                       "target_full": 1},
    "messages": 3 + 2 + 2 + 1 + 4 + 1 + 1,
    "cycled_messages": 1,
    "died_again_after_redrive": 0,
    "queues": 10,
    "nodes": 1,
}


@pytest.fixture(scope="module")
def broker_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("audit") / "broker-a"
    write_broker_log(path, "broker-a")
    return path


def code_cache(spark) -> tuple[int, int]:
    """The driver JVM's code cache: bytes used, bytes it may grow to."""
    pools = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    usages = [pool.getUsage() for pool in pools
              if pool.getName().startswith(("CodeCache", "CodeHeap"))]
    return sum(u.getUsed() for u in usages), sum(u.getMax() for u in usages)


def test_a_quick_start_session_keeps_room_for_many_queries(spark):
    """C1 alone would shrink the code cache to 48 MB; the suite's one
    session, which runs every audit here, filled it (CI: InternalError,
    no such method MethodHandle.linkToSpecial, in the fleet test)."""
    used, limit = code_cache(spark)
    assert limit >= 240 * 1024 * 1024, (used, limit)


def test_every_reason_and_drop_cause_is_counted_exactly(spark, broker_data, tmp_path):
    (source,), _ = local_sources([str(broker_data)])
    assert len(source.files) == 2
    # The broker names itself in every line (its config's node_name), next
    # to the message's application headers.
    raw = [json.loads(line) for path in source.files
           for line in Path(path).read_text().splitlines()]
    assert len(raw) == EXPECTED["events"] and {e["node"] for e in raw} == {"broker-a"}
    assert all(isinstance(event["headers"], dict) for event in raw)
    summary = audit(spark, broker_data, tmp_path, "--replay-candidates")
    written = json.loads((tmp_path / "summary.json").read_text())
    for key, value in EXPECTED.items():
        assert written[key] == value, key
    assert summary["_run"]["compacted_files"] == 1
    assert written["replay_candidates"] == 2 + 2  # the expired and maxlen ones
    assert written["replay_candidates_expiring_again"] == 2  # quotes has a message TTL

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
    (node,) = read_csv(tables / "by_node.csv")
    assert node["node"] == "broker-a" and node["events"] == str(EXPECTED["events"])
    by_exchange = read_csv(tables / "by_exchange.csv")
    assert sum(int(r["events"]) for r in by_exchange) == written["events"]
    for name in ("over_time", "by_queue_reason", "delivery_counts"):
        assert (tables / f"{name}.csv").exists()
        assert spark.read.parquet(str(tables / f"{name}.parquet")).count() == len(
            read_csv(tables / f"{name}.csv"))
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 4 and "cycling" in page
    assert "Dead-letter audit: 15 dead letters" in page


def test_top_poison_lists_only_messages_that_died_more_than_once(spark, broker_data,
                                                                 tmp_path):
    audit(spark, broker_data, tmp_path)
    (top,) = read_csv(tmp_path / "tables" / "top_poison.csv")
    assert top["message"] == "cycling" and top["deaths"] == "2" and top["events"] == "2"
    assert top["queues"] == "c1; c2" and top["reasons"] == "expired"
    assert top["nodes"] == "broker-a"
    assert "died twice or more" in (tmp_path / "report.html").read_text()


def test_replay_file_names_each_message_and_the_queue_it_waits_in(spark, broker_data,
                                                                   tmp_path):
    audit(spark, broker_data, tmp_path, "--replay-candidates")
    lines = [json.loads(line) for line in
             (tmp_path / "replay-candidates.ndjson").read_text().splitlines()]
    assert sorted(line["message_id"] for line in lines) == [
        "expired-0", "expired-1", "maxlen-0", "maxlen-1"]
    expired = next(line for line in lines if line["message_id"] == "expired-0")
    assert set(expired) == {"node", "vhost", "queue", "message_id", "body_sha256", "died_in",
                            "reason", "exchange", "routing_keys", "time", "expires_again"}
    assert expired["node"] == "broker-a" and expired["vhost"] == "/"
    assert expired["queue"] == "dlq" and expired["died_in"] == "quotes"
    assert expired["reason"] == "expired"
    assert expired["exchange"] == "" and expired["routing_keys"] == ["quotes"]
    assert expired["time"].endswith("+00:00")
    import hashlib
    assert expired["body_sha256"] == hashlib.sha256(b"expired-0").hexdigest()
    table = read_csv(tmp_path / "tables" / "replay_candidates.csv")
    assert {r["message_id"] for r in table} == {line["message_id"] for line in lines}
    # Without the flag, no file from an earlier run is left behind.
    audit(spark, broker_data, tmp_path)
    assert not (tmp_path / "replay-candidates.ndjson").exists()


def test_the_replay_file_drives_the_brokers_redrive(spark, tmp_path):
    """The loop closed on a live broker: three messages expire into a
    dead-letter queue beside a rejected one (not a candidate); the audit
    names the expired ones; once their queue no longer expires them,
    `amqpctl redrive --from-file` moves back exactly those."""
    data_dir = tmp_path / "live"
    with running_broker(data_dir, "live") as broker, pika_channel(broker.url) as ch:
        declare_dlq(ch)
        ch.exchange_declare("shop", "direct")
        ch.queue_declare("quotes", arguments={"x-dead-letter-exchange": "dlx",
                                              "x-message-ttl": 10})
        ch.queue_bind("quotes", "shop", "quote")
        late = [f"late-{n}" for n in range(3)]
        for body in late:
            ch.basic_publish("shop", "quote", body.encode(),
                             pika.BasicProperties(message_id=body))
        ch.queue_declare("orders", arguments={"x-dead-letter-exchange": "dlx"})
        publish(ch, "orders", "bad-order")
        reject_all(ch, "orders", 1)
        wait_depth(ch, "dlq", 4)
        assert wait_for(lambda: logged_events(data_dir) == 4)  # the writer is a process

        audit(spark, data_dir, tmp_path / "out", "--replay-candidates")
        replay = tmp_path / "out" / "replay-candidates.ndjson"
        lines = [json.loads(line) for line in replay.read_text().splitlines()]
        assert sorted(line["message_id"] for line in lines) == late
        assert {(line["queue"], line["exchange"], tuple(line["routing_keys"]))
                for line in lines} == {("dlq", "shop", ("quote",))}

        ch.queue_delete("quotes")
        ch.queue_declare("quotes")
        ch.queue_bind("quotes", "shop", "quote")
        assert ctl.main(["--port", str(broker.management_port), "redrive",
                         "--from-file", str(replay)]) == 0
        assert sorted(wait_get(ch, "quotes")[2] for _ in late) == [b.encode() for b in late]
        assert queue_depth(ch, "dlq") == 1 and wait_get(ch, "dlq")[2] == b"bad-order"


def test_rerun_reads_only_what_is_new_and_counts_nothing_twice(spark, broker_data, tmp_path):
    first = audit(spark, broker_data, tmp_path / "a")
    again = audit(spark, broker_data, tmp_path / "b")
    assert again["_run"]["compacted_files"] == 0
    assert {k: v for k, v in first.items() if k != "_run"} == \
        {k: v for k, v in again.items() if k != "_run"}
    assert (broker_data / "dead-letters-parquet" / "events" / "node=broker-a").is_dir()


def test_compaction_keeps_dictionaries_for_repeating_values_only(spark, broker_data, tmp_path):
    """Per-message values (ids, bodies, property values) are written plain:
    a dictionary of them outgrows its page and is thrown away.  Nested
    columns are named by their Parquet path, which the writer must accept."""
    pq = pytest.importorskip("pyarrow.parquet")
    audit(spark, broker_data, tmp_path / "out")
    written = next((broker_data / "dead-letters-parquet" / "events").rglob("*.parquet"))
    row_group = pq.ParquetFile(written).metadata.row_group(0)
    dictionary = {row_group.column(n).path_in_schema: row_group.column(n).has_dictionary_page
                  for n in range(row_group.num_columns)}
    assert dictionary["queue"] and dictionary["reason"] and dictionary["properties.key_value.key"]
    for column in UNIQUE_COLUMNS:
        assert dictionary[column] is False, column


def test_filters(spark, broker_data, tmp_path):
    only_orders = audit(spark, broker_data, tmp_path / "q", "--queue", "orders")
    assert only_orders["events"] == 4 and only_orders["by_reason"]["rejected"] == 4
    other_vhost = audit(spark, broker_data, tmp_path / "v", "--vhost", "other")
    assert other_vhost["events"] == 0
    assert other_vhost["notes"] == ["0 dead letters match the filters"]
    assert audit(spark, broker_data, tmp_path / "n", "--node", "broker-a")["events"] == 15
    window = audit(spark, broker_data, tmp_path / "w", "--since", "2000-01-01",
                   "--until", "2000-01-02")
    assert window["events"] == 0


def test_a_broker_that_has_not_dead_lettered_yet_is_zero_dead_letters(spark, tmp_path):
    fresh = tmp_path / "fresh"
    with running_broker(fresh, "fresh"):
        pass
    assert not (fresh / "dead-letters").exists()
    summary = audit(spark, fresh, tmp_path / "out")
    assert summary["events"] == 0 and summary["messages"] == 0
    assert any("no dead letters yet" in note for note in summary["notes"])
    assert "0 dead letters" in (tmp_path / "out" / "report.html").read_text()
    assert read_csv(tmp_path / "out" / "tables" / "by_queue_reason.csv") == []


def test_logs_from_before_the_node_field_take_their_data_directory_name(spark, broker_data,
                                                                        tmp_path):
    legacy = tmp_path / "legacy-broker"
    shutil.copytree(broker_data / "dead-letters", legacy / "dead-letters")
    for path in (legacy / "dead-letters").iterdir():
        events = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({k: v for k, v in event.items() if k != "node"})
                                + "\n" for event in events))
    summary = audit(spark, legacy, tmp_path / "out")
    assert summary["events"] == EXPECTED["events"]
    (node,) = read_csv(tmp_path / "out" / "tables" / "by_node.csv")
    assert node["node"] == "legacy-broker"
    assert (legacy / "dead-letters-parquet" / "events" / "node=legacy-broker").is_dir()


def test_bad_input_gets_clear_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        parser().parse_args(["--data-dir", "x", "--out", "y", "--since", "yesterday"])
    assert info.value.code == 2
    assert "'yesterday' is not a date or time" in capsys.readouterr().err
    missing = tmp_path / "no-such-dir"
    assert main(["--data-dir", str(missing), "--out", str(tmp_path / "o"), "--quiet"]) == 66
    assert f"no such data directory: {missing}" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path / "nothing-*"), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 66
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    assert main(["--data-dir", str(tmp_path / "one"), "--data-dir", str(tmp_path / "two"),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "give --parquet-dir" in capsys.readouterr().err


def test_only_candidates_their_queues_ttl_expired_are_marked_to_expire_again(spark, tmp_path):
    """x-death keeps a message's own expiration (original-expiration) and
    the dead letter loses it, so a redriven copy does not expire by it
    again; a queue's TTL stays with the queue and expires the copy again."""
    data_dir = tmp_path / "ttl"
    with running_broker(data_dir, "ttl") as broker, pika_channel(broker.url) as ch:
        declare_dlq(ch)
        ch.queue_declare("quotes", arguments={"x-dead-letter-exchange": "dlx",
                                              "x-message-ttl": 10})
        publish(ch, "quotes", "queue-ttl")
        ch.queue_declare("offers", arguments={"x-dead-letter-exchange": "dlx"})
        publish(ch, "offers", "own-ttl", expiration="10")
        wait_depth(ch, "dlq", 2)
        assert wait_for(lambda: logged_events(data_dir) == 2)  # the writer is a process
        summary = audit(spark, data_dir, tmp_path / "out", "--replay-candidates")

    out = tmp_path / "out"
    table = read_csv(out / "tables" / "replay_candidates.csv")
    assert {row["message_id"]: row["expires_again"] for row in table} == {
        "queue-ttl": "true", "own-ttl": "false"}
    lines = [json.loads(line) for line in (out / "replay-candidates.ndjson").read_text()
             .splitlines()]
    assert {line["message_id"]: line["expires_again"] for line in lines} == {
        "queue-ttl": True, "own-ttl": False}
    assert summary["replay_candidates"] == 2
    assert summary["replay_candidates_expiring_again"] == 1
    (note,) = summary["notes"]
    assert note.startswith("replay candidates that expired by their queue's own TTL")
    assert html.escape(note) in (out / "report.html").read_text()


def test_a_message_redriven_that_dies_again_is_told_from_a_cycle(spark, tmp_path):
    """Both die again in a queue they died in before, for the same reason
    (x-death counts 2 there): one because an operator sent it back
    (`amqpctl redrive`, which counts itself on the message), the other
    because the dead-letter exchanges brought it back.  Only the second
    cycled; the first died again after a redrive."""
    data_dir = tmp_path / "redrive"
    with running_broker(data_dir, "redrive") as broker, pika_channel(broker.url) as ch:
        declare_dlq(ch)
        ch.queue_declare("orders", arguments={"x-dead-letter-exchange": "dlx"})
        publish(ch, "orders", "redriven")
        reject_all(ch, "orders", 1)
        wait_depth(ch, "dlq", 1)
        assert ctl.main(["--port", str(broker.management_port), "redrive", "dlq"]) == 0
        wait_depth(ch, "orders", 1)
        method, props, _ = ch.basic_get("orders")
        assert props.headers["x-redrive-count"] == 1
        assert props.headers["x-death"][0]["count"] == 1
        ch.basic_reject(method.delivery_tag, requeue=False)
        wait_depth(ch, "dlq", 1)

        for queue, back_to in (("work", "retry"), ("retry", "work")):
            ch.exchange_declare(f"to-{back_to}", "fanout")
            ch.queue_declare(queue, arguments={"x-dead-letter-exchange": f"to-{back_to}"})
        for queue in ("work", "retry"):
            ch.queue_bind(queue, f"to-{queue}")
        publish(ch, "work", "looped")
        for queue in ("work", "retry", "work"):
            wait_depth(ch, queue, 1)
            reject_all(ch, queue, 1)
        assert wait_for(lambda: logged_events(data_dir) == 2 + 3)
        summary = audit(spark, data_dir, tmp_path / "out")

    assert (summary["died_again_after_redrive"], summary["cycled_messages"]) == (1, 1)
    cycles = read_csv(tmp_path / "out" / "tables" / "cycles.csv")
    assert {row["message"] for row in cycles} == {"looped"}
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<div>died again after a redrive<b>1</b></div>" in page
    assert "died again after a redrive" in report.terminal_summary(summary, tmp_path)


def test_count_axes_tick_whole_numbers_only(spark, broker_data, tmp_path, monkeypatch):
    """A few dead letters per queue gave ticks at 0.5, 2.5...; read from the
    figures the report draws, every chart's count axis (the labelled one)
    ticks whole numbers."""
    counted = []
    draw = charts._png

    def recording(figure):
        axes = figure.axes[0]
        axis = axes.xaxis if axes.get_xlabel() else axes.yaxis
        counted.append((axis.get_label_text(), [float(tick) for tick in axis.get_ticklocs()]))
        return draw(figure)

    monkeypatch.setattr(charts, "_png", recording)
    audit(spark, broker_data, tmp_path)
    assert len(counted) == 5
    assert {label for label, _ in counted} == {"dead letters", "dropped"}
    for label, ticks in counted:
        assert ticks and all(tick.is_integer() for tick in ticks), (label, ticks)


# Spark's log lines (log4j's pattern, or its JSON layout) and log4j's own.
JVM_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d [A-Z]+ |log4j|\"logger\":",
                          re.MULTILINE)


def test_quiet_prints_nothing_of_the_jvms_start(broker_data, tmp_path):
    """Spark's launcher always adds an incubator module, which Java announces
    on stderr before any log setting applies; Spark's log is kept to errors."""
    data_dir = tmp_path / "copy"
    shutil.copytree(broker_data / "dead-letters", data_dir / "dead-letters")
    result = subprocess.run(
        [sys.executable, "-m", "spark.audit", "--data-dir", str(data_dir),
         "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == ""
    assert "Using incubator modules" not in result.stderr
    assert not JVM_LOG_LINE.search(result.stderr), result.stderr
    assert (tmp_path / "out" / "report.html").exists()


def _slowly(n: int) -> int:
    import time  # in Spark's Python worker

    time.sleep(0.3)
    return n


def test_a_long_stage_says_how_far_sparks_jobs_are(spark, capsys, monkeypatch):
    """A stage of the audit ran a minute without a word on a busy machine:
    while Spark works, a line says how many of its jobs are done and where
    the running one is."""
    from spark import progress as progress_module

    monkeypatch.setattr(progress_module, "QUIET_SECONDS", 0.0)
    monkeypatch.setattr(progress_module, "POLL_SECONDS", 0.05)
    progress = progress_module.Progress()
    progress.follow(spark)
    try:
        progress("aggregating the events")
        rows = spark.sparkContext.parallelize(range(8), 8).map(_slowly).collect()
    finally:
        progress.unfollow()
    assert rows == list(range(8))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("] aggregating the events")
    inside = [line for line in lines[1:] if "Spark job" in line]
    assert inside and all(re.search(r"\] {3}0 Spark jobs done, the running one at [0-8] of 8 "
                                    r"tasks$", line) for line in inside), lines


SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"


def test_a_dataset_compacted_before_redrives_were_counted_reads_as_before(
        spark, broker_data, tmp_path):
    """Parquet files an earlier version compacted have no `redrives`
    column: no redrive recorded itself then, so none is counted."""
    pq = pytest.importorskip("pyarrow.parquet")
    data_dir = tmp_path / "older"
    shutil.copytree(broker_data / "dead-letters", data_dir / "dead-letters")
    first = audit(spark, data_dir, tmp_path / "a")
    files = list((data_dir / "dead-letters-parquet" / "events").rglob("*.parquet"))
    assert files
    for path in files:
        table = pq.ParquetFile(path).read()
        metadata = dict(table.schema.metadata)
        spark_schema = json.loads(metadata[SPARK_ROW_METADATA])
        spark_schema["fields"] = [field for field in spark_schema["fields"]
                                  if field["name"] != "redrives"]
        metadata[SPARK_ROW_METADATA] = json.dumps(spark_schema).encode()
        pq.write_table(table.drop_columns(["redrives"]).replace_schema_metadata(metadata),
                       path)
        (path.parent / f".{path.name}.crc").unlink()  # Hadoop's checksum of the old file
    again = audit(spark, data_dir, tmp_path / "b")
    assert again["_run"]["compacted_files"] == 0
    assert {k: v for k, v in first.items() if k != "_run"} == \
        {k: v for k, v in again.items() if k != "_run"}


def test_count_headers_a_publisher_set_to_text_count_nothing(spark, tmp_path):
    """x-redrive-count and x-delivery-count are the broker's, but a publisher
    may send anything under those names: text is no count, and fails no
    audit (Spark's ANSI cast would)."""
    data_dir = tmp_path / "odd"
    with running_broker(data_dir, "odd") as broker, pika_channel(broker.url) as ch:
        declare_dlq(ch)
        ch.queue_declare("orders", arguments={"x-dead-letter-exchange": "dlx"})
        publish(ch, "orders", "odd", headers={"x-redrive-count": "often",
                                              "x-delivery-count": "many"})
        reject_all(ch, "orders", 1)
        assert wait_for(lambda: logged_events(data_dir) == 1)
        summary = audit(spark, data_dir, tmp_path / "out")
    assert (summary["events"], summary["died_again_after_redrive"]) == (1, 0)
    (row,) = read_csv(tmp_path / "out" / "tables" / "delivery_counts.csv")
    assert row["delivery_count"] == ""


def test_the_audit_reads_what_retention_archived_as_it_is_and_counts_it_apart(spark, tmp_path):
    """Dead letters archived by retention are read from the archive's
    Parquet files as they are, never compacted (they are Parquet of the
    audit's schema already); they are counted as archived, not as deaths,
    once each though the log records their removal too."""
    data_dir = tmp_path / "broker-r"
    _archived_by_retention(data_dir, ["kept-0", "kept-1"], content_type="text/plain",
                           headers={"tenant": "acme"})
    (source,), _ = local_sources([str(data_dir)])
    assert len(source.archived) == 1 and source.archived[0].endswith(".parquet")
    assert not set(source.sealed) & set(source.archived)
    summary = audit(spark, data_dir, tmp_path / "out")
    assert summary["events"] == 2  # the two deaths
    assert summary["archived"] == 2
    checkpoint = data_dir / "dead-letters-parquet" / "checkpoint"
    named = "".join(path.read_text() for path in checkpoint.glob("*") if path.is_file()) \
        if checkpoint.exists() else ""
    assert "archive-" not in named  # never compacted
    again = audit(spark, data_dir, tmp_path / "again")
    assert (again["events"], again["archived"]) == (2, 2)


def _archived_by_retention(data_dir, bodies: list[str], **props) -> None:
    """A broker on `data_dir` rejects a message of each body (its message
    id the body) into a DLQ whose retention archives them."""
    config = BrokerConfig(port=0, management_port=0, node_name="broker-r")
    with BrokerThread(config, data_dir=str(data_dir)) as broker:
        with pika_channel(broker.url) as channel:
            channel.exchange_declare("r.dlx", "fanout")
            channel.queue_declare("r.dlq", durable=True,
                                  arguments={"x-dead-letter-retention": 300})
            channel.queue_bind("r.dlq", "r.dlx")
            channel.queue_declare("r.work", arguments={"x-dead-letter-exchange": "r.dlx"})
            for body in bodies:
                publish(channel, "r.work", body, delivery_mode=2, **props)
            reject_all(channel, "r.work", len(bodies))
            assert wait_for(lambda: broker.call(
                lambda: broker.broker.archiver.archived) == len(bodies), 15)


def _archive_three_alike(data_dir) -> None:
    """Three dead letters of one body and one message id, archived by
    retention in one batch (which gives them one time)."""
    _archived_by_retention(data_dir, ['{"ping": 1}'] * 3)


def test_archived_dead_letters_alike_count_once_each(spark, tmp_path):
    # They were counted as one: their records and the log's lines share
    # queue, time, message id and body.
    data_dir = tmp_path / "broker-r"
    _archive_three_alike(data_dir)
    summary = audit(spark, data_dir, tmp_path / "out")
    assert (summary["events"], summary["archived"]) == (3, 3)


def test_a_damaged_archive_file_is_skipped_and_the_audit_goes_on(spark, tmp_path):
    data_dir = tmp_path / "broker-r"
    _archive_three_alike(data_dir)
    (good,) = (data_dir / "dead-letter-archive").glob("node=*/day=*/archive-*.parquet")
    damaged = good.parent / "archive-20000101T000000-1-1.parquet"
    damaged.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    summary = audit(spark, data_dir, tmp_path / "out")
    assert (summary["events"], summary["archived"]) == (3, 3)


def test_an_archive_file_read_by_spark_holds_body_properties_and_whole_death_history(
        spark, tmp_path):
    """A message rejected twice, then retained: its archive file, read by
    Spark with the audit's schema (and without one: the content header is
    there too), holds its body, properties, headers and its whole x-death
    history: queue, reason, count 2, exchange, routing keys."""
    from spark.schema import EVENT_SCHEMA

    data_dir = tmp_path / "broker-t"
    config = BrokerConfig(port=0, management_port=0, node_name="broker-t")
    with BrokerThread(config, data_dir=str(data_dir)) as broker:
        with pika_channel(broker.url) as channel:
            channel.exchange_declare("t.in", "direct")
            channel.exchange_declare("t.dlx", "fanout")
            channel.queue_declare("t.work", arguments={"x-dead-letter-exchange": "t.dlx"})
            channel.queue_bind("t.work", "t.in", "order.created")
            channel.queue_bind("t.work", "t.dlx")  # the first rejection comes back
            channel.basic_publish("t.in", "order.created", b"poison", pika.BasicProperties(
                message_id="twice", content_type="text/plain", delivery_mode=2,
                headers={"tenant": "acme"}))
            reject_all(channel, "t.work", 1)
            channel.queue_unbind("t.work", "t.dlx")
            channel.queue_declare("t.dlq", durable=True,
                                  arguments={"x-dead-letter-retention": 300})
            channel.queue_bind("t.dlq", "t.dlx")
            assert wait_for(lambda: queue_depth(channel, "t.work") == 1)
            reject_all(channel, "t.work", 1)
            assert wait_for(lambda: broker.call(
                lambda: broker.broker.archiver.archived) == 1, 15)
    (source,), _ = local_sources([str(data_dir)])
    (path,) = source.archived
    assert "/node=broker-t/day=" in path
    (row,) = spark.read.schema(EVENT_SCHEMA).parquet(path).collect()
    assert (row.outcome, row.vhost, row.queue, row.reason) == (
        "archived", "/", "t.dlq", "rejected")
    assert row.message_id == "twice" and row.node == "broker-t"
    assert row.body_included and row.body == "cG9pc29u"  # base64 of poison
    assert row.body_size == 6
    assert json.loads(row.properties["content_type"]) == "text/plain"
    assert json.loads(row.properties["delivery_mode"]) == 2
    assert json.loads(row.headers["tenant"]) == "acme"
    assert "x-death" not in row.headers  # the history is `deaths`
    (death,) = row.deaths
    assert (death.queue, death.reason, death["count"], death.exchange,
            list(death.routing_keys)) == ("t.work", "rejected", 2, "t.in", ["order.created"])
    assert death.time > 0
    assert (row.first_death_queue, row.first_death_reason, row.first_death_exchange) == (
        "t.work", "rejected", "t.in")
    full = spark.read.parquet(path)
    assert dict(full.dtypes)["content_header"] == "binary"
    assert bytes(full.collect()[0].content_header)[:2] == b"\x00\x3c"  # class basic
