"""An asyncio application written against RabbitMQ 4.3's quorum queues,
run with aio-pika over TCP against the broker in 4.3 mode: a worker that
consumes, fails on a poison message, and reads the counts 4.3 puts on each
delivery."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread


@pytest.fixture
def broker():
    with BrokerThread(BrokerConfig(rabbitmq_semantics="4.3")) as running:
        yield running


async def work_and_dead_letter_queues(channel, **arguments):
    dlq = await channel.declare_queue("work.dlq", durable=True,
                                      arguments={"x-queue-type": "quorum"})
    work = await channel.declare_queue("work", durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "work.dlq", **arguments})
    return work, dlq


async def next_message(queue, timeout: float = 5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        message = await queue.get(no_ack=False, fail=False)
        if message is not None:
            return message
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"nothing arrived in {queue.name}")
        await asyncio.sleep(0.02)


async def test_a_worker_rejecting_a_poison_message_sees_it_dead_lettered(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1)
        work, dlq = await work_and_dead_letter_queues(channel)
        await channel.default_exchange.publish(aio_pika.Message(b"ok"), routing_key="work")
        await channel.default_exchange.publish(aio_pika.Message(b"poison"),
                                               routing_key="work")
        done, seen = [], []
        async with work.iterator() as messages:
            async for message in messages:
                if message.body == b"ok":
                    await message.ack()
                    done.append(message.body)
                else:
                    seen.append(message.headers.get("x-delivery-count"))
                    await message.reject(requeue=True)
                if len(seen) == 21:
                    break
        assert done == [b"ok"] and seen == [None, *range(1, 21)]
        dead = await next_message(dlq)
        assert dead.body == b"poison"
        assert dead.headers["x-death"][0]["reason"] == "delivery_limit"
        assert dead.headers["x-delivery-count"] == 21
        await dead.ack()
        assert (await work.declare()).message_count == 0


async def test_a_worker_that_nacks_to_retry_later_is_never_cut_off(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        work, dlq = await work_and_dead_letter_queues(channel)
        await channel.default_exchange.publish(aio_pika.Message(b"later"),
                                               routing_key="work")
        for _ in range(25):
            message = await next_message(work)
            await message.nack(requeue=True)
        message = await next_message(work)
        assert message.headers == {"x-acquired-count": 25} and message.redelivered
        await message.ack()
        assert (await dlq.declare()).message_count == 0
