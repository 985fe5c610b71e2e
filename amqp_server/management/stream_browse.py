"""The workbench's view of a stream: a page of its messages from an offset
or a moment, read from the log without consuming anything (a stream's
messages stay whatever anyone reads).  A dead-letter stream shows its
deaths and origins as a dead-letter queue does.

The page's `offset` is a stream offset here (a queue's is a position among
its ready messages); `timestamp` (seconds or ISO 8601) starts at the first
message appended at or after it.  Filters take the messages they match
among at most SCAN_MAX read; `next_offset` says where the next page starts.
"""

from __future__ import annotations

from dlx.redrive import Filter, facts_of

from ..broker.peek import PeekedMessage
from ..broker.message import HEADER_PREFIX
from ..wire.properties import decode_properties
from .workbench import _text, message_json

SCAN_MAX = 10_000  # messages read for one page, at most


def _peeked(item) -> PeekedMessage:
    from dlx.deaths import history_from_headers
    from ..broker.stream.queue import _route_parts

    properties = decode_properties(item.header[HEADER_PREFIX:]).as_dict()
    exchange, key = _route_parts(item.route)
    return PeekedMessage(body=bytes(item.body), exchange=exchange, routing_key=key,
                         properties=properties, redelivered=False,
                         deaths=history_from_headers(properties.get("headers")).deaths)


def page(vhost, queue, wanted: Filter, offset: int, limit: int, shown: int,
         timestamp: int | None = None) -> dict:
    log = queue.log
    found: list[tuple[int, PeekedMessage]] = []
    scanned = 0
    next_offset = offset
    if log is not None:
        if timestamp is not None:
            reader = log.reader(log.first_at_or_after(timestamp * 1000.0), timestamp * 1000.0)
        else:
            reader = log.reader(max(offset, log.first_offset))
        try:
            while len(found) < limit and scanned < SCAN_MAX:
                items = reader.read(min(limit - len(found), SCAN_MAX - scanned) if wanted.empty
                                    else min(256, SCAN_MAX - scanned))
                if not items:
                    break
                scanned += len(items)
                for item in items:
                    message = _peeked(item)
                    if wanted.empty or wanted.matches(
                            facts_of(message.headers, _text(message.properties.get("message_id"))),
                            message.body):
                        found.append((item.offset, message))
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
        "messages": [message_json(seq, message, vhost.exchanges, shown)
                     for seq, message in found],
    }
