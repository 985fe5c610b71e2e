"""A stream's rules as pure functions: how long `x-max-age` is, where a
consumer's `x-stream-offset` starts it, and which segments retention removes.

Sources, RabbitMQ 3.13: rabbit_amqqueue:check_max_age/1 (the units and
their lengths), rabbit_stream_queue:parse_offset_arg/1 (the offset specs,
an AMQP timestamp in seconds, an interval string counted back from now) and
osiris_log's retention (whole segments from the oldest, never the one being
written, by total size and by the age of a segment's newest message).

No I/O and no clock: the caller passes `now` (wall-clock ms).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from amqp_server.wire.table import FieldTable

# rabbit_amqqueue:unit_value_in_ms/1: a month is 30 days, a year 365.
_SECOND = 1000
UNIT_MS = {"s": _SECOND, "m": 60 * _SECOND, "h": 3600 * _SECOND, "D": 86400 * _SECOND,
           "M": 30 * 86400 * _SECOND, "Y": 365 * 86400 * _SECOND}
_MAX_AGE = re.compile(r"([0-9]+)(Y|M|D|h|m|s)")

# rabbit.hrl's MAX_STREAM_MAX_SEGMENT_SIZE, and osiris's default segment size.
MAX_SEGMENT_SIZE = 3_000_000_000
DEFAULT_SEGMENT_SIZE = 500_000_000
# The Bloom filter size range and default of 3.13's filtering.
FILTER_SIZE_RANGE = (16, 255)
DEFAULT_FILTER_SIZE = 16


def max_age_ms(text: object) -> int | None:
    """`7D`, `12h`, `30m`, `10s`, ... in milliseconds; None when RabbitMQ
    would answer invalid_max_age (no digits, zero, another unit).  3.10
    crashes on a unit without digits (541); 3.13 and we refuse it."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str):
        return None
    match = _MAX_AGE.fullmatch(text)
    if match is None or int(match.group(1)) <= 0:
        return None
    return int(match.group(1)) * UNIT_MS[match.group(2)]


# ---- where a consumer starts ---------------------------------------------------

@dataclass(frozen=True)
class OffsetSpec:
    """`kind` is first, last, next, offset or timestamp; `value` the
    offset or the wall-clock ms of a timestamp."""
    kind: str
    value: int = 0


FIRST, LAST, NEXT = OffsetSpec("first"), OffsetSpec("last"), OffsetSpec("next")
_NAMED = {"first": FIRST, "last": LAST, "next": NEXT}
_INTEGER_TYPES = frozenset({"byte", "short", "signedint", "long", "unsignedbyte",
                            "unsignedshort", "unsignedint"})


def offset_spec(typed: tuple[str, object] | None, now: float) -> OffsetSpec | None:
    """The start an `x-stream-offset` argument asks for, as
    rabbit_stream_queue:parse_offset_arg/1 reads it; None when it is not
    one (3.13: {invalid_stream_offset_arg, ...})."""
    if typed is None:
        return NEXT
    kind, value = typed
    text = _text(value) if isinstance(value, (bytes, bytearray, str)) else None
    named = _NAMED.get(text) if text is not None else None
    if named is not None:  # whatever the field's type: pika sends bytes as a byte array
        return named
    if kind == "longstr":
        interval = max_age_ms(text)
        return None if interval is None else OffsetSpec("timestamp", int(now) - interval)
    if kind == "timestamp" and isinstance(value, int):  # AMQP timestamps are seconds
        return OffsetSpec("timestamp", value * 1000)
    if kind in _INTEGER_TYPES and isinstance(value, int) and not isinstance(value, bool):
        return OffsetSpec("offset", value)
    return None


def check_stream_offset(typed: tuple[str, object], _arguments: FieldTable) -> str | None:
    """rabbit_amqqueue:check_stream_offset_arg/2's error term."""
    if offset_spec(typed, 0) is not None:
        return None
    kind, value = typed
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    shown = f'<<"{value}">>' if isinstance(value, str) else (
        ("true" if value else "false") if isinstance(value, bool) else value)
    return f"{{invalid_stream_offset_arg,{{{kind},{shown}}}}}"


def start_offset(spec: OffsetSpec, first: int, next_offset: int) -> int | None:
    """Where a reader starts in a log holding offsets first..next_offset-1
    (first == next_offset when it holds none); None for a timestamp, which
    the log resolves by looking at its messages.  A numeric offset before
    the first starts at the first; one past the end waits for its own
    offset (osiris attaches at the next, and rabbit_stream_queue delivers
    nothing below the offset asked for)."""
    if spec.kind == "first":
        return first
    if spec.kind == "next":
        return next_offset
    if spec.kind == "last":
        return max(first, next_offset - 1)
    if spec.kind == "offset":
        return max(spec.value, first)
    return None


# ---- filtering (3.13) -----------------------------------------------------------

@dataclass(frozen=True)
class FilterSpec:
    """What a consumer's `x-stream-filter` and `x-stream-match-unfiltered`
    ask for."""
    values: frozenset[str]
    match_unfiltered: bool = False

    def passes(self, value: str | None) -> bool:
        """Whether a message published with `x-stream-filter-value` `value`
        (None: without one) goes to the consumer.  RabbitMQ decides per
        chunk with a Bloom filter and may send more, which its clients
        filter out again; here the decision is exact, per message, so the
        consumer gets what that client-side filter would keep."""
        if value is None:
            return self.match_unfiltered
        return value in self.values


def filter_spec(arguments: Mapping[str, object] | None) -> FilterSpec | None:
    """rabbit_stream_queue:filter_spec/1: `x-stream-filter` is a string or
    an array (its strings are taken, other elements skipped);
    `x-stream-match-unfiltered` counts only with it, and only a boolean."""
    if not arguments:
        return None
    found = arguments.get("x-stream-filter")
    if found is None:
        return None
    kinds = getattr(arguments, "types", {}) or {}
    if isinstance(found, (bytes, bytearray, str)):
        if kinds.get("x-stream-filter", "longstr") != "longstr":
            return None  # a byte array is no filter there: every message goes
        values = [_text(found)]
    elif isinstance(found, (list, tuple)):
        element_types = getattr(found, "types", None) or []
        values = [_text(item) for index, item in enumerate(found)
                  if isinstance(item, (bytes, bytearray, str))
                  and (index >= len(element_types) or element_types[index] == "longstr")]
    else:
        return None
    match = arguments.get("x-stream-match-unfiltered")
    unfiltered = match is True and kinds.get("x-stream-match-unfiltered", "bool") == "bool"
    return FilterSpec(frozenset(values), unfiltered)


def _text(value: object) -> str:
    return bytes(value).decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) \
        else str(value)


# ---- retention ---------------------------------------------------------------------

@dataclass(frozen=True)
class SegmentFacts:
    """What retention reads of one segment."""
    size: int             # bytes on disk
    newest: float | None  # wall-clock ms of its newest message (None: empty)


def segments_to_remove(segments: Sequence[SegmentFacts], max_bytes: int | None,
                       max_age: int | None, now: float) -> int:
    """How many segments, from the oldest, retention removes.  The newest
    segment holding messages always stays, so a stream never loses its
    newest messages, nor the empty segments after it (the one a restart
    starts appending to); a segment goes whole or not at all."""
    removable = len(segments) - 1
    while removable > 0 and segments[removable].newest is None:
        removable -= 1
    count = 0
    if max_age is not None:
        while count < removable:
            newest = segments[count].newest
            if newest is None or newest >= now - max_age:
                break
            count += 1
    if max_bytes is not None:
        total = sum(segment.size for segment in segments[count:])
        while count < removable and total > max_bytes:
            total -= segments[count].size
            count += 1
    return count
