"""How the audit buckets time: the publish-to-death buckets (from the
message's timestamp property) and the width of the timeline's bars."""

from __future__ import annotations

TIME_BUCKETS = ((1, "<1s"), (10, "1-10s"), (60, "10s-1m"), (600, "1-10m"), (3600, "10m-1h"))
LAST_BUCKET = ">=1h"
BUCKET_LABELS = tuple(name for _, name in TIME_BUCKETS) + (LAST_BUCKET,)


# Bars per minute over two hours or less, per hour up to a week, else per day.
UNITS = ((7200, "minute"), (7 * 86400, "hour"))
LAST_UNIT = "day"
NO_SPAN_UNIT = "hour"  # no events


def bucket_unit(first_micros: int | None, last_micros: int | None) -> str:
    if first_micros is None or last_micros is None:
        return NO_SPAN_UNIT
    span = (last_micros - first_micros) / 1_000_000
    return next((unit for limit, unit in UNITS if span <= limit), LAST_UNIT)


def bucket_unit_sql(first: str, last: str) -> str:
    """`bucket_unit` as Spark SQL on two µs columns, so the timeline's unit
    is decided inside the query that counts it."""
    steps = " ".join(f"WHEN ({last} - {first}) / 1000000 <= {limit} THEN '{unit}'"
                     for limit, unit in UNITS)
    return (f"CASE WHEN {first} IS NULL OR {last} IS NULL THEN '{NO_SPAN_UNIT}' {steps} "
            f"ELSE '{LAST_UNIT}' END")
