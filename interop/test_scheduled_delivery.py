"""Artemis's scheduled delivery through pika: a message whose
`_AMQ_SCHED_DELIVERY` header holds an absolute time (ms since the epoch) is
routed when published, as Artemis routes it, and each queue keeps it from
consumers until that time; a time already past delivers at once.  Unlike
the delayed-message exchange this works on any exchange, so mandatory
publishes are answered by the routing at publish time."""

from __future__ import annotations

import time

import pika

from .broker_process import BrokerProcess
from .delayed import collect, drain

LONG = 60_000


def at(offset_ms: float) -> int:
    return int(time.time() * 1000 + offset_ms)


def send(channel, queue, body, when, mandatory=False, delivery_mode=None):
    channel.basic_publish("", queue, body, pika.BasicProperties(
        headers={"_AMQ_SCHED_DELIVERY": when}, delivery_mode=delivery_mode),
        mandatory=mandatory)


def test_a_scheduled_message_waits_until_its_time(channel):
    channel.queue_declare("sq")
    send(channel, "sq", b"later", at(LONG))
    send(channel, "sq", b"soon", at(300))
    send(channel, "sq", b"past", at(-1000))
    got = collect(channel, "sq", 2)
    assert [body for body, _ in got] == [b"past", b"soon"]
    assert not collect(channel, "sq", 1, seconds=0.3)


def test_a_scheduled_message_reaches_a_waiting_consumer_not_redelivered(channel):
    channel.queue_declare("sq")
    arrived = []
    channel.basic_consume("sq", lambda ch, method, props, body: arrived.append(
        (body, method.redelivered)), auto_ack=True)
    send(channel, "sq", b"m", at(200))
    deadline = time.monotonic() + 5
    while not arrived and time.monotonic() < deadline:
        channel.connection.process_data_events(0.05)
    assert arrived == [(b"m", False)]


def test_mandatory_is_answered_by_routing_at_publish(channel):
    returned = []
    channel.add_on_return_callback(lambda ch, method, props, body: returned.append(body))
    channel.queue_declare("sq")
    send(channel, "sq", b"routed", at(200), mandatory=True)
    send(channel, "nowhere", b"unroutable", at(200), mandatory=True)
    channel.connection.process_data_events(0.3)
    assert returned == [b"unroutable"]


def test_a_scheduled_string_time_is_read_and_garbage_ignored(channel):
    channel.queue_declare("sq")
    send(channel, "sq", b"string", str(at(200)))
    send(channel, "sq", b"garbage", "tomorrow")  # not a time: delivered at once
    assert [body for body, _ in collect(channel, "sq", 2)] == [b"garbage", b"string"]


def test_scheduled_messages_survive_kill_9(data_dir):
    broker = BrokerProcess(data_dir)
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.queue_declare("dq", durable=True)
        channel.confirm_delivery()
        send(channel, "dq", b"b", at(1500), delivery_mode=2)
        send(channel, "dq", b"a", at(1000), delivery_mode=2)
        conn.close()
        broker.kill9()
        broker = BrokerProcess(data_dir)
        assert sorted(drain(broker.url, 2)) == [b"a", b"b"]
    finally:
        broker.stop()
