"""Exchanges and bindings, driven by pika's BlockingConnection over TCP."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker


def declare_queues(channel, *names):
    for name in names:
        channel.queue_declare(name, auto_delete=False)


def drain(channel, queue):
    bodies = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def test_default_exchange_routes_by_queue_name(channel):
    declare_queues(channel, "q1")
    channel.basic_publish("", "q1", b"m")
    assert drain(channel, "q1") == [b"m"]


def test_direct_exchange_routes_on_exact_key(channel):
    channel.exchange_declare("d", "direct")
    declare_queues(channel, "a", "b")
    channel.queue_bind("a", "d", "red")
    channel.queue_bind("b", "d", "blue")
    channel.basic_publish("d", "red", b"r")
    channel.basic_publish("d", "green", b"g")
    assert drain(channel, "a") == [b"r"]
    assert drain(channel, "b") == []


def test_fanout_ignores_routing_key(channel):
    channel.exchange_declare("f", "fanout")
    declare_queues(channel, "a", "b")
    channel.queue_bind("a", "f")
    channel.queue_bind("b", "f", "anything")
    channel.basic_publish("f", "whatever", b"x")
    assert drain(channel, "a") == [b"x"]
    assert drain(channel, "b") == [b"x"]


def test_topic_wildcards(channel):
    channel.exchange_declare("t", "topic")
    declare_queues(channel, "star", "hash", "exact")
    channel.queue_bind("star", "t", "stock.*.nyse")
    channel.queue_bind("hash", "t", "stock.#")
    channel.queue_bind("exact", "t", "stock.ibm.nyse")
    for key in ("stock.ibm.nyse", "stock.nyse", "stock", "stock.a.b.c", "other"):
        channel.basic_publish("t", key, key.encode())
    assert drain(channel, "star") == [b"stock.ibm.nyse"]
    assert drain(channel, "hash") == [b"stock.ibm.nyse", b"stock.nyse", b"stock", b"stock.a.b.c"]
    assert drain(channel, "exact") == [b"stock.ibm.nyse"]


@pytest.mark.parametrize("mode,headers,expected", [
    ("all", {"a": 1, "b": "x"}, True),
    ("all", {"a": 1}, False),
    ("any", {"a": 1}, True),
    ("any", {"c": 1}, False),
    ("all", {"a": 1, "b": "x", "x-extra": 5}, True),
    ("all-with-x", {"a": 1, "b": "x", "x-k": "v"}, True),
    ("all-with-x", {"a": 1, "b": "x"}, False),
    ("any-with-x", {"x-k": "v"}, True),
])
def test_headers_exchange_x_match(channel, mode, headers, expected):
    channel.exchange_declare("h", "headers")
    declare_queues(channel, "hq")
    args = {"x-match": mode, "a": 1, "b": "x"}
    if mode.endswith("with-x"):
        args["x-k"] = "v"
    channel.queue_bind("hq", "h", arguments=args)
    channel.basic_publish("h", "", b"m", pika.BasicProperties(headers=headers))
    assert drain(channel, "hq") == ([b"m"] if expected else [])


def test_headers_binding_with_bad_x_match_is_refused(channel):
    channel.exchange_declare("h", "headers")
    declare_queues(channel, "hq")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_bind("hq", "h", arguments={"x-match": "some"})
    assert info.value.reply_code == 406


def test_exchange_to_exchange_binding(channel):
    channel.exchange_declare("src", "topic")
    channel.exchange_declare("dst", "fanout")
    declare_queues(channel, "q")
    channel.exchange_bind("dst", "src", "a.#")
    channel.queue_bind("q", "dst")
    channel.basic_publish("src", "a.b", b"in")
    channel.basic_publish("src", "b.a", b"out")
    assert drain(channel, "q") == [b"in"]
    channel.exchange_unbind("dst", "src", "a.#")
    channel.basic_publish("src", "a.b", b"after")
    assert drain(channel, "q") == []


def test_exchange_binding_cycle_delivers_once(channel):
    channel.exchange_declare("x1", "fanout")
    channel.exchange_declare("x2", "fanout")
    declare_queues(channel, "q")
    channel.exchange_bind("x2", "x1")
    channel.exchange_bind("x1", "x2")
    channel.queue_bind("q", "x2")
    channel.basic_publish("x1", "", b"once")
    assert drain(channel, "q") == [b"once"]


def test_alternate_exchange_gets_unroutable(channel):
    channel.exchange_declare("ae", "fanout")
    channel.exchange_declare("main", "direct", arguments={"alternate-exchange": "ae"})
    declare_queues(channel, "routed", "unrouted")
    channel.queue_bind("routed", "main", "k")
    channel.queue_bind("unrouted", "ae")
    channel.basic_publish("main", "k", b"1")
    channel.basic_publish("main", "other", b"2")
    assert drain(channel, "routed") == [b"1"]
    assert drain(channel, "unrouted") == [b"2"]


def test_publishing_to_internal_exchange_is_refused(channel):
    channel.exchange_declare("int", "fanout", internal=True)
    channel.basic_publish("int", "", b"x")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("probe")  # the error arrives on the next sync call
    assert info.value.reply_code == 403
    assert "cannot publish to internal exchange 'int'" in info.value.reply_text


def test_publishing_to_missing_exchange_closes_channel(connection):
    channel = connection.channel()
    channel.basic_publish("nope", "", b"x")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("probe")
    assert info.value.reply_code == 404
    assert info.value.reply_text == "NOT_FOUND - no exchange 'nope' in vhost '/'"
    assert connection.channel().is_open  # only the channel closed


def test_amq_prefix_is_reserved(connection):
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_declare("amq.mine", "direct")
    assert info.value.reply_code == 403
    assert "exchange name 'amq.mine' contains reserved prefix 'amq.*'" in info.value.reply_text
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_delete("amq.direct")
    assert info.value.reply_code == 403


def test_standard_exchanges_exist(channel):
    for name in ("amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"):
        channel.exchange_declare(name, passive=True)


def test_exchange_redeclare_inequivalent_and_unknown_type(connection):
    channel = connection.channel()
    channel.exchange_declare("e", "direct", durable=False)
    channel.exchange_declare("e", "direct", durable=False)  # equivalent: fine
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_declare("e", "direct", durable=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == ("PRECONDITION_FAILED - inequivalent arg 'durable' for "
                                     "exchange 'e' in vhost '/': received 'true' but current "
                                     "is 'false'")
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_declare("e2", "no-such-type")
    assert info.value.reply_code == 406
    assert "unknown exchange type 'no-such-type'" in info.value.reply_text


def test_exchange_passive_missing_and_delete_if_unused(connection):
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_declare("ghost", passive=True)
    assert info.value.reply_code == 404
    channel = connection.channel()
    channel.exchange_declare("used", "fanout")
    channel.queue_declare("q")
    channel.queue_bind("q", "used")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_delete("used", if_unused=True)
    assert info.value.reply_code == 406
    channel = connection.channel()
    channel.exchange_delete("used")
    channel.exchange_delete("never-existed")  # succeeds, as in RabbitMQ
    with pytest.raises(ChannelClosedByBroker):
        channel.exchange_declare("used", passive=True)


def test_auto_delete_exchange_goes_with_last_binding(channel):
    channel.exchange_declare("ad", "fanout", auto_delete=True)
    channel.queue_declare("q")
    channel.queue_bind("q", "ad")
    channel.queue_unbind("q", "ad")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_declare("ad", passive=True)
    assert info.value.reply_code == 404


def test_binding_to_default_exchange_is_refused(channel):
    channel.queue_declare("q")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_bind("q", "", "q")
    assert info.value.reply_code == 403
    assert "operation not permitted on the default exchange" in info.value.reply_text


def test_bind_to_missing_exchange_or_queue(connection):
    channel = connection.channel()
    channel.queue_declare("q")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_bind("q", "missing-x")
    assert info.value.reply_code == 404
    assert "no exchange 'missing-x'" in info.value.reply_text
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_bind("missing-q", "amq.direct")
    assert info.value.reply_code == 404
    assert "no queue 'missing-q'" in info.value.reply_text
