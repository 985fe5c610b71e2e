"""Consumer timeouts: a delivery not acknowledged in time closes its channel
with RabbitMQ's 406 and its messages return to the queue, compared with a
real RabbitMQ (its consumer_timeout and channel tick set for the test with
rabbitmqctl eval, and put back after)."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .management_api import http
from .waiting import wait_for

TIMEOUT_MS = 1000


def rabbitmq_eval(expression: str) -> str:
    done = subprocess.run(["rabbitmqctl", "-q", "eval", expression], capture_output=True,
                          text=True, timeout=60, check=False)
    return done.stdout.strip()


@pytest.fixture
def rabbitmq_short_timeout(rabbitmq_url):
    """RabbitMQ with consumer_timeout 1 s and a 1 s channel tick, for
    channels opened from now on."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed: cannot set RabbitMQ's consumer_timeout")
    before = {key: rabbitmq_eval(f"application:get_env(rabbit, {key}).")
              for key in ("consumer_timeout", "channel_tick_interval")}
    rabbitmq_eval(f"application:set_env(rabbit, consumer_timeout, {TIMEOUT_MS}).")
    rabbitmq_eval("application:set_env(rabbit, channel_tick_interval, 1000).")
    yield rabbitmq_url
    for key, value in before.items():
        number = value.removeprefix("{ok,").removesuffix("}")
        rabbitmq_eval(f"application:set_env(rabbit, {key}, {number}).")


@pytest.fixture
def short_timeout_broker():
    with BrokerThread(BrokerConfig(consumer_timeout=TIMEOUT_MS)) as running:
        yield running


def timed_out(url: str, get: bool = False) -> dict:
    """Three messages delivered, the first acknowledged, the others held
    past the timeout: what closes the channel, and what is in the queue
    after.  The queue's name is this call's own: the reference RabbitMQ is
    shared with whatever else runs against it."""
    queue = f"ct.q.{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(url))
    setup = conn.channel()
    setup.queue_delete(queue)
    setup.queue_declare(queue)
    for body in ("m1", "m2", "m3"):
        setup.basic_publish("", queue, body.encode())
    channel = conn.channel()
    closed: list = []
    channel._impl.add_on_close_callback(lambda ch, reason: closed.append(reason))
    tags: list[int] = []
    if get:
        for _ in range(3):
            tags.append(channel.basic_get(queue)[0].delivery_tag)
    else:
        channel.basic_consume(queue, lambda ch, m, p, b: tags.append(m.delivery_tag))
        wait_for(lambda: len(tags) == 3, step=lambda: conn.process_data_events(time_limit=0.05))
    channel.basic_ack(tags[0])
    wait_for(lambda: closed, seconds=30, step=lambda: conn.process_data_events(time_limit=0.1))
    seen = {"closed by": [(r.reply_code, r.reply_text) for r in closed
                          if isinstance(r, ChannelClosedByBroker)]}
    back = []
    while True:
        method, _, body = setup.basic_get(queue, auto_ack=True)
        if method is None:
            break
        back.append((body.decode(), method.redelivered))
    seen["back in the queue"] = back
    setup.queue_delete(queue)
    conn.close()
    return seen


EXPECTED = {
    "closed by": [(406, "PRECONDITION_FAILED - delivery acknowledgement on channel 2 timed "
                        "out. Timeout value used: 1000 ms. This timeout value can be "
                        "configured, see consumers doc guide to learn more")],
    "back in the queue": [("m2", True), ("m3", True)],
}


def test_an_unacknowledged_delivery_times_out_as_in_rabbitmq(short_timeout_broker,
                                                             rabbitmq_short_timeout):
    ours = timed_out(short_timeout_broker.url)
    assert ours == timed_out(rabbitmq_short_timeout) == EXPECTED


def test_basic_get_deliveries_time_out_too_as_in_rabbitmq(short_timeout_broker,
                                                          rabbitmq_short_timeout):
    ours = timed_out(short_timeout_broker.url, get=True)
    assert ours == timed_out(rabbitmq_short_timeout, get=True) == EXPECTED


def held(url: str, queue: str, arguments: dict | None, seconds: float) -> list:
    """Hold one delivery unacknowledged for `seconds`; the closes seen."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    setup = conn.channel()
    setup.queue_declare(queue, arguments=arguments)
    setup.basic_publish("", queue, b"m")
    channel = conn.channel()
    closed: list = []
    channel._impl.add_on_close_callback(lambda ch, reason: closed.append(reason))
    channel.basic_consume(queue, lambda *a: None)
    wait_for(lambda: closed, seconds=seconds, step=lambda: conn.process_data_events(
        time_limit=0.1))
    conn.close()
    return [r.reply_text for r in closed if isinstance(r, ChannelClosedByBroker)]


def test_the_queue_argument_replaces_the_broker_timeout(broker):
    """The default is 30 minutes; the argument's 500 ms applies."""
    closed = held(broker.url, "ct.arg", {"x-consumer-timeout": 500}, 10)
    assert closed and "Timeout value used: 500 ms" in closed[0]


def test_policy_and_argument_the_smaller_wins(broker):
    status, _ = http(broker, "PUT", "/api/policies/%2F/ct", {
        "pattern": "^ct\\.", "apply-to": "queues", "definition": {"consumer-timeout": 700}})
    assert status == 201
    closed = held(broker.url, "ct.both", {"x-consumer-timeout": 60000}, 10)
    assert closed and "Timeout value used: 700 ms" in closed[0]


def test_a_policy_value_that_is_not_a_timeout_is_refused(broker):
    status, body = http(broker, "PUT", "/api/policies/%2F/ct", {
        "pattern": ".", "definition": {"consumer-timeout": -1}})
    assert status == 400 and "-1 is not a valid consumer timeout" in body["reason"]


def test_an_argument_that_is_not_an_integer_turns_the_timeout_off(short_timeout_broker):
    """x-consumer-timeout is not checked (RabbitMQ); only an integer is enforced."""
    assert held(short_timeout_broker.url, "ct.text", {"x-consumer-timeout": "soon"}, 3) == []


def test_timed_out_deliveries_count_as_returns_for_the_delivery_limit(short_timeout_broker):
    """A consumer that hangs on a message: after the quorum queue's delivery
    limit the message is dead-lettered with reason delivery_limit."""
    url = short_timeout_broker.url
    conn = pika.BlockingConnection(pika.URLParameters(url))
    setup = conn.channel()
    setup.queue_declare("ct.dead")
    setup.queue_declare("ct.quorum", durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 1,
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "ct.dead"})
    setup.basic_publish("", "ct.quorum", b"poison")
    for _ in range(2):
        channel = conn.channel()
        closed: list = []
        channel._impl.add_on_close_callback(
            lambda ch, reason, closed=closed: closed.append(reason))
        channel.basic_consume("ct.quorum", lambda *a: None)
        assert wait_for(lambda closed=closed: closed, seconds=10,
                        step=lambda: conn.process_data_events(time_limit=0.1))
    method, props, body = setup.basic_get("ct.dead", auto_ack=True)
    assert body == b"poison"
    assert props.headers["x-death"][0]["reason"] == "delivery_limit"
    assert props.headers["x-first-death-reason"] == "delivery_limit"
    conn.close()
