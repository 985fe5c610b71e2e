"""Retention that archives instead of deleting, over real TCP with pika: a
dead letter that outstayed its dead letter queue's retention is written to
the archive (the dead-letter log's fields, body, properties, whole death
history) before it leaves the queue, and its removal is in the dead-letter
log; what is not a dead letter stays; a retention on a queue that sends its
dead letters on is refused with 406; an archive that cannot be written
keeps the messages and says why."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pika
import pyarrow.parquet as pq
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_server.storage.archive import ARCHIVE_DIR
from amqp_server.testing import BrokerThread

from .management_api import amqpctl, http
from .waiting import wait_for, wait_get_noack

CONFIG = {"port": 0, "management-port": 0, "prometheus-port": -1}


@pytest.fixture
def broker(tmp_path):
    with BrokerThread({**CONFIG, "data-dir": str(tmp_path / "data")}) as running:
        yield running


def depth(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def archived(data_dir: str) -> list[dict]:
    records = []
    for path in sorted(Path(data_dir, ARCHIVE_DIR).rglob("archive-*.parquet")):
        records.extend(pq.read_table(path).to_pylist(maps_as_pydicts="strict"))
    return records


def logged(data_dir: str) -> list[dict]:
    return [json.loads(line) for path in sorted(Path(data_dir, "dead-letters").glob("*.ndjson"))
            for line in path.read_text().splitlines() if line.strip()]


def dead_letter_setup(channel, retention_argument: int | None = 1000) -> None:
    """work -> dlx (fanout) -> dlq, dlq with retention `retention_argument` ms."""
    channel.exchange_declare("dlx", "fanout")
    arguments = {} if retention_argument is None else {
        "x-dead-letter-retention": retention_argument}
    channel.queue_declare("dlq", durable=True, arguments=arguments)
    channel.queue_bind("dlq", "dlx")
    channel.queue_declare("work", durable=True, arguments={"x-dead-letter-exchange": "dlx"})


def reject(channel, count: int) -> None:
    for _ in range(count):
        method, _, _ = wait_get_noack(channel, "work")
        channel.basic_reject(method.delivery_tag, requeue=False)


def test_dead_letters_past_retention_are_archived_whole_then_leave_the_queue(broker, channel):
    dead_letter_setup(channel)
    channel.confirm_delivery()
    for n in range(3):
        channel.basic_publish("", "work", f"order {n}".encode(), pika.BasicProperties(
            delivery_mode=2, message_id=f"m{n}", content_type="text/plain",
            headers={"trace": f"t{n}", "attempt": n}))
    channel.basic_publish("", "dlq", b"not dead", pika.BasicProperties(delivery_mode=2))
    reject(channel, 3)
    assert depth(channel, "dlq") == 4
    assert wait_for(lambda: depth(channel, "dlq") == 1, 15)
    # What did not die stays, however long.
    method, _, body = wait_get_noack(channel, "dlq")
    assert body == b"not dead"
    # Withdrawn while their record is written (not ready, still stored),
    # then gone.
    assert wait_for(lambda: len(archived(broker.data_dir)) == 3, 15)
    assert wait_for(lambda: broker.call(lambda: broker.broker.vhosts["/"].queues["dlq"].unacked)
                    == 1, 15)
    records = archived(broker.data_dir)
    assert [r["message_id"] for r in records] == ["m0", "m1", "m2"]
    first = records[0]
    assert first["outcome"] == "archived" and first["queue"] == "dlq"
    assert first["reason"] == "rejected" and first["vhost"] == "/"
    assert base64.b64decode(first["body"]) == b"order 0" and first["body_included"]
    assert json.loads(first["properties"]["content_type"]) == "text/plain"
    assert json.loads(first["headers"]["trace"]) == "t0"
    assert [(d["queue"], d["reason"], d["count"]) for d in first["deaths"]] == [
        ("work", "rejected", 1)]
    assert first["first_death_queue"] == "work"
    assert first["content_header"][:2] == b"\x00\x3c"  # class basic
    assert len({r["event_id"] for r in records}) == 3
    # The removal is in the dead-letter log, beside the three deaths.
    assert wait_for(lambda: [e["outcome"] for e in logged(broker.data_dir)].count("archived")
                    == 3, 15)
    outcomes = [(e["queue"], e["outcome"]) for e in logged(broker.data_dir)]
    assert outcomes.count(("work", "dead_lettered")) == 3
    assert outcomes.count(("dlq", "archived")) == 3
    channel.basic_ack(method.delivery_tag)


def test_a_policy_sets_retention_on_dead_letter_queues_only(broker, channel):
    dead_letter_setup(channel, retention_argument=None)
    channel.basic_publish("", "work", b"x", pika.BasicProperties(delivery_mode=2))
    reject(channel, 1)
    # The policy matches both queues: the work queue dead-letters onward, so
    # on it retention does nothing.
    assert http(broker, "PUT", "/api/policies/%2F/keep", {
        "pattern": "^(dlq|work)$", "definition": {"dead-letter-retention": 500}})[0] == 201
    channel.basic_publish("", "work", b"stays in work", pika.BasicProperties(delivery_mode=2))
    assert wait_for(lambda: [r["queue"] for r in archived(broker.data_dir)] == ["dlq"], 15)
    assert wait_for(lambda: http(broker, "GET", "/api/queues/%2F/dlq")[1]["messages"] == 0, 15)
    assert depth(channel, "work") == 1
    assert http(broker, "GET", "/api/queues/%2F/dlq")[1]["dead_letters_archived"] == 1


@pytest.mark.parametrize("arguments, term", [
    ({"x-dead-letter-exchange": "dlx"}, '{not_a_dead_letter_queue,"x-dead-letter-exchange"}'),
    ({"x-dead-letter-address": "DLA"}, '{not_a_dead_letter_queue,"x-dead-letter-address"}'),
    ({"x-qpid-dlq-enabled": True}, '{not_a_dead_letter_queue,"x-qpid-dlq-enabled"}'),
])
def test_retention_on_a_queue_that_sends_its_dead_letters_on_is_refused(
        connection, arguments, term):
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("source", arguments={**arguments,
                                                   "x-dead-letter-retention": 60000})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - invalid arg 'x-dead-letter-retention' for queue 'source' in "
        f"vhost '/': {term}")


@pytest.mark.parametrize("value, term", [
    (0, "{value_too_small,0}"), (-5, "{value_too_small,-5}"),
    ("soon", '"expected integer, got longstr"')])
def test_a_retention_that_is_not_a_positive_number_of_ms_is_refused(connection, value, term):
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("dlq", arguments={"x-dead-letter-retention": value})
    assert info.value.reply_code == 406
    assert info.value.reply_text.endswith(f"in vhost '/': {term}")


def test_a_retention_policy_value_that_is_not_a_number_of_ms_is_refused(broker):
    status, body = http(broker, "PUT", "/api/policies/%2F/bad", {
        "pattern": ".*", "definition": {"dead-letter-retention": "a week"}})
    assert status == 400
    assert "is not a valid dead letter retention" in body["reason"]


def test_an_archive_that_cannot_be_written_keeps_the_dead_letters_and_says_why(tmp_path,
                                                                               caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the archive directory should be")
    config = {**CONFIG, "data-dir": str(tmp_path / "data"),
              "dead-letter-archive-dir": str(blocker / "archive")}
    with BrokerThread(config) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        dead_letter_setup(channel, 200)
        for n in range(2):
            channel.basic_publish("", "work", f"keep {n}".encode(),
                                  pika.BasicProperties(delivery_mode=2))
        reject(channel, 2)

        def health():
            return http(broker, "GET", "/api/health/checks/dead-letter-archive")
        assert wait_for(lambda: health()[0] == 503, 10)
        status, body = health()
        assert body["status"] == "failed"
        assert "Not a directory" in body["reason"]
        assert str(blocker) in body["reason"]
        overview = http(broker, "GET", "/api/overview")[1]
        assert overview["dead_letter_archive"]["problem"] == body["reason"]
        # Past retention, the messages are still there, in order.
        time.sleep(1.5)
        assert depth(channel, "dlq") == 2
        bodies = [wait_get_noack(channel, "dlq")[2] for _ in range(2)]
        assert bodies == [b"keep 0", b"keep 1"]
        conn.close()
    # The log says it, once per problem however often it is tried again.
    said = [r.getMessage() for r in caplog.records if r.name == "amqp_server.archive"]
    assert any("Not a directory" in line and str(blocker) in line for line in said), said
    assert len(said) == len(set(said))


def test_the_workbench_searches_the_archive_beside_the_queue_and_redrives_from_it(
        broker, channel):
    dead_letter_setup(channel)
    for n in range(3):
        channel.basic_publish("", "work", f"invoice {n}".encode(), pika.BasicProperties(
            delivery_mode=2, message_id=f"inv-{n}", headers={"customer": f"c{n}"}))
    reject(channel, 3)
    assert wait_for(lambda: len(archived(broker.data_dir)) == 3, 15)
    assert wait_for(lambda: http(broker, "GET", "/api/queues/%2F/dlq")[1]["messages"] == 0, 15)
    # Live and archived side by side: the live queue is empty, the archive not.
    assert http(broker, "GET", "/api/queues/%2F/dlq/messages")[1]["messages"] == []
    status, page = http(broker, "GET", "/api/queues/%2F/dlq/archive?body=invoice%201")
    assert status == 200 and page["matched"] == 1
    (found,) = page["messages"]
    assert found["payload_text"] == "invoice 1" and found["reason"] == "rejected"
    assert found["original_queue"] == "work" and found["headers"]["customer"] == "c1"
    assert found["origin"]["routing_keys"] == ["work"] and found["redriven_at"] is None
    status, page = http(broker, "GET", "/api/queues/%2F/dlq/archive?reason=expired")
    assert page["matched"] == 0
    # Redriven to where it died, byte for byte, and noted as redriven.
    status, result = http(broker, "POST", "/api/queues/%2F/dlq/archive/redrive",
                          {"event_ids": [found["event_id"], "no-such-id"]})
    assert status == 200, result
    assert result["redriven"] == 1 and result["missing"] == ["no-such-id"]
    method, props, body = wait_get_noack(channel, "work")
    assert body == b"invoice 1" and props.message_id == "inv-1"
    assert props.headers["customer"] == "c1"
    channel.basic_ack(method.delivery_tag)
    page = http(broker, "GET", "/api/queues/%2F/dlq/archive?message_id=inv-1")[1]
    assert page["messages"][0]["redriven_at"] is not None
    # A second redrive of it asks for `again`.
    again = http(broker, "POST", "/api/queues/%2F/dlq/archive/redrive", {"filter": {}})[1]
    assert again["redriven"] == 2  # the two never redriven
    assert http(broker, "POST", "/api/queues/%2F/dlq/archive/redrive",
                {"filter": {}})[1]["redriven"] == 0
    assert http(broker, "POST", "/api/queues/%2F/dlq/archive/redrive",
                {"seqs": [1]})[0] == 400


def test_amqpctl_lists_and_redrives_the_archive(broker, channel, capsys):
    dead_letter_setup(channel)
    for n in range(2):
        channel.basic_publish("", "work", f"ctl {n}".encode(), pika.BasicProperties(
            delivery_mode=2, message_id=f"ctl-{n}"))
    reject(channel, 2)
    assert wait_for(lambda: len(archived(broker.data_dir)) == 2, 15)
    assert amqpctl(broker, "list_archived", "dlq", "--message-id", "ctl-1", "-q",
                   "--formatter", "json") == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["message_id"] == "ctl-1" and row["reason"] == "rejected"
    assert row["original_queue"] == "work" and row["redriven_at"] is None
    assert amqpctl(broker, "redrive_archived", "dlq", "--event-id", row["event_id"]) == 0
    assert "1 redriven" in capsys.readouterr().out
    assert wait_get_noack(channel, "work")[2] == b"ctl 1"
    assert amqpctl(broker, "redrive_archived", "dlq", "--event-id", "nope") == 65
    assert "0 redriven, 1 not in the archive" in capsys.readouterr().out
    assert amqpctl(broker, "list_archived", "missing") == 65
