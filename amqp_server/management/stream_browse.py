"""The workbench's view of a stream: a page of its messages from an offset
or a moment, read from the log without consuming anything (a stream's
messages stay whatever anyone reads).  A dead-letter stream shows its
deaths and origins as a dead-letter queue does.

The page's `offset` is a stream offset here (a queue's is a position among
its ready messages); `timestamp` (seconds or ISO 8601) starts at the first
message appended at or after it.  Filters take the messages they match
among at most SCAN_MAX read; `next_offset` says where the next page starts.

A redrive copies chosen messages back to where they first died from and
leaves them in the stream, marked as redriven (storage/stream_log.py keeps
the marks on disk): redriving one again takes `"again": true`, a choice,
never an accident.  A redrive by filter reads at most SCAN_MAX messages
from its offset and says where it stopped and whether the stream goes on,
so that "all matching" is never silently "the first 10,000".
"""

from __future__ import annotations

from dataclasses import dataclass
from hashlib import sha256

from dlx.redrive import Filter, facts_of
from dlx.text import as_optional_text

from ..broker.message import HEADER_PREFIX, Entry, Message
from ..broker.peek import PeekedMessage
from ..broker.stream.queue import route_parts
from ..wire.properties import decode_properties
from .workbench import message_json

SCAN_MAX = 10_000  # messages read for one page, at most
# A page from a moment first passes over the older messages of the segment
# it starts in, a reader's SCAN_LIMIT (4,096) a read: at most this many
# such reads (about a million messages) for one page.
PASS_OVER_READS = 256


def _peeked(item) -> PeekedMessage:
    from dlx.deaths import history_from_headers

    properties = decode_properties(item.header[HEADER_PREFIX:]).as_dict()
    exchange, key = route_parts(item.route)
    return PeekedMessage(body=bytes(item.body), exchange=exchange, routing_key=key,
                         properties=properties, redelivered=False,
                         deaths=history_from_headers(properties.get("headers")).deaths)


def page(vhost, queue, wanted: Filter, offset: int, limit: int, shown: int,
         timestamp: int | None = None) -> dict:
    log = queue.log
    found: list[tuple[int, float, PeekedMessage]] = []
    scanned = 0
    next_offset = offset
    if log is not None:
        if timestamp is not None:
            reader = log.reader(log.first_at_or_after(timestamp * 1000.0), timestamp * 1000.0)
        else:
            reader = log.reader(max(offset, log.first_offset))
        passed_over = 0
        try:
            while len(found) < limit and scanned < SCAN_MAX:
                items = reader.read(min(limit - len(found), SCAN_MAX - scanned) if wanted.empty
                                    else min(256, SCAN_MAX - scanned))
                if not items:
                    if reader.more and passed_over < PASS_OVER_READS:
                        passed_over += 1  # older than the moment: on past them
                        continue
                    break
                scanned += len(items)
                for item in items:
                    message = _peeked(item)
                    message_id = as_optional_text(message.properties.get("message_id"))
                    if wanted.empty or wanted.matches(facts_of(message.headers, message_id),
                                                      message.body):
                        found.append((item.offset, item.timestamp, message))
                        if len(found) == limit:
                            reader.offset = item.offset + 1
                            break
            next_offset = reader.offset
        finally:
            reader.close()
    return {
        "vhost": vhost.name, "queue": queue.name, "type": "stream",
        "messages_ready": queue.message_count,
        "first_offset": log.first_offset if log is not None else 0,
        "committed_offset": (log.committed - 1) if log is not None else -1,
        "offset": offset, "limit": limit, "scanned": scanned, "matched": len(found),
        "next_offset": next_offset,
        # Each message's offset is its `seq`; `appended_at` (seconds) is when
        # the stream took it, what a page started at a time goes by.
        "messages": [{**message_json(seq, message, vhost.exchanges, shown),
                      "appended_at": stamp / 1000.0,
                      "redriven": log is not None and seq in log.redriven}
                     for seq, stamp, message in found],
    }


# ---- redrive: copies back to their origin, the stream keeps them -------------------

@dataclass(frozen=True)
class Chosen:
    """What a redrive names: the entries (offset, message as first
    published) and the named offsets the stream does not hold.  A read by
    filter or by replay candidates also says where it stopped
    (`next_offset`: a redrive of the same from there takes the rest) and
    whether the stream went on past it (`more`: SCAN_MAX cut the range
    short); offsets named one by one leave both None.  `found`: the replay
    candidates this read found (message_id, body_sha256)."""
    entries: list
    missing: list[int]
    next_offset: int | None = None
    more: bool | None = None
    found: list[dict] | None = None


def chosen(queue, body: dict, wanted: Filter) -> Chosen:
    """The entries a redrive names: `offsets`, or those the filter takes
    from `offset` on, or the audit's replay candidates (`messages`: each
    message_id and body_sha256) found from `offset` on (at most SCAN_MAX
    read either way)."""
    log = queue.log
    offsets = body.get("offsets")
    if offsets is not None:
        wanted_offsets = sorted({int(offset) for offset in offsets})
        start = wanted_offsets[0] if wanted_offsets else 0
        stop = wanted_offsets[-1] + 1 if wanted_offsets else 0
        if stop - start > SCAN_MAX:
            raise ValueError(f"offsets must lie within {SCAN_MAX} of each other")
    else:
        wanted_offsets = None
        # From the first offset retention kept: SCAN_MAX messages read, not
        # SCAN_MAX offsets of which the removed ones count.
        start = max(int(body.get("offset", 0)), log.first_offset)
        stop = start + SCAN_MAX
    candidates = ({(named.get("message_id"), named.get("body_sha256"))
                   for named in body["messages"]} if "messages" in body else None)
    seen: set[tuple] = set()
    entries: list = []
    found: set[int] = set()
    reader = log.reader(max(start, log.first_offset))
    try:
        while reader.offset < min(stop, log.committed):
            items = reader.read(min(256, stop - reader.offset))
            if not items:
                break
            for item in items:
                if item.offset >= stop:
                    break
                if wanted_offsets is not None and item.offset not in wanted_offsets:
                    continue
                message = _original(item)
                message_id = as_optional_text(message.properties.message_id)
                if candidates is not None:
                    key = (message_id, sha256(message.body).hexdigest())
                    if key not in candidates:
                        continue
                    seen.add(key)
                elif wanted_offsets is None and not wanted.empty and not wanted.matches(
                        facts_of(message.headers, message_id), message.body):
                    continue
                found.add(item.offset)
                entries.append(Entry(item.offset, message))
        # A read may return offsets past `stop`, not looked at: a redrive
        # from `stop` takes them.
        reached = min(reader.offset, stop)
    finally:
        reader.close()
    if wanted_offsets is not None:
        return Chosen(entries, [offset for offset in wanted_offsets if offset not in found])
    return Chosen(entries, [], next_offset=reached, more=reached < log.committed,
                  found=None if candidates is None else [
                      {"message_id": message_id, "body_sha256": digest}
                      for message_id, digest in sorted(seen, key=str)])


def _original(item) -> Message:
    exchange, key = route_parts(item.route)
    return Message(exchange, key, item.route, item.header, item.body)


async def redrive(queue, target, entries: list, again: bool) -> dict:
    """Copy each entry back where it first died from (LocalTarget: the
    publish path, waiting until durable copies are on disk), mark those
    copied as redriven; an entry redriven before is skipped unless `again`."""
    log = queue.log
    skipped = [entry.seq for entry in entries if entry.seq in log.redriven and not again]
    todo = [entry for entry in entries if again or entry.seq not in log.redriven]
    outcome = await target.send(todo)
    done = [entry.seq for entry in outcome.safe]
    log.mark_redriven(done)
    return {"redriven": done, "already_redriven": skipped,
            "kept": [{"offset": entry.seq, "why": why} for entry, why in outcome.kept],
            "duplicates": outcome.duplicates}
