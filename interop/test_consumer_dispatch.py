"""Which consumer gets a message: single active consumer
(`x-single-active-consumer`) and consumer priorities (`x-priority`),
compared with a real RabbitMQ by what each consumer receives."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from .consumers import Recorder, publish, settle
from .management_api import http
from .waiting import wait_for


def single_active(url: str) -> dict:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    setup = conn.channel()
    setup.queue_delete("sac.q")
    setup.queue_declare("sac.q", arguments={"x-single-active-consumer": True})
    first = Recorder(conn, "sac.q", "first", 3)
    second = Recorder(conn, "sac.q", "second", 3)
    publish(conn, "sac.q", [f"a{n}" for n in range(5)])
    settle(conn, first, second, count=3)
    seen = {"before": (list(first.got), list(second.got))}
    first.channel.close()  # its three unacknowledged messages go back
    settle(conn, second, count=3)
    seen["after close"] = list(second.got)
    second.ack_all()
    settle(conn)
    second.ack_all()
    settle(conn)
    third = Recorder(conn, "sac.q", "third", 3)
    second.channel.basic_cancel(second.ctag)
    publish(conn, "sac.q", ["b0", "b1"])
    settle(conn, second, third, count=7)
    seen["after cancel"] = (list(second.got), list(third.got))
    try:
        conn.channel().basic_consume("sac.q", lambda *a: None, exclusive=True)
        seen["exclusive"] = "consuming"
    except ChannelClosedByBroker as exc:
        seen["exclusive"] = (exc.reply_code, exc.reply_text)
    for bad in ("yes", 1):
        try:
            conn.channel().queue_declare("sac.bad", arguments={"x-single-active-consumer": bad})
            seen[f"flag {bad}"] = "declared"
        except ChannelClosedByBroker as exc:
            seen[f"flag {bad}"] = (exc.reply_code, exc.reply_text)
    conn.channel().queue_delete("sac.q")
    conn.close()
    return seen


def priorities(url: str) -> dict:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    setup = conn.channel()
    setup.queue_delete("prio.c")
    setup.queue_declare("prio.c")
    low = Recorder(conn, "prio.c", "low", 2)
    high = Recorder(conn, "prio.c", "high", 2, **{"x-priority": 10})
    middle = Recorder(conn, "prio.c", "middle", 2, **{"x-priority": 5})
    publish(conn, "prio.c", [f"m{n}" for n in range(7)])
    settle(conn, high, middle, low, count=6)
    seen = {"first": (sorted(high.got), sorted(middle.got), sorted(low.got))}
    high.ack_all()
    settle(conn, high, middle, low, count=7)
    seen["after high acks"] = (sorted(high.got), sorted(middle.got), sorted(low.got))
    for bad in ("high", True):
        try:
            conn.channel().basic_consume("prio.c", lambda *a: None,
                                         arguments={"x-priority": bad})
            seen[f"priority {bad}"] = "consuming"
        except ChannelClosedByBroker as exc:
            seen[f"priority {bad}"] = (exc.reply_code, exc.reply_text)
    conn.channel().queue_delete("prio.c")
    conn.close()
    return seen


def test_single_active_consumer_as_rabbitmq(broker, rabbitmq_url):
    ours, theirs = single_active(broker.url), single_active(rabbitmq_url)
    assert ours == theirs
    assert ours["before"] == ([("a0", False), ("a1", False), ("a2", False)], [])
    assert ours["after close"][:3] == [("a0", True), ("a1", True), ("a2", True)]


def test_consumer_priorities_as_rabbitmq(broker, rabbitmq_url):
    ours, theirs = priorities(broker.url), priorities(rabbitmq_url)
    assert ours == theirs
    assert len(ours["first"][0]) == 2 and len(ours["first"][2]) == 2  # high full, then low


def test_the_management_api_shows_the_active_consumer(broker, connection):
    connection.channel().queue_declare("sac.shown", arguments={"x-single-active-consumer": True})
    first = Recorder(connection, "sac.shown", "first", 1)
    Recorder(connection, "sac.shown", "second", 1, **{"x-priority": 3})
    queue = http(broker, "GET", "/api/queues/%2F/sac.shown")[1]
    assert queue["single_active_consumer_tag"] == first.ctag
    consumers = {c["consumer_tag"]: c for c in http(broker, "GET", "/api/consumers")[1]}
    assert consumers[first.ctag]["active"] is True
    assert [c["activity_status"] for c in consumers.values()].count("waiting") == 1
    first.channel.close()
    assert wait_for(lambda: http(broker, "GET", "/api/queues/%2F/sac.shown")[1][
        "single_active_consumer_tag"] not in (None, first.ctag))


def test_the_capability_is_advertised(connection):
    assert connection._impl.server_capabilities["consumer_priorities"] is True


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_single_active_consumer_on_each_queue_type(connection, queue_type):
    channel = connection.channel()
    channel.queue_declare(f"sac.{queue_type}", durable=True, arguments={
        "x-single-active-consumer": True, "x-queue-type": queue_type})
    first = Recorder(connection, f"sac.{queue_type}", "first", 10)
    second = Recorder(connection, f"sac.{queue_type}", "second", 10)
    publish(connection, f"sac.{queue_type}", [f"q{n}" for n in range(6)])
    settle(connection, first, second, count=6)
    assert [b for b, _ in first.got] == [f"q{n}" for n in range(6)] and second.got == []
