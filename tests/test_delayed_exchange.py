"""The x-delayed-message exchange and the delayed messages of a virtual
host, driven without a loop: the clock is a fake, due messages are
released by calling `release(now)`."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from amqp_server.broker.message import Message
from amqp_server.broker.vhost import VirtualHost
from amqp_server.errors import AMQPError
from amqp_server.wire.properties import Properties, decode_properties, encode_properties
from amqp_server.wire.table import FieldTable


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Grant:
    unrestricted = True


def message(key: str, headers: dict | None, expiration: str | None = None,
            exchange: str = "dx") -> Message:
    table = None
    if headers is not None:
        table = FieldTable(headers)
        for name, value in headers.items():
            if isinstance(value, int) and not isinstance(value, bool):
                table.types[name] = "long"
    props = encode_properties(Properties(headers=table, expiration=expiration,
                                         content_type="text/plain"))
    return Message.to(exchange, key, struct.pack(">HHQ", 60, 0, 1) + props, b"x")


@pytest.fixture
def vhost():
    clock = Clock()
    host = VirtualHost("/", clock=clock)
    host.declare_exchange("dx", "x-delayed-message",
                          arguments=FieldTable({"x-delayed-type": "direct"}))
    host.bind("dx", host.declare_queue("q", None), "k", None)
    return host


def bodies(queue) -> list[bytes]:
    return [entry.message.body for entry in queue.ready]


def test_a_delayed_message_routes_to_nothing_until_due(vhost):
    outcome = vhost.publish(message("k", {"x-delay": 500}), Grant())
    assert not outcome.routed  # mandatory: basic.return, as the plugin gives
    assert vhost.queues["q"].message_count == 0
    assert vhost.delayed.held_by("dx") == 1
    assert vhost.delayed.release(vhost.clock() + 499) == 0
    assert vhost.delayed.release(vhost.clock() + 500) == 1
    assert vhost.queues["q"].message_count == 1
    assert vhost.delayed.held_by("dx") == 0


def test_release_follows_due_time_then_publish_order(vhost):
    for n, ms in enumerate((300, 100, 200, 100)):
        vhost.publish(message("k", {"x-delay": ms, "n": n}), Grant())
    vhost.delayed.release(vhost.clock() + 1000)
    order = [decode_properties(e.message.header[12:]).headers["n"]
             for e in vhost.queues["q"].ready]
    assert order == [1, 3, 2, 0]


def test_routed_copy_has_x_delay_negated_and_the_rest_byte_for_byte(vhost):
    original = message("k", {"a": "b", "x-delay": 250, "z": 1}, expiration="60000")
    vhost.publish(original, Grant())
    vhost.delayed.release(vhost.clock() + 250)
    [entry] = vhost.queues["q"].ready
    props = decode_properties(entry.message.header[12:])
    assert props.headers == {"a": "b", "z": 1, "x-delay": -250}
    assert props.headers.types["x-delay"] == "long"
    assert (props.expiration, props.content_type) == ("60000", "text/plain")
    assert original.properties.headers["x-delay"] == 250  # the original is untouched


def test_a_negated_delay_is_not_delayed_again(vhost):
    vhost.publish(message("k", {"x-delay": -250}), Grant())
    assert vhost.queues["q"].message_count == 1
    assert len(vhost.delayed) == 0


def test_a_client_publish_with_a_non_integer_string_fails_with_541(vhost):
    with pytest.raises(AMQPError) as caught:
        vhost.publish(message("k", {"x-delay": "soon"}), Grant())
    assert caught.value.code == 541 and caught.value.closes_connection
    assert len(vhost.delayed) == 0


def test_a_deleted_exchange_routes_its_delayed_messages_nowhere(vhost):
    vhost.publish(message("k", {"x-delay": 100}), Grant())
    vhost.delete_exchange("dx")
    assert vhost.delayed.release(vhost.clock() + 100) == 1
    assert vhost.queues["q"].message_count == 0
    assert vhost.counters.unroutable_dropped >= 1


def test_unbound_keys_are_dropped_when_due(vhost):
    vhost.publish(message("other", {"x-delay": 100}), Grant())
    vhost.delayed.release(vhost.clock() + 100)
    assert vhost.queues["q"].message_count == 0


@pytest.mark.parametrize("arguments, text", [
    ({}, "'x-delayed-type' must be an existing exchange type"),
    ({"x-delayed-type": "x-delayed-message"}, "can't be used for 'x-delayed-type'"),
    ({"x-delayed-type": "nope"}, "unknown exchange type 'nope'"),
])
def test_declare_checks_x_delayed_type(arguments, text):
    host = VirtualHost("/")
    with pytest.raises(AMQPError) as caught:
        host.declare_exchange("dx", "x-delayed-message", arguments=FieldTable(arguments))
    assert caught.value.code == 406 and text in caught.value.explanation


def test_scheduled_delivery_is_held_by_the_queue(vhost):
    queue = vhost.declare_queue("s", None)
    vhost.publish(message("s", {"_AMQ_SCHED_DELIVERY": int(vhost.clock()) + 400},
                          exchange=""), Grant())
    assert queue.message_count == 0 and queue.delayed_count == 1
    queue.redeliver_due(vhost.clock() + 400)
    assert queue.message_count == 1
    assert not queue.ready[0].redelivered


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=40),
       st.lists(st.integers(min_value=0, max_value=6000), min_size=1, max_size=10))
def test_every_message_is_routed_once_in_due_then_publish_order(delays, ticks):
    """Whatever the delays and however the clock advances, each message is
    routed once, none before its time, in (due, publish) order."""
    clock = Clock()
    host = VirtualHost("/", clock=clock)
    host.declare_exchange("dx", "x-delayed-message",
                          arguments=FieldTable({"x-delayed-type": "fanout"}))
    queue = host.declare_queue("q", None)
    host.bind("dx", queue, "", None)
    start = clock.now
    for n, ms in enumerate(delays):
        host.publish(message("", {"x-delay": ms, "n": n}), Grant())
    for tick in sorted(ticks) + [6000]:
        clock.now = start + tick
        host.delayed.release(clock.now, limit=len(delays))
        for entry in queue.ready:
            n = decode_properties(entry.message.header[12:]).headers["n"]
            assert delays[n] <= tick
    routed = [decode_properties(e.message.header[12:]).headers["n"] for e in queue.ready]
    assert routed == sorted(range(len(delays)), key=lambda n: (delays[n], n))
    assert len(host.delayed) == 0 and host.delayed.held_by("dx") == 0
