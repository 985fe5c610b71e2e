"""Delivery counts and delayed redeliveries survive restarts and `kill -9`
(Artemis's persist-delivery-count-before-delivery and redelivery records;
quorum queues keep their return counts as RabbitMQ's log does)."""

from __future__ import annotations

import os

import pika

from .broker_process import BrokerProcess


def channel_of(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.confirm_delivery()
    return conn, channel


def config_file(data_dir: str, text: str) -> str:
    path = os.path.join(data_dir, "..", os.path.basename(data_dir) + ".toml")
    with open(path, "w") as handle:
        handle.write(text)
    return path


def test_count_persisted_before_delivery_survives_kill_9(data_dir):
    config = config_file(data_dir, "persist-delivery-count-before-delivery = true\n")
    broker = BrokerProcess(data_dir, config)
    conn, channel = channel_of(broker)
    channel.queue_declare("work", durable=True, arguments={"x-max-delivery-attempts": 3})
    channel.basic_publish("", "work", b"m", pika.BasicProperties(delivery_mode=2))
    method, _, _ = channel.basic_get("work")  # delivery 1: on disk before it was sent
    assert method is not None and not method.redelivered
    broker.kill9()

    broker = BrokerProcess(data_dir, config)
    try:
        conn, channel = channel_of(broker)
        method, _, _ = channel.basic_get("work")
        assert method.redelivered  # the crash did not hide delivery 1
        channel.basic_nack(method.delivery_tag, requeue=True)  # delivery 2 failed
        method, _, _ = channel.basic_get("work")
        channel.basic_nack(method.delivery_tag, requeue=True)  # delivery 3: the last
        assert channel.basic_get("work")[0] is None
        conn.close()
    finally:
        broker.stop()
    os.remove(config)


def test_returns_and_pending_delays_survive_kill_9(data_dir):
    broker = BrokerProcess(data_dir)
    conn, channel = channel_of(broker)
    channel.queue_declare("work", durable=True, arguments={
        "x-max-delivery-attempts": 3, "x-redelivery-delay": 600_000})
    channel.basic_publish("", "work", b"m", pika.BasicProperties(delivery_mode=2))
    method, _, _ = channel.basic_get("work")
    channel.basic_nack(method.delivery_tag, requeue=True)  # waits ten minutes
    channel.queue_declare("sync", durable=True)  # a round trip: the flush is under way
    conn.process_data_events(time_limit=0.3)
    broker.kill9()

    broker = BrokerProcess(data_dir)
    try:
        conn, channel = channel_of(broker)
        assert channel.basic_get("work")[0] is None  # still waiting
        assert channel.queue_purge("work").method.message_count == 1  # not lost
        conn.close()
    finally:
        broker.stop()


def test_quorum_delivery_count_survives_a_restart(data_dir):
    broker = BrokerProcess(data_dir)
    conn, channel = channel_of(broker)
    channel.queue_declare("q", durable=True, arguments={"x-queue-type": "quorum"})
    channel.basic_publish("", "q", b"m", pika.BasicProperties(delivery_mode=2))
    for _ in range(2):
        method, _, _ = channel.basic_get("q")
        channel.basic_nack(method.delivery_tag, requeue=True)
    conn.close()
    broker.stop()

    broker = BrokerProcess(data_dir)
    try:
        conn, channel = channel_of(broker)
        method, props, _ = channel.basic_get("q")
        assert method.redelivered
        assert props.headers["x-delivery-count"] == 2
        conn.close()
    finally:
        broker.stop()
