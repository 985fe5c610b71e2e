"""The `user_id` property must name the user who published, unless that
user is an impersonator: over AMQP (pika) and over the HTTP API, with
RabbitMQ's code and words, checked against a real RabbitMQ."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from .management_api import http
from .users import connect, ctl

REFUSED = (406, "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated "
                "user was 'guest'")


def publish_as(channel, user_id: str | None) -> None:
    channel.basic_publish("", "uid", b"body", pika.BasicProperties(user_id=user_id))


def refusal(url: str, user_id: str) -> tuple:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.confirm_delivery()
    channel.queue_declare("uid")
    try:
        with pytest.raises(ChannelClosedByBroker) as info:
            publish_as(channel, user_id)
        return info.value.reply_code, info.value.reply_text
    finally:
        conn.channel().queue_delete("uid")
        conn.close()


def test_a_publish_claiming_another_user_is_refused(broker):
    assert refusal(broker.url, "mallory") == REFUSED


def test_the_users_own_name_passes_and_arrives(broker, channel):
    channel.queue_declare("uid")
    publish_as(channel, "guest")
    method, props, _ = channel.basic_get("uid", auto_ack=True)
    assert method is not None and props.user_id == "guest"


def test_an_impersonator_may_publish_as_anyone(broker):
    assert ctl(broker, "add_user", "relay", "pw") == 0
    assert ctl(broker, "set_user_tags", "relay", "impersonator") == 0
    assert ctl(broker, "set_permissions", "relay", ".*", ".*", ".*") == 0
    conn = connect(broker, "relay", "pw")
    channel = conn.channel()
    channel.queue_declare("uid")
    publish_as(channel, "mallory")
    assert channel.basic_get("uid", auto_ack=True)[1].user_id == "mallory"
    conn.close()


def test_the_http_api_refuses_it_too(broker):
    assert http(broker, "PUT", "/api/queues/%2F/uid", {})[0] == 201
    message = {"routing_key": "uid", "payload": "x", "payload_encoding": "string",
               "properties": {"user_id": "mallory"}}
    assert http(broker, "POST", "/api/exchanges/%2F/amq.default/publish", message) == (
        400, {"error": "bad_request", "reason": f"{REFUSED[0]} {REFUSED[1]}"})
    message["properties"]["user_id"] = "guest"
    assert http(broker, "POST", "/api/exchanges/%2F/amq.default/publish", message)[1] == {
        "routed": True}
    assert http(broker, "GET", "/api/queues/%2F/uid")[1]["messages"] == 1


def test_refusal_matches_rabbitmq(broker, rabbitmq_url):
    assert refusal(broker.url, "mallory") == refusal(rabbitmq_url, "mallory") == REFUSED
