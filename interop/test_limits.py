"""Limits with RabbitMQ's defaults and errors: channels per connection
(channel_max), connections per broker (connection_max) and message size
(max_message_size), over real sockets; channel_max also against RabbitMQ."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import aio_pika
import pika
import pytest
from pamqp import commands as spec
from pika.exceptions import ChannelClosedByBroker, ProbableAccessDeniedError

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread
from amqp_server.wire.methods import make
from interop.rawclient import RawClient


def open_channels_until_refused(host: str, port: int) -> tuple[list[int], str]:
    """Tune channel_max to 2, then open channels 1, 7 and 9: the third is
    over the limit whatever its number."""
    client = RawClient(port, host)
    client.handshake(channel_max=2)
    opened = []
    for number in (1, 7, 9):
        client.send_method(number, make(spec.Channel.Open))
        channel, reply = client.read_method()
        if isinstance(reply, spec.Connection.Close):
            client.send_method(0, make(spec.Connection.CloseOk))
            client.close()
            return opened, f"{reply.reply_code} {reply.reply_text}"
        opened.append(channel)
    client.close()
    return opened, ""


def test_channel_max_counts_open_channels(broker):
    opened, refusal = open_channels_until_refused("127.0.0.1", broker.port)
    assert opened == [1, 7]
    assert refusal == ("530 NOT_ALLOWED - number of channels opened (2) has reached the "
                       "negotiated channel_max (2)")


def test_channel_max_matches_rabbitmq(broker, rabbitmq_url):
    parsed = urlparse(rabbitmq_url)
    assert open_channels_until_refused(parsed.hostname, parsed.port or 5672) == \
        open_channels_until_refused("127.0.0.1", broker.port)


def test_configured_channel_max_is_offered_and_enforced():
    with BrokerThread(BrokerConfig(port=0, management_port=0, channel_max=3)) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        assert conn._impl.params.channel_max == 3
        channels = [conn.channel() for _ in range(3)]
        assert all(channel.is_open for channel in channels)
        conn.close()
        opened, refusal = open_channels_until_refused("127.0.0.1", broker.port)
        assert opened == [1, 7] and "channel_max (2)" in refusal


def test_connection_max_refuses_the_next_connection():
    config = BrokerConfig(port=0, management_port=0, connection_max=2)
    with BrokerThread(config) as broker:
        params = pika.URLParameters(broker.url)
        first, second = pika.BlockingConnection(params), pika.BlockingConnection(params)
        with pytest.raises(ProbableAccessDeniedError) as info:
            pika.BlockingConnection(params)
        assert ("(530) 'NOT_ALLOWED - connection refused: node connection limit (2) is "
                "reached'") in str(info.value)
        first.close()
        third = pika.BlockingConnection(params)  # a place came free
        third.channel().queue_declare("works")
        second.close()
        third.close()


def test_max_message_size_is_configurable():
    config = BrokerConfig(port=0, management_port=0, max_message_size=1000)
    with BrokerThread(config) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.queue_declare("sized")
        channel.basic_publish("", "sized", b"x" * 1000)
        assert channel.basic_get("sized", auto_ack=True)[2] == b"x" * 1000
        channel.basic_publish("", "sized", b"x" * 1001)
        with pytest.raises(ChannelClosedByBroker) as info:
            channel.basic_get("sized")
        assert (info.value.reply_code, info.value.reply_text) == (
            406, "PRECONDITION_FAILED - message size 1001 is larger than configured max "
                 "size 1000")
        assert conn.channel().queue_declare("sized", passive=True).method.message_count == 0
        conn.close()


def test_max_message_size_with_aio_pika():
    config = BrokerConfig(port=0, management_port=0, max_message_size=1000)

    async def scenario(url: str) -> Exception:
        connection = await aio_pika.connect(url)
        channel = await connection.channel(publisher_confirms=False)
        await channel.declare_queue("sized")
        await channel.default_exchange.publish(aio_pika.Message(b"x" * 2000), "sized")
        closed = asyncio.get_running_loop().create_future()
        channel.close_callbacks.add(lambda _, exc: closed.done() or closed.set_result(exc))
        exc = await asyncio.wait_for(closed, 5)
        await connection.close()
        return exc

    with BrokerThread(config) as broker:
        exc = asyncio.run(scenario(broker.url))
    assert isinstance(exc, aio_pika.exceptions.ChannelPreconditionFailed)
    assert "message size 2000 is larger than configured max size 1000" in str(exc)
