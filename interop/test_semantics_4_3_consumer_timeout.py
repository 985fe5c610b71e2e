"""Consumer timeouts as RabbitMQ 4.3 evaluates them (its release notes: in
the queues; classic queues and streams have none), with pika against the
broker in 4.3 mode: a quorum queue takes back only the timed-out consumer's
deliveries and that consumer hears basic.cancel; the channel stays open."""

from __future__ import annotations

import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .management_api import http
from .waiting import wait_for, wait_get_noack

TIMEOUT_MS = 1000


@pytest.fixture
def broker():
    """conftest's `connection` and `channel` open on this one."""
    with BrokerThread(BrokerConfig(rabbitmq_semantics="4.3",
                                   consumer_timeout=TIMEOUT_MS)) as running:
        yield running


def queue_state(broker, name: str) -> tuple[int, int]:
    queue = http(broker, "GET", f"/api/queues/%2F/{name}")[1]
    return queue["messages_ready"], queue["messages_unacknowledged"]


def test_a_timed_out_quorum_consumer_is_cancelled_and_its_messages_go_back(broker,
                                                                             connection):
    channel = connection.channel()
    channel.queue_declare("work", durable=True, arguments={"x-queue-type": "quorum"})
    for body in (b"one", b"two"):
        channel.basic_publish("", "work", body)
    held, cancelled = [], []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume("work", lambda ch, method, props, body: held.append(method))
    assert wait_for(lambda: len(held) == 2, 5, lambda: connection.process_data_events(0.05))
    assert wait_for(lambda: cancelled == [tag], 10,
                    lambda: connection.process_data_events(0.1))
    assert queue_state(broker, "work") == (2, 0)
    # A late ack of a timed-out delivery is taken and does nothing.
    channel.basic_ack(held[0].delivery_tag)
    _, props, body = wait_get_noack(channel, "work")
    assert body == b"one" and props.headers == {"x-acquired-count": 1}  # not a failure
    assert channel.is_open


def test_only_the_timed_out_consumers_messages_go_back(broker, connection):
    channel = connection.channel()
    channel.queue_declare("work", durable=True, arguments={"x-queue-type": "quorum"})
    for body in (b"slow", b"fast"):
        channel.basic_publish("", "work", body)
    slow, fast = [], []
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume("work", lambda ch, m, p, b: slow.append(m))
    channel.basic_consume("work", lambda ch, m, p, b: fast.append(m),
                          arguments={"x-consumer-timeout": 600_000})
    assert wait_for(lambda: slow and fast, 5, lambda: connection.process_data_events(0.05))
    assert wait_for(lambda: queue_state(broker, "work") == (1, 1), 10,
                    lambda: connection.process_data_events(0.1))
    channel.basic_ack(fast[0].delivery_tag)  # its own stayed delivered


def test_a_classic_queue_has_no_consumer_timeout_in_4_3(broker, connection):
    channel = connection.channel()
    channel.queue_declare("plain", durable=True)
    channel.basic_publish("", "plain", b"m")
    method, _, _ = wait_get_noack(channel, "plain")
    connection.sleep(2.5 * TIMEOUT_MS / 1000)
    assert channel.is_open and queue_state(broker, "plain") == (0, 1)
    channel.basic_ack(method.delivery_tag)


def test_a_basic_get_past_its_timeout_closes_the_channel(broker, connection):
    channel = connection.channel()
    closed: list = []
    channel._impl.add_on_close_callback(lambda ch, reason: closed.append(reason))
    channel.queue_declare("work", durable=True, arguments={"x-queue-type": "quorum"})
    channel.basic_publish("", "work", b"m")
    wait_get_noack(channel, "work")
    assert wait_for(lambda: closed, 10, lambda: connection.process_data_events(0.1))
    [reason] = closed
    assert isinstance(reason, ChannelClosedByBroker) and reason.reply_code == 406
    # rabbit_channel:handle_queue_actions/2 for a released ... timeout action
    # of a tag it has no consumer for: handle_consumer_timed_out(-1, ...)
    assert reason.reply_text == (
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout "
        "value used: -1 ms. This timeout value can be configured, see consumers doc guide "
        "to learn more")
    assert queue_state(broker, "work") == (1, 0)
    _, props, _ = wait_get_noack(connection.channel(), "work")
    assert props.headers == {"x-acquired-count": 1}  # the timeout, not the close, counted


def test_global_qos_is_taken_as_a_consumers_prefetch(broker, connection):
    """4.3 denies the deprecated global qos: a quorum queue consumer on a
    channel with basic.qos global=true is accepted (3.13 refuses it with
    540) and the count is its own prefetch."""
    channel = connection.channel()
    channel.queue_declare("work", durable=True, arguments={"x-queue-type": "quorum"})
    for n in range(3):
        channel.basic_publish("", "work", str(n).encode())
    channel.basic_qos(prefetch_count=1, global_qos=True)
    got = []
    channel.basic_consume("work", lambda ch, m, p, b: got.append(b),
                          arguments={"x-consumer-timeout": 600_000})
    connection.process_data_events(0.5)
    assert got == [b"0"]
