"""What a queue's waiting dead letters are: how many by the reason of their
latest death, and when the oldest of them died.  Read by the Prometheus
gauges, the broker's own alert samples and the retention scan's wake-up.

A dead letter is a ready message with a death history (its `x-death`):
the dead-letterer hands its copies over with the history as data; any
other message's headers are searched for the bytes `x-death` before any
decoding, so a queue of plain messages costs one byte search each.  Its
age counts from the time of its latest death entry (x-death[0]'s `time`,
which RabbitMQ keeps from the first death under that queue and reason):
it travels with the message, so it survives a restart.

The census looks at the ready messages in memory, the head first, at most
SCAN_LIMIT of them; a queue's paged-out tail (newer messages: a lazy
queue keeps 256 in memory, any queue pages past its threshold) is counted
by reason as it is paged out and back in (paging.py), its ages not.  The
result is kept until the queue changes.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field

from dlx.deaths import REASONS, history_from_headers

from ...wire.properties import decode_properties, locate
from ...wire.table import array_items, table_entries
from ..message import HEADER_PREFIX

SCAN_LIMIT = 100_000
_MARK = b"x-death"


@dataclass
class Census:
    waiting: Counter = field(default_factory=Counter)  # reason -> dead letters
    oldest_death: int | None = None  # seconds since the epoch
    complete: bool = True  # every ready message was looked at


# What dlx.deaths takes as a death: a table holding these, `routing-keys`
# an array, `count` and `time` integers, `reason` text naming a reason.
_DEATH_KEYS = (b"queue", b"reason", b"exchange", b"routing-keys", b"count", b"time")
_INTEGER_TAGS = frozenset(b"bBsuIilLT")
_TEXT_TAGS = frozenset(b"Sx")
_TABLE, _ARRAY = 0x46, 0x41


def latest_reason(message) -> str | None:
    """The reason of the message's latest death, as history_of finds it,
    without decoding what history_of already holds."""
    history = message.history
    if history is not None:
        return history.deaths[0].reason if history.deaths else None
    return latest_reason_of_header(message.header)


def latest_reason_of_header(header: bytes) -> str | None:
    """The reason of the latest death a stored content header records, as
    history_of finds it, or None.  Read in place (a recovered queue's
    paged tail may hold millions of dead letters, and decoding a header
    takes tens of µs), with decoding's checks: a message counts alike
    paged and in memory."""
    if header.find(_MARK) < 0:
        return None
    try:
        layout = locate(header, HEADER_PREFIX)
        if layout is None:  # continuation flags, which no client sends
            history = history_from_headers(decode_properties(header[HEADER_PREFIX:]).headers)
            return history.deaths[0].reason if history.deaths else None
        start, end = layout[1], layout[2]
        if end <= start:
            return None
        # A stored header was checked when it was published (or built by
        # the broker), and its record's checksum when it was read back:
        # walked by its lengths alone.
        deaths = None
        for key, tag, at, value_end in table_entries(header, start + 4, end, checked=True):
            if key == _MARK:
                deaths = (tag, at, value_end)  # the last of a repeated key, as decoded
        if deaths is None or deaths[0] != _ARRAY:
            return None
        for tag, at, value_end in array_items(header, deaths[1] + 5, deaths[2], checked=True):
            reason = _death_reason(header, at + 5, value_end) if tag == _TABLE else None
            if reason is not None:
                return reason  # the first entry dlx.deaths keeps
        return None
    except (ValueError, IndexError, struct.error):
        return None


def _death_reason(header: bytes, start: int, end: int) -> str | None:
    """The reason of an x-death entry (the table body header[start:end])
    that dlx.deaths takes as a death, else None."""
    found = {key: (tag, at, value_end)
             for key, tag, at, value_end in table_entries(header, start, end, checked=True)}
    if any(key not in found for key in _DEATH_KEYS):
        return None
    if (found[b"routing-keys"][0] != _ARRAY or found[b"count"][0] not in _INTEGER_TAGS
            or found[b"time"][0] not in _INTEGER_TAGS):
        return None
    tag, at, value_end = found[b"reason"]
    if tag not in _TEXT_TAGS:
        return None
    reason = bytes(header[at + 5:value_end]).decode("utf-8", "replace")
    return reason if reason in REASONS else None


def history_of(message):
    """The message's death history if it has one, else None, decoding its
    headers only when they hold the word."""
    history = message.history
    if history is None:
        header = message.header
        if header.find(_MARK) < 0:
            return None
        try:
            # Decoded for the history only: the message keeps its encoded
            # properties (a dead letter queue may hold millions).
            headers = decode_properties(header[HEADER_PREFIX:]).headers
            history = message.history = history_from_headers(headers)
        except (ValueError, IndexError, struct.error):
            return None
    return history if history.deaths else None


def take_census(entries, limit: int = SCAN_LIMIT) -> Census:
    census = Census()
    waiting = census.waiting
    oldest = None
    for index, entry in enumerate(entries):
        if index >= limit:
            census.complete = False
            break
        history = history_of(entry.message)
        if history is None:
            continue
        latest = history.deaths[0]
        waiting[latest.reason] += 1
        if oldest is None or latest.time < oldest:
            oldest = latest.time
    census.oldest_death = oldest
    return census
