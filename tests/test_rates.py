"""The sampler behind the management API's rates and samples, without any
socket: ticks taken by hand at chosen times, queues filled and drained
through their own methods, answers read in RabbitMQ's shapes."""

from __future__ import annotations

import pytest

from amqp_server.broker.broker import Broker
from amqp_server.broker.message import Message
from amqp_server.management.rates import (
    OVERVIEW_SAMPLES,
    QUEUE_FIELDS,
    QUEUE_SAMPLES,
    History,
    InvalidRange,
    Range,
    Rates,
    ranges,
)
from amqp_server.wire.frames import content_header
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable

T0 = 1_800_000_000_000  # ms, a multiple of 5 s
NO_RANGE = {"lengths": None, "msg_rates": None}


def message(key: str) -> Message:
    msg = Message.to("", key, content_header(1, encode_properties(Properties())), b"x")
    msg.inspect()
    return msg


@pytest.fixture
def broker():
    return Broker()


@pytest.fixture
def rates(broker):
    return Rates(broker)


def fill(queue, count: int) -> None:
    for _ in range(count):
        queue.enqueue(message(queue.name))


def last_seconds(now_ms: int, age: int = 60) -> dict:
    return ranges({"lengths_age": str(age), "lengths_incr": "5",
                   "msg_rates_age": str(age), "msg_rates_incr": "5"}, now_ms)


# ---- the query parameters --------------------------------------------------------

def test_no_range_unless_both_age_and_increment_are_integers():
    assert ranges({}) == NO_RANGE
    assert ranges({"lengths_age": "60"}) == NO_RANGE
    assert ranges({"msg_rates_age": "60", "msg_rates_incr": "five"}) == NO_RANGE


def test_lengths_end_at_the_next_increment_and_rates_at_the_last_one():
    found = ranges({"lengths_age": "60", "lengths_incr": "5",
                    "msg_rates_age": "30", "msg_rates_incr": "10"}, T0 + 2_000)
    assert found["lengths"] == Range(T0 + 5_000 - 60_000, T0 + 5_000, 5_000)
    assert found["msg_rates"] == Range(T0 - 30_000, T0, 10_000)


@pytest.mark.parametrize(("age", "incr"), [("0", "5"), ("60", "0"), ("-5", "5"), ("6000", "5")])
def test_a_range_rabbitmq_refuses_is_refused_with_its_words(age, incr):
    with pytest.raises(InvalidRange, match=f"^Invalid range parameters: age {age}, incr {incr}$"):
        ranges({"lengths_age": age, "lengths_incr": incr})


# ---- one object's history ------------------------------------------------------------

def test_an_unchanging_object_keeps_one_reading_and_no_ring():
    history = History(4, 10, (1, 2))
    for tick in range(11, 30):
        history.record(tick, (1, 2))
    assert history.ring is None
    assert history.at(29) == (1, 2) and history.at(10) == (1, 2)
    assert history.at(9) == (0, 0)  # before it existed


def test_a_change_keeps_a_ring_of_the_window_until_a_whole_window_is_quiet():
    history = History(4, 0, (0,))
    for tick in range(1, 3):
        history.record(tick, (0,))
    history.record(3, (5,))
    assert len(history.ring) == 4
    assert [history.at(tick) for tick in range(4)] == [(0,), (0,), (0,), (5,)]
    history.record(4, (7,))
    assert [history.at(tick) for tick in range(1, 5)] == [(0,), (0,), (5,), (7,)]
    for tick in range(5, 8):
        history.record(tick, (7,))
    assert history.ring is not None
    history.record(8, (7,))  # four ticks without a change
    assert history.ring is None and history.at(8) == (7,)


# ---- rates and samples ---------------------------------------------------------------

def test_a_queues_rate_is_the_change_between_the_last_two_ticks_per_second(broker, rates):
    queue = broker.vhosts["/"].declare_queue("work", None)
    rates.sample(T0)
    fill(queue, 10)
    rates.sample(T0 + 5_000)
    answer = rates.queue(queue, NO_RANGE)
    assert answer["message_stats"]["publish_details"] == {"rate": 2.0}
    assert answer["message_stats"]["ack_details"] == {"rate": 0.0}
    assert answer["messages_details"] == {"rate": 2.0}
    assert answer["messages_ready_details"] == {"rate": 2.0}
    assert answer["dead_lettered_details"]["rejected"] == {"rate": 0.0}
    entries = [queue.take_one() for _ in range(4)]
    queue.settle(entries)
    rates.sample(T0 + 10_000)
    stats = rates.queue(queue, NO_RANGE)["message_stats"]
    assert (stats["publish_details"], stats["deliver_get_details"], stats["ack_details"]) == (
        {"rate": 0.0}, {"rate": 0.8}, {"rate": 0.8})
    assert rates.queue(queue, NO_RANGE)["messages_details"] == {"rate": -0.8}


def test_samples_newest_first_with_rabbitmqs_rate_average_rate_and_average(broker, rates):
    queue = broker.vhosts["/"].declare_queue("work", None)
    rates.sample(T0)
    fill(queue, 5)
    rates.sample(T0 + 5_000)
    fill(queue, 10)
    rates.sample(T0 + 10_000)
    details = rates.queue(queue, last_seconds(T0 + 10_000, 10))
    publish = details["message_stats"]["publish_details"]
    assert publish["samples"] == [{"sample": 15, "timestamp": T0 + 10_000},
                                  {"sample": 5, "timestamp": T0 + 5_000},
                                  {"sample": 0, "timestamp": T0}]
    assert publish["rate"] == 2.0  # the last two samples: 10 in 5 s
    assert publish["avg_rate"] == 1.5  # 15 over the 10 s the samples span
    assert publish["avg"] == pytest.approx(20 / 3)
    assert [s["sample"] for s in details["messages_details"]["samples"]] == [15, 5, 0]


def test_points_between_ticks_read_the_tick_before_and_zeros_precede_the_first(broker, rates):
    queue = broker.vhosts["/"].declare_queue("work", None)
    fill(queue, 2)
    rates.sample(T0 + 1_000)  # the sampler started after T0
    fill(queue, 3)
    rates.sample(T0 + 12_000)
    span = ranges({"msg_rates_age": "20", "msg_rates_incr": "5"}, T0 + 14_000)
    samples = rates.queue(queue, span)["message_stats"]["publish_details"]["samples"]
    assert samples == [{"sample": 2, "timestamp": T0 + 10_000},
                       {"sample": 2, "timestamp": T0 + 5_000},
                       {"sample": 0, "timestamp": T0},
                       {"sample": 0, "timestamp": T0 - 5_000},
                       {"sample": 0, "timestamp": T0 - 10_000}]
    later = ranges({"msg_rates_age": "10", "msg_rates_incr": "5"}, T0 + 15_000)
    samples = rates.queue(queue, later)["message_stats"]["publish_details"]["samples"]
    assert [s["sample"] for s in samples] == [5, 2, 2]


def test_no_samples_before_the_first_tick(broker, rates):
    queue = broker.vhosts["/"].declare_queue("work", None)
    answer = rates.queue(queue, last_seconds(T0))
    assert answer["messages_details"] == {"rate": 0.0, "samples": []}


def test_a_queue_declared_between_ticks_was_empty_before(broker, rates):
    rates.sample(T0)
    queue = broker.vhosts["/"].declare_queue("late", None)
    fill(queue, 4)
    answer = rates.queue(queue, last_seconds(T0 + 1_000))  # not sampled yet
    assert answer["messages_details"]["samples"][:2] == [
        {"sample": 0, "timestamp": T0 + 5_000}, {"sample": 0, "timestamp": T0}]
    rates.sample(T0 + 5_000)
    answer = rates.queue(queue, last_seconds(T0 + 5_000))
    assert [s["sample"] for s in answer["messages_details"]["samples"]][:3] == [4, 0, 0]


def test_dead_letters_are_counted_by_reason(broker, rates):
    vhost = broker.vhosts["/"]
    vhost.declare_queue("dlq", None)
    work = vhost.declare_queue("work", None, arguments=FieldTable(
        {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    rates.sample(T0)
    fill(work, 3)
    work.reject([work.take_one() for _ in range(3)])
    rates.sample(T0 + 5_000)
    assert rates.queue(work, NO_RANGE)["dead_lettered_details"]["rejected"] == {"rate": 0.6}
    overview = rates.overview(["/"], True, NO_RANGE)
    assert overview["dead_lettered"]["rejected"] == 3
    assert overview["dead_lettered_details"]["rejected"] == {"rate": 0.6}
    assert overview["dead_lettered_details"]["expired"] == {"rate": 0.0}


# ---- the overview ------------------------------------------------------------------------

def test_a_monitor_sees_the_brokers_own_counters(broker, rates):
    rates.sample(T0)
    broker.counters.publishes(20, routed=True, mandatory=False, confirm=True)
    broker.counters.publishes(5, routed=False, mandatory=True, confirm=False)
    rates.sample(T0 + 5_000)
    overview = rates.overview(["/"], True, NO_RANGE)
    stats = overview["message_stats"]
    assert (stats["publish"], stats["publish_details"]) == (25, {"rate": 5.0})
    assert stats["return_unroutable_details"] == {"rate": 1.0}
    assert set(stats) >= {"confirm", "deliver", "deliver_no_ack", "get", "get_no_ack",
                          "get_empty", "redeliver", "ack", "deliver_get"}
    assert set(overview["queue_totals"]) == {
        "messages", "messages_details", "messages_ready", "messages_ready_details",
        "messages_unacknowledged", "messages_unacknowledged_details"}


def test_anyone_else_sees_the_sums_of_their_vhosts_which_never_go_down(broker, rates):
    broker.add_vhost("other")
    mine = broker.vhosts["/"].declare_queue("mine", None)
    theirs = broker.vhosts["other"].declare_queue("theirs", None)
    rates.sample(T0)
    fill(mine, 10)
    fill(theirs, 100)
    rates.sample(T0 + 5_000)
    stats = rates.overview(["/"], False, NO_RANGE)["message_stats"]
    assert set(stats) == {"publish", "publish_details", "deliver_get", "deliver_get_details",
                          "ack", "ack_details"}
    assert (stats["publish"], stats["publish_details"]) == (10, {"rate": 2.0})
    broker.vhosts["/"].delete_queue(mine, False, False)
    rates.sample(T0 + 10_000)
    answer = rates.overview(["/"], False, last_seconds(T0 + 10_000, 10))
    assert answer["message_stats"]["publish"] == 10  # the deleted queue's count stays
    assert [s["sample"] for s in answer["message_stats"]["publish_details"]["samples"]] == [
        10, 10, 0]
    assert answer["message_stats"]["publish_details"]["rate"] == 0.0
    assert [s["sample"] for s in answer["queue_totals"]["messages_details"]["samples"]] == [
        0, 10, 0]


def test_a_deleted_vhost_is_forgotten(broker, rates):
    broker.add_vhost("gone")
    broker.vhosts["gone"].declare_queue("q", None)
    rates.sample(T0)
    broker.delete_vhost("gone")
    rates.sample(T0 + 5_000)
    assert "gone" not in rates.vhosts and "gone" not in rates.retired
    assert not rates.queues


# ---- the timer ----------------------------------------------------------------------------

class Loop:
    """Records what would be called when, and runs it on demand."""

    def __init__(self) -> None:
        self.calls: list = []

    def call_later(self, delay, callback, *args):
        self.calls.append((delay, callback, args))
        return self

    def cancel(self) -> None:
        self.calls.clear()

    def fire(self):
        delay, callback, args = self.calls.pop(0)
        callback(*args)
        return delay


def test_ticks_fall_on_the_intervals_multiples_once_each(broker):
    now = [1_800_000_002.5]  # seconds, between two multiples of 5
    rates = Rates(broker, clock=lambda: now[0])
    loop = Loop()
    rates.start(loop)
    assert rates.ticks == 1  # one at once
    assert loop.calls[0][0] == pytest.approx(2.5) and loop.calls[0][2] == (1_800_000_005.0,)
    now[0] = 1_800_000_004.998  # the loop's clock fires a little early
    loop.fire()
    assert rates.times[1] == 1_800_000_005_000
    assert loop.calls[0][2] == (1_800_000_010.0,)  # not 005 a second time
    now[0] = 1_800_000_027.0  # the loop was stuck: the next multiple after now
    loop.fire()
    assert loop.calls[0][2] == (1_800_000_030.0,)
    rates.stop()
    assert not loop.calls and rates.ticks == 3


# ---- a fixed memory cost -----------------------------------------------------------------

def test_memory_stays_fixed_however_long_the_broker_runs(broker, rates):
    busy = broker.vhosts["/"].declare_queue("busy", None)
    for name in range(50):
        broker.vhosts["/"].declare_queue(f"idle-{name}", None)
    for tick in range(3 * OVERVIEW_SAMPLES):
        fill(busy, 1)
        rates.sample(T0 + tick * 5_000)
    histories = {queue.name: history for queue, (_, history) in rates.queues.items()}
    assert len(histories["busy"].ring) == QUEUE_SAMPLES * len(QUEUE_FIELDS)
    assert all(histories[f"idle-{n}"].ring is None for n in range(50))
    assert len(rates.times) == OVERVIEW_SAMPLES
    assert len(rates.overall.ring) == OVERVIEW_SAMPLES * len(rates.overall.last)
    newest = T0 + (3 * OVERVIEW_SAMPLES - 1) * 5_000
    span = ranges({"lengths_age": "2400", "lengths_incr": "5"}, newest)
    samples = rates.queue(busy, span)["messages_details"]["samples"]
    assert len(samples) == QUEUE_SAMPLES  # what it keeps, no more
