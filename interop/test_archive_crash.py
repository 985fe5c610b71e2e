"""Retention's archive under `kill -9`: a broker archiving dead letters is
killed at random moments and restarted on the same data directory; once
the archive has caught up, every confirmed dead letter is in the archive
(a crash between a durable record and the queue's removal may archive one
twice, never lose one), no record is torn, and no temporary file is
left.  Bounded: a few kill points, each a few seconds."""

from __future__ import annotations

import datetime
import random
import threading
import time
from pathlib import Path

import pika
import pyarrow.parquet as pq
import pytest

from amqp_server.storage.archive import ARCHIVE_DIR

from .broker_process import BrokerProcess

DLQ = "crash.dlq"
DIED = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


def dead_letter_publisher(url: str, confirmed: list, stop: threading.Event, start: int) -> None:
    """Dead letters (with an x-death from 2020: past any retention) straight
    into the dead letter queue, each confirmed before the next."""
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        channel = conn.channel()
        channel.queue_declare(DLQ, durable=True, arguments={"x-dead-letter-retention": 1000})
        channel.confirm_delivery()
        n = start
        while not stop.is_set():
            channel.basic_publish("", DLQ, f"body {n}".encode(), pika.BasicProperties(
                delivery_mode=2, message_id=str(n), headers={"x-death": [{
                    "queue": "work", "reason": "rejected", "count": 1, "time": DIED,
                    "exchange": "", "routing-keys": ["work"]}]}))
            confirmed.append(str(n))
            n += 1
    except Exception:
        return  # the broker died under us: expected


def archive_ids(directory: str) -> list[str]:
    ids = []
    for path in Path(directory, ARCHIVE_DIR).rglob("archive-*.parquet"):
        # A torn file is no Parquet: reading it raises.
        ids.extend(pq.read_table(path, columns=["message_id"]).column(0).to_pylist())
    return ids


def ready(url: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return conn.channel().queue_declare(DLQ, passive=True).method.message_count
    finally:
        conn.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_confirmed_dead_letter_is_lost_when_the_broker_is_killed_while_archiving(
        data_dir, seed):
    rng = random.Random(seed)
    confirmed: list[str] = []
    for round_ in range(2):
        broker = BrokerProcess(data_dir)
        stop = threading.Event()
        thread = threading.Thread(target=dead_letter_publisher,
                                  args=(broker.url, confirmed, stop, round_ * 1_000_000))
        thread.start()
        time.sleep(rng.uniform(1.0, 3.0))  # archiving runs once a second
        broker.kill9()
        stop.set()
        thread.join(10)
    assert confirmed, "nothing was confirmed before the kills"
    broker = BrokerProcess(data_dir)
    try:
        deadline = time.monotonic() + 30
        while ready(broker.url) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready(broker.url) == 0
    finally:
        broker.stop()  # a clean stop lets the batch in flight finish
    ids = archive_ids(data_dir)
    missing = set(confirmed) - set(ids)
    assert not missing, f"{len(missing)} confirmed dead letters were lost"
    assert not list(Path(data_dir, ARCHIVE_DIR).rglob("*.tmp"))
