"""How the audit buckets time: the publish-to-death buckets (from the
message's timestamp property) and the width of the timeline's bars."""

from __future__ import annotations

TIME_BUCKETS = ((1, "<1s"), (10, "1-10s"), (60, "10s-1m"), (600, "1-10m"), (3600, "10m-1h"))
LAST_BUCKET = ">=1h"
BUCKET_LABELS = tuple(name for _, name in TIME_BUCKETS) + (LAST_BUCKET,)


def bucket_unit(first_micros: int | None, last_micros: int | None) -> str:
    """Bars per minute over two hours or less, per hour up to a week, else per day."""
    if first_micros is None or last_micros is None:
        return "hour"
    span = (last_micros - first_micros) / 1_000_000
    return "minute" if span <= 7200 else "hour" if span <= 7 * 86400 else "day"
