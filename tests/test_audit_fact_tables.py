"""The tables the audit derives from its collected facts (Arrow, on the
driver): the same rows in the same order as Spark's SQL gave them, without
a JVM.  The end-to-end audit on a broker's own log is in
interop/test_spark_audit.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pa = pytest.importorskip("pyarrow")

from spark import fact_tables  # noqa: E402
from spark.fact_tables import Split, summary  # noqa: E402

STRING_KEYS = ("node", "vhost", "queue", "reason", "outcome", "drop_cause", "exchange",
               "first_death_queue")
# As Spark gives it: a node filled in from the data directory's name is
# never NULL.
SCHEMA = pa.schema(
    [pa.field("node", pa.string(), nullable=False)]
    + [(name, pa.string()) for name in STRING_KEYS[1:]]
    + [("deaths_so_far", pa.int64()), ("delivery_count", pa.int64()),
       ("publish_to_death", pa.string()), ("cycled_message", pa.string()),
       ("cycle_path", pa.string()), ("events", pa.int64()), ("first", pa.int64()),
       ("last", pa.int64())])
SINGLE, BY_NODE = Split(), Split(by_node=True)
DEFAULTS = {"node": "n1", "vhost": "/", "queue": "q", "reason": "rejected",
            "outcome": "dead_lettered", "exchange": "", "first_death_queue": "q",
            "deaths_so_far": 1, "events": 1, "first": 0, "last": 0}


def facts(*rows: dict) -> pa.Table:
    return pa.Table.from_pylist([{**DEFAULTS, **row} for row in rows], schema=SCHEMA)


def column(table: pa.Table, name: str) -> list:
    return table[name].to_pylist()


def test_keys_sort_as_spark_sorts_them_null_first_then_by_bytes():
    table = fact_tables.by_queue_reason(facts(
        {"queue": "b"}, {"queue": "a"}, {"queue": "B"}, {"queue": "é"}, {"queue": None},
        {"queue": "a", "events": 4}), SINGLE)
    assert column(table, "queue") == [None, "B", "a", "b", "é"]
    assert column(table, "events") == [1, 1, 5, 1, 1]


def test_conditional_counts_treat_a_missing_value_as_no_match():
    rows = facts({"outcome": "dropped", "drop_cause": "no_dlx", "events": 2},
                 {"outcome": None, "reason": None, "events": 3},
                 {"reason": "expired", "events": 5})
    unknown, expired, rejected = fact_tables.by_queue_reason(rows, SINGLE).to_pylist()
    assert (unknown["reason"], unknown["dead_lettered"], unknown["dropped"]) == (None, 0, 0)
    assert rejected["dead_lettered"] == 0 and rejected["dropped"] == 2
    assert expired["dead_lettered"] == 5
    (per_queue,) = fact_tables.reasons_per_queue(rows, SINGLE).to_pylist()
    assert per_queue == {"vhost": "/", "queue": "q", "rejected": 2, "expired": 5,
                         "maxlen": 0, "delivery_limit": 0}
    assert fact_tables.drops(rows, SINGLE).to_pylist() == [
        {"drop_cause": "no_dlx", "reason": "rejected", "events": 2}]


def test_time_to_death_runs_from_the_quickest_bucket_not_alphabetically():
    rows = facts(*({"publish_to_death": bucket} for bucket in (">=1h", "1-10s", "<1s", None)))
    table = fact_tables.time_to_death(rows, SINGLE)
    assert column(table, "bucket") == ["<1s", "1-10s", ">=1h"]
    assert table.column_names == ["reason", "bucket", "events"]


def test_split_by_node_puts_the_node_first():
    rows = facts({"node": "n2"}, {"node": "n1"}, {"node": "n1", "queue": "a"})
    table = fact_tables.first_to_last(rows, BY_NODE)
    assert table.column_names == ["node", "vhost", "first_death_queue", "last_queue", "events"]
    assert [(r["node"], r["last_queue"]) for r in table.to_pylist()] == [
        ("n1", "a"), ("n1", "q"), ("n2", "q")]


def test_by_node_gives_first_and_last_seen_as_utc_times():
    moment = datetime(2026, 11, 24, 1, 2, 3, 456789, tzinfo=UTC)
    micros = int(moment.timestamp()) * 1_000_000 + moment.microsecond
    (node,) = fact_tables.by_node(facts({"first": micros, "last": micros + 1},
                                        {"first": micros + 5, "last": micros + 9}),
                                  SINGLE).to_pylist()
    assert node["first_seen"] == moment and node["events"] == 2
    assert node["last_seen"] == datetime.fromtimestamp((micros + 9) / 1e6, UTC)


def test_output_types_are_sparks_and_keys_keep_their_nullability():
    schema = fact_tables.by_node(facts({}), SINGLE).schema
    assert schema.field("first_seen").type == pa.timestamp("us", tz="UTC")
    assert schema.field("events").type == pa.int64() and schema.field("events").nullable
    assert not schema.field("node").nullable  # REQUIRED in the Parquet file, as before
    split = fact_tables.by_queue_reason(facts({}), BY_NODE).schema
    assert [(f.name, f.nullable) for f in split][:4] == [
        ("node", False), ("vhost", True), ("queue", True), ("reason", True)]


def test_cycles_and_the_count_of_cycled_messages():
    rows = facts({"cycled_message": "m1", "cycle_path": "a -> b", "queue": "a"},
                 {"cycled_message": "m1", "cycle_path": "a -> b", "queue": "b",
                  "outcome": "dropped", "drop_cause": "cycle"},
                 {"cycled_message": "m1", "vhost": "other", "cycle_path": "a -> b"},
                 {"cycled_message": "m2", "node": "n2", "cycle_path": "c x2"},
                 {"cycled_message": "m2", "node": "n1", "cycle_path": "c x2"},
                 {"cycled_message": "m3", "vhost": None, "cycle_path": "d x2"},
                 {"events": 7})
    table = fact_tables.cycles(rows, SINGLE)
    assert [(r["vhost"], r["message"], r["outcome"], r["events"]) for r in table.to_pylist()
            ] == [(None, "m3", "dead_lettered", 1), ("/", "m1", "dead_lettered", 1),
                  ("/", "m1", "dropped", 1), ("/", "m2", "dead_lettered", 2),
                  ("other", "m1", "dead_lettered", 1)]
    # count(DISTINCT vhost, message): a NULL in either leaves the row out,
    # and with the split the same message on two nodes counts twice.
    assert fact_tables.totals(rows, SINGLE)["cycled_messages"] == 3
    assert fact_tables.totals(rows, BY_NODE)["cycled_messages"] == 4
    assert fact_tables.totals(rows, SINGLE)["events"] == 13


def test_totals_count_every_outcome_reason_and_drop_cause():
    rows = facts({"outcome": "dropped", "drop_cause": "no_route", "events": 2},
                 {"outcome": "dropped", "drop_cause": "cycle", "reason": "expired"},
                 {"reason": "maxlen", "events": 4, "first": 5, "last": 9},
                 {"reason": "delivery_limit", "outcome": None, "first": -1, "last": 3})
    totals = fact_tables.totals(rows, SINGLE)
    assert (totals["events"], totals["dead_lettered"], totals["dropped"]) == (8, 4, 3)
    assert [totals[reason] for reason in ("rejected", "expired", "maxlen", "delivery_limit")
            ] == [2, 1, 4, 1]
    assert (totals["drop_no_route"], totals["drop_cycle"], totals["drop_no_dlx"]) == (2, 1, 0)
    assert (totals["first"], totals["last"]) == (-1, 9)


def test_no_events_are_empty_tables_and_zero_counts():
    empty = facts()
    for name, table in fact_tables.from_facts(empty, SINGLE).items():
        assert table.num_rows == 0, name
    totals = fact_tables.totals(empty, SINGLE)
    assert totals["events"] is None and totals["cycled_messages"] == 0
    counts = summary(totals, repeats=0)
    assert counts["events"] == 0 and counts["messages"] == 0
    assert counts["first_event"] is None and set(counts["by_reason"].values()) == {0}
