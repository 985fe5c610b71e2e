"""Programs written against RabbitMQ 4.3's quorum queues and dead-lettering,
run with pika over TCP against the broker in 4.3 mode
(`rabbitmq_semantics = "4.3"`): each test is what such an application does
and sees (docs/choosing-semantics.md; the rules, line by line, are in
tests/test_quorum_4_3_*.py)."""

from __future__ import annotations

import datetime
import json
import time

import pika
import pytest

from amqp_server.broker.erlang_hash import phash2
from amqp_server.broker.modulus_hash import PHASH2_RANGE
from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .dead_letters import dead_letters, wait_task
from .management_api import amqpctl, http
from .waiting import wait_get, wait_get_noack


@pytest.fixture
def broker():
    """conftest's `connection` and `channel` open on this one."""
    with BrokerThread(BrokerConfig(rabbitmq_semantics="4.3")) as running:
        yield running


def declare_work(channel, **arguments):
    """A quorum work queue dead-lettering to `work.dlq`, as RabbitMQ's
    documentation sets one up."""
    channel.queue_declare("work.dlq", durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_declare("work", durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "work.dlq", **arguments})


def test_a_poison_message_is_dead_lettered_after_20_failed_deliveries(channel):
    """A consumer that fails on a message and rejects it back: 4.x stops
    after 20 failures (4.0.1's release notes) where 3.13 loops forever."""
    declare_work(channel)
    channel.basic_publish("", "work", b"poison")
    counts = []
    for _ in range(30):
        method, props, _ = wait_get(channel, "work", timeout=2, auto_ack=False)
        if method is None:
            break
        counts.append((props.headers or {}).get("x-delivery-count"))
        channel.basic_reject(method.delivery_tag, requeue=True)
    assert counts == [None, *range(1, 21)]
    _, props, body = wait_get_noack(channel, "work.dlq")
    assert body == b"poison"
    [death] = props.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", "work", 1)
    assert props.headers["x-first-death-reason"] == "delivery_limit"


def test_nacked_messages_come_back_without_counting_towards_the_limit(channel):
    declare_work(channel)
    channel.basic_publish("", "work", b"busy")
    for _ in range(30):
        method, _, _ = wait_get_noack(channel, "work")
        channel.basic_nack(method.delivery_tag, requeue=True)
    method, props, _ = wait_get_noack(channel, "work")
    assert props.headers == {"x-acquired-count": 30}
    assert method.redelivered
    channel.basic_ack(method.delivery_tag)
    assert channel.queue_declare("work.dlq", passive=True).method.message_count == 0


def test_the_counts_follow_the_message_to_the_dead_letter_queue(channel):
    declare_work(channel, **{"x-delivery-limit": 2})
    channel.basic_publish("", "work", b"m")
    for _ in range(3):
        method, _, _ = wait_get_noack(channel, "work")
        channel.basic_reject(method.delivery_tag, requeue=True)
    method, props, _ = wait_get_noack(channel, "work.dlq")
    assert method.redelivered
    assert (props.headers["x-delivery-count"], props.headers["x-acquired-count"]) == (3, 3)


def test_a_closed_channel_counts_as_a_failed_delivery(broker, channel):
    declare_work(channel)
    channel.basic_publish("", "work", b"m")
    other = pika.BlockingConnection(pika.URLParameters(broker.url))
    wait_get_noack(other.channel(), "work")
    other.close()
    _, props, _ = wait_get_noack(channel, "work")
    assert props.headers == {"x-acquired-count": 1, "x-delivery-count": 1}


def test_a_limit_of_minus_one_turns_it_off(channel):
    declare_work(channel, **{"x-delivery-limit": -1})
    channel.basic_publish("", "work", b"poison")
    for _ in range(25):
        method, _, _ = wait_get_noack(channel, "work")
        channel.basic_reject(method.delivery_tag, requeue=True)
    _, props, _ = wait_get_noack(channel, "work")
    assert props.headers["x-delivery-count"] == 25


def test_a_policy_sets_the_limit_of_a_running_queue(broker, channel):
    declare_work(channel)
    channel.basic_publish("", "work", b"m")
    assert amqpctl(broker, "set_policy", "poison", "^work$", '{"delivery-limit": 1}',
                   "--apply-to", "quorum_queues") == 0
    for _ in range(2):
        method, _, _ = wait_get_noack(channel, "work")
        channel.basic_reject(method.delivery_tag, requeue=True)
    assert wait_get(channel, "work", timeout=0.5)[0] is None
    assert wait_get_noack(channel, "work.dlq")[2] == b"m"


def test_a_client_republishing_x_death_is_not_counted(channel):
    """4.0.1's release notes: an x-death a client publishes is not
    interpreted; the application's retry counter has to be its own header."""
    declare_work(channel)
    republished = {"x-death": [{"count": 7, "reason": "rejected", "queue": "work",
                                "exchange": "", "routing-keys": ["work"],
                                "time": datetime.datetime(2024, 1, 1)}],
                   "x-first-death-reason": "expired"}
    channel.basic_publish("", "work", b"again",
                          pika.BasicProperties(headers=republished))
    method, props, _ = wait_get_noack(channel, "work")
    assert props.headers["x-death"][0]["count"] == 7  # passed on as a header
    channel.basic_reject(method.delivery_tag, requeue=False)
    _, props, _ = wait_get_noack(channel, "work.dlq")
    [death] = props.headers["x-death"]  # the client's entry is gone
    assert (death["count"], death["reason"]) == (1, "rejected")
    assert props.headers["x-first-death-reason"] == "rejected"


def test_a_redriven_dead_letter_dies_again_with_its_count_going_on(broker, channel):
    """The workbench's redrive is the broker's own move: the x-death it
    wrote stays the message's history under 4.3 (a client republishing the
    same bytes would start it anew)."""
    dead_letters(channel, [b"order"])
    status, started = http(broker, "POST", "/api/queues/%2F/work.dlq/redrive", {"filter": {}})
    assert status == 202 and wait_task(broker, started["task"])["moved"] == 1
    method, props, _ = wait_get_noack(channel, "work")
    assert props.headers["x-death"][0]["count"] == 1
    channel.basic_reject(method.delivery_tag, requeue=False)
    _, props, _ = wait_get_noack(channel, "work.dlq")
    assert props.headers["x-death"][0]["count"] == 2


def test_a_policy_gives_a_quorum_queue_delayed_retry(broker, channel, capsys):
    """A failed delivery waits delayed-retry-min (times the failures, at
    most delayed-retry-max) before it is delivered again; the queue shows
    the configuration and what waits, over HTTP and in amqpctl."""
    declare_work(channel)
    assert amqpctl(broker, "set_policy", "retry", "^work$",
                   '{"delayed-retry-type": "failed", "delayed-retry-min": 60000, '
                   '"delayed-retry-max": 600000}', "--apply-to", "quorum_queues") == 0
    channel.basic_publish("", "work", b"flaky")
    method, _, _ = wait_get_noack(channel, "work")
    before = time.time() * 1000
    channel.basic_reject(method.delivery_tag, requeue=True)
    queue = http(broker, "GET", "/api/queues/%2F/work")[1]
    assert queue["delayed_retry"] == "failed (min: 60000ms, max: 600000ms)"
    assert (queue["messages_delayed"], queue["messages_ready"], queue["messages"]) == (1, 0, 1)
    assert queue["next_delayed_at"] >= int(before) + 60000  # ms, floored as shown
    assert channel.basic_get("work")[0] is None  # held back
    capsys.readouterr()
    assert amqpctl(broker, "list_queues", "name", "delivery_limit", "delayed_retry",
                   "messages_delayed", "--formatter", "json") == 0
    assert json.loads(capsys.readouterr().out) == [
        {"name": "work", "delivery_limit": 20,
         "delayed_retry": "failed (min: 60000ms, max: 600000ms)", "messages_delayed": 1},
        {"name": "work.dlq", "delivery_limit": 20, "delayed_retry": "disabled",
         "messages_delayed": 0}]


def test_a_delayed_retry_is_never_early(channel):
    declare_work(channel, **{"x-delayed-retry-type": "all", "x-delayed-retry-min": 200})
    channel.basic_publish("", "work", b"flaky")
    method, _, _ = wait_get_noack(channel, "work")
    rejected_at = time.monotonic()
    channel.basic_reject(method.delivery_tag, requeue=True)
    _, props, _ = wait_get_noack(channel, "work")
    assert time.monotonic() - rejected_at >= 0.2
    assert props.headers == {"x-acquired-count": 1, "x-delivery-count": 1}


def test_a_quorum_queue_serves_priorities_strictly(broker, channel):
    """4.3's quorum queues take the message priority without x-max-priority:
    the highest first, 4 for a message with none; the management API counts
    them by priority."""
    declare_work(channel)
    for body, priority in ((b"low", 1), (b"plain", None), (b"urgent", 9), (b"high", 5)):
        channel.basic_publish("", "work", body, pika.BasicProperties(priority=priority))
    queue = http(broker, "GET", "/api/queues/%2F/work")[1]
    assert queue["messages_by_priority"] == {"1": 1, "4": 1, "5": 1, "9": 1}
    assert queue["messages_active_priorities"] == 4
    got = [wait_get(channel, "work")[2] for _ in range(4)]
    assert got == [b"urgent", b"high", b"plain", b"low"]


def test_purge_also_drops_dead_letters_waiting_for_a_target(broker, channel):
    """4.3.0's release notes: purging a quorum queue removes its
    at-least-once dead letters pending delivery (here, to an exchange that
    does not exist yet), and counts them."""
    channel.queue_declare("orders", durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "not-yet",
        "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
    for body in (b"a", b"b"):
        channel.basic_publish("", "orders", body)
    method, _, _ = wait_get_noack(channel, "orders")
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert http(broker, "GET", "/api/queues/%2F/orders")[1]["dead_letter_held"] == 1
    assert channel.queue_purge("orders").method.message_count == 2
    assert http(broker, "GET", "/api/queues/%2F/orders")[1]["dead_letter_held"] == 0


def test_a_modulus_hash_exchange_spreads_keys_over_its_queues(broker, channel):
    """4.3 has x-modulus-hash in its core: each routing key always reaches
    the same one of the bound queues, the one RabbitMQ would pick."""
    channel.exchange_declare("shards", "x-modulus-hash", durable=True)
    for name in ("shard-0", "shard-1", "shard-2"):
        channel.queue_declare(name, durable=True)
        channel.queue_bind(name, "shards")
    keys = [f"customer-{n}" for n in range(12)]
    for _ in range(2):
        for key in keys:
            channel.basic_publish("shards", key, key.encode())
    where = {}
    for name in ("shard-0", "shard-1", "shard-2"):
        while (got := wait_get(channel, name, timeout=0.5))[0] is not None:
            where.setdefault(got[2].decode(), set()).add(name)
    assert set(where) == set(keys)
    assert all(len(queues) == 1 for queues in where.values())
    expected = {key: f"shard-{phash2([key.encode()], PHASH2_RANGE) % 3}" for key in keys}
    assert {key: queues.pop() for key, queues in where.items()} == expected
    types = [t["name"] for t in http(broker, "GET", "/api/nodes")[1][0]["exchange_types"]]
    assert "x-modulus-hash" in types


def test_3_13_mode_refuses_the_modulus_hash_exchange():
    with BrokerThread() as plain:
        connection = pika.BlockingConnection(pika.URLParameters(plain.url))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            connection.channel().exchange_declare("shards", "x-modulus-hash")
        assert closed.value.reply_code == 406
        assert "unknown exchange type 'x-modulus-hash'" in closed.value.reply_text
        connection.close()


def test_a_transient_queue_closes_the_connection_as_4_3_does(broker):
    """The queue pika declares by default (non-durable, non-exclusive) uses
    a feature 4.3 denies: the connection closes with 541 and its words;
    `permit_deprecated_features` in the config takes it again."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.channel().queue_declare("scratch")
    assert closed.value.reply_code == 541
    assert closed.value.reply_text.startswith(
        "INTERNAL_ERROR - Feature `transient_nonexcl_queues` is deprecated.\n")
    with BrokerThread(BrokerConfig(rabbitmq_semantics="4.3", permit_deprecated_features=[
            "transient_nonexcl_queues"])) as permitting:
        again = pika.BlockingConnection(pika.URLParameters(permitting.url))
        assert again.channel().queue_declare("scratch").method.queue == "scratch"
        again.close()
