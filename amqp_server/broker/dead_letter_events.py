"""Dead-letter log lines (fields in dlx/events.py), built in two parts: what
messages that died together share (queue, reason, routing, death history)
is serialised once per plan; each message adds its own properties,
headers, outcome and body digest, in the log's writer process, from the
content header and body as they were stored."""

from __future__ import annotations

import json
import struct
from base64 import b64encode
from hashlib import sha256
from json.encoder import encode_basestring

from dlx.dead_letter import Republish
from dlx.deaths import record_death
from dlx.events import deaths_json, string_map

from ..wire.properties import decode_properties, locate, simple_properties
from ..wire.table import decode_table
from .message import HEADER_PREFIX


def event_common(vhost: str, queue: str, reason: str, letter, target: str | None,
                 now: int, plan: Republish | None = None) -> str:
    """The shared fields, as JSON members without the braces; `target` is the
    exchange the death was meant for (dead-letter exchange or address)."""
    if plan is not None:
        history = plan.history
        dl_keys = list(plan.routing_keys)
    else:
        # Dropped before a plan: record the death anyway, so the audit sees it.
        bcc = set(letter.bcc)
        history = record_death(letter.history, queue, reason, letter.exchange,
                               tuple(k for k in letter.routing_keys if k not in bcc),
                               letter.expiration, now)
        dl_keys = []
    first = history.first or (None, None, None)
    bcc = set(letter.bcc)
    common = {
        "vhost": vhost, "queue": queue, "reason": reason, "exchange": letter.exchange,
        "routing_keys": [k for k in letter.routing_keys if k not in bcc],
        "dead_letter_exchange": target,
        "dead_letter_routing_keys": dl_keys,
        "deaths": deaths_json(history),
        "first_death_reason": first[0], "first_death_queue": first[1],
        "first_death_exchange": first[2],
    }
    return _encode(common)[1:-1]


# One encoder, built once: json.dumps with options builds a new one per call.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _text(value) -> str:
    """A JSON string literal, or null (the C string escaper, no encoder object)."""
    return "null" if value is None else encode_basestring(str(value))


def _scalar(value) -> str:
    return str(value) if isinstance(value, int) else encode_basestring(str(value))


def event_head(common: str, now: float, cause: str | None, targets: list[str]) -> str:
    """What messages dying in one batch with one outcome share."""
    return (f'{{{common},"time":{int(now * 1_000_000)},'
            f'"outcome":"{"dropped" if cause else "dead_lettered"}",'
            f'"drop_cause":{_text(cause)},'
            f'"target_queues":[{",".join(map(encode_basestring, targets))}]')


def _headers(header: bytes) -> str:
    """The application headers of a stored content header (death headers
    aside), as the log's string map: decoded here, not by the broker."""
    try:
        layout = locate(header, HEADER_PREFIX)
        if layout is None:
            table = decode_properties(header[HEADER_PREFIX:]).headers
        else:
            table = decode_table(header, layout[1])[0] if layout[2] > layout[1] else None
    except (ValueError, IndexError, struct.error):
        table = None  # counted as invalid_header where it died
    return _encode(string_map(table))


def node_member(node: str) -> str:
    """The `node` field as the JSON member every line of one writer ends with."""
    return f'"node":{encode_basestring(node)}'


def event_line(head: str, header: bytes, body: bytes, body_limit: int,
               node_field: str) -> str:
    """One log line: `head` from event_head, then this message's own parts
    (its content header and body as they were stored), then `node_field`
    (from node_member, encoded once per batch)."""
    props = simple_properties(header, HEADER_PREFIX)
    headers = _headers(header)
    # Property values are plain strings and numbers: JSON-encoded once for
    # the value, once more to carry that JSON as a string.
    properties = ",".join(f"{encode_basestring(name)}:{encode_basestring(_scalar(value))}"
                          for name, value in props.items())
    included = len(body) <= body_limit
    return (f'{head},"message_id":{_text(props.get("message_id"))},'
            f'"correlation_id":{_text(props.get("correlation_id"))},'
            f'"properties":{{{properties}}},"headers":{headers},"body_size":{len(body)},'
            f'"body_sha256":"{sha256(body).hexdigest()}",'
            f'"body":{_text(b64encode(body).decode()) if included else "null"},'
            f'"body_included":{"true" if included else "false"},{node_field}}}\n')
