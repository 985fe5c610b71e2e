"""The close that answers a refused basic.publish names basic.publish (class
60, method 40) as RabbitMQ's does, however the publish's frames arrive: in
one read (the connection's fused path), with its body split over two frames
(the general path), or in a transaction.  Content frames that break the
framing name the publish they belong to too, and content with no publish
in progress names no method.  Driven over a raw socket, which reads the
close's class and method ids, against this broker and a real RabbitMQ."""

from __future__ import annotations

import uuid

import pytest
from pamqp import commands as spec

from amqp_server.wire import frames
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties

from .broken_content import broken_content
from .management_api import call
from .rawclient import RawClient

BODY = b"ab"


def publish_frames(channel: int, exchange: str, properties: Properties, how: str) -> bytes:
    header = frames.content_header(len(BODY), encode_properties(properties))
    data = (frames.method_frame(channel, make(spec.Basic.Publish, exchange=exchange,
                                                routing_key="k"))
            + frames.frame(frames.FRAME_HEADER, channel, header))
    if how == "split body":
        return (data + frames.frame(frames.FRAME_BODY, channel, BODY[:1])
                + frames.frame(frames.FRAME_BODY, channel, BODY[1:]))
    return data + frames.frame(frames.FRAME_BODY, channel, BODY)


def refused_publishes(url: str, internal: str) -> dict:
    """(reply code, class id, method id) of each refusal, one channel each."""
    refusals = {
        "missing exchange": (f"pcd.missing.{uuid.uuid4().hex[:8]}", Properties()),
        "internal exchange": (internal, Properties()),
        "wrong user_id": ("", Properties(user_id="not-the-user")),
    }
    client = RawClient.for_url(url)
    seen = {}
    number = 1  # channel 1 is open already: each refusal gets a new one
    try:
        for how in ("one write", "split body", "in a transaction"):
            for name, (exchange, properties) in refusals.items():
                number += 1
                client.open_channel(number)
                if how == "in a transaction":
                    client.send_method(number, make(spec.Tx.Select))
                    assert isinstance(client.read_method()[1], spec.Tx.SelectOk)
                client.send(publish_frames(number, exchange, properties, how))
                channel, close = client.read_method()
                assert (channel, type(close)) == (number, spec.Channel.Close), close
                seen[f"{name}, {how}"] = (close.reply_code, close.class_id, close.method_id)
                client.send_method(number, make(spec.Channel.CloseOk))
    finally:
        client.close()
    return seen


@pytest.fixture
def internal_exchanges(broker, rabbitmq_url, rabbitmq_management_url):
    """An internal exchange of this run's name on both brokers."""
    name = f"pcd.internal.{uuid.uuid4().hex[:8]}"
    bases = (broker.management_url, rabbitmq_management_url)
    for base in bases:
        assert call(base, "PUT", f"/api/exchanges/%2F/{name}",
                    {"type": "fanout", "durable": False, "internal": True})[0] == 201
    yield name
    for base in bases:
        call(base, "DELETE", f"/api/exchanges/%2F/{name}")


def test_a_refused_publish_closes_its_channel_naming_basic_publish_as_rabbitmq(
        broker, rabbitmq_url, internal_exchanges):
    ours = refused_publishes(broker.url, internal_exchanges)
    assert ours == refused_publishes(rabbitmq_url, internal_exchanges)
    assert set(ours.values()) == {(404, 60, 40), (403, 60, 40), (406, 60, 40)}


def test_broken_content_names_the_publish_it_belongs_to_as_rabbitmq(broker, rabbitmq_url):
    ours = broken_content(broker.url)
    assert ours == broken_content(rabbitmq_url)
    assert ours["a second header"][2:] == (60, 40)
    assert ours["a method before the body"][:2] == (
        505, "UNEXPECTED_FRAME - expected content body, got non content body frame instead")
    assert ours["a channel.close amid the content"][2:] == (60, 40)
    assert ours["a body with no publish"][2:] == (0, 0)
