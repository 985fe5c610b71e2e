"""A dead letter that a stream holds, as a dead-letter log event (the
fields of events.py): what the audit counts when dead letters are routed
into a stream (docs/streams.md).

A stream keeps each message as it was routed to it (storage/stream_log.py:
its route, content header and body); a dead letter's content header
carries its death history as `x-death`.  From that the event is rebuilt as
the broker's log writer would have written it when the message died: the
queue and reason of its latest death, its whole history, its properties,
headers and body digest.  What the stream does not know is left as the log
leaves what it does not know: no node (the audit names the data directory),
and the time is when the stream took the copy (the moment of the death,
give or take the republish), not the death's `time` (that is when the
message first died under this queue and reason, as RabbitMQ keeps it).

A message without `x-death` is no dead letter: None.
"""

from __future__ import annotations

import struct
from typing import Any

from amqp_server.wire.frames import CONTENT_HEADER_PREFIX
from amqp_server.wire.properties import decode_properties, simple_properties

from .deaths import history_from_headers
from .events import body_fields, deaths_json, json_value, string_map

# The log's default (config `dead_letter_log.body_limit`): bodies up to this
# size are kept in the event, base64.
BODY_LIMIT = 64 << 10
STREAM_RECORD = "S"  # a stream segment's message record (storage/stream_log.py)


def route_parts(route: bytes) -> tuple[str, str]:
    """The exchange and routing key of a stored route (two short strings,
    as basic.deliver carries them)."""
    length = route[0]
    exchange = route[1:1 + length].decode("utf-8", "surrogateescape")
    key_length = route[1 + length]
    key = route[2 + length:2 + length + key_length].decode("utf-8", "surrogateescape")
    return exchange, key


def event_id(vhost: str, stream: str, offset: int) -> str:
    """The copy's id: where it is (a stream's offsets are never reused),
    so the workbench finds it by these three; distinct from the log's ids
    (`<log id>-<number>`)."""
    return f"stream:{json_value(vhost)}:{json_value(stream)}:{offset}"


def dead_letter_event(vhost: str, stream: str, offset: int, timestamp_ms: float,
                      route: bytes, header: bytes, body: bytes,
                      body_limit: int = BODY_LIMIT) -> dict[str, Any] | None:
    """The event of one stream message (a record's fields), or None when it
    carries no death: the stream holds it, but nothing died."""
    properties = decode_properties(bytes(header[CONTENT_HEADER_PREFIX:]))
    history = history_from_headers(properties.headers)
    if not history.deaths:
        return None
    latest = history.deaths[0]
    first = history.first or (None, None, None)
    exchange, key = route_parts(route)
    simple = simple_properties(bytes(header), CONTENT_HEADER_PREFIX)
    return {
        "node": None,
        "time": int(timestamp_ms * 1000),
        "vhost": vhost,
        "queue": latest.queue,
        "reason": latest.reason,
        "outcome": "dead_lettered",
        "drop_cause": None,
        "exchange": latest.exchange,
        "routing_keys": list(latest.routing_keys),
        # The copy was routed into the stream by the dead-letter exchange,
        # with the dead-letter routing key: its stored route says which.
        "dead_letter_exchange": exchange,
        "dead_letter_routing_keys": [key],
        "target_queues": [stream],
        "deaths": deaths_json(history),
        "first_death_reason": first[0],
        "first_death_queue": first[1],
        "first_death_exchange": first[2],
        "message_id": simple.get("message_id"),
        "correlation_id": simple.get("correlation_id"),
        "properties": {name: json_value(value) for name, value in simple.items()},
        "headers": string_map(properties.headers),
        **body_fields(bytes(body), body_limit),
        "event_id": event_id(vhost, stream, offset),
    }


def events_of_records(vhost: str, stream: str, records: list[Any],
                      body_limit: int = BODY_LIMIT) -> list[dict[str, Any]]:
    """The events of a segment's decoded records (other records and
    messages that never died are passed over)."""
    found = []
    for record in records:
        if not isinstance(record, list) or len(record) < 6 or record[0] != STREAM_RECORD:
            continue
        _, offset, stamp, route, header, body = record[:6]
        try:
            event = dead_letter_event(vhost, stream, offset, stamp, route, header, body,
                                      body_limit)
        except (ValueError, IndexError, TypeError, struct.error):
            continue  # a header this broker could not have written: not an event
        if event is not None:
            found.append(event)
    return found
