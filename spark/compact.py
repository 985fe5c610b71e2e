"""Incremental compaction of the brokers' dead-letter logs into one Parquet
dataset, and reading every event back: Parquet for what was compacted, JSON
for the rest, and retention's archive, which the broker writes as Parquet
of the same schema (read as it is, never compacted).

A broker writes one log file at a time; every file but its newest is sealed
and can be compacted.  Each run compacts the sealed files the checkpoint
does not list yet, broker by broker, into `--parquet-dir/events/`
(zstd, partitioned by node and day), so a re-run reads only what is new and
a filter on a node or a time range reads only those partitions.

Events written before brokers wrote `node` get the name of their data
directory (LogSource.name), here and in the dataset alike.
"""

from __future__ import annotations

import uuid
from functools import reduce

from pyspark.sql import DataFrame, SparkSession, functions as F

from . import checkpoint
from .checkpoint import Checkpoint
from .derived import with_derived
from .schema import COMPACTED_SCHEMA, EVENT_SCHEMA, EVENTS_SCHEMA, PARTITIONS
from .sources import LogSource

EVENTS = "events"
# Columns whose values are all but unique per event.  Parquet's dictionary
# encoding would hash every value into a dictionary that outgrows its page
# and is then thrown away (the values written again, plain); their min/max
# statistics narrow no filter the audit has.  Measured on 2 cores, 1M
# events: dictionary and statistics were 20% and 4% of compaction's CPU;
# without them for these columns compaction took 17-19 s instead of 21-24.
# The property and header values are the application's own (message ids,
# timestamps, trace ids): four or more per event, most of them unique
# (without their dictionary: 16.6-18.3 -> 15.5-16.2 s, 49 -> 48 MB).
UNIQUE_COLUMNS = ("time", "message_id", "body_sha256", "body", "message", "event_id",
                  "properties.key_value.value", "headers.key_value.value")
WRITE_OPTIONS = {
    "compression": "zstd",
    **{f"parquet.enable.dictionary#{name}": "false" for name in UNIQUE_COLUMNS},
    # time keeps its statistics: --since and --until skip row groups by them.
    **{f"parquet.column.statistics.enabled#{name}": "false" for name in UNIQUE_COLUMNS
       if name != "time"},
}


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def read_json(spark: SparkSession, source: LogSource, files: list[str]) -> DataFrame:
    """These files of one broker's log as events, each with its node and
    the derived columns."""
    # A line the writer is still appending is malformed for now: skipped.
    events = spark.read.schema(EVENT_SCHEMA).option("mode", "DROPMALFORMED").json(files)
    return with_derived(events.withColumn("node", F.coalesce(F.col("node"),
                                                             F.lit(source.name))))


def read_archive(spark: SparkSession, source: LogSource) -> DataFrame:
    """One broker's archive files (Parquet: the event's fields and the
    content header, which this schema leaves out) as events."""
    # A file damaged after it was written is skipped, as the broker's own
    # reader skips it (storage/archive_parquet.py) and the log's a broken line.
    events = (spark.read.schema(EVENT_SCHEMA).option("ignoreCorruptFiles", "true")
              .parquet(*source.archived))
    return with_derived(events.withColumn("node", F.coalesce(F.col("node"),
                                                             F.lit(source.name))))


def _union(spark: SparkSession, frames: list[DataFrame]) -> DataFrame:
    if not frames:
        return spark.createDataFrame([], EVENTS_SCHEMA)
    return reduce(DataFrame.unionByName, frames)


def to_compact(sources: list[LogSource], done: Checkpoint) -> list[tuple[LogSource, list[str]]]:
    """Per broker, its sealed files that are not in the dataset yet."""
    todo = []
    for source in sources:
        compacted = done.compacted(source.data_dir)
        files = [path for path in source.sealed if _name(path) not in compacted]
        if files:
            todo.append((source, files))
    return todo


def compact(spark: SparkSession, parquet_dir: str,
            todo: list[tuple[LogSource, list[str]]], done: Checkpoint) -> Checkpoint:
    """Appends these files' events as one batch, then commits it; returns
    the checkpoint with the batch in it."""
    if not todo:
        return done
    batches = [uuid.uuid4().hex for _ in todo]  # one per broker
    events = _union(spark, [read_json(spark, source, files).withColumn("batch", F.lit(batch))
                            for (source, files), batch in zip(todo, batches)])
    (events.withColumn("day", F.to_date(F.timestamp_micros("time")))
     .write.mode("append").partitionBy(*PARTITIONS).options(**WRITE_OPTIONS)
     .parquet(f"{parquet_dir}/{EVENTS}"))
    entries = [(source.data_dir, _name(path), batch)
               for (source, files), batch in zip(todo, batches) for path in files]
    checkpoint.commit(spark, parquet_dir, entries)
    return Checkpoint(done.entries + tuple(entries))


def read_events(spark: SparkSession, sources: list[LogSource], parquet_dir: str,
                done: Checkpoint, partitions=None) -> DataFrame:
    """Every event with its derived columns: the compacted Parquet (only the
    partitions `partitions` keeps, when given), the JSON not compacted
    yet and the archive; Spark then reads only the columns a query uses."""
    frames = []
    for source in sources:
        compacted = done.compacted(source.data_dir)
        files = [path for path in source.files if _name(path) not in compacted]
        if files:
            frames.append(read_json(spark, source, files))
        if source.archived:
            frames.append(read_archive(spark, source))
    batches = done.batches([source.data_dir for source in sources])
    if batches:
        parquet = spark.read.schema(COMPACTED_SCHEMA).parquet(f"{parquet_dir}/{EVENTS}")
        if partitions is not None:
            parquet = partitions(parquet)
        frames.append(parquet.where(F.col("batch").isin(batches))
                      .select(*EVENTS_SCHEMA.fieldNames()))
    events = _union(spark, frames)
    if len(sources) > 1:
        events = once_each(events)
    return events


def once_each(events: DataFrame) -> DataFrame:
    """Each event once, however many logs hold a copy: a cluster's followers
    keep the leader's events under the leader's ids.  Events of logs older
    than the ids (event_id NULL) are all distinct."""
    has_id = F.col("event_id").isNotNull()
    return events.where(has_id).dropDuplicates(["event_id"]).unionByName(
        events.where(~has_id))
