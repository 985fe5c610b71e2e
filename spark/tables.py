"""What the audit computes from the dead-letter events, in the DataFrame API
only (no RDDs, no Python UDFs: the same plan runs locally, on a standalone
cluster and through Spark Connect).

The events are aggregated once into `facts`: event counts by every
dimension a table groups by except time and message.  Its size follows the
brokers' configuration (queues, reasons, outcomes), not their traffic, so
it is cached, fetched, and most tables are re-aggregations of it on the
driver (fact_tables.py).  One row per message gives the message counts and
the few messages that died more than once (cached), from which the top
poison messages and the replay candidates come.  `collect_all` fetches the
facts and the tables that need the events in one Spark query.

Every table is sorted on all of its key columns, so two runs over the same
log give the same rows in the same order wherever they ran.  With `by_node`
every table has the node as its first key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce

import pyarrow as pa
from pyspark.sql import Column, DataFrame, functions as F, types as T
from pyspark.sql.pandas.types import to_arrow_schema

from .buckets import bucket_unit_sql
from .fact_tables import Split

# Reasons that say the consumer or the queue was overwhelmed, not that the
# message itself is poison: a message that died once for one of them can go
# back where it came from.
TRANSIENT_REASONS = ("expired", "maxlen")
TOP_POISON = 100
# A message is poison when it died at least this often (its x-death total,
# or how many of its deaths the log holds, whichever is more).
POISON_DEATHS = 2


@dataclass(frozen=True)
class Filters:
    since: datetime | None = None
    until: datetime | None = None
    vhost: str | None = None
    queue: str | None = None
    node: str | None = None

    def apply(self, events: DataFrame) -> DataFrame:
        if self.since is not None:
            events = events.where(F.col("time") >= _micros(self.since))
        if self.until is not None:
            events = events.where(F.col("time") < _micros(self.until))
        for column in ("vhost", "queue", "node"):
            if getattr(self, column) is not None:
                events = events.where(F.col(column) == getattr(self, column))
        return events

    def partitions(self, compacted: DataFrame) -> DataFrame:
        """The same filters on the dataset's partition columns, so Spark
        reads only the days and nodes they can match."""
        if self.since is not None:
            compacted = compacted.where(F.col("day") >= _utc(self.since).date())
        if self.until is not None:
            compacted = compacted.where(F.col("day") <= _utc(self.until).date())
        if self.node is not None:
            compacted = compacted.where(F.col("node") == self.node)
        return compacted


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _micros(moment: datetime) -> int:
    return int(_utc(moment).timestamp() * 1_000_000)


# ---- the events, prepared ---------------------------------------------------
#
# Expressions are Spark SQL text, as in derived.py: in classic PySpark every
# Column built in Python is a round trip to the JVM (one table cost 200 of
# them), while an expression string is one.

PREPARED = (
    "node", "vhost", "queue", "reason", "outcome", "drop_cause", "exchange",
    "first_death_queue", "time", "message_id", "body_sha256", "target_queues", "message",
    "deaths_so_far", "cycled", "delivery_count", "publish_to_death", "original_exchange",
    "original_routing_keys",
    # Cycled events keep their message and path in the facts, so the cycles
    # table and the count of cycled messages come from it (NULL for others).
    "IF(cycled, message, NULL) AS cycled_message",
    "death_path AS cycle_path",
    # Died after the workbench redrove it (compacted before the count was
    # derived: NULL, and no redrive recorded it then).
    "coalesce(redrives, 0) > 0 AS redriven",
    # Expired, and x-death records no expiration of its own: its queue's
    # TTL (x-message-ttl, a message-ttl policy, an address's expiry delay)
    # expired it, and does so again when it is redriven there.  RabbitMQ
    # keeps a message's own expiration in its x-death entry
    # (original-expiration) and removes it from the dead letter, so a
    # redriven copy of such a message does not expire by it again.
    ("reason = 'expired' AND try_element_at(deaths.original_expiration, 1) IS NULL "
     "AS expires_again"),
)


def prepare(events: DataFrame) -> DataFrame:
    """One row per event with what the tables group by; Spark reads only
    the columns a query uses (bodies, most properties and headers stay on
    disk)."""
    return events.selectExpr(*PREPARED)


FACT_KEYS = ("node", "vhost", "queue", "reason", "outcome", "drop_cause", "exchange",
             "first_death_queue", "deaths_so_far", "delivery_count", "publish_to_death",
             "cycled_message", "cycle_path")


def _exprs(*sql: str) -> list[Column]:
    return [F.expr(text) for text in sql]


def facts(prepared: DataFrame) -> DataFrame:
    """Event counts by every dimension but time and message (but for the
    messages that cycled), in a single partition (cache it: the timeline
    takes its span from it in the same query)."""
    return (prepared.groupBy(*FACT_KEYS)
            .agg(*_exprs("count(1) AS events", "min(time) AS first", "max(time) AS last"))
            .coalesce(1))


def _sorted(frame: DataFrame, keys: list) -> DataFrame:
    """A small table in one partition, sorted: no range-partitioning job,
    and its order survives the union in collect_all."""
    return frame.coalesce(1).sortWithinPartitions(*keys)


# ---- tables from the events ---------------------------------------------------

def over_time(prepared: DataFrame, facts: DataFrame, split: Split) -> DataFrame:
    """Events per bar of time; the bars' width (bucket_unit) follows the
    span of the events, taken from the facts in the same query, so no
    Spark job has to run before this one."""
    keys = split.keys("bucket", "reason")
    unit = facts.selectExpr(f"{bucket_unit_sql('min(first)', 'max(last)')} AS bucket_unit")
    counts = (prepared.crossJoin(F.broadcast(unit))
              .selectExpr("date_trunc(bucket_unit, timestamp_micros(time)) AS bucket", "*")
              .groupBy(*keys).agg(F.expr("count(1) AS events")))
    return _sorted(counts, keys)


def per_message(prepared: DataFrame, split: Split) -> DataFrame:
    """One row per message (per node and message with `by_node`): about as
    many rows as events, so only `repeated` is kept of it."""
    return prepared.groupBy(*split.keys("vhost", "message")).agg(*_exprs(
        "count(1) AS events", "max(deaths_so_far) AS deaths", "bool_or(redriven) AS redriven",
        "min(time) AS first", "max(time) AS last"))


def repeated(messages: DataFrame) -> DataFrame:
    """The messages that died at least POISON_DEATHS times: few, so cache
    them; the top poison messages and the replay candidates come from them,
    and so does the number of messages (see `repeats`)."""
    return messages.where(f"greatest(deaths, events) >= {POISON_DEATHS}")


def repeats(repeated: DataFrame) -> DataFrame:
    """Deaths in the log beyond each message's first: every message that
    died more than once is in `repeated`, so the events less these are the
    distinct messages, without a second pass over them all.  So is every
    message that died again after a redrive (x-death counts on through a
    redrive): those are counted here too."""
    return repeated.selectExpr("coalesce(sum(events - 1), 0) AS repeats",
                               "count_if(redriven) AS died_again_after_redrive")


def top_poison(prepared: DataFrame, repeated: DataFrame, split: Split) -> DataFrame:
    """The most repeated, most deaths first; where they died and why is
    gathered for those alone."""
    identity = split.keys("vhost", "message")
    ranking = [F.desc("deaths"), F.desc("events"), *identity]
    top = repeated.orderBy(*ranking).limit(TOP_POISON)
    details = (prepared.join(F.broadcast(top.select(*identity)), identity, "left_semi")
               .groupBy(*identity)
               .agg(*_exprs("array_sort(collect_set(reason)) AS reasons",
                            "array_sort(collect_set(queue)) AS queues",
                            "array_sort(collect_set(node)) AS nodes")))
    return _sorted(top.join(details, identity).selectExpr(
        *identity, "events", "deaths", "reasons", "queues", "nodes",
        "timestamp_micros(first) AS first_seen", "timestamp_micros(last) AS last_seen"),
        ranking)


def replay_candidates(prepared: DataFrame, repeated: DataFrame, split: Split) -> DataFrame:
    """Dead letters to send back: messages that died once only, for a
    transient reason, and wait in a dead-letter queue.  Their original
    exchange and routing keys are those of that one death.  Those their
    queue's TTL expired are kept, marked `expires_again`: the audit cannot
    tell whether that queue still expires them before a consumer comes
    (it can, after an outage of its consumers; a delay queue always
    does), the operator can."""
    identity = split.keys("vhost", "message")
    transient = ", ".join(f"'{reason}'" for reason in TRANSIENT_REASONS)
    return _sorted(
        prepared.where(f"outcome = 'dead_lettered' AND reason IN ({transient}) "
                       "AND deaths_so_far = 1")
        .join(repeated.select(*identity), identity, "left_anti")
        .selectExpr("timestamp_micros(time) AS time", "node", "vhost", "queue", "reason",
                    "message_id", "body_sha256", "original_exchange",
                    "original_routing_keys", "target_queues", "expires_again"),
        ["time", "node", "vhost", "queue", "message_id", "body_sha256"])


# ---- fetching them all ----------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _fetched(schema: T.StructType, rows: list) -> pa.Table:
    """Collected rows as an Arrow table of the frame's own types, times as
    UTC (they travel as µs: collect() would give naive local times)."""
    times = [f.name for f in schema if isinstance(f.dataType, T.TimestampType)]
    records = []
    for row in rows:
        record = row.asDict()
        for name in times:
            if record[name] is not None:
                record[name] = _EPOCH + timedelta(microseconds=record[name])
        records.append(record)
    return pa.Table.from_pylist(records, schema=to_arrow_schema(schema, timezone="UTC"))


def collect_all(frames: dict[str, DataFrame]) -> dict[str, pa.Table]:
    """Every table, in one Spark job: the tables go into one union, each as
    a struct column of its own, and come back apart."""
    schemas = {name: frame.schema for name, frame in frames.items()}
    packed = [frame.selectExpr(f"'{name}' AS table", "struct({}) AS {}".format(", ".join(
        f"unix_micros(`{f.name}`) AS `{f.name}`" if isinstance(f.dataType, T.TimestampType)
        else f"`{f.name}`" for f in schemas[name]), name))
        for name, frame in frames.items()]
    rows: dict[str, list] = {name: [] for name in frames}
    for row in reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True),
                      packed).collect():
        rows[row["table"]].append(row[row["table"]])
    return {name: _fetched(schemas[name], rows[name]) for name in frames}
