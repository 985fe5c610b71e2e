"""The headline numbers and the tables that re-aggregate the facts, computed
on the driver from the collected facts (Arrow).

The facts are a few rows per queue, reason and outcome (plus the messages
that cycled, which the cycles table lists one by one anyway), whatever the
traffic: Spark aggregates the events into them, and re-aggregating a few
hundred rows takes Arrow milliseconds where nine more aggregations in the
Spark query cost two seconds of planning and code generation per run.

Every table is sorted on all of its key columns, ascending with NULL first
as Spark sorts, so the rows come out as they did from Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from dlx.dead_letter import DROP_CAUSES
from dlx.deaths import REASONS

from .buckets import BUCKET_LABELS

# (output column, the fact rows whose events it adds up; None: all)
Count = tuple[str, Callable[[pa.Table], pa.Array] | None]
TIME = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Split:
    """Whether every table is split by node (its first key column)."""
    by_node: bool = False

    def keys(self, *columns) -> list:
        return ["node", *columns] if self.by_node else list(columns)


def _is(column: str, value: str) -> Callable[[pa.Table], pa.Array]:
    return lambda facts: pc.fill_null(pc.equal(facts[column], value), False)


EVENTS: Count = ("events", None)
OUTCOME_COUNTS: tuple[Count, ...] = (("dead_lettered", _is("outcome", "dead_lettered")),
                                     ("dropped", _is("outcome", "dropped")))
REASON_COUNTS: tuple[Count, ...] = tuple((reason, _is("reason", reason)) for reason in REASONS)
DROP_COUNTS: tuple[Count, ...] = tuple((f"drop_{cause}", _is("drop_cause", cause))
                                       for cause in DROP_CAUSES)


def _counted(facts: pa.Table, counts: tuple[Count, ...]) -> dict[str, pa.Array]:
    events = facts["events"]
    return {name: events if where is None else pc.if_else(where(facts), events, 0)
            for name, where in counts}


def _sorted(table: pa.Table, keys: list[str]) -> pa.Table:
    return table.sort_by([(key, "ascending", "at_start") for key in keys])


def _grouped(facts: pa.Table, keys: list[str], counts: tuple[Count, ...],
             times: bool = False) -> pa.Table:
    """Events added up per `keys` (sorted on them), with the first and last
    event's time when `times`."""
    columns = {key: facts[key] for key in keys} | _counted(facts, counts)
    aggregations = [(name, "sum") for name, _ in counts]
    if times:
        columns.update(first=facts["first"], last=facts["last"])
        aggregations += [("first", "min"), ("last", "max")]
    grouped = pa.table(columns).group_by(keys, use_threads=False).aggregate(aggregations)
    # The keys keep the facts' fields (a node Spark knows is never NULL
    # stays so in the Parquet schema); sums and times may be NULL, as in SQL.
    fields = [facts.schema.field(key) for key in keys]
    out = [grouped[key] for key in keys] + [grouped[f"{name}_sum"] for name, _ in counts]
    fields += [pa.field(name, pa.int64()) for name, _ in counts]
    if times:
        out += [grouped["first_min"].cast(TIME), grouped["last_max"].cast(TIME)]
        fields += [pa.field("first_seen", TIME), pa.field("last_seen", TIME)]
    return _sorted(pa.Table.from_arrays(out, schema=pa.schema(fields)), keys)


def _renamed(facts: pa.Table, **names: str) -> pa.Table:
    return facts.rename_columns([names.get(name, name) for name in facts.column_names])


def totals(facts: pa.Table, split: Split) -> dict:
    """The headline counts (NULL sums when there are no events, as in SQL)."""
    row = {name: pc.sum(column).as_py() for name, column in
           _counted(facts, (EVENTS, *OUTCOME_COUNTS, *REASON_COUNTS, *DROP_COUNTS)).items()}
    identity = split.keys("vhost", "cycled_message")
    cycled = facts.select(identity).drop_null()
    row["cycled_messages"] = cycled.group_by(identity).aggregate([]).num_rows
    row["first"] = pc.min(facts["first"]).as_py()
    row["last"] = pc.max(facts["last"]).as_py()
    return row


def by_node(facts: pa.Table, split: Split) -> pa.Table:
    return _grouped(facts, ["node"], (EVENTS, *OUTCOME_COUNTS, *REASON_COUNTS), times=True)


def by_queue_reason(facts: pa.Table, split: Split) -> pa.Table:
    return _grouped(facts, split.keys("vhost", "queue", "reason"),
                    (EVENTS, *OUTCOME_COUNTS))


def by_exchange(facts: pa.Table, split: Split) -> pa.Table:
    return _grouped(facts, split.keys("vhost", "exchange", "reason"),
                    (EVENTS, *OUTCOME_COUNTS))


def time_to_death(facts: pa.Table, split: Split) -> pa.Table:
    """Buckets from the quickest to the slowest, not alphabetically."""
    stamped = _renamed(facts.filter(pc.is_valid(facts["publish_to_death"])),
                       publish_to_death="bucket")
    keys = split.keys("reason", "bucket")
    counts = _grouped(stamped, keys, (EVENTS,))
    order = pc.index_in(counts["bucket"], value_set=pa.array(BUCKET_LABELS))
    return _sorted(counts.append_column("order", order), [*keys[:-1], "order"]).drop(["order"])


def delivery_counts(facts: pa.Table, split: Split) -> pa.Table:
    return _grouped(facts, split.keys("reason", "deaths_so_far", "delivery_count"),
                    (EVENTS,))


def reasons_per_queue(facts: pa.Table, split: Split) -> pa.Table:
    """Expired against rejected (and the other reasons) queue by queue."""
    return _grouped(facts, split.keys("vhost", "queue"), REASON_COUNTS)


def first_to_last(facts: pa.Table, split: Split) -> pa.Table:
    return _grouped(_renamed(facts, queue="last_queue"),
                    split.keys("vhost", "first_death_queue", "last_queue"), (EVENTS,))


def drops(facts: pa.Table, split: Split) -> pa.Table:
    return _grouped(facts.filter(_is("outcome", "dropped")(facts)),
                    split.keys("drop_cause", "reason"), (EVENTS,))


def cycles(facts: pa.Table, split: Split) -> pa.Table:
    cycled = _renamed(facts.filter(pc.is_valid(facts["cycled_message"])),
                      cycled_message="message", cycle_path="path")
    return _grouped(cycled, split.keys("vhost", "message", "path", "outcome"), (EVENTS,))


FROM_FACTS = {
    "by_node": by_node,
    "by_queue_reason": by_queue_reason,
    "by_exchange": by_exchange,
    "time_to_death": time_to_death,
    "delivery_counts": delivery_counts,
    "reasons_per_queue": reasons_per_queue,
    "first_to_last": first_to_last,
    "drops": drops,
    "cycles": cycles,
}


def from_facts(facts: pa.Table, split: Split) -> dict[str, pa.Table]:
    return {name: build(facts, split) for name, build in FROM_FACTS.items()}


def summary(row: dict, repeats: int, died_again_after_redrive: int = 0) -> dict:
    """The summary dict from the headline counts (fact_tables.totals) and
    the `repeats` (the queue and node counts come with the tables)."""
    return {
        "events": row["events"] or 0,
        "messages": (row["events"] or 0) - repeats,
        "cycled_messages": row["cycled_messages"],
        "died_again_after_redrive": died_again_after_redrive,
        "dead_lettered": row["dead_lettered"] or 0,
        "dropped": row["dropped"] or 0,
        "by_reason": {reason: row[reason] or 0 for reason in REASONS},
        "drops_by_cause": {cause: row[f"drop_{cause}"] or 0 for cause in DROP_CAUSES},
        "first_event": _iso(row["first"]),
        "last_event": _iso(row["last"]),
    }


def _iso(micros: int | None) -> str | None:
    if micros is None:
        return None
    return datetime.fromtimestamp(micros / 1_000_000, UTC).isoformat()
