"""Each dead-letter reason through aio-pika, the asyncio client."""

from __future__ import annotations

import aio_pika
import pytest
from aio_pika.exceptions import DeliveryError

from .waiting import next_message


async def setup(channel, **arguments):
    dlx = await channel.declare_exchange("dlx", aio_pika.ExchangeType.FANOUT)
    dlq = await channel.declare_queue("dlq")
    await dlq.bind(dlx)
    durable = arguments.get("x-queue-type") == "quorum"
    work = await channel.declare_queue("work", durable=durable, arguments={
        "x-dead-letter-exchange": "dlx", **arguments})
    return work, dlq


async def publish(channel, body: bytes, **kw):
    await channel.default_exchange.publish(aio_pika.Message(body, **kw), routing_key="work")


@pytest.mark.parametrize("how", ["reject", "nack"])
async def test_rejected(broker, how):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        work, dlq = await setup(channel)
        await publish(channel, b"bad", headers={"trace": "t-1"})
        message = await work.get()
        await (message.reject() if how == "reject" else message.nack(requeue=False))
        dead = await next_message(dlq)
        assert dead.body == b"bad" and dead.headers["trace"] == "t-1"
        assert dead.headers["x-death"][0]["reason"] == "rejected"
        assert dead.headers["x-death"][0]["count"] == 1


async def test_expired(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        work, dlq = await setup(channel, **{"x-message-ttl": 30})
        await publish(channel, b"late")
        dead = await next_message(dlq)
        assert dead.headers["x-first-death-reason"] == "expired"
        assert dead.headers["x-first-death-queue"] == "work"


async def test_maxlen(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        work, dlq = await setup(channel, **{"x-max-length": 1,
                                            "x-overflow": "reject-publish-dlx"})
        await publish(channel, b"kept")
        with pytest.raises(DeliveryError):
            await publish(channel, b"over")
        dead = await next_message(dlq)
        assert dead.body == b"over"
        assert dead.headers["x-death"][0]["reason"] == "maxlen"


async def test_delivery_limit(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        work, dlq = await setup(channel, **{"x-queue-type": "quorum", "x-delivery-limit": 2})
        await publish(channel, b"poison")
        counts = []
        async with work.iterator() as messages:
            async for message in messages:
                counts.append(message.headers.get("x-delivery-count"))
                await message.nack(requeue=True)
                if len(counts) == 3:
                    break
        dead = await next_message(dlq)
        assert counts == [None, 1, 2]
        assert dead.headers["x-death"][0]["reason"] == "delivery_limit"
        assert dead.headers["x-death"][0]["queue"] == "work"
