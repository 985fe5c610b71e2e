"""Where a redrive sends a dead letter and which dead letters a filter
takes (dlx/redrive.py), without a broker."""

from __future__ import annotations

import json

import pytest

from amqp_server.wire.table import FieldTable
from dlx.deaths import DeathHistory, record_death, render_headers
from dlx.redrive import (
    FROM_ADDRESS,
    FROM_X_DEATH,
    REDRIVE_COUNT,
    Filter,
    body_digest,
    facts_of,
    is_dead_letter,
    named_like_dead_letters,
    origin_of,
    parse_candidates,
    parse_filter,
    parse_time,
    redrive_count,
    redriven_headers,
)


def died(*deaths, extra=None) -> FieldTable:
    """Headers of a message that died as `deaths` say, oldest first:
    (queue, reason, exchange, keys, now)."""
    history = DeathHistory()
    for queue, reason, exchange, keys, now in deaths:
        history = record_death(history, queue, reason, exchange, keys, None, now)
    return render_headers(FieldTable(extra or {}), history)


def test_redrive_goes_to_the_exchange_and_keys_of_the_first_death():
    headers = died(("orders", "rejected", "shop", ("order.eu", "audit"), 100),
                   ("retry", "expired", "retry-x", ("r",), 200))
    origin = origin_of(headers, "r", exchanges={"shop"})
    assert (origin.exchange, origin.routing_keys, origin.source) == (
        "shop", ("order.eu", "audit"), FROM_X_DEATH)


def test_the_first_death_is_found_by_its_headers_even_after_it_moved_to_the_front():
    # Dying again in the first queue moves its entry to the front of x-death.
    headers = died(("orders", "rejected", "shop", ("o",), 100),
                   ("retry", "expired", "retry-x", ("r",), 200),
                   ("orders", "rejected", "other", ("later",), 300))
    assert headers["x-death"][0]["queue"] == "orders"
    assert origin_of(headers, "x", exchanges=set()).routing_keys == ("o",)


def test_a_redriven_copy_counts_its_redrives_and_keeps_every_other_header():
    headers = died(("orders", "rejected", "shop", ("o",), 100), extra={"trace": "t-1"})
    once = redriven_headers(headers)
    twice = redriven_headers(once)
    assert [redrive_count(h) for h in (headers, once, twice)] == [0, 1, 2]
    assert twice.types[REDRIVE_COUNT] == "long"
    assert twice["x-death"] == headers["x-death"] and twice["trace"] == "t-1"
    assert REDRIVE_COUNT not in headers  # the message's own are left as they were
    # A header of that name a publisher set to something else counts nothing.
    assert redrive_count({REDRIVE_COUNT: "often"}) == 0
    assert redrive_count({REDRIVE_COUNT: True}) == 0


def test_without_first_death_headers_the_oldest_entry_is_the_first():
    headers = died(("a", "rejected", "ex-a", ("ka",), 1), ("b", "expired", "ex-b", ("kb",), 2))
    for name in ("x-first-death-queue", "x-first-death-reason", "x-first-death-exchange"):
        del headers[name]
    assert origin_of(headers, "k", exchanges=set()).exchange == "ex-a"


def test_artemis_original_address_naming_an_exchange_keeps_the_routing_key():
    headers = FieldTable({"_AMQ_ORIG_ADDRESS": "orders", "_AMQ_ORIG_QUEUE": "orders-work"})
    origin = origin_of(headers, "order.created", exchanges={"orders"})
    assert (origin.exchange, origin.routing_keys, origin.source) == (
        "orders", ("order.created",), FROM_ADDRESS)


def test_artemis_original_address_naming_a_queue_goes_through_the_default_exchange():
    headers = FieldTable({"_AMQ_ORIG_ADDRESS": "jobs"})
    origin = origin_of(headers, "DLQ.jobs", exchanges={"amq.direct"})
    assert (origin.exchange, origin.routing_keys) == ("", ("jobs",))


def test_x_death_wins_over_the_artemis_address():
    headers = died(("work", "rejected", "shop", ("k",), 1), extra={"_AMQ_ORIG_ADDRESS": "else"})
    assert origin_of(headers, "k", exchanges={"else"}).exchange == "shop"


def test_a_message_that_never_died_has_no_origin():
    assert origin_of(FieldTable({"trace": "1"}), "k", exchanges=set()) is None
    assert origin_of(None, "k", exchanges=set()) is None
    assert not is_dead_letter(FieldTable({"trace": "1"}))
    assert is_dead_letter(died(("q", "expired", "", ("q",), 1)))
    assert is_dead_letter(FieldTable({"_AMQ_ORIG_ADDRESS": "a"}))


@pytest.mark.parametrize("name, expected", [
    ("tickers_DLQ", True), ("DLQ.orders", True), ("EXP.quotes", True),
    ("orders", False), ("dlq", False), ("my_DLQ_not", False)])
def test_dead_letter_queues_known_by_name(name, expected):
    assert named_like_dead_letters(name) is expected


def test_facts_name_the_latest_reason_and_the_first_queue_and_exchange():
    headers = died(("orders", "rejected", "shop", ("o",), 100),
                   ("retry", "expired", "retry-x", ("r",), 250))
    facts = facts_of(headers, "m-1")
    assert (facts.reason, facts.original_queue, facts.original_exchange, facts.died_at,
            facts.deaths, facts.message_id) == ("expired", "orders", "shop", 250, 2, "m-1")


def test_facts_of_an_artemis_dead_letter_come_from_its_stamps():
    facts = facts_of(FieldTable({"_AMQ_ORIG_ADDRESS": "orders",
                                 "_AMQ_ORIG_QUEUE": "orders-work"}), None)
    assert (facts.original_queue, facts.original_exchange, facts.reason) == (
        "orders-work", "orders", None)


def test_every_set_filter_field_must_match():
    facts = facts_of(died(("orders", "rejected", "shop", ("o",), 1000)), "m-7")
    body = b'{"sku": "A-1"}'
    assert Filter().matches(facts, body)
    assert Filter(reason="rejected", original_queue="orders", original_exchange="shop",
                  since=1000, until=1001, message_id="m-7",
                  body_contains=b"A-1").matches(facts, body)
    for wrong in (Filter(reason="expired"), Filter(original_queue="x"),
                  Filter(original_exchange="x"), Filter(since=1001), Filter(until=1000),
                  Filter(message_id="m-8"), Filter(body_contains=b"B-2")):
        assert not wrong.matches(facts, body), wrong


def test_a_time_range_never_matches_a_message_without_deaths():
    facts = facts_of(FieldTable(), None)
    assert not Filter(since=0).matches(facts, b"")


def test_filters_parse_from_form_fields_with_clear_errors():
    parsed = parse_filter({"reason": "expired", "original_queue": "q", "since": "100",
                           "until": "1970-01-01T00:03:20Z", "body": "needle",
                           "message_id": "", "original_exchange": None})
    assert parsed == Filter(reason="expired", original_queue="q", since=100, until=200,
                            body_contains=b"needle")
    assert parse_filter({}).empty
    with pytest.raises(ValueError, match="reason must be one of"):
        parse_filter({"reason": "tired"})
    with pytest.raises(ValueError, match="unknown filter fields: colour"):
        parse_filter({"colour": "red"})
    with pytest.raises(ValueError, match="since must be seconds since the epoch"):
        parse_filter({"since": "yesterday"})


def test_times_read_as_utc_unless_they_say_otherwise():
    assert parse_time("2024-01-01T00:00:00", "t") == 1704067200
    assert parse_time("2024-01-01T01:00:00+01:00", "t") == 1704067200
    assert parse_time(5, "t") == 5


def test_replay_candidates_parse_from_the_audits_ndjson():
    digest = body_digest(b"hello")
    lines = [json.dumps({"node": "n", "vhost": "/", "queue": "dlq", "message_id": "m1",
                         "body_sha256": digest, "died_in": "work", "reason": "expired",
                         "exchange": "x", "routing_keys": ["k"], "time": 1}),
             "",
             json.dumps({"vhost": "/", "queue": "dlq", "message_id": None,
                         "body_sha256": digest.upper()})]
    found = parse_candidates("\n".join(lines))
    assert [(c.queue, c.key, c.died_in, c.line) for c in found] == [
        ("dlq", ("m1", digest), "work", 1), ("dlq", (None, digest), None, 3)]


@pytest.mark.parametrize("line, error", [
    ("{", "line 1: not JSON"), ("[1]", "line 1: not a JSON object"),
    ('{"vhost": "/", "queue": "q"}', "line 1: missing body_sha256"),
    ('{"vhost": "/", "queue": "q", "body_sha256": "abc"}', "not a SHA-256 hex digest")])
def test_bad_candidate_lines_are_named(line, error):
    with pytest.raises(ValueError, match=error):
        parse_candidates(line)
