"""Streams with aio-pika (asyncio): a consumer from an offset, manual acks,
several consumers reading everything, and basic.get refused."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest
from aio_pika.exceptions import ChannelClosed, ConnectionClosed

from .stream_scenarios import STREAM, unique


async def read(queue, count: int, offset) -> list:
    got = []
    async with queue.iterator(arguments={"x-stream-offset": offset}) as messages:
        async for message in messages:
            async with message.process():  # ack: credit back
                got.append((message.headers["x-stream-offset"], message.body))
            if len(got) == count:
                break
    return got


async def test_aio_pika_reads_a_stream_from_an_offset(broker):
    name = unique()
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=4)
        queue = await channel.declare_queue(name, durable=True, arguments=STREAM)
        for i in range(10):
            await channel.default_exchange.publish(aio_pika.Message(b"e%d" % i), routing_key=name)
        assert await asyncio.wait_for(read(queue, 4, 6), 10) == \
            [(i, b"e%d" % i) for i in range(6, 10)]
        # Two consumers at once, each from the start: each reads all ten.
        first, second = await asyncio.wait_for(
            asyncio.gather(read(queue, 10, "first"), read(queue, 10, "first")), 10)
        assert first == second == [(i, b"e%d" % i) for i in range(10)]


async def test_aio_pika_basic_get_is_refused(broker):
    name = unique()
    connection = await aio_pika.connect(broker.url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, durable=True, arguments=STREAM)
        with pytest.raises((ChannelClosed, ConnectionClosed)) as raised:
            await queue.get(timeout=5)
        assert "basic.get not supported by stream queues" in str(raised.value)
    finally:
        await connection.close()
