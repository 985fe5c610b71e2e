"""What the audit computes from the dead-letter events, in the DataFrame API
only (no RDDs, no Python UDFs: the same plan runs locally, on a standalone
cluster and through Spark Connect).

Every table is sorted on all of its key columns, so two runs over the same
log give the same rows in the same order wherever they ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dlx.dead_letter import DROP_CAUSES
from dlx.deaths import REASONS

# Reasons that say the consumer or the queue was overwhelmed, not that the
# message itself is poison: a message that died once for one of them can go
# back where it came from.
TRANSIENT_REASONS = ("expired", "maxlen")
TOP_POISON = 100
# Time from publish (the message's timestamp property) to death.
TIME_BUCKETS = ((1, "<1s"), (10, "1-10s"), (60, "10s-1m"), (600, "1-10m"), (3600, "10m-1h"))
LAST_BUCKET = ">=1h"


@dataclass(frozen=True)
class Filters:
    since: datetime | None = None
    until: datetime | None = None
    vhost: str | None = None
    queue: str | None = None

    def apply(self, events: DataFrame) -> DataFrame:
        if self.since is not None:
            events = events.where(F.col("time") >= _micros(self.since))
        if self.until is not None:
            events = events.where(F.col("time") < _micros(self.until))
        if self.vhost is not None:
            events = events.where(F.col("vhost") == self.vhost)
        if self.queue is not None:
            events = events.where(F.col("queue") == self.queue)
        return events


def _micros(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1_000_000)


# ---- derived columns --------------------------------------------------------

def prepare(events: DataFrame) -> DataFrame:
    """Only what the tables read: bodies, most properties and headers stay
    on disk (a cached million events with their bodies does not fit a
    default 1 GB driver)."""
    return events.select(
        "time", "vhost", "queue", "reason", "outcome", "drop_cause", "exchange",
        "deaths", "first_death_queue", "message_id", "body_sha256", "target_queues",
        F.col("properties")["timestamp"].cast("long").alias("published"),
        F.col("headers")["x-delivery-count"].cast("long").alias("delivery_count"))


def message_key() -> Column:
    """A message's identity: its message-id, else its body's digest."""
    return F.coalesce(F.col("message_id"), F.concat(F.lit("sha256:"), F.col("body_sha256")))


def deaths_total() -> Column:
    """Deaths so far, this one included: the x-death counts added up."""
    return F.aggregate("deaths", F.lit(0).cast("long"), lambda acc, d: acc + d["count"])


def cycled() -> Column:
    """Died in the same queue for the same reason more than once, or
    dropped because the dead-letter target closed a cycle."""
    return ((F.col("drop_cause") == "cycle")
            | F.exists("deaths", lambda d: d["count"] > 1))


def death_path() -> Column:
    """The queues it died in, with repeats: "a x2 -> b".  x-death moves an
    entry to the front each time it dies there again, so reversed it runs
    from the earliest to the latest death."""
    steps = F.transform(F.reverse("deaths"), lambda d: F.when(
        d["count"] > 1, F.concat(d["queue"], F.lit(" x"), d["count"].cast("string")))
        .otherwise(d["queue"]))
    return F.array_join(steps, " -> ")


def bucket_unit(first_micros: int | None, last_micros: int | None) -> str:
    """Bars per minute over two hours or less, per hour up to a week, else per day."""
    if first_micros is None or last_micros is None:
        return "hour"
    span = (last_micros - first_micros) / 1_000_000
    return "minute" if span <= 7200 else "hour" if span <= 7 * 86400 else "day"


def _time_bucket(seconds: Column) -> Column:
    label = F.when(seconds.isNull(), F.lit(None))
    for limit, name in TIME_BUCKETS:
        label = label.when(seconds < limit, name)
    return label.otherwise(LAST_BUCKET)


def _counts_by(events: DataFrame, keys: list, *extra) -> DataFrame:
    return (events.groupBy(*keys)
            .agg(F.count(F.lit(1)).alias("events"), *extra)
            .orderBy(*keys))


def _outcome_counts():
    return (F.sum(F.when(F.col("outcome") == "dead_lettered", 1).otherwise(0))
            .cast("long").alias("dead_lettered"),
            F.sum(F.when(F.col("outcome") == "dropped", 1).otherwise(0))
            .cast("long").alias("dropped"))


# ---- the tables -------------------------------------------------------------

def over_time(events: DataFrame, unit: str) -> DataFrame:
    bucket = F.date_trunc(unit, F.timestamp_micros("time")).alias("bucket")
    return _counts_by(events.withColumn("bucket", bucket), ["bucket", "reason"])


def by_queue_reason(events: DataFrame) -> DataFrame:
    return _counts_by(events, ["vhost", "queue", "reason"], *_outcome_counts())


def by_exchange(events: DataFrame) -> DataFrame:
    return _counts_by(events, ["vhost", "exchange", "reason"], *_outcome_counts())


def top_poison(events: DataFrame) -> DataFrame:
    keyed = events.withColumn("message", message_key())
    return (keyed.groupBy("vhost", "message")
            .agg(F.count(F.lit(1)).alias("events"),
                 F.max(deaths_total()).alias("deaths"),
                 F.array_sort(F.collect_set("reason")).alias("reasons"),
                 F.array_sort(F.collect_set("queue")).alias("queues"),
                 F.min(F.timestamp_micros("time")).alias("first_seen"),
                 F.max(F.timestamp_micros("time")).alias("last_seen"))
            .orderBy(F.desc("deaths"), F.desc("events"), "vhost", "message")
            .limit(TOP_POISON))


def cycles(events: DataFrame) -> DataFrame:
    found = (events.where(cycled())
             .withColumn("message", message_key()).withColumn("path", death_path()))
    return _counts_by(found, ["vhost", "message", "path", "outcome"])


def time_to_death(events: DataFrame) -> DataFrame:
    published = F.col("published")
    seconds = F.col("time") / 1_000_000 - published
    stamped = events.where(published.isNotNull()).withColumn("bucket", _time_bucket(seconds))
    order = F.array([F.lit(name) for _, name in TIME_BUCKETS] + [F.lit(LAST_BUCKET)])
    return (stamped.groupBy("reason", "bucket").agg(F.count(F.lit(1)).alias("events"))
            .withColumn("order", F.array_position(order, F.col("bucket")))
            .orderBy("reason", "order").drop("order"))


def delivery_counts(events: DataFrame) -> DataFrame:
    counted = events.withColumn("deaths_so_far", deaths_total())
    return _counts_by(counted, ["reason", "deaths_so_far", "delivery_count"])


def reasons_per_queue(events: DataFrame) -> DataFrame:
    """Expired against rejected (and the other reasons) queue by queue."""
    return (events.groupBy("vhost", "queue").pivot("reason", list(REASONS))
            .agg(F.count(F.lit(1))).na.fill(0).orderBy("vhost", "queue"))


def first_to_last(events: DataFrame) -> DataFrame:
    return _counts_by(events.withColumnRenamed("queue", "last_queue"),
                      ["vhost", "first_death_queue", "last_queue"])


def drops(events: DataFrame) -> DataFrame:
    return _counts_by(events.where(F.col("outcome") == "dropped"), ["drop_cause", "reason"])


def replay_candidates(events: DataFrame) -> DataFrame:
    """Dead letters safe to send back: messages that died once only, for a
    transient reason, and sit in a dead-letter queue.  Their original
    exchange and routing keys are those of their oldest death (x-death lists
    the most recent first)."""
    keyed = events.withColumn("message", message_key())
    once = (keyed.groupBy("vhost", "message").agg(F.count(F.lit(1)).alias("n"))
            .where(F.col("n") == 1).drop("n"))
    origin = F.element_at("deaths", -1)
    return (keyed.join(once, ["vhost", "message"], "left_semi")
            .where((F.col("outcome") == "dead_lettered")
                   & F.col("reason").isin(*TRANSIENT_REASONS) & (deaths_total() == 1))
            .select(F.timestamp_micros("time").alias("time"), "vhost", "queue", "reason",
                    "message_id", "body_sha256",
                    origin["exchange"].alias("original_exchange"),
                    origin["routing_keys"].alias("original_routing_keys"),
                    "target_queues")
            .orderBy("time", "vhost", "queue", "body_sha256"))


TABLES = {
    "by_queue_reason": by_queue_reason,
    "by_exchange": by_exchange,
    "top_poison": top_poison,
    "cycles": cycles,
    "time_to_death": time_to_death,
    "delivery_counts": delivery_counts,
    "reasons_per_queue": reasons_per_queue,
    "first_to_last": first_to_last,
    "drops": drops,
}


def summary(events: DataFrame) -> dict:
    """The headline numbers, in one pass over the events."""
    per_reason = [F.sum(F.when(F.col("reason") == r, 1).otherwise(0)).alias(f"r_{r}")
                  for r in REASONS]
    per_cause = [F.sum(F.when(F.col("drop_cause") == c, 1).otherwise(0)).alias(f"c_{c}")
                 for c in DROP_CAUSES]
    row = events.agg(
        F.count(F.lit(1)).alias("events"), *_outcome_counts(), *per_reason, *per_cause,
        F.countDistinct(message_key()).alias("messages"),
        F.countDistinct(F.when(cycled(), message_key())).alias("cycled_messages"),
        F.countDistinct("vhost", "queue").alias("queues"),
        F.min("time").alias("first"), F.max("time").alias("last"),
    ).first()
    return {
        "events": row["events"],
        "dead_lettered": row["dead_lettered"] or 0,
        "dropped": row["dropped"] or 0,
        "by_reason": {r: row[f"r_{r}"] or 0 for r in REASONS},
        "drops_by_cause": {c: row[f"c_{c}"] or 0 for c in DROP_CAUSES},
        "messages": row["messages"],
        "cycled_messages": row["cycled_messages"],
        "queues": row["queues"],
        "first_event": _iso(row["first"]),
        "last_event": _iso(row["last"]),
        "first_event_micros": row["first"],
        "last_event_micros": row["last"],
    }


def _iso(micros: int | None) -> str | None:
    if micros is None:
        return None
    return datetime.fromtimestamp(micros / 1_000_000, timezone.utc).isoformat()
