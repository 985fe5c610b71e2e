"""The per-message half of a dead-letter log line (fields in dlx/events.py).

The broker serialises what messages that died together share (queue,
reason, routing, death history: `broker/dead_letter_events.py`) once per
batch and hands over finished event records (that head, the content header
and the body as they were stored); the log's writer process completes each
line here, so the event loop never JSON-encodes a message's properties.
"""

from __future__ import annotations

import json
import struct
from base64 import b64encode
from hashlib import sha256
from json.encoder import encode_basestring

from dlx.events import string_map

from ..wire.frames import CONTENT_HEADER_PREFIX
from ..wire.properties import decode_properties, locate, simple_properties
from ..wire.table import decode_table

# One encoder, built once: json.dumps with options builds a new one per call.
encode_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def json_text(value) -> str:
    """A JSON string literal, or null (the C string escaper, no encoder object)."""
    return "null" if value is None else encode_basestring(str(value))


def _scalar(value) -> str:
    return str(value) if isinstance(value, int) else encode_basestring(str(value))


def _header_map(header: bytes) -> dict[str, str]:
    """The application headers of a stored content header (death headers
    aside), as the log's string map: decoded here, not by the broker."""
    try:
        layout = locate(header, CONTENT_HEADER_PREFIX)
        if layout is None:
            table = decode_properties(header[CONTENT_HEADER_PREFIX:]).headers
        else:
            table = decode_table(header, layout[1])[0] if layout[2] > layout[1] else None
    except (ValueError, IndexError, struct.error):
        table = None  # counted as invalid_header where it died
    return string_map(table)


def event_fields(header: bytes, body: bytes, body_limit: int) -> dict:
    """This message's own fields of its log line (event_line's, as values
    rather than JSON text): for a writer of columns, the archive's."""
    props = simple_properties(header, CONTENT_HEADER_PREFIX)
    message_id, correlation_id = props.get("message_id"), props.get("correlation_id")
    included = len(body) <= body_limit
    return {"message_id": None if message_id is None else str(message_id),
            "correlation_id": None if correlation_id is None else str(correlation_id),
            "properties": {name: _scalar(value) for name, value in props.items()},
            "headers": _header_map(header), "body_size": len(body),
            "body_sha256": sha256(body).hexdigest(),
            "body": b64encode(body).decode() if included else None,
            "body_included": included}


def node_member(node: str) -> str:
    """The `node` field as the JSON member every line of one writer ends with."""
    return f'"node":{encode_basestring(node)}'


def event_line(head: str, header: bytes, body: bytes, body_limit: int,
               node_field: str, event_id: str) -> str:
    """One log line: `head` (the shared fields, from the broker), then this
    message's own parts (event_fields, of its content header and body as
    they were stored), its `event_id`, then `node_field` (from node_member,
    encoded once per batch)."""
    own = event_fields(header, body, body_limit)
    # Property values are plain strings and numbers (_scalar: JSON already),
    # carried as strings: the value's JSON encoded once more.
    properties = ",".join(f"{encode_basestring(name)}:{encode_basestring(value)}"
                          for name, value in own["properties"].items())
    return (f'{head},"message_id":{json_text(own["message_id"])},'
            f'"correlation_id":{json_text(own["correlation_id"])},'
            f'"properties":{{{properties}}},"headers":{encode_json(own["headers"])},'
            f'"body_size":{own["body_size"]},"body_sha256":"{own["body_sha256"]}",'
            f'"body":{json_text(own["body"])},'
            f'"body_included":{"true" if own["body_included"] else "false"},'
            f'"event_id":"{event_id}",{node_field}}}\n')
