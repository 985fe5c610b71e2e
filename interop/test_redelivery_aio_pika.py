"""Delayed redelivery and delivery attempts through aio-pika, the asyncio
client: a consumer that keeps failing sees the message again only after
the delay, and finally in the dead letter address's queue."""

from __future__ import annotations

import asyncio

import aio_pika

from .waiting import next_message


async def test_delayed_redelivery_then_dead_letter_address(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        dla = await channel.declare_exchange("dla", aio_pika.ExchangeType.FANOUT)
        dlq = await channel.declare_queue("dlq")
        await dlq.bind(dla)
        work = await channel.declare_queue("work", arguments={
            "x-redelivery-delay": 60, "x-max-delivery-attempts": 3,
            "x-dead-letter-address": "dla"})
        await channel.default_exchange.publish(aio_pika.Message(b"poison"), routing_key="work")
        loop = asyncio.get_running_loop()
        seen = []
        done = asyncio.Event()

        async def on_message(message):
            seen.append((loop.time(), message.redelivered))
            await message.nack(requeue=True)
            if len(seen) == 3:
                done.set()

        await work.consume(on_message)
        await asyncio.wait_for(done.wait(), 10)
        arrived = await next_message(dlq)
        assert arrived.body == b"poison"
        assert arrived.headers["x-death"][0]["reason"] == "delivery_limit"
        assert [flag for _, flag in seen] == [False, True, True]
        gaps = [b - a for (a, _), (b, _) in zip(seen, seen[1:])]
        assert all(gap >= 0.058 for gap in gaps), gaps
