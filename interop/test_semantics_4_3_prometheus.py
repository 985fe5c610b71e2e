"""What the Prometheus listener shows of RabbitMQ 4.3's quorum queues.

RabbitMQ 4.3.5's rabbitmq_prometheus exports none of the new quorum queue
fields: rabbit_quorum_queue:handle_tick/3 puts delivery_limit,
delayed_retry, messages_by_priority, messages_ready_returned and the
delayed times in the queue_metrics table, and
prometheus_rabbitmq_core_metrics_collector's queue_metrics family reads a
fixed list of keys without them.  What it does change: a delayed message
counts in rabbitmq_queue_messages (num_messages is rabbit_fifo's
messages_total) and not among the ready, and a consumer in a timeout is
left out of rabbitmq_queue_consumers (its `consumers` is
num_active_consumers).  The per-priority and returned counts are ours,
under amqp_."""

from __future__ import annotations

import pika
import pytest

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .metrics import scrape, value
from .waiting import wait_for, wait_get_noack

JOBS = {"vhost": "/", "queue": "jobs"}


@pytest.fixture
def broker():
    with BrokerThread(BrokerConfig(rabbitmq_semantics="4.3", consumer_timeout=1000)) as running:
        yield running


def test_ready_messages_by_priority_and_returned_are_ours(broker, channel):
    channel.queue_declare("jobs", durable=True, arguments={"x-queue-type": "quorum"})
    for priority in (9, 9, 9, None, 0, 0):
        channel.basic_publish("", "jobs", b"x", pika.BasicProperties(priority=priority))
    method, _, _ = wait_get_noack(channel, "jobs")
    channel.basic_reject(method.delivery_tag, requeue=True)  # to the returns queue
    per_object = scrape(broker, "/metrics/per-object")
    by_priority = {dict(labels)["priority"]: count for labels, count
                   in per_object["amqp_queue_messages_ready_by_priority"].items()}
    assert by_priority == {"9": 2, "4": 1, "0": 2}
    assert value(per_object, "amqp_queue_messages_ready_returned", **JOBS) == 1
    assert value(per_object, "rabbitmq_queue_messages_ready", **JOBS) == 6
    summed = scrape(broker)
    assert value(summed, "amqp_queue_messages_ready_by_priority", priority="9") == 2
    assert value(summed, "amqp_queue_messages_ready_returned") == 1
    detailed = scrape(broker, "/metrics/detailed?family=quorum_queue_metrics")
    assert value(detailed, "amqp_queue_messages_ready_returned", **JOBS) == 1


def test_a_3_13_quorum_queue_has_no_priority_counts():
    with BrokerThread() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        connection.channel().queue_declare("jobs", durable=True,
                                           arguments={"x-queue-type": "quorum"})
        per_object = scrape(broker, "/metrics/per-object")
        assert "amqp_queue_messages_ready_returned" not in per_object
        connection.close()


def test_a_delayed_retry_counts_in_the_depth_not_among_the_ready(broker, channel):
    channel.queue_declare("jobs", durable=True, arguments={
        "x-queue-type": "quorum", "x-delayed-retry-type": "all",
        "x-delayed-retry-min": 600_000})
    channel.basic_publish("", "jobs", b"x")
    method, _, _ = wait_get_noack(channel, "jobs")
    channel.basic_reject(method.delivery_tag, requeue=True)
    per_object = scrape(broker, "/metrics/per-object")
    assert value(per_object, "rabbitmq_queue_messages", **JOBS) == 1
    assert value(per_object, "rabbitmq_queue_messages_ready", **JOBS) == 0
    assert value(per_object, "amqp_queue_messages_delayed", **JOBS) == 1


def test_a_consumer_in_a_timeout_is_not_among_the_queues_consumers(broker, connection):
    channel = connection.channel()
    channel.queue_declare("jobs", durable=True, arguments={"x-queue-type": "quorum"})
    channel.basic_publish("", "jobs", b"x")
    cancelled: list = []
    channel.add_on_cancel_callback(cancelled.append)
    channel.basic_consume("jobs", lambda *args: None)
    assert wait_for(lambda: cancelled, 10, lambda: connection.process_data_events(0.1))
    per_object = scrape(broker, "/metrics/per-object")
    assert value(per_object, "rabbitmq_queue_consumers", **JOBS) == 0
    assert value(per_object, "rabbitmq_consumers") == 1  # the channel still has it
