"""The delayed-message exchange through aio-pika, the way asyncio retry loops
use it (and with the header types pika cannot send: a float `x-delay`)."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest

from .waiting import next_message

LONG = 60_000


async def setup(channel, routing_type=aio_pika.ExchangeType.DIRECT):
    exchange = await channel.declare_exchange(
        "dx", "x-delayed-message", arguments={"x-delayed-type": routing_type.value})
    queue = await channel.declare_queue("dq")
    await queue.bind(exchange, "k")
    return exchange, queue


async def test_messages_arrive_in_delay_order_with_x_delay_negated(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        exchange, queue = await setup(channel)
        for ms in (400, 150, 300, 200):
            await exchange.publish(aio_pika.Message(str(ms).encode(), headers={"x-delay": ms}),
                                   "k")
        got = [await next_message(queue) for _ in range(4)]
        assert [m.body for m in got] == [b"150", b"200", b"300", b"400"]
        assert [m.headers["x-delay"] for m in got] == [-150, -200, -300, -400]


async def test_a_delay_sent_as_a_signed_byte_routes_at_once(broker):
    # aio-pika (pamqp) sends an int in -128..127 as a signed byte; the
    # plugin since its 3.13 series reads x-delay through the message
    # container, which names that type `byte`, not in its integer list.
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        exchange, queue = await setup(channel)
        await exchange.publish(aio_pika.Message(b"later", headers={"x-delay": 300}), "k")
        await exchange.publish(aio_pika.Message(b"byte", headers={"x-delay": 100}), "k")
        message = await next_message(queue)
        assert (message.body, message.headers["x-delay"]) == (b"byte", 100)


async def test_a_float_delay_is_truncated(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        exchange, queue = await setup(channel)
        await exchange.publish(aio_pika.Message(b"later", headers={"x-delay": LONG + 0.7}), "k")
        await exchange.publish(aio_pika.Message(b"now", headers={"x-delay": 0.9}), "k")
        await exchange.publish(aio_pika.Message(b"soon", headers={"x-delay": 150.9}), "k")
        first = await next_message(queue)
        assert first.body == b"now"  # trunc(0.9) = 0: no delay
        second = await next_message(queue)
        assert (second.body, second.headers["x-delay"]) == (b"soon", -150)


async def test_confirmed_before_delivered_and_returned_when_mandatory(broker):
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        exchange, queue = await setup(channel)
        # The plugin routes a delayed message to no queue when it arrives:
        # a mandatory publish is returned (312 NO_ROUTE), and delivered later.
        with pytest.raises(aio_pika.exceptions.DeliveryError) as caught:
            await exchange.publish(aio_pika.Message(b"m", headers={"x-delay": 200}), "k",
                                   mandatory=True)
        assert caught.value.message.body == b"m"
        assert (await next_message(queue)).body == b"m"
        # Not mandatory: a plain ack, while the message still waits.
        confirmation = await exchange.publish(
            aio_pika.Message(b"waits", headers={"x-delay": LONG}), "k", mandatory=False)
        assert confirmation.name == "Basic.Ack"
        assert (await queue.declare()).message_count == 0


async def test_an_asyncio_retry_loop(broker):
    # The hand-written retry loop: a consumer that fails republishes the
    # message to the delayed exchange with a growing x-delay and a count.
    async with await aio_pika.connect(broker.url) as connection:
        channel = await connection.channel()
        exchange, queue = await setup(channel)
        await exchange.publish(aio_pika.Message(b"job", headers={"attempt": 0}), "k")
        attempts = []
        done = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage):
            async with message.process():
                attempt = message.headers["attempt"]
                attempts.append((attempt, message.headers.get("x-delay")))
                if attempt == 3:
                    done.set()
                    return
                await exchange.publish(aio_pika.Message(message.body, headers={
                    "attempt": attempt + 1, "x-delay": 150 * 2 ** attempt}), "k")

        await queue.consume(on_message)
        await asyncio.wait_for(done.wait(), 10)
        assert attempts == [(0, None), (1, -150), (2, -300), (3, -600)]
