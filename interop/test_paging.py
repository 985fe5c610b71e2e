"""Long queues over real TCP: past the paging threshold messages wait on
disk, the management API says how many, and pika consumers get every one
back in order, persistent and transient alike, across a restart too."""

from __future__ import annotations

from pathlib import Path

import pika

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .management_api import http
from .waiting import wait_for

THRESHOLD = 100
COUNT = 3000


def paging_broker(data_dir: str, **config) -> BrokerThread:
    return BrokerThread(BrokerConfig(port=0, management_port=0, paging_threshold=THRESHOLD,
                                     **config), data_dir=data_dir)


def publish(url: str, queue: str, count: int, persistent: bool) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.confirm_delivery()
    channel.queue_declare(queue, durable=persistent)
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1,
                                 headers={"n": 0})
    for n in range(count):
        props.headers["n"] = n
        channel.basic_publish("", queue, f"{queue}:{n}".encode(), props)
    conn.close()


def consume(url: str, queue: str, count: int) -> list[tuple[bytes, int, bool]]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=50)
    got = []
    for method, props, body in channel.consume(queue, inactivity_timeout=10):
        assert method is not None, f"stalled after {len(got)} of {count}"
        got.append((body, props.headers["n"], method.redelivered))
        if len(got) % 25 == 0 or len(got) == count:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if len(got) == count:
            break
    channel.cancel()
    conn.close()
    return got


def queue_info(broker, name: str) -> dict:
    status, info = http(broker, "GET", f"/api/queues/%2F/{name}")
    assert status == 200
    return info


def test_long_queue_pages_and_comes_back_in_order(data_dir):
    with paging_broker(data_dir) as broker:
        publish(broker.url, "long", COUNT, persistent=True)
        info = queue_info(broker, "long")
        assert info["messages_ready"] == COUNT
        assert info["messages_ram"] == THRESHOLD
        assert info["messages_paged_out"] == COUNT - THRESHOLD
        assert list(Path(data_dir, "paging").glob("*.page"))
        got = consume(broker.url, "long", COUNT)
        assert [n for _, n, _ in got] == list(range(COUNT))
        assert [body for body, _, _ in got] == [f"long:{n}".encode() for n in range(COUNT)]
        assert queue_info(broker, "long")["messages"] == 0
        assert not list(Path(data_dir, "paging").glob("*.page"))


def test_transient_messages_page_under_memory_pressure(data_dir):
    """Transient messages stay in memory until the broker's memory passes
    the paging ratio of its watermark (here a ratio so small that any
    broker passes it, while the watermark itself is far away)."""
    with paging_broker(data_dir) as broker:
        publish(broker.url, "long", COUNT, persistent=False)
        assert queue_info(broker, "long")["messages_paged_out"] == 0
    with paging_broker(data_dir, vm_memory_high_watermark_paging_ratio=1e-9,
                       paging_pressure_threshold=THRESHOLD) as broker:
        publish(broker.url, "long", COUNT, persistent=False)
        assert wait_for(
            lambda: queue_info(broker, "long")["messages_paged_out"] == COUNT - THRESHOLD)
        assert not broker.broker.alarms  # pressure, not the alarm: publishers go on
        got = consume(broker.url, "long", COUNT)
        assert [n for _, n, _ in got] == list(range(COUNT))
        assert not list(Path(data_dir, "paging").glob("*.page"))


def test_paged_persistent_messages_survive_a_restart(data_dir):
    with paging_broker(data_dir) as broker:
        publish(broker.url, "kept", COUNT, persistent=True)
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        method, _, body = channel.basic_get("kept")  # delivered, not acked
        assert body == b"kept:0"
    with paging_broker(data_dir) as broker:
        info = queue_info(broker, "kept")
        assert (info["messages_ready"], info["messages_paged_out"]) == (COUNT, COUNT - THRESHOLD)
        got = consume(broker.url, "kept", COUNT)
        assert [n for _, n, _ in got] == list(range(COUNT))
        assert [redelivered for _, _, redelivered in got] == [True] + [False] * (COUNT - 1)


def test_publishers_wait_for_a_busy_store_and_lose_nothing(data_dir):
    """With the store's backlog limit tiny, a publisher without confirms is
    paused again and again; every message still arrives, in order."""
    with paging_broker(data_dir) as broker:
        log = broker.broker.store.log
        log.backlog_high, log.backlog_low = 1000, 200  # a few messages
        changes = []
        log.on_congestion = lambda busy, report=log.on_congestion: (
            changes.append(busy), report(busy))
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.queue_declare("busy", durable=True)
        for n in range(COUNT):
            channel.basic_publish("", "busy", f"busy:{n}".encode(),
                                  pika.BasicProperties(delivery_mode=2, headers={"n": n}))
        conn.close()
        got = consume(broker.url, "busy", COUNT)
        assert [n for _, n, _ in got] == list(range(COUNT))
        # Paused more than once: how many times depends on how fast the disk
        # is at that moment (a loaded machine batches more per flush).
        assert changes.count(True) >= 2
        # The consumer's acks are records too: the writer catches up after.
        assert wait_for(lambda: changes[-1] is False, 30), changes[-6:]
