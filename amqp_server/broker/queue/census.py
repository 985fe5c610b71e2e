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

import re
import struct
from collections import Counter
from dataclasses import dataclass, field

from dlx.deaths import REASONS, history_from_headers

from ...wire.properties import decode_properties, locate
from ...wire.table import table_entries, value_end
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
_DEATH_KEYS = frozenset((b"queue", b"reason", b"exchange", b"routing-keys", b"count",
                         b"time"))
_INTEGER_TAGS = frozenset(b"bBsuIilLT")
_TEXT_TAGS = frozenset(b"Sx")
_TABLE, _ARRAY = 0x46, 0x41
# The x-death key with its array type, as a field table encodes it.
_DEATHS_KEY = re.compile(re.escape(b"\x07x-deathA"))
_MARK_IN = re.compile(re.escape(_MARK))  # in a stored record's bytes, in place
_U32 = struct.Struct(">I")


def latest_reason(message) -> str | None:
    """The reason of the message's latest death, as history_of finds it,
    without decoding what history_of already holds."""
    history = message.history
    if history is not None:
        return history.deaths[0].reason if history.deaths else None
    return latest_reason_of_header(message.header)


def latest_reason_of_header(header: bytes) -> str | None:
    """The reason of the latest death a stored content header records, as
    history_of finds it, or None: only the headers table's own x-death is
    read, in place, with decoding's checks (7 µs; decoding: 32)."""
    if header.find(_MARK) < 0:
        return None
    try:
        layout = locate(header, HEADER_PREFIX)
        if layout is None:  # continuation flags, which no client sends
            return _decoded_reason(header)
        start, end = layout[1], layout[2]
        deaths = None
        for key, tag, at, after in table_entries(header, start + 4, end, checked=True):
            if key == _MARK:
                deaths = (tag, at, after)  # the last of a repeated key, as decoded
        if deaths is None or deaths[0] != _ARRAY:
            return None
        return _first_death_reason(header, deaths[1] + 5, deaths[2])
    except (ValueError, IndexError, struct.error):
        return None


_KNOWN_ARRAYS = 4096  # x-death arrays remembered while recovering one queue


def recovered_reasons(payloads, header_of) -> list[str | None]:
    """The latest death's reason (None: not a dead letter) of each stored
    record (bytes holding its content header as it is), for recovery: a
    queue's paged tail may hold millions of dead letters, and decoding a
    header takes 32 µs.  The x-death array is read in place, where its
    key first shows in the record (in a stored header, the headers
    table's own: a client's table nested in another header could hold one
    first, and that message would count by it); dead letters that died
    together carry the same array bytes, and each is read once (4 µs).
    `header_of(i)` decodes the i-th record's content header, for an
    x-death of another shape or no entry dlx.deaths would take."""
    known: dict[bytes, str | None] = {}
    reasons: list[str | None] = []
    for index, payload in enumerate(payloads):
        reason = None
        if _MARK_IN.search(payload) is not None:
            found = _DEATHS_KEY.search(payload)
            if found is not None:
                at = found.start() + 13
                try:
                    deaths = bytes(payload[at:at + _U32.unpack_from(payload, at - 4)[0]])
                    if deaths in known:
                        reason = known[deaths]
                    else:
                        if len(known) >= _KNOWN_ARRAYS:
                            known.clear()
                        reason = known[deaths] = _first_death_reason(deaths, 0, len(deaths))
                except (ValueError, IndexError, struct.error):
                    reason = None
            if reason is None:
                reason = latest_reason_of_header(header_of(index))
        reasons.append(reason)
    return reasons


def _first_death_reason(data, start: int, end: int) -> str | None:
    """The reason of the first entry dlx.deaths keeps of the x-death array
    body data[start:end].  A stored header was checked when it was
    published (or built by the broker), and its record's checksum when it
    was read back: it is walked by its lengths alone, by hand (this runs
    for every dead letter a restart finds paged)."""
    pos = start
    while pos < end:
        after = value_end(data, pos)
        if data[pos] == _TABLE:
            reason = _death_reason(data, pos + 5, after)
            if reason is not None:
                return reason
        pos = after
    return None


def _death_reason(data, start: int, end: int) -> str | None:
    """The reason of an x-death entry (the table body data[start:end])
    that dlx.deaths takes as a death, else None."""
    tags: dict[bytes, int] = {}
    reason_at = reason_end = 0
    pos = start
    while pos < end:
        key_end = pos + 1 + data[pos]
        key = bytes(data[pos + 1:key_end])
        tag = data[key_end]
        after = value_end(data, key_end)
        if key in _DEATH_KEYS:
            tags[key] = tag  # the last of a repeated key, as decoded
            if key == b"reason":
                reason_at, reason_end = key_end, after
        pos = after
    if (len(tags) < len(_DEATH_KEYS) or tags[b"routing-keys"] != _ARRAY
            or tags[b"count"] not in _INTEGER_TAGS or tags[b"time"] not in _INTEGER_TAGS
            or tags[b"reason"] not in _TEXT_TAGS):
        return None
    reason = bytes(data[reason_at + 5:reason_end]).decode("utf-8", "replace")
    return reason if reason in REASONS else None


def _decoded_reason(header: bytes) -> str | None:
    """As history_of decides, the header decoded (continuation flags)."""
    try:
        history = history_from_headers(decode_properties(header[HEADER_PREFIX:]).headers)
    except (ValueError, IndexError, struct.error):
        return None
    return history.deaths[0].reason if history.deaths else None


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
