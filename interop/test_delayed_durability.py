"""Delayed messages of a durable x-delayed-message exchange survive a
restart and `kill -9` of a broker subprocess (plugin_SUITE's
node_restart_before_delay_expires and node_restart_after_delay_expires):
every confirmed delayed message is delivered once, in delay order, after
the broker comes back; one whose time passed while it was down is routed
as soon as it is up."""

from __future__ import annotations

import time

import pika
import pytest

from .broker_process import BrokerProcess
from .delayed import collect, delayed, drain, publish

DELAYS = [2500, 1000, 2000, 1500, 3000, 1200]


def declare_and_publish(url: str, delays, delivery_mode: int = 2) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    delayed(channel, durable=True)
    channel.queue_declare("dq", durable=True)
    channel.queue_bind("dq", "dx", "k")
    channel.confirm_delivery()
    for ms in delays:
        # Returns once confirmed: the delayed message is on disk.
        publish(channel, "dx", "k", str(ms).encode(), ms, delivery_mode=delivery_mode)
    conn.close()


@pytest.mark.parametrize("stop", ["restart", "kill -9"])
def test_delayed_messages_survive(data_dir, stop):
    broker = BrokerProcess(data_dir)
    try:
        declare_and_publish(broker.url, DELAYS)
        if stop == "kill -9":
            broker.kill9()
        else:
            broker.stop()
        broker = BrokerProcess(data_dir)
        assert drain(broker.url, len(DELAYS)) == [str(ms).encode() for ms in sorted(DELAYS)]
    finally:
        broker.stop()


def test_messages_due_while_the_broker_was_down_are_routed_at_boot(data_dir):
    broker = BrokerProcess(data_dir)
    try:
        declare_and_publish(broker.url, [300, 100, 200])
        broker.kill9()
        time.sleep(0.5)  # past every due time: not a timing assertion
        broker = BrokerProcess(data_dir)
        assert drain(broker.url, 3) == [b"100", b"200", b"300"]
    finally:
        broker.stop()


def test_transient_messages_are_kept_too(data_dir):
    # The plugin writes every delayed message to its disc table, whatever
    # its delivery mode; routed after the restart, it enters the queue.
    broker = BrokerProcess(data_dir)
    try:
        declare_and_publish(broker.url, [1500], delivery_mode=1)
        broker.stop()
        broker = BrokerProcess(data_dir)
        assert drain(broker.url, 1) == [b"1500"]
    finally:
        broker.stop()


def test_a_routed_delayed_message_is_not_routed_again_after_a_restart(data_dir):
    broker = BrokerProcess(data_dir)
    try:
        declare_and_publish(broker.url, [100])
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        assert [body for body, _ in collect(conn.channel(), "dq", 1)] == [b"100"]
        conn.close()
        broker.stop()
        broker = BrokerProcess(data_dir)
        assert drain(broker.url, 1, seconds=1.0) == []
    finally:
        broker.stop()
