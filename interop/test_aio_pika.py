"""aio-pika (asyncio) and pika's SelectConnection against the broker."""

from __future__ import annotations

import asyncio

import aio_pika
import pika
import pytest
from aio_pika.exceptions import ChannelClosed, DeliveryError


async def test_publish_consume_with_confirms(broker):
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=10)
        queue = await channel.declare_queue("", exclusive=True)
        for i in range(50):
            await channel.default_exchange.publish(
                aio_pika.Message(str(i).encode(), headers={"n": i}), routing_key=queue.name)
        received = []
        async with queue.iterator() as messages:
            async for message in messages:
                async with message.process():
                    received.append((message.body, message.headers["n"]))
                if len(received) == 50:
                    break
        assert received == [(str(i).encode(), i) for i in range(50)]


async def test_mandatory_return_fails_the_publish(broker):
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        exchange = await channel.declare_exchange("x", aio_pika.ExchangeType.DIRECT)
        with pytest.raises(DeliveryError):
            await exchange.publish(aio_pika.Message(b"lost"), routing_key="none", mandatory=True)


async def test_topic_routing_and_nack_requeue(broker):
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange("t", aio_pika.ExchangeType.TOPIC)
        queue = await channel.declare_queue("q")
        await queue.bind(exchange, "a.*")
        await exchange.publish(aio_pika.Message(b"m"), routing_key="a.b")
        first = await queue.get(timeout=5)
        await first.nack(requeue=True)
        again = await queue.get(timeout=5)
        assert again.body == b"m" and again.redelivered
        await again.ack()


async def test_transactions(broker):
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=False)
        await channel.declare_queue("q")
        async with channel.transaction():
            await channel.default_exchange.publish(aio_pika.Message(b"1"), routing_key="q")
            await channel.default_exchange.publish(aio_pika.Message(b"2"), routing_key="q")
        declared = await channel.declare_queue("q", passive=True)
        assert declared.declaration_result.message_count == 2


async def test_channel_error_surfaces_and_connection_survives(broker):
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        with pytest.raises(ChannelClosed) as info:
            await channel.declare_queue("ghost", passive=True)
        assert "NOT_FOUND - no queue 'ghost'" in str(info.value)
        again = await connection.channel()
        await again.declare_queue("fine")


async def test_many_concurrent_channels(broker):
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channels = await asyncio.gather(*(connection.channel() for _ in range(50)))
        queues = await asyncio.gather(*(ch.declare_queue(f"q{i}")
                                        for i, ch in enumerate(channels)))
        assert len({q.name for q in queues}) == 50


def test_pika_select_connection(broker):
    """The callback-style adapter goes through the same handshake and flows."""
    events = []

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(channel):
        def on_declared(frame):
            channel.basic_publish("", "sel", b"hello")
            channel.basic_consume("sel", on_message, auto_ack=True)

        def on_message(ch, method, props, body):
            events.append(body)
            ch.connection.close()

        channel.queue_declare("sel", callback=on_declared)

    conn = pika.SelectConnection(pika.URLParameters(broker.url), on_open_callback=on_open,
                                 on_close_callback=lambda c, reason: c.ioloop.stop())
    conn.ioloop.call_later(10, conn.ioloop.stop)
    conn.ioloop.start()
    assert events == [b"hello"]
