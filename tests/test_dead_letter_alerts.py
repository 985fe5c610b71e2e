"""The dead-letter alerts as the broker evaluates them (dlx/alerts.py), and
the queue parts its gauges read: arrival marks and the dead-letter census."""

from __future__ import annotations

import struct

from hypothesis import given, strategies as st

from amqp_server.broker.dead_letter_watch import DeadLetterWatch
from amqp_server.broker.message import Entry, Message
from amqp_server.broker.queue.arrivals import CAP, Arrivals
from amqp_server.broker.queue.census import (
    latest_reason_of_header,
    recovered_reasons,
    take_census,
)
from amqp_server.broker.queue.core import Queue
from amqp_server.storage import records as records_module
from amqp_server.wire.properties import Properties, decode_properties, encode_properties
from amqp_server.wire.table import FieldTable, Timestamp
from dlx.alerts import GROWING, RATE_SPIKE, STUCK, TOO_OLD, Sample, Thresholds, firing
from dlx.deaths import history_from_headers

LOW = Thresholds(growth=10, growth_window=60, max_age=100, rate=1.0, rate_window=60,
                 held_for=120)


def _series(*points, step=30.0):
    """Samples every `step` seconds from (waiting, age, received, held)."""
    return [Sample(i * step, *point) for i, point in enumerate(points)]


def test_no_samples_fire_nothing():
    assert firing([], LOW) == ()


def test_a_queue_growing_past_the_threshold_within_the_window_fires():
    assert firing(_series((0, 0, 0, 0), (5, 0, 0, 0), (11, 0, 0, 0)), LOW) == (GROWING,)
    assert firing(_series((0, 0, 0, 0), (5, 0, 0, 0), (10, 0, 0, 0)), LOW) == ()


def test_growth_needs_a_sample_as_old_as_its_window():
    assert firing(_series((0, 0, 0, 0), (50, 0, 0, 0)), LOW) == ()


def test_a_dead_letter_older_than_the_limit_fires_at_once():
    assert firing(_series((1, 101, 0, 0)), LOW) == (TOO_OLD,)
    assert firing(_series((1, 100, 0, 0)), LOW) == ()


def test_arrivals_faster_than_the_rate_over_the_window_fire():
    assert RATE_SPIKE in firing(_series((0, 0, 0, 0), (0, 0, 40, 0), (0, 0, 61, 0)), LOW)
    assert firing(_series((0, 0, 0, 0), (0, 0, 30, 0), (0, 0, 60, 0)), LOW) == ()


def test_held_dead_letters_fire_only_when_held_throughout():
    held = _series(*[(0, 0, 0, 3)] * 5)  # 0..120 s
    assert firing(held, LOW) == (STUCK,)
    assert firing(held[:4], LOW) == ()  # watched for 90 s only
    gap = _series((0, 0, 0, 3), (0, 0, 0, 3), (0, 0, 0, 0), (0, 0, 0, 3), (0, 0, 0, 3))
    assert firing(gap, LOW) == ()


def test_alerts_come_in_a_fixed_order():
    series = _series((0, 0, 0, 5), (0, 0, 0, 5), (0, 0, 0, 5), (0, 0, 0, 5),
                     (20, 500, 200, 5))
    assert firing(series, LOW) == (GROWING, TOO_OLD, RATE_SPIKE, STUCK)


# ---- arrival marks ----------------------------------------------------------------

def test_a_message_is_at_least_as_old_as_the_first_mark_after_it():
    arrivals = Arrivals()
    arrivals.mark(3, 1000.0)   # 0, 1, 2 by t=1000
    arrivals.mark(5, 2000.0)   # 3, 4 by t=2000
    assert arrivals.arrived_by(0) == 1000.0
    assert arrivals.arrived_by(2) == 1000.0
    assert arrivals.arrived_by(3) == 2000.0
    assert arrivals.arrived_by(5) is None  # arrived after the last mark


def test_marks_below_the_head_go_and_thinning_never_makes_a_message_older():
    arrivals = Arrivals()
    for tick in range(1, CAP * 3):
        arrivals.mark(tick, tick * 1000.0)
    assert len(arrivals) <= CAP
    for seq in (0, 10, 500, CAP * 2):
        assert arrivals.arrived_by(seq) >= (seq + 1) * 1000.0
    before = len(arrivals)
    arrivals.forget_below(CAP * 2)
    assert len(arrivals) < before
    assert arrivals.arrived_by(CAP * 2) >= (CAP * 2 + 1) * 1000.0


def test_a_queue_reports_the_age_of_its_head_from_the_ticks():
    queue = Queue("/", "q")
    queue.enqueue(Message.to("", "q", _header(), b"a"))
    assert queue.oldest_age(500.0) == 0.0  # no tick since it arrived
    queue.mark_arrivals(1000.0)
    queue.enqueue(Message.to("", "q", _header(), b"b"))
    queue.mark_arrivals(2000.0)
    assert queue.oldest_age(61_000.0) == 60.0
    queue.take_one()
    queue.mark_arrivals(3000.0)
    assert queue.oldest_age(61_000.0) == 59.0


# ---- the census -------------------------------------------------------------------

def _header(headers: FieldTable | None = None) -> bytes:
    return struct.pack(">HHQ", 60, 0, 1) + encode_properties(Properties(headers=headers))


def _dead(reason: str, seconds: int) -> Message:
    death = FieldTable({"queue": "work", "reason": reason, "count": 1, "time": seconds,
                        "exchange": "", "routing-keys": ["work"]})
    return Message.to("dlx", "work", _header(FieldTable({"x-death": [death]})), b"x")


def test_the_census_counts_dead_letters_by_their_latest_reason_and_finds_the_oldest():
    entries = [Entry(0, Message.to("", "q", _header(FieldTable({"trace": "t"})), b"x")),
               Entry(1, _dead("rejected", 2000)), Entry(2, _dead("expired", 1000)),
               Entry(3, _dead("rejected", 3000))]
    census = take_census(entries)
    assert dict(census.waiting) == {"rejected": 2, "expired": 1}
    assert census.oldest_death == 1000
    assert take_census(entries, limit=2).complete is False


# ---- the watch --------------------------------------------------------------------

class _Vhost:
    def __init__(self, *queues: Queue) -> None:
        self.name = "/"
        self.queues = {queue.name: queue for queue in queues}


def _burst(queue: Queue, count: int, reason: str = "rejected") -> None:
    for _ in range(count):
        queue.enqueue(_dead(reason, 1000))
    queue.stats["dead_letters_received"][reason] += count  # as the dead letterer counts


def test_a_burst_into_a_quiet_dead_letter_queue_fires_as_the_rules_do():
    # Prometheus scraped the empty queue's zeros all along: `offset` and
    # rate() see the jump.  The watch stood those zeros in when it first
    # sampled the queue (it had skipped it while empty).
    watch = DeadLetterWatch(LOW, interval=60.0)
    dlq = Queue("/", "dlq")
    vhosts = [_Vhost(dlq)]
    for now in (0.0, 60.0, 120.0):
        watch.sample(vhosts, now)
    assert watch.alerts() == []
    _burst(dlq, 100)
    watch.sample(vhosts, 135.0)
    assert watch.alerts() == [{"vhost": "/", "queue": "dlq",
                               "alerts": [GROWING, RATE_SPIKE]}]


def test_a_burst_into_a_queue_of_plain_messages_fires_too():
    watch = DeadLetterWatch(LOW, interval=60.0)
    dlq = Queue("/", "dlq")
    dlq.enqueue(Message.to("", "dlq", _header(), b"plain"))
    vhosts = [_Vhost(dlq)]
    for now in (0.0, 60.0, 120.0):
        watch.sample(vhosts, now)
    _burst(dlq, 100)
    watch.sample(vhosts, 135.0)
    assert watch.alerts() == [{"vhost": "/", "queue": "dlq",
                               "alerts": [GROWING, RATE_SPIKE]}]


def test_dead_letters_there_at_the_first_round_stand_for_no_growth():
    # After a restart the queue holds what it held: Prometheus saw it
    # before and after, no growth.
    watch = DeadLetterWatch(LOW, interval=60.0)
    dlq = Queue("/", "dlq")
    for _ in range(50):
        dlq.enqueue(_dead("expired", 1000))
    vhosts = [_Vhost(dlq)]
    for now in (1000.0, 1030.0, 1060.0, 1090.0):  # the dead letters stay younger than 100 s
        watch.sample(vhosts, now)
    assert watch.alerts() == []


_FIELDS = {"count": 1, "reason": "rejected", "queue": "q", "time": Timestamp(1),
           "exchange": "x", "routing-keys": ["k"]}
# Ways an x-death entry can be what decoding drops: a field missing, of the
# wrong type, or an unknown reason.
_SPOILED = st.sampled_from([None, "no count", "no exchange", "no routing-keys",
                            "count is a string", "time is a bool", "keys not a list"])


@st.composite
def _deaths(draw):
    entries = []
    for _ in range(draw(st.integers(1, 3))):
        entry = dict(_FIELDS, reason=draw(st.sampled_from(
            ["rejected", "expired", "maxlen", "delivery_limit", "unknown", "é"])))
        spoiled = draw(_SPOILED)
        if spoiled is not None and spoiled.startswith("no "):
            del entry[spoiled[3:]]
        elif spoiled == "count is a string":
            entry["count"] = "1"
        elif spoiled == "time is a bool":
            entry["time"] = True
        elif spoiled == "keys not a list":
            entry["routing-keys"] = "k"
        entries.append(FieldTable(entry))
    return entries


@given(_deaths(), st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8),
                                  max_size=3),
       st.booleans())
def test_a_paged_dead_letters_reason_is_read_from_its_bytes_as_decoding_finds_it(
        deaths, others, nested):
    # The paged tail and the census in memory must count a message alike.
    headers = FieldTable({**others, "x-death": deaths})
    if nested:  # an x-death a client put inside another header: not a history
        headers = FieldTable({**others, "wrapper": FieldTable({"x-death": deaths})})
    header = _header(headers)
    decoded = history_from_headers(decode_properties(header[12:]).headers)
    assert latest_reason_of_header(header) == (
        decoded.deaths[0].reason if decoded.deaths else None)


@given(st.lists(_deaths(), min_size=1, max_size=4),
       st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=3))
def test_recovery_reads_each_stored_records_reason_as_decoding_finds_it(histories, others):
    # Records as the store keeps them; the same x-death array twice is
    # read once, and a record of another shape is decoded.
    headers = [_header(FieldTable({**others, "x-death": deaths})) for deaths in histories]
    headers += [headers[0], _header(FieldTable(others)),
                _header(FieldTable({"x-death": FieldTable({"reason": "expired"})}))]
    records = [records_module.packer().pack(["E", "/", "q", n, "", "q", header, b"body", None,
                                             None, None]) for n, header in enumerate(headers)]
    expected = []
    for header in headers:
        decoded = history_from_headers(decode_properties(header[12:]).headers)
        expected.append(decoded.deaths[0].reason if decoded.deaths else None)
    assert recovered_reasons([memoryview(r) for r in records],
                             lambda index: headers[index]) == expected
