"""The Spark audit reads the dead letters a stream holds like the
dead-letter log (issue 30), on data a broker wrote: dead letters routed by a
dead-letter exchange into two streams are counted once with their reasons
and queues, whether the log holds their lines or not, and two alike
messages that died alike stay two."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from policies import ctl

from .spark_runs import (
    audit,
    logged_events,
    pika_channel,
    publish,
    queue_depth,
    read_csv,
    reject_all,
    running_broker,
)
from .waiting import wait_for

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")


STREAM = {"x-queue-type": "stream"}
STREAMS = ("dead.stream", "dead.copy")


def stream_length(channel, name: str) -> int:
    return channel.queue_declare(name, durable=True, arguments=STREAM,
                                 passive=True).method.message_count


def wait_stream(channel, name: str, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while stream_length(channel, name) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stream_length(channel, name) == count, name


def dead_letters_into_streams(url: str) -> None:
    """orders: 3 rejected, and twice a message with one id and body
    rejected (two deaths alike in every field the audit compares); quotes:
    2 expired.  The fanout dead-letter exchange copies each into both
    streams; one message is published into a stream directly (no death)."""
    with pika_channel(url) as ch:
        ch.exchange_declare("dlx", "fanout", durable=True)
        for name in STREAMS:
            ch.queue_declare(name, durable=True, arguments=STREAM)
            ch.queue_bind(name, "dlx")
        ch.confirm_delivery()
        publish(ch, STREAMS[0], "not-dead")
        ch.queue_declare("orders", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
        for n in range(3):
            publish(ch, "orders", f"rejected-{n}")
        publish(ch, "orders", "twin")
        publish(ch, "orders", "twin")
        reject_all(ch, "orders", 5)
        ch.queue_declare("quotes", durable=True, arguments={"x-dead-letter-exchange": "dlx",
                                                            "x-message-ttl": 10})
        for n in range(2):
            publish(ch, "quotes", f"expired-{n}")
        wait_stream(ch, STREAMS[0], 1 + 7)
        wait_stream(ch, STREAMS[1], 7)


@pytest.fixture(scope="module")
def stream_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("stream-audit") / "broker-s"
    with running_broker(path, "broker-s") as broker:
        dead_letters_into_streams(broker.url)
    return path


def logged(data_dir: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((data_dir / "dead-letters").glob("*.ndjson"))
            for line in path.read_text().splitlines()]


def per_queue(out: Path) -> dict[tuple[str, str], int]:
    return {(row["queue"], reason): int(row[reason])
            for row in read_csv(out / "tables" / "reasons_per_queue.csv")
            for reason in ("rejected", "expired", "maxlen", "delivery_limit")
            if int(row[reason] or 0)}


EXPECTED_QUEUES = {("orders", "rejected"): 5, ("quotes", "expired"): 2}
BY_REASON = {"rejected": 5, "expired": 2, "maxlen": 0, "delivery_limit": 0}


def test_dead_letters_in_the_log_and_in_two_streams_are_counted_once(spark, stream_data,
                                                                     tmp_path):
    lines = logged(stream_data)
    assert len(lines) == 7 and all(set(line["target_queues"]) == set(STREAMS)
                                   for line in lines)
    summary = audit(spark, stream_data, tmp_path / "out", "--parquet-dir",
                    str(tmp_path / "dataset"))
    assert summary["events"] == 7
    assert summary["by_reason"] == BY_REASON
    assert per_queue(tmp_path / "out") == EXPECTED_QUEUES
    # Matched to the log's lines: every event is the log's, with its node.
    (node,) = read_csv(tmp_path / "out" / "tables" / "by_node.csv")
    assert node["node"] == "broker-s" and node["events"] == "7"


def test_dead_letters_only_a_stream_still_holds_are_counted_from_it(spark, stream_data,
                                                                    tmp_path):
    # The log's retention removed every line: the streams still hold them.
    copy = tmp_path / "broker-s"
    shutil.copytree(stream_data, copy)
    shutil.rmtree(copy / "dead-letters")
    summary = audit(spark, copy, tmp_path / "out", "--no-compact")
    assert summary["events"] == 7
    assert summary["by_reason"] == BY_REASON
    assert per_queue(tmp_path / "out") == EXPECTED_QUEUES
    # The stream knows no node: the data directory's name stands for it.
    (node,) = read_csv(tmp_path / "out" / "tables" / "by_node.csv")
    assert node["node"] == "broker-s" and node["events"] == "7"
    drops = read_csv(tmp_path / "out" / "tables" / "drops.csv")
    assert drops == []
    # Not said to have no dead letters: its streams hold them.
    assert not any("no dead letters yet" in note for note in summary["notes"])


def test_a_data_directory_named_with_a_globs_characters_has_its_streams_read(
        spark, stream_data, tmp_path):
    copy = tmp_path / "fleet" / "broker[s]"
    shutil.copytree(stream_data, copy)
    shutil.rmtree(copy / "dead-letters")
    found = audit(spark, str(tmp_path / "fleet" / "broker*"), tmp_path / "out", "--no-compact")
    named = audit(spark, str(copy), tmp_path / "out2", "--no-compact")
    assert found["events"] == named["events"] == 7


def test_a_log_missing_some_lines_is_completed_from_the_stream(spark, stream_data, tmp_path):
    # Half the lines gone (one twin among them): the others come from the stream.
    copy = tmp_path / "broker-s"
    shutil.copytree(stream_data, copy)
    lines = logged(stream_data)
    twin = next(index for index, line in enumerate(lines) if line["message_id"] == "twin")
    kept = [line for index, line in enumerate(lines)
            if index != twin and line["message_id"] not in ("rejected-0", "expired-1")]
    assert len(kept) == 4
    shutil.rmtree(copy / "dead-letters")
    (copy / "dead-letters").mkdir()
    (copy / "dead-letters" / "dead-letters-00000000T000000-1-000001.ndjson").write_text(
        "".join(json.dumps(line) + "\n" for line in kept))
    summary = audit(spark, copy, tmp_path / "out", "--no-compact")
    assert summary["events"] == 7
    assert per_queue(tmp_path / "out") == EXPECTED_QUEUES


def test_a_local_segment_is_decoded_in_chunks_as_it_is_whole(tmp_path, monkeypatch):
    from amqp_server.storage import records
    from spark import stream_dead_letters

    data = b"".join(records.encode(["S", n, 1000.0, b"\x00\x00", b"h" * n, b"b" * (n * 7)])
                    for n in range(40))
    path = tmp_path / "00000001.seg"
    path.write_bytes(data + data[:9])  # and a torn tail, as a segment being written
    whole, _problems, _end = records.decode_all(data)
    monkeypatch.setattr(stream_dead_letters, "READ_CHUNK", 13)
    assert list(stream_dead_letters._file_records(str(path))) == whole
    assert list(stream_dead_letters._file_records(str(tmp_path / "gone.seg"))) == []


def test_a_uri_data_directory_has_its_segments_read_through_spark(spark, stream_data):
    from spark.schema import EVENTS_SCHEMA
    from spark.sources import LogSource
    from spark.stream_dead_letters import counted_once, read_stream_events

    copies = read_stream_events(spark, [LogSource(stream_data.as_uri(), ())])
    assert copies is not None
    rows = copies.select("vhost", "queue", "reason", "target_queues", "node").collect()
    assert len(rows) == 2 * 7  # each death, in each of the two streams
    assert {row.target_queues[0] for row in rows} == set(STREAMS)
    assert {row.node for row in rows} == {"broker-s"}
    nothing = spark.createDataFrame([], EVENTS_SCHEMA)
    assert counted_once(nothing, copies).count() == 7
    assert read_stream_events(spark, [LogSource((stream_data / "nowhere").as_uri(), ())]) is None


def test_through_spark_connect_the_streams_dead_letters_count_the_same(stream_data, tmp_path,
                                                                       connect_server):
    """The job stays DataFrame API only (the segments decoded by the
    audit's own process): a Spark Connect server's executors need no
    package of ours."""
    from .spark_runs import run_command

    copy = tmp_path / "broker-s"
    shutil.copytree(stream_data, copy)
    shutil.rmtree(copy / "dead-letters")
    run_command("--data-dir", str(copy), "--out", str(tmp_path / "remote"), "--no-compact",
                "--remote", connect_server)
    summary = json.loads((tmp_path / "remote" / "summary.json").read_text())
    assert summary["events"] == 7 and summary["by_reason"] == BY_REASON
    assert per_queue(tmp_path / "remote") == EXPECTED_QUEUES


def test_replay_candidates_a_stream_holds_are_redriven_from_the_file(spark, tmp_path):
    # The replay file names the stream as their queue; amqpctl's redrive
    # of it was refused (a stream took offsets or a filter only).
    data_dir = tmp_path / "live"
    with running_broker(data_dir, "live") as broker, pika_channel(broker.url) as ch:
        ch.exchange_declare("dlx", "fanout", durable=True)
        ch.queue_declare("dead.stream", durable=True, arguments=STREAM)
        ch.queue_bind("dead.stream", "dlx")
        ch.queue_declare("quotes", durable=True,
                         arguments={"x-dead-letter-exchange": "dlx", "x-message-ttl": 10})
        for n in range(2):
            publish(ch, "quotes", f"late-{n}")
        assert wait_for(lambda: logged_events(data_dir) == 2)
        audit(spark, data_dir, tmp_path / "out", "--replay-candidates")
        replay = tmp_path / "out" / "replay-candidates.ndjson"
        lines = [json.loads(line) for line in replay.read_text().splitlines()]
        assert {line["queue"] for line in lines} == {"dead.stream"} and len(lines) == 2
        ch.queue_delete("quotes")  # back to a queue that keeps them
        ch.queue_declare("quotes", durable=True)
        code = ctl.main(["--port", str(broker.management_port), "redrive",
                         "--from-file", str(replay)])
        assert code == 0
        assert wait_for(lambda: queue_depth(ch, "quotes") == 2)
        # Again: both left as redriven before, none sent twice.
        assert ctl.main(["--port", str(broker.management_port), "redrive",
                         "--from-file", str(replay)]) == 0
        assert queue_depth(ch, "quotes") == 2
