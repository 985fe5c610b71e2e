"""Priority queues (`x-max-priority`): higher priorities first, FIFO within
one, no priority as 0, above the maximum as the maximum; returned messages
back into their priority; length limits, TTL and dead-lettering, restarts.
Compared with a real RabbitMQ where the client can see the difference."""

from __future__ import annotations

import shutil
import tempfile

import aio_pika
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .broker_process import BrokerProcess
from .management_api import http
from .waiting import wait_for, wait_get

PRIORITIES = [None, 1, 5, 10, 11, 255, 3, 5, 0, 7]


def drain(channel, queue: str) -> list:
    got = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        got.append((body.decode(), method.redelivered))


def observe(url: str) -> dict:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    seen = {}
    try:
        channel.queue_declare("pq.order", arguments={"x-max-priority": 10})
        for n, priority in enumerate(PRIORITIES):
            channel.basic_publish("", "pq.order", f"m{n}".encode(),
                                  pika.BasicProperties(priority=priority))
        taken = [channel.basic_get("pq.order")[2].decode() for _ in range(3)]
        channel.basic_nack(0, multiple=True, requeue=True)
        seen["order"] = taken + drain(channel, "pq.order")
        # Consumers get the same order, a prefetch window at a time.
        for n, priority in enumerate(PRIORITIES):
            channel.basic_publish("", "pq.order", f"c{n}".encode(),
                                  pika.BasicProperties(priority=priority))
        channel.basic_qos(prefetch_count=1)
        consumed = []
        for method, _, body in channel.consume("pq.order", inactivity_timeout=2):
            if method is None:
                break
            consumed.append(body.decode())
            channel.basic_ack(method.delivery_tag)
            if len(consumed) == len(PRIORITIES):
                break
        channel.cancel()
        seen["consumed"] = consumed
        channel.queue_declare("pq.drop", arguments={"x-max-priority": 5, "x-max-length": 3})
        for n, priority in enumerate([1, 5, 2, 5, 0, 3]):
            channel.basic_publish("", "pq.drop", f"d{n}".encode(),
                                  pika.BasicProperties(priority=priority))
        seen["drop_head"] = drain(channel, "pq.drop")
        for bad in (256, -1, "high"):
            try:
                conn.channel().queue_declare("pq.bad", arguments={"x-max-priority": bad})
                seen[f"max {bad}"] = "declared"
            except ChannelClosedByBroker as exc:
                seen[f"max {bad}"] = (exc.reply_code, exc.reply_text)
        quorum = conn.channel()
        try:
            quorum.queue_declare("pq.quorum", durable=True, arguments={
                "x-queue-type": "quorum", "x-max-priority": 5})
            seen["quorum"] = "declared"
        except ChannelClosedByBroker as exc:
            seen["quorum"] = (exc.reply_code, exc.reply_text)
    finally:
        cleanup = conn.channel()
        for queue in ("pq.order", "pq.drop", "pq.bad", "pq.quorum"):
            cleanup.queue_delete(queue)
        conn.close()
    return seen


def test_priority_queues_behave_as_rabbitmqs(broker, rabbitmq_url):
    ours, theirs = observe(broker.url), observe(rabbitmq_url)
    assert ours == theirs
    assert [body for body, _ in ours["order"][3:]][:3] == ["m3", "m4", "m5"]
    assert ours["max 256"][1].endswith("{max_value_exceeded,256}")


def test_priority_order_through_pika(channel):
    assert [body for body, _ in observe_order(channel)] == [
        "m3", "m4", "m5", "m9", "m2", "m7", "m6", "m1", "m0", "m8"]


def observe_order(channel) -> list:
    channel.queue_declare("prio", arguments={"x-max-priority": 10})
    for n, priority in enumerate(PRIORITIES):
        channel.basic_publish("", "prio", f"m{n}".encode(), pika.BasicProperties(priority=priority))
    return drain(channel, "prio")


async def test_priority_order_through_aio_pika(broker):
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("prio", arguments={"x-max-priority": 3})
        for n, priority in enumerate([0, 3, 1, 2, 3]):
            await channel.default_exchange.publish(
                aio_pika.Message(f"a{n}".encode(), priority=priority), "prio")
        got = []
        for _ in range(5):
            message = await queue.get(timeout=5)
            await message.ack()
            got.append(message.body.decode())
    assert got == ["a1", "a4", "a3", "a2", "a0"]


def test_expired_and_rejected_messages_of_a_priority_queue_die_as_usual(channel):
    channel.exchange_declare("prio.dlx", "fanout")
    channel.queue_declare("prio.dlq")
    channel.queue_bind("prio.dlq", "prio.dlx")
    channel.queue_declare("prio.work", arguments={
        "x-max-priority": 5, "x-dead-letter-exchange": "prio.dlx"})
    for body, priority, expiration in ((b"old-low", 1, "50"), (b"old-high", 5, "50"),
                                       (b"shunned", 3, None)):
        channel.basic_publish("", "prio.work", body, pika.BasicProperties(
            priority=priority, expiration=expiration))
    dead = []
    for _ in range(2):
        method, props, body = wait_get(channel, "prio.dlq")
        dead.append((body, props.headers["x-death"][0]["reason"], props.priority))
    method, _, body = channel.basic_get("prio.work")
    assert body == b"shunned"
    channel.basic_reject(method.delivery_tag, requeue=False)
    method, props, body = wait_get(channel, "prio.dlq")
    dead.append((body, props.headers["x-death"][0]["reason"], props.priority))
    assert sorted(dead) == [(b"old-high", "expired", 5), (b"old-low", "expired", 1),
                            (b"shunned", "rejected", 3)]


def test_a_priority_queue_comes_back_in_order_after_kill_9():
    data_dir = tempfile.mkdtemp(prefix="amqp-prio-")
    try:
        broker = BrokerProcess(data_dir)
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare("prio.durable", durable=True, arguments={"x-max-priority": 9})
        for n in range(60):
            channel.basic_publish("", "prio.durable", f"p{n}".encode(),
                                  pika.BasicProperties(priority=n % 10, delivery_mode=2))
        broker.kill9()
        broker = BrokerProcess(data_dir)
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        got = [body for body, _ in drain(conn.channel(), "prio.durable")]
        broker.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    expected = sorted((f"p{n}" for n in range(60)),
                      key=lambda body: (-min(int(body[1:]) % 10, 9), int(body[1:])))
    assert got == expected


def test_counts_in_the_management_api(broker, channel):
    channel.queue_declare("prio.counted", arguments={"x-max-priority": 4})
    for priority in (0, 4, 2):
        channel.basic_publish("", "prio.counted", b"x", pika.BasicProperties(priority=priority))
    channel.basic_get("prio.counted")
    queue = http(broker, "GET", "/api/queues/%2F/prio.counted")[1]
    assert (queue["messages_ready"], queue["messages_unacknowledged"]) == (2, 1)
    assert queue["arguments"] == {"x-max-priority": 4}


@pytest.fixture
def paging_broker():
    data_dir = tempfile.mkdtemp(prefix="amqp-prio-page-")
    with BrokerThread(BrokerConfig(paging_threshold=10), data_dir=data_dir) as running:
        yield running
    shutil.rmtree(data_dir, ignore_errors=True)


def test_past_the_paging_threshold_priority_order_holds(paging_broker):
    """A lane per priority: past the threshold the queue keeps only its
    head in memory, and a high priority paged behind low ones in memory
    still goes first."""
    conn = pika.BlockingConnection(pika.URLParameters(paging_broker.url))
    channel = conn.channel()
    channel.confirm_delivery()
    channel.queue_declare("prio.long", durable=True, arguments={"x-max-priority": 2})
    for n in range(40):
        channel.basic_publish("", "prio.long", f"{n}".encode(),
                              pika.BasicProperties(priority=n % 3, delivery_mode=2))
    queue = http(paging_broker, "GET", "/api/queues/%2F/prio.long")[1]
    assert (queue["messages"], queue["messages_ram"], queue["messages_paged_out"]) == (
        40, 10, 30)
    got = [int(body) for body, _ in drain(channel, "prio.long")]
    assert got == sorted(range(40), key=lambda n: (-(n % 3), n))
    conn.close()


def test_overflow_modes_redelivery_and_purge_on_a_priority_queue(channel):
    channel.confirm_delivery()
    channel.queue_declare("prio.dlq")
    channel.queue_declare("prio.full", arguments={
        "x-max-priority": 5, "x-max-length": 2, "x-overflow": "reject-publish"})
    channel.queue_declare("prio.full.dlx", arguments={
        "x-max-priority": 5, "x-max-length": 2, "x-overflow": "reject-publish-dlx",
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "prio.dlq"})
    for queue in ("prio.full", "prio.full.dlx"):
        for n in range(2):
            channel.basic_publish("", queue, f"{queue}{n}".encode(),
                                  pika.BasicProperties(priority=n))
        with pytest.raises(pika.exceptions.NackError):
            channel.basic_publish("", queue, b"one too many", pika.BasicProperties(priority=5))
    _, props, body = wait_get(channel, "prio.dlq")
    assert (body, props.headers["x-death"][0]["reason"]) == (b"one too many", "maxlen")
    assert channel.queue_purge("prio.full").method.message_count == 2

    # Artemis's delayed redelivery and attempts: the high one waits out its
    # delay while the low one is served, then comes first again, then dies.
    channel.queue_declare("prio.retry", arguments={
        "x-max-priority": 5, "x-redelivery-delay": 200, "x-max-delivery-attempts": 2,
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "prio.dlq"})
    channel.basic_publish("", "prio.retry", b"low", pika.BasicProperties(priority=1))
    channel.basic_publish("", "prio.retry", b"high", pika.BasicProperties(priority=5))
    method, _, body = channel.basic_get("prio.retry")
    assert body == b"high"
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get("prio.retry")
    assert body == b"low"  # the high one is waiting out its delay
    channel.basic_nack(method.delivery_tag, requeue=True)
    got = []
    assert wait_for(lambda: got.append(channel.basic_get("prio.retry")) or got[-1][0])
    method, _, body = got[-1]
    assert body == b"high" and method.redelivered
    channel.basic_nack(method.delivery_tag, requeue=True)  # its second attempt: it dies
    _, props, body = wait_get(channel, "prio.dlq")
    assert (body, props.headers["x-death"][0]["reason"]) == (b"high", "delivery_limit")
