"""Delayed retries against this broker and Debian's RabbitMQ side by side.

Debian's RabbitMQ has no delayed-message plugin (so the x-delayed-message
exchange is compared with the plugin's source and README instead, in
test_delayed_pika.py); what applications do there without it is a retry
queue whose TTL dead-letters back into the work queue.  That loop must
look the same to a consumer on both brokers, round after round."""

from __future__ import annotations

import pika
import pytest

from .differential import Scenario, same


def test_a_ttl_retry_queue_loop_looks_the_same(broker, rabbitmq_url):
    def scenario(s: Scenario):
        s.queue("work", x_dead_letter_exchange="", x_dead_letter_routing_key="retry")
        s.queue("retry", x_message_ttl=50, x_dead_letter_exchange="",
                x_dead_letter_routing_key="work")
        s.publish("", s.name("work"), body=b"job", headers={"attempt": 1})
        s.reject("work")   # fails: waits 50 ms in retry, comes back
        s.reject("work")   # fails again
        return [s.look("work"), s.empty("retry")]
    seen = same(broker, rabbitmq_url, scenario)
    deaths = seen[0]["headers"]["x-death"][1]
    assert [(d[1]["queue"][1], d[1]["reason"][1], d[1]["count"][1]) for d in deaths] == [
        ("<p>retry", "expired", 2), ("<p>work", "rejected", 2)]


def test_debians_rabbitmq_has_no_delayed_message_exchange(rabbitmq_url):
    # Why the delayed-message exchange is not compared with a running
    # RabbitMQ: the plugin is not there (3.10 closes the connection, 503).
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        with pytest.raises(pika.exceptions.AMQPError) as caught:
            connection.channel().exchange_declare(
                "delayed-probe", "x-delayed-message", arguments={"x-delayed-type": "direct"})
        assert "x-delayed-message" in str(caught.value)
    finally:
        if connection.is_open:
            connection.close()
