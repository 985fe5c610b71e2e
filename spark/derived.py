"""Columns derived from each event once: stored with the compacted events,
so an audit reads a few flat columns instead of the death history and the
property and header maps; computed the same way on the fly for the log not
compacted yet.

Expressions are Spark SQL text: in classic PySpark every Column built in
Python is a round trip to the JVM, while an expression string is one;
through Spark Connect both are local.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, types as T

from dlx.redrive import REDRIVE_COUNT

from .buckets import LAST_BUCKET, TIME_BUCKETS


def _time_bucket(seconds: str) -> str:
    steps = " ".join(f"WHEN {seconds} < {limit} THEN '{name}'" for limit, name in TIME_BUCKETS)
    return f"CASE WHEN {seconds} IS NULL THEN NULL {steps} ELSE '{LAST_BUCKET}' END"


# How often the workbench had redriven the message before this death
# (dlx/redrive.py); try_cast: a header of that name a publisher set to
# something else is no count, and fails no audit (Spark's ANSI cast would).
_REDRIVES = f"coalesce(try_cast(headers['{REDRIVE_COUNT}'] AS BIGINT), 0)"
# A death in a queue the message died in before for the same reason (an
# x-death count above 1) that its redrives do not explain: it came back
# there by dead-lettering.  Each redrive can account for one such repeat:
# a message redriven to the queue it died in and dying there again is not
# a cycle.  Or it was dropped because the dead-letter target closed a
# cycle (RabbitMQ's is_cycle).
# `deaths`.`count` rather than the structs: Spark then reads only that field
# of the nested column.  array_max rather than exists(..., n -> n > 1): a
# lambda is evaluated row by row outside Spark's generated code (compaction
# of 1M events: about 0.5 s less); the repeats are added up only for the
# messages that were redriven.
_CYCLED = (f"coalesce(drop_cause = 'cycle', false) OR IF({_REDRIVES} = 0, "
           "array_max(deaths.`count`) > 1, "
           f"aggregate(deaths.`count`, 0L, (total, n) -> total + n - 1) > {_REDRIVES})")

# (name, Spark SQL, type)
DERIVED: tuple[tuple[str, str, T.DataType], ...] = (
    # A message's identity: its message-id, else its body's digest.
    ("message", "coalesce(message_id, concat('sha256:', body_sha256))", T.StringType()),
    # Deaths so far, this one included: the x-death counts added up.
    ("deaths_so_far", "aggregate(deaths.`count`, 0L, (total, n) -> total + n)",
     T.LongType()),
    ("redrives", _REDRIVES, T.LongType()),
    # Came back by dead-lettering to a queue it had died in (see _CYCLED).
    ("cycled", _CYCLED, T.BooleanType()),
    # For those, the queues it died in, with repeats: "a x2 -> b".  x-death
    # moves an entry to the front each time it dies there again, so reversed
    # it runs from the earliest to the latest death.
    ("death_path", f"IF({_CYCLED}, array_join(transform(reverse(deaths), d -> "
     "IF(d.`count` > 1, concat(d.queue, ' x', CAST(d.`count` AS STRING)), d.queue)), "
     "' -> '), NULL)", T.StringType()),
    # From publish (the message's timestamp property, in seconds) to death.
    ("publish_to_death",
     _time_bucket("(time / 1000000 - CAST(properties['timestamp'] AS BIGINT))"),
     T.StringType()),
    ("delivery_count", "try_cast(headers['x-delivery-count'] AS BIGINT)", T.LongType()),
    # x-death lists the most recent death first: the last entry is the
    # first death, with the exchange and keys it was originally published to.
    ("original_exchange", "element_at(deaths, -1).exchange", T.StringType()),
    ("original_routing_keys", "element_at(deaths, -1).routing_keys",
     T.ArrayType(T.StringType())),
)
DERIVED_FIELDS = tuple(T.StructField(name, kind) for name, _, kind in DERIVED)


def with_derived(events: DataFrame) -> DataFrame:
    return events.selectExpr("*", *(f"{sql} AS {name}" for name, sql, _ in DERIVED))
