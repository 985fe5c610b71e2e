"""Message rates and queue depths through the management API, with pika
moving the messages: X_details {rate} next to each counter, the samples of
a range when asked, RabbitMQ's 400 for a range it refuses, and each user
seeing the rates of what they may see.  The sampler's timer is stopped and
ticks are taken by hand, so that no tick falls between two readings."""

from __future__ import annotations

import time

import pytest

from .dead_letters import dead_letters
from .management_api import http
from .users import ctl
from .waiting import wait_get_noack

RANGE = "lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5"


@pytest.fixture
def tick(broker):
    """Take one sample now (the timer no longer does)."""
    rates = broker.server.management.rates
    broker.call(rates.stop)
    broker.call(rates.sample)

    def take() -> None:
        time.sleep(0.05)  # a rate needs time between two ticks
        broker.call(rates.sample)
    return take


def test_a_queues_counters_and_depths_carry_their_rates(broker, channel, tick):
    channel.queue_declare("work")
    for _ in range(6):
        channel.basic_publish("", "work", b"x")
    method, _props, _body = wait_get_noack(channel, "work")
    channel.basic_ack(method.delivery_tag)
    tick()
    queue = http(broker, "GET", "/api/queues/%2F/work")[1]
    stats = queue["message_stats"]
    assert (stats["publish"], stats["deliver_get"], stats["ack"]) == (6, 1, 1)
    assert stats["publish_details"]["rate"] > stats["ack_details"]["rate"] > 0
    assert queue["messages_details"]["rate"] > 0 and queue["messages"] == 5
    assert set(queue["messages_ready_details"]) == {"rate"}
    assert queue["messages_unacknowledged_details"] == {"rate": 0.0}
    assert queue["dead_lettered_details"]["rejected"] == {"rate": 0.0}
    listed = http(broker, "GET", "/api/queues")[1]
    assert listed[0]["message_stats"]["publish_details"] == stats["publish_details"]
    tick()
    stats = http(broker, "GET", "/api/queues/%2F/work")[1]["message_stats"]
    assert stats["publish_details"] == {"rate": 0.0}


def test_a_range_brings_the_samples_newest_first(broker, channel, tick):
    channel.queue_declare("work")
    for _ in range(3):
        channel.basic_publish("", "work", b"x")
    assert http(broker, "GET", "/api/queues/%2F/work")[1]["messages"] == 3
    tick()
    queue = http(broker, "GET", f"/api/queues/%2F/work?{RANGE}")[1]
    depth = queue["messages_details"]
    assert set(depth) == {"rate", "samples", "avg_rate", "avg"}
    assert depth["samples"][0]["sample"] == 3
    assert len(depth["samples"]) == 13  # 60 s every 5 s, both ends
    stamps = [s["timestamp"] for s in depth["samples"]]
    assert stamps == sorted(stamps, reverse=True) and all(t % 5000 == 0 for t in stamps)
    published = queue["message_stats"]["publish_details"]["samples"]
    assert {s["sample"] for s in published} <= {0, 3}
    overview = http(broker, "GET", f"/api/overview?{RANGE}")[1]
    assert overview["queue_totals"]["messages_details"]["samples"][0]["sample"] == 3
    assert "samples" in overview["message_stats"]["publish_details"]
    assert "samples" in overview["dead_lettered_details"]["rejected"]


@pytest.mark.parametrize("query", ["lengths_age=0&lengths_incr=5",
                                   "msg_rates_age=60&msg_rates_incr=0",
                                   "lengths_age=5000&lengths_incr=5"])
def test_a_refused_range_is_a_bad_request(broker, query):
    age, incr = (part.split("=")[1] for part in query.split("&"))
    reason = f"Invalid range parameters: age {age}, incr {incr}"
    assert http(broker, "PUT", "/api/queues/%2F/work", {})[0] == 201
    for path in ("/api/overview", "/api/queues/%2F/work"):
        assert http(broker, "GET", f"{path}?{query}") == (400, {"error": "bad_request",
                                                                 "reason": reason})
    for path in ("/api/queues", "/api/queues/%2F"):  # RabbitMQ's listings say it so
        assert http(broker, "GET", f"{path}?{query}") == (400, {
            "error": "invalid_range_parameters", "reason": reason})
    assert http(broker, "GET", f"/api/queues/%2F/nowhere?{query}")[0] == 404


def test_the_overview_gives_rabbitmqs_global_rates_to_monitors(broker, channel, tick):
    channel.confirm_delivery()
    channel.queue_declare("work")
    for _ in range(4):
        channel.basic_publish("", "work", b"x")
    tick()
    overview = http(broker, "GET", "/api/overview")[1]
    stats = overview["message_stats"]
    assert stats["publish"] == 4 and stats["confirm"] == 4
    assert stats["publish_details"]["rate"] > 0 and stats["confirm_details"]["rate"] > 0
    assert overview["rates_mode"] == "basic"
    assert overview["sample_retention_policies"]["global"] == [600]


def test_a_management_user_sees_the_rates_of_their_own_vhost(broker, channel, tick):
    assert ctl(broker, "add_vhost", "other") == 0
    assert ctl(broker, "add_user", "mandy", "pw") == 0
    assert ctl(broker, "set_user_tags", "mandy", "management") == 0
    assert ctl(broker, "set_permissions", "-p", "other", "mandy", ".*", ".*", ".*") == 0
    dead_letters(channel, [b"a", b"b"])  # in /, which she may not see
    tick()
    mine = http(broker, "GET", "/api/overview", auth=("mandy", "pw"))[1]
    assert mine["message_stats"] == {"publish": 0, "publish_details": {"rate": 0.0},
                                     "deliver_get": 0, "deliver_get_details": {"rate": 0.0},
                                     "ack": 0, "ack_details": {"rate": 0.0}}
    assert mine["dead_lettered"]["rejected"] == 0
    everything = http(broker, "GET", "/api/overview")[1]
    assert everything["dead_lettered"]["rejected"] == 2
    assert everything["dead_lettered_details"]["rejected"]["rate"] > 0


def test_a_deleted_queue_keeps_counting_in_the_overview(broker, channel, tick):
    dead_letters(channel, [b"a", b"b", b"c"])
    channel.queue_delete("work")
    tick()
    assert http(broker, "GET", "/api/overview")[1]["dead_lettered"]["rejected"] == 3
