"""A quorum queue's single active consumer by consumer priority, as
RabbitMQ 4.3 runs it (rabbit_fifo.erl of v4.3.5, activate_next_consumer/2;
its quorum_queue_SUITE single_active_consumer_priority_take_over and
single_active_consumer_priority), with pika and aio-pika over TCP against
the broker in 4.3 mode, and 3.13's, which keeps the first consumer."""

from __future__ import annotations

import aio_pika
import pika
import pytest

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .management_api import consumers_listed, queue_shown
from .waiting import until, wait_for

SAC = {"x-queue-type": "quorum", "x-single-active-consumer": True}


@pytest.fixture
def broker():
    """conftest's `connection` and `channel` open on this one."""
    with BrokerThread(BrokerConfig(rabbitmq_semantics="4.3")) as running:
        yield running




class Held:
    """A pika consumer on a channel of its own that keeps its deliveries."""

    def __init__(self, connection, queue: str, priority: int, prefetch: int = 10) -> None:
        self.channel = connection.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.got: list = []
        self.tag = self.channel.basic_consume(
            queue, lambda ch, method, props, body: self.got.append((method, body)),
            arguments={"x-priority": priority})

    def bodies(self) -> list[bytes]:
        return [body for _, body in self.got]

    def ack_all(self) -> None:
        for method, _ in self.got:
            self.channel.basic_ack(method.delivery_tag)


def test_a_higher_priority_consumer_takes_over_once_the_active_one_settles(broker,
                                                                           connection):
    publisher = connection.channel()
    publisher.confirm_delivery()  # each publish is in the queue when it returns
    publisher.queue_declare("jobs", durable=True, arguments=SAC)
    low = Held(connection, "jobs", priority=1)
    publisher.basic_publish("", "jobs", b"first")
    assert wait_for(lambda: low.got, 5, lambda: connection.process_data_events(0.05))
    high = Held(connection, "jobs", priority=3)
    # The active consumer holds a message: it quiesces, and what comes
    # meanwhile waits (rabbit_fifo's `quiescing` status).
    publisher.basic_publish("", "jobs", b"second")
    queue = queue_shown(broker, "jobs")
    assert queue["single_active_consumer_tag"] == low.tag
    assert (queue["messages_ready"], queue["messages_unacknowledged"]) == (1, 1)
    low.ack_all()
    assert wait_for(lambda: high.got, 5, lambda: connection.process_data_events(0.05))
    assert high.bodies() == [b"second"] and low.bodies() == [b"first"]
    assert queue_shown(broker, "jobs")["single_active_consumer_tag"] == high.tag
    assert consumers_listed(broker, "jobs") == {high.tag: (True, "single_active"),
                                        low.tag: (False, "waiting")}


def test_an_idle_active_consumer_gives_way_at_once(broker, connection):
    channel = connection.channel()
    channel.queue_declare("jobs", durable=True, arguments=SAC)
    low = Held(connection, "jobs", priority=1)
    high = Held(connection, "jobs", priority=3)
    assert queue_shown(broker, "jobs")["single_active_consumer_tag"] == high.tag
    channel.basic_publish("", "jobs", b"m")
    assert wait_for(lambda: high.got, 5, lambda: connection.process_data_events(0.05))
    assert low.got == []


def test_the_next_active_consumer_is_the_waiting_one_of_the_highest_priority(broker,
                                                                              connection):
    channel = connection.channel()
    channel.queue_declare("jobs", durable=True, arguments=SAC)
    top = Held(connection, "jobs", priority=3)
    low = Held(connection, "jobs", priority=1)
    mid = Held(connection, "jobs", priority=2)
    assert queue_shown(broker, "jobs")["single_active_consumer_tag"] == top.tag
    top.channel.close()
    assert queue_shown(broker, "jobs")["single_active_consumer_tag"] == mid.tag
    mid.channel.close()
    assert queue_shown(broker, "jobs")["single_active_consumer_tag"] == low.tag


def test_3_13_keeps_the_first_consumer_active():
    with BrokerThread() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("jobs", durable=True, arguments=SAC)
        low = Held(connection, "jobs", priority=1)
        Held(connection, "jobs", priority=3)
        channel.basic_publish("", "jobs", b"m")
        assert wait_for(lambda: low.got, 5, lambda: connection.process_data_events(0.05))
        assert queue_shown(broker, "jobs")["single_active_consumer_tag"] == low.tag
        connection.close()



async def test_an_asyncio_worker_of_a_higher_priority_takes_over(broker):
    """Two aio-pika workers on one single-active-consumer queue: the standby
    of the higher priority takes the work once the one running has
    finished what it holds (a new version started beside the old one)."""
    async with await aio_pika.connect(broker.url) as connection:
        old_channel, new_channel = await connection.channel(), await connection.channel()
        await old_channel.set_qos(prefetch_count=10)
        old_queue = await old_channel.declare_queue("jobs", durable=True, arguments=SAC)
        new_queue = await new_channel.get_queue("jobs", ensure=False)
        old_held: list = []
        new_got: list[bytes] = []

        async def old_worker(message):
            old_held.append(message)

        async def new_worker(message):
            new_got.append(message.body)
            await message.ack()

        await old_queue.consume(old_worker, arguments={"x-priority": 1})
        await old_channel.default_exchange.publish(aio_pika.Message(b"1"), routing_key="jobs")
        assert await until(lambda: old_held)
        await new_queue.consume(new_worker, arguments={"x-priority": 5})
        await old_channel.default_exchange.publish(aio_pika.Message(b"2"), routing_key="jobs")
        assert await until(lambda: queue_shown(broker, "jobs")["messages_ready"] == 1)
        assert new_got == [] and [m.body for m in old_held] == [b"1"]
        await old_held[0].ack()
        assert await until(lambda: new_got == [b"2"])
        assert [m.body for m in old_held] == [b"1"]
