"""Artemis-style delayed redelivery, delivery attempts, dead letter and expiry
addresses, and Qpid's DLQs, driven by pika over TCP with scaled-down delays.

Redelivery gaps are checked against the formula with a lower bound that is
exact (the broker must never redeliver early) and a generous upper bound
(a loaded machine may deliver late)."""

from __future__ import annotations

import json
import time
import urllib.request
from base64 import b64encode
from decimal import Decimal

import pika
import pytest

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread
from policies.address_settings import parse

from .waiting import wait_get

SLACK_MS = 1000  # how late a redelivery may be on a busy machine


def consume_times(channel, queue: str, count: int, decide, timeout: float = 10.0):
    """Deliveries as (monotonic ms, body, redelivered); `decide(n, body)`
    returns "nack" (requeue), "reject" (requeue) or "ack"."""
    seen = []

    def on_message(ch, method, _props, body):
        seen.append((time.monotonic() * 1000, body, method.redelivered))
        action = decide(len(seen), body)
        if action == "ack":
            ch.basic_ack(method.delivery_tag)
        elif action == "reject":
            ch.basic_reject(method.delivery_tag, requeue=True)
        else:
            ch.basic_nack(method.delivery_tag, requeue=True)
        if len(seen) >= count:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message)
    deadline = time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        channel.connection.process_data_events(time_limit=0.05)
    channel.stop_consuming()
    return seen


def fanout_dlq(channel, exchange: str, queue: str) -> None:
    channel.exchange_declare(exchange, "fanout")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange)


def test_redelivery_gaps_follow_the_multiplier_and_cap(channel):
    # 50 ms, x2, capped at 300: waits of 50, 100, 200, 300 (pika sends
    # fractions as decimals: its tables have no float type)
    channel.queue_declare("work", arguments={
        "x-redelivery-delay": 50, "x-redelivery-delay-multiplier": Decimal("2.0"),
        "x-max-redelivery-delay": 300})
    channel.basic_publish("", "work", b"flaky")
    seen = consume_times(channel, "work", 5, lambda n, body: "nack" if n < 5 else "ack")
    assert len(seen) == 5
    gaps = [later[0] - earlier[0] for earlier, later in zip(seen, seen[1:])]
    for gap, expected in zip(gaps, (50, 100, 200, 300)):
        assert expected - 2 <= gap < expected + SLACK_MS, (gaps, expected)
    assert [redelivered for _, _, redelivered in seen] == [False, True, True, True, True]


def test_a_delayed_message_does_not_hold_up_the_others(channel):
    channel.queue_declare("work", arguments={"x-redelivery-delay": 400})
    for body in (b"poison", b"ok-1", b"ok-2"):
        channel.basic_publish("", "work", body)
    channel.basic_qos(prefetch_count=1)
    seen = consume_times(channel, "work", 4,
                         lambda n, body: "reject" if body == b"poison" and n == 1 else "ack")
    assert [body for _, body, _ in seen] == [b"poison", b"ok-1", b"ok-2", b"poison"]
    assert seen[2][0] - seen[0][0] < 400  # the others went while poison waited
    assert seen[3][0] - seen[0][0] >= 398


def test_delayed_message_counts_in_management_and_purge(broker, channel):
    channel.queue_declare("work", arguments={"x-redelivery-delay": 60_000})
    channel.basic_publish("", "work", b"later")
    method, _, _ = channel.basic_get("work")
    channel.basic_nack(method.delivery_tag, requeue=True)
    queue = http_json(broker, "/api/queues/%2F/work")
    assert (queue["messages"], queue["messages_ready"], queue["messages_delayed"]) == (1, 0, 1)
    assert channel.basic_get("work")[0] is None  # invisible while it waits
    assert channel.queue_purge("work").method.message_count == 1


def test_max_delivery_attempts_sends_to_the_dead_letter_address(channel):
    fanout_dlq(channel, "dla", "dlq")
    channel.queue_declare("work", arguments={"x-max-delivery-attempts": 3,
                                             "x-dead-letter-address": "dla"})
    channel.basic_publish("", "work", b"poison")
    seen = consume_times(channel, "work", 3, lambda n, body: "nack")
    assert len(seen) == 3
    _, props, body = wait_get(channel, "dlq")
    assert body == b"poison"
    (death,) = props.headers["x-death"]
    assert death["reason"] == "delivery_limit" and death["queue"] == "work"
    channel.connection.process_data_events(time_limit=0.2)
    assert channel.basic_get("work")[0] is None  # never delivered again from work


def test_past_max_attempts_without_address_is_removed_and_counted(broker, channel):
    channel.queue_declare("work", arguments={"x-max-delivery-attempts": 2})
    channel.basic_publish("", "work", b"poison")
    for _ in range(2):
        method, _, _ = channel.basic_get("work")
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert channel.basic_get("work")[0] is None
    queue = http_json(broker, "/api/queues/%2F/work")
    assert queue["dead_letter_dropped_by_reason"]["no_dlx/delivery_limit"] == 1


def test_a_closed_channel_counts_as_an_unsuccessful_delivery(connection):
    setup = connection.channel()
    fanout_dlq(setup, "dla", "dlq")
    setup.queue_declare("work", arguments={"x-max-delivery-attempts": 2,
                                           "x-dead-letter-address": "dla"})
    setup.basic_publish("", "work", b"crashes-consumers")
    for _ in range(2):
        consumer = connection.channel()
        method, _, _ = wait_get(consumer, "work", auto_ack=False)
        assert method is not None
        consumer.close()  # unacked: back to the queue, counted
    _, props, body = wait_get(setup, "dlq")
    assert body == b"crashes-consumers"


def test_recover_counts_too(channel):
    channel.queue_declare("work", arguments={"x-max-delivery-attempts": 2})
    channel.basic_publish("", "work", b"m")
    for _ in range(2):
        method, _, _ = wait_get(channel, "work", auto_ack=False)
        assert method is not None
        channel.basic_recover(requeue=True)
    assert wait_get(channel, "work", timeout=0.3, auto_ack=False)[0] is None


def test_auto_created_dead_letter_queues_per_original_address(channel):
    for exchange in ("orders", "stocks"):
        channel.exchange_declare(exchange, "direct")
        channel.queue_declare(f"{exchange}-work", arguments={
            "x-max-delivery-attempts": 1, "x-dead-letter-address": "DLA",
            "x-auto-create-dead-letter-resources": True})
        channel.queue_bind(f"{exchange}-work", exchange, "new")
        channel.basic_publish(exchange, "new", f"{exchange}-poison".encode())
    for exchange in ("orders", "stocks"):
        method, _, _ = wait_get(channel, f"{exchange}-work", auto_ack=False)
        channel.basic_nack(method.delivery_tag, requeue=True)
    for exchange in ("orders", "stocks"):
        _, props, body = wait_get(channel, f"DLQ.{exchange}")
        assert body == f"{exchange}-poison".encode()
        assert props.headers["_AMQ_ORIG_ADDRESS"] == exchange
        assert props.headers["_AMQ_ORIG_QUEUE"] == f"{exchange}-work"
        assert props.headers["x-death"][0]["reason"] == "delivery_limit"
        assert wait_get(channel, f"DLQ.{exchange}", timeout=0.2)[0] is None
    declared = channel.exchange_declare("DLA", "headers", passive=True)
    assert declared is not None


def test_default_exchange_address_is_the_routing_key(channel):
    channel.queue_declare("jobs", arguments={
        "x-max-delivery-attempts": 1, "x-dead-letter-address": "DLA",
        "x-auto-create-dead-letter-resources": True, "x-dead-letter-queue-prefix": "",
        "x-dead-letter-queue-suffix": ".DLQ"})
    channel.basic_publish("", "jobs", b"j")
    method, _, _ = channel.basic_get("jobs")
    channel.basic_reject(method.delivery_tag, requeue=True)
    _, props, body = wait_get(channel, "jobs.DLQ")
    assert body == b"j" and props.headers["_AMQ_ORIG_ADDRESS"] == "jobs"


def test_expired_messages_go_to_the_expiry_address(channel):
    channel.exchange_declare("orders", "fanout")
    channel.queue_declare("orders-work", arguments={
        "x-message-ttl": 20, "x-dead-letter-exchange": "not-for-expired",
        "x-expiry-address": "EXP", "x-auto-create-expiry-resources": True})
    channel.queue_bind("orders-work", "orders")
    before = int(time.time() * 1000)
    channel.basic_publish("orders", "k", b"stale")
    time.sleep(0.3)  # EXP.orders exists once the first message expired
    _, props, body = wait_get(channel, "EXP.orders")
    assert body == b"stale"
    headers = props.headers
    assert before <= headers["_AMQ_ACTUAL_EXPIRY"] <= int(time.time() * 1000)
    assert headers["_AMQ_ORIG_ADDRESS"] == "orders"
    assert headers["x-death"][0]["reason"] == "expired"


def test_expired_without_expiry_address_or_dlx_is_dropped_and_counted(broker, channel):
    channel.queue_declare("work", arguments={"x-message-ttl": 10})
    channel.basic_publish("", "work", b"stale")
    time.sleep(0.1)
    assert channel.basic_get("work")[0] is None
    queue = http_json(broker, "/api/queues/%2F/work")
    assert queue["expired"] == 1
    assert queue["dead_letter_dropped_by_reason"]["no_dlx/expired"] == 1


def test_max_expiry_delay_gives_messages_without_expiration_a_ttl(channel):
    fanout_dlq(channel, "exp", "expired")
    channel.queue_declare("work", arguments={"x-max-expiry-delay": 30,
                                             "x-expiry-address": "exp"})
    channel.basic_publish("", "work", b"no-expiration")
    channel.basic_publish("", "work", b"long", pika.BasicProperties(expiration="600000"))
    assert {wait_get(channel, "expired")[2] for _ in range(2)} == {b"no-expiration", b"long"}


def test_min_expiry_delay_keeps_short_lived_messages_longer(channel):
    channel.queue_declare("work", arguments={"x-min-expiry-delay": 60_000})
    channel.basic_publish("", "work", b"m", pika.BasicProperties(expiration="1"))
    time.sleep(0.1)
    assert channel.basic_get("work", auto_ack=True)[2] == b"m"


def test_qpid_declares_dle_and_dlq_and_moves_after_the_count(broker, channel):
    channel.queue_declare("tickers", arguments={"x-qpid-maximum-delivery-count": 2,
                                                "x-qpid-dlq-enabled": True})
    channel.exchange_declare("tickers_DLE", "fanout", passive=True)
    channel.queue_declare("tickers_DLQ", passive=True)
    channel.basic_publish("", "tickers", b"bytes-message")
    method, _, _ = channel.basic_get("tickers")
    channel.basic_reject(method.delivery_tag, requeue=True)
    shown = http_post(broker, "/api/queues/%2F/tickers/get",
                      {"count": 1, "ackmode": "reject_requeue_true", "encoding": "auto"})
    assert shown[0]["delivery_count"] == 1  # seen once before, by the client
    assert wait_get(channel, "tickers_DLQ")[2] == b"bytes-message"
    assert channel.basic_get("tickers")[0] is None


def test_qpid_count_is_not_enforced_when_a_consumer_just_goes_away(connection):
    setup = connection.channel()
    setup.queue_declare("tickers", arguments={"x-qpid-maximum-delivery-count": 1,
                                              "x-qpid-dlq-enabled": True})
    setup.basic_publish("", "tickers", b"m")
    consumer = connection.channel()
    assert wait_get(consumer, "tickers", auto_ack=False)[0] is not None
    consumer.close()
    method, _, body = wait_get(setup, "tickers", auto_ack=False)
    assert body == b"m" and method.redelivered  # still here, seen again
    setup.basic_reject(method.delivery_tag, requeue=True)
    assert wait_get(setup, "tickers_DLQ")[2] == b"m"


def test_qpid_without_dlq_discards(broker, channel):
    channel.queue_declare("tickers", arguments={"x-qpid-maximum-delivery-count": 1})
    channel.basic_publish("", "tickers", b"m")
    method, _, _ = channel.basic_get("tickers")
    channel.basic_reject(method.delivery_tag, requeue=True)
    assert channel.basic_get("tickers")[0] is None
    queue = http_json(broker, "/api/queues/%2F/tickers")
    assert queue["dead_letter_dropped_by_reason"]["no_dlx/delivery_limit"] == 1


def test_settings_by_policy(broker, channel):
    fanout_dlq(channel, "dla", "dlq")
    broker.call(broker.broker.set_policy, "/", "artemis", "^work$",
                {"max-delivery-attempts": 2, "dead-letter-address": "dla"})
    channel.queue_declare("work")
    channel.basic_publish("", "work", b"p")
    for _ in range(2):
        method, _, _ = wait_get(channel, "work", auto_ack=False)
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert wait_get(channel, "dlq")[2] == b"p"


def test_settings_by_address_settings_in_the_config():
    settings = parse({"orders.#": {"redelivery-delay": 40, "dead-letter-address": "DLA",
                                   "auto-create-dead-letter-resources": True}})
    config = BrokerConfig(port=0, management_port=0, address_settings=settings)
    with BrokerThread(config) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.queue_declare("orders.eu")
        channel.queue_declare("stocks")
        channel.basic_publish("", "orders.eu", b"o")
        # no number given: Artemis's default of 10 attempts, 40 ms apart
        seen = consume_times(channel, "orders.eu", 10, lambda n, body: "nack")
        assert len(seen) == 10
        assert all(b[0] - a[0] >= 38 for a, b in zip(seen, seen[1:]))
        _, props, body = wait_get(channel, "DLQ.orders.eu")
        assert body == b"o" and props.headers["x-death"][0]["count"] == 1
        channel.basic_publish("", "stocks", b"s")
        method, _, _ = channel.basic_get("stocks")
        channel.basic_nack(method.delivery_tag, requeue=True)
        assert channel.basic_get("stocks", auto_ack=True)[2] == b"s"  # untouched
        conn.close()


# ---- the management API, as an operator reads it --------------------------------

def _request(broker, path: str, data: bytes | None = None):
    request = urllib.request.Request(broker.management_url + path, data=data,
                                     method="POST" if data is not None else "GET")
    request.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def http_json(broker, path: str):
    return _request(broker, path)


def http_post(broker, path: str, body: dict):
    return _request(broker, path, json.dumps(body).encode())


@pytest.fixture(autouse=True)
def _bounded():
    started = time.monotonic()
    yield
    assert time.monotonic() - started < 60, "test ran away"


def test_redeclaring_with_another_delay_is_inequivalent(channel):
    channel.queue_declare("work", arguments={"x-redelivery-delay": 10})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare("work", arguments={"x-redelivery-delay": 20})
    assert info.value.reply_code == 406
    assert "inequivalent arg 'x-redelivery-delay'" in info.value.reply_text


def test_bad_argument_is_refused_with_406(channel):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare("work", arguments={"x-max-delivery-attempts": "three"})
    assert info.value.reply_code == 406
    assert info.value.reply_text == ("PRECONDITION_FAILED - invalid arg "
                                     "'x-max-delivery-attempts' for queue 'work' in vhost "
                                     "'/': \"expected integer, got longstr\"")


@pytest.mark.parametrize("period, swept", [(50, True), (-1, False)])
def test_message_expiry_scan_period(period, swept):
    config = BrokerConfig(port=0, management_port=0, message_expiry_scan_period=period)
    with BrokerThread(config) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.queue_declare("work")
        channel.basic_publish("", "work", b"head, never expires")
        channel.basic_publish("", "work", b"behind it", pika.BasicProperties(expiration="10"))
        deadline = time.monotonic() + (3.0 if swept else 0.4)
        count = 2
        while time.monotonic() < deadline and count == 2:
            time.sleep(0.05)
            count = channel.queue_declare("work", passive=True).method.message_count
        assert count == (1 if swept else 2)
        conn.close()
