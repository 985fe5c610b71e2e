"""Artemis auto-deletes the DLQ./EXP. queues it auto-created once unused
(auto-delete-queues, -delay, -message-count, with Artemis's defaults: on,
at once, only when empty), checked when the last consumer leaves and by
the address-queue scan.  Driven by pika over TCP."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .management_api import http
from .waiting import wait_for, wait_get

WORK = {"x-max-delivery-attempts": 1, "x-dead-letter-address": "DLA",
        "x-auto-create-dead-letter-resources": True}


def poison(channel, queue: str = "orders", body: bytes = b"poison") -> None:
    """A message that dies at its first return: DLQ.<queue> holds it."""
    channel.queue_declare(queue, durable=True, arguments=WORK)
    channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    method = None
    while method is None:
        method, _, _ = channel.basic_get(queue)
    channel.basic_nack(method.delivery_tag, requeue=True)
    assert wait_for(lambda: exists(channel.connection, f"DLQ.{queue}"))


def exists(conn, queue: str) -> bool:
    channel = conn.channel()
    try:
        channel.queue_declare(queue, passive=True)
    except ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return False
    channel.close()
    return True


def consume_then_cancel(conn, queue: str, ack: bool = True) -> None:
    channel = conn.channel()
    got = []
    tag = channel.basic_consume(queue, lambda ch, m, p, b: got.append(m.delivery_tag))
    assert wait_for(lambda: got, step=lambda: conn.process_data_events(time_limit=0.05))
    if ack:
        channel.basic_ack(got[-1], multiple=True)
    channel.basic_cancel(tag)


def test_drained_by_a_consumer_it_goes_when_the_consumer_does(connection):
    channel = connection.channel()
    poison(channel)
    consume_then_cancel(connection, "DLQ.orders")
    assert not exists(connection, "DLQ.orders")
    poison(channel, body=b"again")  # the next death makes it again
    assert wait_get(channel, "DLQ.orders")[2] == b"again"


def test_a_queue_still_holding_messages_stays(connection):
    """The consumer leaves without acknowledging: the message is back."""
    poison(connection.channel())
    consume_then_cancel(connection, "DLQ.orders", ack=False)
    assert exists(connection, "DLQ.orders")


def test_only_the_queues_the_broker_created(connection):
    channel = connection.channel()
    channel.queue_declare("DLQ.orders")
    channel.exchange_declare("DLA", "headers")
    poison(channel)
    consume_then_cancel(connection, "DLQ.orders")
    assert exists(connection, "DLQ.orders")


def test_settings_by_policy_message_count_and_off(broker, connection):
    assert http(broker, "PUT", "/api/policies/%2F/dlqs", {
        "pattern": "^DLQ\\.", "apply-to": "queues",
        "definition": {"auto-delete-queues-message-count": -1}})[0] == 201
    poison(connection.channel())
    consume_then_cancel(connection, "DLQ.orders", ack=False)
    assert not exists(connection, "DLQ.orders")  # any number of messages
    assert http(broker, "PUT", "/api/policies/%2F/dlqs", {
        "pattern": "^DLQ\\.", "apply-to": "queues",
        "definition": {"auto-delete-queues": False}})[0] == 204  # replaced
    poison(connection.channel(), "stock")
    consume_then_cancel(connection, "DLQ.stock")
    assert exists(connection, "DLQ.stock")


def test_a_bad_setting_is_refused(broker):
    status, body = http(broker, "PUT", "/api/policies/%2F/dlqs", {
        "pattern": ".", "definition": {"auto-delete-queues-delay": -5}})
    assert status == 400 and "is not a valid auto-delete delay" in body["reason"]


def test_the_delay_is_waited_out(broker, connection):
    assert http(broker, "PUT", "/api/policies/%2F/dlqs", {
        "pattern": "^DLQ\\.", "definition": {"auto-delete-queues-delay": 400}})[0] == 201
    poison(connection.channel())
    consume_then_cancel(connection, "DLQ.orders")
    assert exists(connection, "DLQ.orders")
    assert wait_for(lambda: not exists(connection, "DLQ.orders"))


@pytest.fixture
def scanning_broker():
    with BrokerThread(BrokerConfig(address_queue_scan_period=200)) as running:
        yield running


def test_the_scan_finds_one_emptied_without_a_consumer(scanning_broker):
    conn = pika.BlockingConnection(pika.URLParameters(scanning_broker.url))
    channel = conn.channel()
    poison(channel)
    assert exists(conn, "DLQ.orders")
    assert wait_get(channel, "DLQ.orders")[2] == b"poison"  # basic.get, no consumer
    assert wait_for(lambda: not exists(conn, "DLQ.orders"))
    conn.close()


def test_it_stays_auto_created_across_a_restart(tmp_path):
    with BrokerThread(data_dir=str(tmp_path)) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        poison(conn.channel())
        conn.close()
    with BrokerThread(data_dir=str(tmp_path)) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        consume_then_cancel(conn, "DLQ.orders")
        assert not exists(conn, "DLQ.orders")
        conn.close()
