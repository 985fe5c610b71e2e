"""queue.* methods and their error paths, driven by pika over TCP."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker


def test_server_named_queue(channel):
    name = channel.queue_declare("", exclusive=True).method.queue
    assert name.startswith("amq.gen-") and len(name) > 20


def test_declare_ok_reports_counts(channel):
    channel.queue_declare("q")
    for _ in range(3):
        channel.basic_publish("", "q", b"x")
    ok = channel.queue_declare("q", passive=True).method
    assert (ok.message_count, ok.consumer_count) == (3, 0)


def test_passive_declare_of_missing_queue(channel):
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("ghost", passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == "NOT_FOUND - no queue 'ghost' in vhost '/'"


def test_redeclare_with_other_durability(channel):
    channel.queue_declare("q", durable=False)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("q", durable=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': "
        "received 'true' but current is 'false'")


def test_redeclare_with_other_argument_names_types(connection):
    channel = connection.channel()
    channel.queue_declare("q", arguments={"x-max-length": 10})
    channel.queue_declare("q", arguments={"x-max-length": 10, "x-unchecked": 1})
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("q", arguments={"x-max-length": 20})
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': "
        "received '20' but current is '10'")
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("q")
    # pika encodes small ints as signed 32-bit: RabbitMQ names that 'signedint'.
    assert "received none but current is the value '10' of type 'signedint'" in (
        info.value.reply_text)


def test_reserved_queue_prefix(channel):
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("amq.mine")
    assert info.value.reply_code == 403


def test_exclusive_queue_is_locked_to_its_connection(broker, channel):
    channel.queue_declare("mine", exclusive=True)
    other = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        for action in (lambda ch: ch.queue_declare("mine", passive=True),
                       lambda ch: ch.queue_declare("mine"),
                       lambda ch: ch.basic_consume("mine", lambda *a: None),
                       lambda ch: ch.basic_get("mine"),
                       lambda ch: ch.queue_purge("mine"),
                       lambda ch: ch.queue_delete("mine"),
                       lambda ch: ch.queue_bind("mine", "amq.fanout")):
            other_channel = other.channel()
            with pytest.raises(ChannelClosedByBroker) as info:
                action(other_channel)
            assert info.value.reply_code == 405
            assert "cannot obtain exclusive access to locked queue 'mine'" in info.value.reply_text
    finally:
        other.close()


def test_exclusive_queue_goes_with_its_connection(broker):
    first = pika.BlockingConnection(pika.URLParameters(broker.url))
    first.channel().queue_declare("temp", exclusive=True)
    first.close()
    second = pika.BlockingConnection(pika.URLParameters(broker.url))
    with pytest.raises(ChannelClosedByBroker) as info:
        second.channel().queue_declare("temp", passive=True)
    assert info.value.reply_code == 404
    second.close()


def test_auto_delete_queue_goes_with_last_consumer(channel):
    channel.queue_declare("ad", auto_delete=True)
    tag = channel.basic_consume("ad", lambda *a: None)
    channel.basic_cancel(tag)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("ad", passive=True)
    assert info.value.reply_code == 404


def test_purge_returns_count(channel):
    channel.queue_declare("q")
    for _ in range(4):
        channel.basic_publish("", "q", b"x")
    assert channel.queue_purge("q").method.message_count == 4
    assert channel.basic_get("q")[0] is None


def test_delete_if_empty_and_if_unused(connection):
    channel = connection.channel()
    channel.queue_declare("q")
    channel.basic_publish("", "q", b"x")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_delete("q", if_empty=True)
    assert info.value.reply_text == "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty"
    channel = connection.channel()
    channel.basic_consume("q", lambda *a: None)
    with pytest.raises(ChannelClosedByBroker) as info:
        connection.channel().queue_delete("q", if_unused=True)
    assert info.value.reply_text == "PRECONDITION_FAILED - queue 'q' in vhost '/' in use"
    connection.channel().queue_delete("q")
    channel = connection.channel()
    channel.queue_declare("full")
    channel.basic_publish("", "full", b"x")
    channel.basic_publish("", "full", b"y")
    assert channel.queue_delete("full").method.message_count == 2
    assert connection.channel().queue_delete("never-was").method.message_count == 0


def test_unbind_stops_routing_and_missing_binding_is_fine(channel):
    channel.queue_declare("q")
    channel.queue_bind("q", "amq.direct", "k")
    channel.queue_unbind("q", "amq.direct", "k")
    channel.queue_unbind("q", "amq.direct", "never-bound")
    channel.basic_publish("amq.direct", "k", b"x")
    assert channel.basic_get("q")[0] is None


def test_empty_queue_name_means_last_declared(channel):
    name = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind("", "amq.direct", "")  # routing key defaults to the queue name
    channel.basic_publish("amq.direct", name, b"x")
    method, _, body = channel.basic_get("")
    assert body == b"x"


def test_empty_queue_name_without_previous_declare(channel):
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_get("")
    assert info.value.reply_text == "NOT_FOUND - no previously declared queue"
