"""The death history and its x-death rendering, without a broker."""

from __future__ import annotations

from hypothesis import given, strategies as st

from amqp_server.wire.table import FieldTable, Timestamp, decode_table, encode_table
from dlx.deaths import (
    REASONS,
    DeathHistory,
    history_from_headers,
    is_cycle,
    record_death,
    render_headers,
)


def die(history, queue, reason="rejected", exchange="x", keys=("k",), expiration=None, now=100):
    return record_death(history, queue, reason, exchange, keys, expiration, now)


def test_first_death_creates_entry_and_first_headers():
    history = die(DeathHistory(), "q1", "expired", "ex", ("a", "b"), "500", now=1700)
    assert [(d.queue, d.reason, d.count, d.time) for d in history.deaths] == [
        ("q1", "expired", 1, 1700)]
    assert history.first == ("expired", "q1", "ex")
    assert history.last == ("expired", "q1", "ex")
    assert history.deaths[0].original_expiration == "500"


def test_same_queue_and_reason_increments_and_moves_to_front():
    history = die(DeathHistory(), "a", now=1)
    history = die(history, "b", now=2)
    history = die(history, "a", exchange="other", now=3)
    assert [(d.queue, d.count) for d in history.deaths] == [("a", 2), ("b", 1)]
    # The entry keeps its first exchange and time; the last-death triple moves on.
    assert history.deaths[0].exchange == "x" and history.deaths[0].time == 1
    assert history.last == ("rejected", "a", "other")
    assert history.first == ("rejected", "a", "x")


def test_other_reason_in_same_queue_is_a_new_entry():
    history = die(die(DeathHistory(), "a", "rejected"), "a", "expired")
    assert [(d.queue, d.reason) for d in history.deaths] == [("a", "expired"), ("a", "rejected")]


def test_cycle_detection_follows_3_13():
    history = die(DeathHistory(), "a", "expired")
    assert is_cycle(history, "a")
    assert not is_cycle(history, "b")
    # A rejection more recent than the earlier death breaks the cycle.
    history = die(die(DeathHistory(), "a", "expired"), "b", "rejected")
    assert not is_cycle(history, "a")
    # A rejection older than the death in the target does not.
    history = die(die(DeathHistory(), "a", "rejected"), "b", "maxlen")
    assert is_cycle(history, "b")
    assert not is_cycle(history, "a")


def test_rendered_x_death_has_rabbitmq_wire_types():
    history = die(DeathHistory(), "q", "expired", "ex", ("k", "cc"), "60", now=1234)
    headers = render_headers(FieldTable({"app": 1}), history)
    decoded, _ = decode_table(encode_table(headers))
    entry = decoded["x-death"][0]
    assert decoded.type_of("x-death") == "array"
    assert {key: entry.type_of(key) for key in entry} == {
        "original-expiration": "longstr", "count": "long", "reason": "longstr",
        "queue": "longstr", "time": "timestamp", "exchange": "longstr",
        "routing-keys": "array"}
    assert entry["time"] == Timestamp(1234)
    assert list(entry["routing-keys"]) == ["k", "cc"]
    assert decoded["x-first-death-reason"] == "expired"
    assert decoded["x-last-death-queue"] == "q"
    assert decoded["app"] == 1


def test_history_round_trips_through_headers():
    history = die(die(DeathHistory(), "a", "expired", expiration="9"), "b", "maxlen")
    decoded, _ = decode_table(encode_table(render_headers(None, history)))
    assert history_from_headers(decoded) == history


def test_invalid_x_death_entries_are_ignored():
    headers = FieldTable({"x-death": [{"queue": "q"}, "junk",
                                      {"queue": "q", "reason": "bogus", "exchange": "",
                                       "routing-keys": [], "count": 1, "time": 1}]})
    assert history_from_headers(headers).deaths == ()


def test_publisher_supplied_first_death_is_replaced_on_first_real_death():
    # No x-death yet: 3.13 sets new first-death values over any present.
    headers = FieldTable({"x-first-death-reason": "fake", "x-first-death-queue": "fake",
                          "x-first-death-exchange": "fake"})
    history = die(history_from_headers(headers), "q", "maxlen")
    assert render_headers(headers, history)["x-first-death-reason"] == "maxlen"


events = st.lists(st.tuples(st.sampled_from(["q1", "q2", "q3"]), st.sampled_from(REASONS),
                            st.sampled_from(["x1", "x2"])), min_size=1, max_size=30)


@given(events)
def test_invariants_over_any_sequence_of_deaths(sequence):
    history = DeathHistory()
    for step, (queue, reason, exchange) in enumerate(sequence):
        history = record_death(history, queue, reason, exchange, ("k",), None, step)
        # The most recent death is always the head entry.
        assert history.deaths[0].key == (queue, reason)
    # Counts sum to the number of deaths; keys are unique.
    assert history.total == len(sequence)
    assert len({d.key for d in history.deaths}) == len(history.deaths)
    # First-death never changes.
    queue, reason, exchange = sequence[0]
    assert history.first == (reason, queue, exchange)
    # Order is most recent first: by the step of each key's latest death.
    latest = {}
    for step, (queue, reason, _) in enumerate(sequence):
        latest[(queue, reason)] = step
    order = [latest[d.key] for d in history.deaths]
    assert order == sorted(order, reverse=True)
    # Each count is the number of deaths under that key.
    for death in history.deaths:
        assert death.count == sum(1 for q, r, _ in sequence if (q, r) == death.key)
