"""POST /api/exchanges/{vhost}/{name}/publish goes through the virtual
host's one publish path, as RabbitMQ's management plugin publishes on a
channel of its own (mandatory, in confirm mode): its refusals, direct
reply-to and counters are a channel's."""

from __future__ import annotations

import pika

from .management_api import http
from .metrics import scrape, value
from .waiting import wait_for

REFUSED = (400, {"error": "bad_request",
                 "reason": "rejected Unable to publish message. Check queue limits."})
FULL = {"x-max-length": 0, "x-overflow": "reject-publish"}


def post(broker, key: str, exchange: str = "amq.default", **properties):
    return http(broker, "POST", f"/api/exchanges/%2F/{exchange}/publish", {
        "routing_key": key, "payload": "x", "payload_encoding": "string",
        "properties": properties})


def test_a_publish_every_queue_refuses_answers_400_rejected(broker):
    http(broker, "PUT", "/api/queues/%2F/full", {"arguments": FULL})
    assert post(broker, "full") == REFUSED


def test_a_publish_one_of_two_queues_refuses_answers_400_as_rabbitmqs_nack_does(broker):
    http(broker, "PUT", "/api/queues/%2F/full", {"arguments": FULL})
    http(broker, "PUT", "/api/queues/%2F/free", {})
    for queue in ("full", "free"):
        http(broker, "POST", f"/api/bindings/%2F/e/amq.fanout/q/{queue}", {"routing_key": ""})
    assert post(broker, "", exchange="amq.fanout") == REFUSED
    assert http(broker, "GET", "/api/queues/%2F/free")[1]["messages"] == 1


def test_a_publish_no_queue_is_routed_to_answers_routed_false(broker):
    assert post(broker, "nowhere") == (200, {"routed": False})


def test_a_publish_to_the_default_exchange_reaches_a_direct_reply_to_consumer(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = conn.channel()
        replies = []
        channel.basic_consume("amq.rabbitmq.reply-to", auto_ack=True,
                              on_message_callback=lambda *args: replies.append(args[3]))
        channel.queue_declare("requests")
        channel.basic_publish("", "requests", b"request",
                              pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
        _method, props, _body = channel.basic_get("requests", auto_ack=True)
        # No queue holds a reply: a mandatory publish is returned, as RabbitMQ's.
        assert post(broker, props.reply_to) == (200, {"routed": False})
        assert wait_for(lambda: conn.process_data_events(0.05) or replies)
        assert replies == [b"x"]
    finally:
        conn.close()


def test_a_publish_naming_direct_reply_to_is_refused_without_a_reply_consumer(broker):
    http(broker, "PUT", "/api/queues/%2F/q", {})
    assert post(broker, "q", reply_to="amq.rabbitmq.reply-to") == (400, {
        "error": "bad_request",
        "reason": "406 PRECONDITION_FAILED - fast reply consumer does not exist"})


def test_an_invalid_expiration_answers_the_channels_406(broker):
    http(broker, "PUT", "/api/queues/%2F/q", {})
    assert post(broker, "q", expiration="soon") == (400, {
        "error": "bad_request",
        "reason": "406 PRECONDITION_FAILED - invalid expiration 'soon': no_integer"})


def test_publishes_are_counted_as_mandatory_publishes_in_confirm_mode(broker):
    """What RabbitMQ 3.10 counts for the same three (checked against it)."""
    http(broker, "PUT", "/api/queues/%2F/q", {})
    http(broker, "PUT", "/api/queues/%2F/full", {"arguments": FULL})
    assert post(broker, "q") == (200, {"routed": True})
    assert post(broker, "nowhere") == (200, {"routed": False})
    assert post(broker, "full") == REFUSED
    got = scrape(broker)
    amqp = {"protocol": "amqp091"}
    assert {name: value(got, f"rabbitmq_global_messages_{name}_total", **amqp) for name in (
        "received", "received_confirm", "routed", "unroutable_returned",
        "unroutable_dropped", "confirmed")} == {
        "received": 3, "received_confirm": 3, "routed": 2, "unroutable_returned": 1,
        "unroutable_dropped": 0, "confirmed": 2}
