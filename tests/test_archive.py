"""Retention's archive without an event loop: the files (storage/archive.py)
and the archiver's decisions carried out in-process (broker/archiving.py)."""

from __future__ import annotations

import json
import shutil
import struct
import sys

import pyarrow.parquet as pq
import pytest

from amqp_server.broker.archiving import RETRY_SECONDS, Archiver, archive_records
from amqp_server.broker.broker import Broker
from amqp_server.broker.message import Message
from amqp_server.broker.queue.census import history_of
from amqp_server.config import BrokerConfig
from amqp_server.storage import archive_parquet
from amqp_server.storage.archive import ArchiveFiles
from amqp_server.storage.dead_letter_lines import event_line, node_member
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable
from dlx.events import DEATH_FIELDS, FIELD_NAMES

DIED = 1_700_000_000  # s


def dead_letter(n: int, died: int = DIED) -> Message:
    death = FieldTable({"queue": "work", "reason": "expired", "count": 1, "time": died,
                        "exchange": "shop", "routing-keys": ["order"]})
    body = f"body {n}".encode()
    header = struct.pack(">HHQ", 60, 0, len(body)) + encode_properties(Properties(
        message_id=f"m{n}", headers=FieldTable({"x-death": [death]})))
    return Message.to("dlx", "order", header, body)


@pytest.fixture
def broker(tmp_path):
    broker = Broker(BrokerConfig(data_dir=str(tmp_path / "data"), node_name="n1"))
    broker.open_data_dir()
    yield broker
    broker.close_data_dir()


def dlq(broker, retention: int = 1000):
    vhost = broker.vhosts["/"]
    vhost.declare_queue("dlq", None, arguments=FieldTable({"x-dead-letter-retention": retention}))
    return vhost.queues["dlq"]


def test_a_batch_is_one_parquet_file_in_its_node_and_day_partition(tmp_path):
    files = ArchiveFiles(tmp_path / "archive")
    files.open()
    path = files.write("node a/b", {"queue": ["q1", "q2"], "body_size": [1, 2]}, 0.0)
    assert path.parent.name == "day=1970-01-01"
    assert path.parent.parent.name == "node=node%20a%2Fb"
    assert path.suffix == ".parquet" and path.read_bytes()[:4] == b"PAR1"
    table = pq.read_table(path)
    assert table.schema.field("deaths").type == archive_parquet.SCHEMA.field("deaths").type
    assert table.column("queue").to_pylist() == ["q1", "q2"]
    assert table.column("body_size").to_pylist() == [1, 2]
    assert files.files() == [path]


def test_the_schema_is_the_dead_letter_events_fields_and_the_content_header():
    assert archive_parquet.SCHEMA.names == [*FIELD_NAMES, "content_header"]
    deaths = archive_parquet.SCHEMA.field("deaths").type.value_type
    assert [field.name for field in deaths] == [name for name, _ in DEATH_FIELDS]
    assert str(archive_parquet.SCHEMA.field("headers").type) == "map<string, string>"


def test_an_archive_record_holds_what_the_dead_letter_log_line_of_the_message_holds():
    """The archive's columns and the log's line are built apart (values
    for Parquet, JSON text for the log) from the same head: equal fields."""
    message = dead_letter(7)
    history = history_of(message)
    item = ("/", "dlq", (message.exchange, message.routing_keys, history, message.header,
                         message.body), "e-7")
    columns, (head,) = archive_records([item], "n1", DIED + 60.0)
    record = {name: column[0] for name, column in columns.items()}
    assert record.pop("content_header") == message.header
    line = json.loads(event_line(head, message.header, message.body, sys.maxsize,
                                 node_member("n1"), "e-7"))
    assert record == line
    assert record["properties"] == {"message_id": '"m7"'}


def test_temporary_files_a_crash_left_go_at_open_and_are_never_read(tmp_path):
    files = ArchiveFiles(tmp_path)
    files.open()
    kept = files.write("n", {"vhost": ["/"], "queue": ["q"]}, 0.0)
    torn = kept.parent / ".archive-x.parquet.tmp"
    torn.write_bytes(kept.read_bytes()[:20])
    assert [r["queue"] for r in files.records("/", "q")] == ["q"]
    ArchiveFiles(tmp_path).open()
    assert not torn.exists() and kept.exists()


def test_a_file_damaged_after_it_was_written_is_skipped_and_said(tmp_path, caplog):
    files = ArchiveFiles(tmp_path)
    files.open()
    damaged = files.write("n", {"vhost": ["/"], "queue": ["q"], "message_id": ["a"]}, 0.0)
    files.write("n", {"vhost": ["/"], "queue": ["q"], "message_id": ["b"]}, 0.0)
    damaged.write_bytes(damaged.read_bytes()[:-30])
    assert [r["message_id"] for r in files.records("/", "q")] == ["b"]
    assert any("cannot be read" in r.getMessage() for r in caplog.records)


def test_the_redriven_ledger_remembers_ids(tmp_path):
    files = ArchiveFiles(tmp_path)
    files.open()
    files.note_redriven(["a", "b"], 5.0)
    assert files.redriven() == {"a": 5.0, "b": 5.0}


def test_due_dead_letters_are_archived_then_removed_the_rest_stays(broker):
    queue = dlq(broker, retention=60_000)
    for n in range(3):
        queue.enqueue(dead_letter(n))
    queue.enqueue(dead_letter(3, died=DIED + 3600))  # not due yet
    plain = Message.to("", "dlq", struct.pack(">HHQ", 60, 0, 1) + encode_properties(
        Properties()), b"p")
    queue.enqueue(plain)
    archiver: Archiver = broker.archiver
    assert archiver.tick((DIED + 61) * 1000.0) == 3
    assert [entry.message.body for entry in queue.ready] == [b"body 3", b"p"]
    assert queue.unacked == 0 and queue.stats["archived"] == 3
    records = list(archiver.files.records("/", "dlq"))
    assert [r["message_id"] for r in records] == ["m0", "m1", "m2"]
    assert records[0]["reason"] == "expired" and records[0]["exchange"] == "dlx"
    assert records[0]["deaths"][0]["time"] == DIED * 1_000_000
    assert records[0]["outcome"] == "archived" and records[0]["body"] == "Ym9keSAw"
    assert records[0]["content_header"] == dead_letter(0).header


def test_a_failed_write_puts_the_messages_back_and_waits_before_trying_again(broker):
    queue = dlq(broker)
    for n in range(2):
        queue.enqueue(dead_letter(n))
    archiver: Archiver = broker.archiver
    shutil.rmtree(archiver.directory)
    archiver.directory.write_text("a file in the way")
    now = (DIED + 10) * 1000.0
    assert archiver.tick(now) == 2
    assert [entry.message.body for entry in queue.ready] == [b"body 0", b"body 1"]
    assert not any(entry.redelivered for entry in queue.ready)
    assert queue.unacked == 0 and queue.stats["archived"] == 0
    assert "they stay in the queue" in archiver.problem
    assert archiver.tick(now + 1000) == 0  # not before RETRY_SECONDS
    archiver.directory.unlink()
    assert archiver.tick(now + RETRY_SECONDS * 1000 + 1) == 2
    assert archiver.problem is None and queue.message_count == 0


def test_a_dead_letter_parquet_cannot_hold_as_sent_is_archived_with_the_others(broker):
    """A correlation-id that is not UTF-8 (short strings are any bytes) and
    an x-death time a client wrote that no 64-bit count of microseconds
    holds: once they kept the queue's every dead letter from the archive."""
    queue = dlq(broker)
    odd = dead_letter(0, died=-(10 ** 13))
    odd.set_header(odd.header[:12] + encode_properties(Properties(
        message_id="m0", correlation_id="\udcc3(\udca0", headers=odd.properties.headers)))
    queue.enqueue(odd)
    queue.enqueue(dead_letter(1))
    archiver: Archiver = broker.archiver
    assert archiver.tick((DIED + 10) * 1000.0) == 2
    assert archiver.problem is None and queue.message_count == 0
    first, second = archiver.files.records("/", "dlq")
    assert first["correlation_id"] == "\ufffd(\ufffd"
    assert first["deaths"][0]["time"] is None
    assert first["content_header"] == odd.header  # a redrive's copy is as sent
    assert second["message_id"] == "m1" and second["correlation_id"] is None


def test_a_cause_is_logged_once_however_many_queues_and_retries_meet_it(broker, caplog):
    vhost = broker.vhosts["/"]
    for name in ("dlq.a", "dlq.b"):
        vhost.declare_queue(name, None,
                            arguments=FieldTable({"x-dead-letter-retention": 1000}))
        vhost.queues[name].enqueue(dead_letter(0))
    archiver: Archiver = broker.archiver
    shutil.rmtree(archiver.directory)
    archiver.directory.write_text("a file in the way")
    now = (DIED + 10) * 1000.0
    for attempt in range(3):
        assert archiver.tick(now + attempt * (RETRY_SECONDS * 1000 + 1)) == 2
    logged = [r for r in caplog.records if r.name == "amqp_server.archive"]
    assert len(logged) == 1 and "they stay in the queue" in logged[0].getMessage()


def test_an_archive_that_takes_records_again_says_so_as_news_not_a_warning(broker, caplog):
    """Warnings are for what an operator must act on: the cause was an
    error, its end is information."""
    caplog.set_level("INFO", logger="amqp_server.archive")
    dlq(broker).enqueue(dead_letter(0))
    archiver: Archiver = broker.archiver
    shutil.rmtree(archiver.directory)
    archiver.directory.write_text("a file in the way")
    now = (DIED + 10) * 1000.0
    archiver.tick(now)
    archiver.directory.unlink()
    archiver.tick(now + RETRY_SECONDS * 1000 + 1)
    assert broker.vhosts["/"].queues["dlq"].message_count == 0  # archived this time
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == "amqp_server.archive"]
    assert [level for level, _ in said] == ["ERROR", "INFO"], said
    assert "takes records again" in said[1][1]


def test_a_crash_between_the_durable_record_and_the_removal_archives_again_never_loses(
        tmp_path):
    """The archive record is on disk, the queue's removal is not (the
    broker died in between): after the restart the messages are back and
    archived again: duplicates in the archive, nothing lost."""
    from amqp_server.broker.archiving import write_batch

    config = BrokerConfig(data_dir=str(tmp_path / "data"), node_name="n1")
    first = Broker(config)
    first.open_data_dir()
    vhost = first.vhosts["/"]
    vhost.declare_queue("dlq", None, durable=True,
                        arguments=FieldTable({"x-dead-letter-retention": 1000}))
    queue = vhost.queues["dlq"]
    for n in range(3):
        message = dead_letter(n)
        message.set_header(message.header[:12] + encode_properties(Properties(
            message_id=f"m{n}", delivery_mode=2,
            headers=message.properties.headers)))
        queue.enqueue(message)
    first.store.flush_now()
    # What the archiver's writer does for a batch, and no more: the crash.
    items = [("/", "dlq", (e.message.exchange, e.message.routing_keys, history_of(e.message),
                           e.message.header, e.message.body), f"x-{e.seq}")
             for e in queue.ready]
    write_batch(str(first.archiver.directory), "n1", items, DIED + 10.0)
    first.store.close()
    first.close_data_dir()

    again = Broker(BrokerConfig(data_dir=str(tmp_path / "data"), node_name="n1"))
    again.open_data_dir()
    restored = again.vhosts["/"].queues["dlq"]
    assert restored.message_count == 3
    assert again.archiver.tick((DIED + 10) * 1000.0) == 3
    assert restored.message_count == 0
    ids = [r["message_id"] for r in again.archiver.files.records("/", "dlq")]
    assert sorted(ids) == ["m0", "m0", "m1", "m1", "m2", "m2"]
    again.store.close()
    again.close_data_dir()
