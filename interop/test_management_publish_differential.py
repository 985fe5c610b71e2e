"""The management publish against a real RabbitMQ's: the same answers to a
publish every queue refuses, one that one of two queues refuses, one no
queue is routed to, one whose properties a channel refuses, and one to a
direct reply-to consumer (which gets it on both).  Both brokers are set up
the same way over their own HTTP API, under names of this run."""

from __future__ import annotations

import uuid

import pika
import pytest

from .management_api import call
from .waiting import wait_for

FULL = {"x-max-length": 0, "x-overflow": "reject-publish"}


def publish(base: str, key: str, exchange: str = "amq.default", **properties):
    return call(base, "POST", f"/api/exchanges/%2F/{exchange}/publish", {
        "routing_key": key, "payload": "x", "payload_encoding": "string",
        "properties": properties})


@pytest.fixture
def both(broker, rabbitmq_url, rabbitmq_management_url):
    """(management URL, AMQP URL) of each broker, and the names of this run:
    a refusing queue, a free one, a fanout exchange bound to both."""
    prefix = f"mpd.{uuid.uuid4().hex[:8]}"
    names = {"full": f"{prefix}.full", "free": f"{prefix}.free", "x": f"{prefix}.x"}
    pairs = ((broker.management_url, broker.url), (rabbitmq_management_url, rabbitmq_url))
    for base, _ in pairs:
        assert call(base, "PUT", f"/api/queues/%2F/{names['full']}",
                    {"durable": False, "arguments": FULL})[0] == 201
        assert call(base, "PUT", f"/api/queues/%2F/{names['free']}",
                    {"durable": False})[0] == 201
        assert call(base, "PUT", f"/api/exchanges/%2F/{names['x']}",
                    {"type": "fanout", "durable": False})[0] == 201
        for queue in ("full", "free"):
            assert call(base, "POST", f"/api/bindings/%2F/e/{names['x']}/q/{names[queue]}",
                        {"routing_key": ""})[0] == 201
    yield pairs, names
    for base, _ in pairs:
        for queue in ("full", "free"):
            call(base, "DELETE", f"/api/queues/%2F/{names[queue]}")
        call(base, "DELETE", f"/api/exchanges/%2F/{names['x']}")


def answers(base: str, url: str, names: dict) -> list:
    """Each publish's answer, then how many messages the free queue holds."""
    seen = [
        publish(base, names["full"]),
        publish(base, "", exchange=names["x"]),
        publish(base, names["free"]),
        publish(base, f"{names['free']}.nowhere"),
        publish(base, names["free"], reply_to="amq.rabbitmq.reply-to"),
        publish(base, names["free"], expiration="soon"),
    ]
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        declared = conn.channel().queue_declare(names["free"], passive=True)
    finally:
        conn.close()
    return [*seen, declared.method.message_count]


def reply_reached(base: str, url: str, names: dict) -> tuple:
    """(the answer to a publish to a reply consumer's name, what it got)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        replies = []
        channel.basic_consume("amq.rabbitmq.reply-to", auto_ack=True,
                              on_message_callback=lambda *args: replies.append(args[3]))
        channel.basic_publish("", names["free"], b"request",
                              pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
        props = None
        for _ in range(100):
            method, props, _body = channel.basic_get(names["free"], auto_ack=True)
            if method is not None:
                break
        answer = publish(base, props.reply_to)
        wait_for(lambda: conn.process_data_events(0.05) or replies)
        return answer, replies
    finally:
        conn.close()


def test_management_publish_answers_match_rabbitmq(both):
    pairs, names = both
    ours, theirs = (answers(base, url, names) for base, url in pairs)
    assert ours == theirs
    # Not trivially equal: a refusal, a partial refusal (the free queue took
    # that one), a channel's 406s.
    assert ours[0] == ours[1] == (400, {
        "error": "bad_request",
        "reason": "rejected Unable to publish message. Check queue limits."})
    assert ours[4][0] == ours[5][0] == 400 and ours[6] == 2


def test_management_publish_to_a_reply_name_reaches_its_consumer_as_rabbitmqs(both):
    pairs, names = both
    ours, theirs = (reply_reached(base, url, names) for base, url in pairs)
    assert ours == theirs == ((200, {"routed": False}), [b"x"])
