"""The delayed-message exchange through pika, as applications use RabbitMQ's
rabbitmq_delayed_message_exchange plugin: an `x-delayed-message` exchange
routing like its `x-delayed-type`, messages held for their `x-delay`.

Debian's RabbitMQ does not ship the plugin, so these follow its README and
its own suite (test/plugin_SUITE.erl: routing_*, delay_order, e2e_delay,
delayed_messages_count, string_delay_header) instead of a differential
run.  No timing is asserted: messages are looked for until a bound, and
"not yet" is checked only against delays far longer than the check."""

from __future__ import annotations

import pika
import pytest

from .delayed import LONG, collect, delayed, publish
from .management_api import http
from .waiting import wait_for, wait_get_noack


def test_messages_arrive_in_delay_order(channel):
    delayed(channel)
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    delays = [500, 100, 300, 200, 100, 400]
    for n, ms in enumerate(delays):
        publish(channel, "dx", "k", f"{ms}:{n}".encode(), ms)
    got = collect(channel, "dq", len(delays))
    assert [int(body.split(b":")[0]) for body, _ in got] == sorted(delays)
    # The two 100 ms messages keep their publish order.
    assert [body for body, _ in got[:2]] == [b"100:1", b"100:4"]


def test_delivered_messages_carry_x_delay_negated(channel):
    delayed(channel)
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    publish(channel, "dx", "k", b"m", 150, headers={"other": "kept"})
    [(_, props)] = collect(channel, "dq", 1)
    assert props.headers == {"x-delay": -150, "other": "kept"}


def test_a_string_delay_is_read_as_an_integer(channel):
    delayed(channel)
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    for ms in ("300", "100", "200"):
        publish(channel, "dx", "k", ms.encode(), ms)
    assert [body for body, _ in collect(channel, "dq", 3)] == [b"100", b"200", b"300"]


@pytest.mark.parametrize("routing_type, binding_keys, routing_keys, routed", [
    ("direct", ["mykey"], ["mykey", "noroute", "mykey"], 2),
    ("fanout", ["mykey", "", "otherkey"], ["mykey", "noroute", "mykey"], 3),
    ("topic", ["a.b.c", "a.*.c", "a.#"], ["a.b.c", "a.z.c", "a.j.k", "b.b.c"], 3),
])
@pytest.mark.parametrize("delay", [0, 100])
def test_routes_as_its_delayed_type(channel, routing_type, binding_keys, routing_keys,
                                    routed, delay):
    delayed(channel, routing_type=routing_type)
    channel.queue_declare("dq")
    for key in binding_keys:
        channel.queue_bind("dq", "dx", key)
    for key in routing_keys:
        publish(channel, "dx", key, key.encode(), delay)
    got = collect(channel, "dq", routed)
    assert len(got) == routed
    assert not collect(channel, "dq", 1, seconds=0.3)


def test_routes_as_a_headers_exchange(channel):
    delayed(channel, routing_type="headers")
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "", arguments={"x-match": "all", "kind": "retry"})
    publish(channel, "dx", "", b"match", 100, headers={"kind": "retry"})
    publish(channel, "dx", "", b"other", 100, headers={"kind": "new"})
    assert [body for body, _ in collect(channel, "dq", 2, seconds=2)] == [b"match"]


def test_a_headers_binding_is_checked_as_the_headers_type_does(connection):
    channel = connection.channel()
    delayed(channel, routing_type="headers")
    channel.queue_declare("dq")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.queue_bind("dq", "dx", "", arguments={"x-match": "some"})
    assert caught.value.reply_code == 406


def test_through_an_exchange_to_exchange_binding(channel):
    # plugin_SUITE e2e_delay: delayed once at the delayed exchange, not again.
    delayed(channel)
    channel.exchange_declare("after", "direct")
    channel.queue_declare("dq")
    channel.queue_bind("dq", "after", "")
    channel.exchange_bind("after", "dx", "")
    for ms in (300, 100, 200):
        publish(channel, "dx", "", str(ms).encode(), ms)
    assert [body for body, _ in collect(channel, "dq", 3)] == [b"100", b"200", b"300"]


def test_no_or_non_delaying_x_delay_routes_at_once(channel):
    delayed(channel)
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    channel.confirm_delivery()
    publish(channel, "dx", "k", b"none", None)
    publish(channel, "dx", "k", b"zero", 0)
    publish(channel, "dx", "k", b"negative", -LONG)
    publish(channel, "dx", "k", b"past-2^32-1", 2**32)
    publish(channel, "dx", "k", b"boolean", True)
    # Routed before the publishes were confirmed: all there now.
    assert channel.queue_declare("dq", passive=True).method.message_count == 5
    got = [body for body, _ in collect(channel, "dq", 5)]
    assert got == [b"none", b"zero", b"negative", b"past-2^32-1", b"boolean"]


def test_a_delay_that_is_not_an_integer_closes_the_connection(broker):
    # The plugin's channel crashes in binary_to_integer/1; RabbitMQ then
    # closes the connection with 541 INTERNAL_ERROR.
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    delayed(channel)
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
        publish(channel, "dx", "k", b"bad", "5s")
        channel.queue_declare("dq", passive=True)
    assert caught.value.reply_code == 541
    assert "x-delay" in caught.value.reply_text
    other = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        assert other.channel().queue_declare("dq", passive=True).method.message_count == 0
    finally:
        other.close()


def test_mandatory_delayed_publish_is_returned_at_once_and_still_delivered(channel):
    # The plugin's README: mandatory is not supported; what a publisher
    # sees is basic.return 312 NO_ROUTE, since the exchange routes to no
    # queue when the message arrives (plugin issues #7, #136).
    delayed(channel)
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    returned = []
    channel.add_on_return_callback(lambda ch, method, props, body: returned.append(
        (method.reply_code, method.reply_text, body)))
    publish(channel, "dx", "k", b"later", 200, mandatory=True)
    publish(channel, "dx", "k", b"now", 0, mandatory=True)
    assert wait_for(lambda: returned, step=lambda: channel.connection.process_data_events(0.05))
    assert returned == [(312, "NO_ROUTE", b"later")]
    assert [body for body, _ in collect(channel, "dq", 2)] == [b"now", b"later"]


def test_confirm_comes_when_stored_not_when_delivered(channel):
    delayed(channel, durable=True)
    channel.queue_declare("dq", durable=True)
    channel.queue_bind("dq", "dx", "k")
    channel.confirm_delivery()
    publish(channel, "dx", "k", b"later", LONG, delivery_mode=2)  # returns once confirmed
    assert channel.queue_declare("dq", passive=True).method.message_count == 0


def test_an_alternate_exchange_gets_a_delayed_message_at_once(channel):
    # As the plugin does (its issue #36): routing to no queue now sends the
    # message to the alternate exchange too.
    channel.exchange_declare("ae", "fanout")
    channel.queue_declare("aeq")
    channel.queue_bind("aeq", "ae")
    delayed(channel, **{"alternate-exchange": "ae"})
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    publish(channel, "dx", "k", b"m", 200)
    assert [body for body, _ in collect(channel, "aeq", 1)] == [b"m"]
    assert [body for body, _ in collect(channel, "dq", 1)] == [b"m"]


def test_delayed_messages_follow_the_exchange_name(channel):
    # The plugin keeps the exchange's name and routes through whatever
    # bindings that name has when the message is due.
    delayed(channel)
    channel.queue_declare("old")
    channel.queue_bind("old", "dx", "k")
    publish(channel, "dx", "k", b"m", 400)
    channel.exchange_delete("dx")
    delayed(channel, routing_type="fanout")
    channel.queue_declare("new")
    channel.queue_bind("new", "dx")
    assert [body for body, _ in collect(channel, "new", 1)] == [b"m"]
    assert channel.queue_declare("old", passive=True).method.message_count == 0


@pytest.mark.parametrize("arguments, text", [
    ({}, ("PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing "
          "exchange type")),
    ({"x-delayed-type": 5}, ("PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must "
                             "be an existing exchange type")),
    ({"x-delayed-type": "x-delayed-message"},
     ("PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for "
      "'x-delayed-type'")),
    ({"x-delayed-type": "x-not-valid-type"},
     "PRECONDITION_FAILED - unknown exchange type 'x-not-valid-type'"),
])
def test_x_delayed_type_must_name_another_exchange_type(connection, arguments, text):
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        channel.exchange_declare("dx", "x-delayed-message", arguments=arguments)
    assert (caught.value.reply_code, caught.value.reply_text) == (406, text)


def test_management_api_shows_messages_delayed(channel, broker):
    # plugin_SUITE delayed_messages_count: the exchange's info item.
    delayed(channel)
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    for ms in (LONG, LONG, LONG + 1, 200):
        publish(channel, "dx", "k", b"m", ms)
    status, shape = http(broker, "GET", "/api/exchanges/%2F/dx")
    assert status == 200
    assert shape["type"] == "x-delayed-message"
    assert shape["arguments"] == {"x-delayed-type": "direct"}
    assert wait_for(lambda: http(broker, "GET", "/api/exchanges/%2F/dx")[1][
        "messages_delayed"] == 3)
    listed = {x["name"]: x for x in http(broker, "GET", "/api/exchanges/%2F")[1]}
    assert listed["dx"]["messages_delayed"] == 3
    assert "messages_delayed" not in listed["amq.direct"]
    status, nodes = http(broker, "GET", "/api/nodes")
    assert "x-delayed-message" in {x["name"] for x in nodes[0]["exchange_types"]}


def test_a_retry_loop_through_a_dead_letter_exchange(channel):
    # A queue whose dead-letter exchange is a delayed one: a rejected
    # message comes back to the work queue after its x-delay, with its
    # death recorded; once delivered it carries x-delay negated, so a
    # second rejection routes it back at once (the plugin's behaviour).
    delayed(channel, "retry")
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "retry"})
    channel.queue_bind("work", "retry", "work")
    publish(channel, "", "work", b"job", None, headers={"x-delay": 150})
    method, props, _ = wait_get_noack(channel, "work")
    assert props.headers == {"x-delay": 150}
    channel.basic_reject(method.delivery_tag, requeue=False)
    method, props, body = wait_get_noack(channel, "work")
    assert body == b"job" and props.headers["x-delay"] == -150
    assert props.headers["x-death"][0]["reason"] == "rejected"
    channel.basic_reject(method.delivery_tag, requeue=False)
    method, props, _ = wait_get_noack(channel, "work")
    assert props.headers["x-death"][0]["count"] == 2
    channel.basic_ack(method.delivery_tag)


def test_cc_and_bcc_route_a_delayed_message_too(channel):
    # CC/BCC are read at publish (BCC is removed then); the delayed copy
    # routes by all the keys when due.
    delayed(channel)
    for name in ("main", "copied", "blind"):
        channel.queue_declare(name)
        channel.queue_bind(name, "dx", name)
    publish(channel, "dx", "main", b"m", 150, headers={"CC": ["copied"], "BCC": ["blind"]})
    for name in ("main", "copied", "blind"):
        [(_, props)] = collect(channel, name, 1)
        assert props.headers == {"CC": ["copied"], "x-delay": -150}


def test_in_a_transaction_a_delayed_message_is_held_when_published(channel):
    # The plugin stores the message when the exchange routes it, which is
    # at publish: a rollback does not take it back.
    delayed(channel)
    channel.queue_declare("dq")
    channel.queue_bind("dq", "dx", "k")
    channel.tx_select()
    publish(channel, "dx", "k", b"rolled back", 150)
    channel.tx_rollback()
    publish(channel, "dx", "k", b"committed", 200)
    channel.tx_commit()
    assert [body for body, _ in collect(channel, "dq", 2)] == [b"rolled back", b"committed"]


def test_at_least_once_dead_letters_into_a_delayed_exchange_arrive_once(channel):
    # The delayed exchange holds the dead letter: taken, so the quorum
    # queue does not keep it to retry (which would deliver it again and
    # again once the reaper ran).
    delayed(channel, "retry")
    channel.queue_declare("parked")
    channel.queue_bind("parked", "retry", "work")
    channel.queue_declare("work", durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "retry",
        "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
    publish(channel, "", "work", b"job", None, headers={"x-delay": 200})
    method, _, _ = wait_get_noack(channel, "work")
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert [body for body, _ in collect(channel, "parked", 1)] == [b"job"]
    # Past a reaper sweep (1 s): still once.
    assert not collect(channel, "parked", 1, seconds=1.5)
    channel.queue_delete("work")
