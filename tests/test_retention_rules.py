"""Which dead letters outstayed their queue's retention (dlx/retention.py)."""

from __future__ import annotations

from dlx.retention import due, is_due, next_due

NOW = 1_000_000_000.0  # ms


def test_a_dead_letter_is_due_once_its_latest_death_is_retention_ago():
    # x-death's time is cut to the second: the stay counts from that
    # second's end, so no dead letter leaves before its retention.
    assert is_due(999_989, 10_000, NOW)
    assert not is_due(999_990, 10_000, NOW)
    assert next_due(999_990, 10_000) == NOW + 1000


def test_no_dead_letter_is_due_before_its_retention_whenever_in_its_second_it_died():
    died_ms = 999_990_999  # the last millisecond of second 999,990
    assert not is_due(died_ms // 1000, 10_000, died_ms + 10_000 - 1)
    assert is_due(died_ms // 1000, 10_000, died_ms + 10_000 + 1)


def test_messages_that_never_died_are_never_due():
    assert due([(0, None, 1), (1, None, 1)], 1, NOW) == []


def test_due_dead_letters_are_taken_in_queue_order_past_messages_that_stay():
    messages = [(0, 1, 1), (1, None, 1), (2, 999_999, 1), (3, 2, 1), (4, 5, 1)]
    assert due(messages, 10_000, NOW) == [0, 3, 4]


def test_the_walk_takes_at_most_a_batch_and_stops_well_past_the_last_one_due():
    assert due([(seq, 1, 1) for seq in range(10)], 1, NOW, batch=4) == [0, 1, 2, 3]
    fresh = [(seq, 999_999, 1) for seq in range(1, 6)]
    assert due([(0, 1, 1), *fresh, (6, 1, 1)], 10_000, NOW, lookahead=3) == [0]
    assert due([(0, 1, 1), *fresh, (6, 1, 1)], 10_000, NOW, lookahead=5) == [0, 6]


def test_a_batch_holds_bodies_up_to_its_bytes_and_always_one():
    messages = [(seq, 1, 40) for seq in range(5)]
    assert due(messages, 1, NOW, batch_bytes=100) == [0, 1]
    assert due([(0, 1, 500), (1, 1, 1)], 1, NOW, batch_bytes=100) == [0]
