"""Getting and publishing messages over HTTP (/api/queues/.../get and
/api/exchanges/.../publish), with RabbitMQ's ackmodes and payload encodings."""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import fields

from dlx.redelivery import NACKED, REJECTED

from ..broker.message import Message
from ..wire.frames import content_header
from ..wire.properties import Properties, encode_properties
from ..wire.table import FieldTable
from .requests import BadRequest
from .shapes import jsonable

ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
            "reject_requeue_false")
_PROPERTY_NAMES = {f.name for f in fields(Properties)}
_INTEGER_PROPERTIES = ("delivery_mode", "priority", "timestamp")
# What RabbitMQ's publish route answers a nack with (400).
REFUSED = "rejected Unable to publish message. Check queue limits."


# The keys a get must have, in the order RabbitMQ names the missing ones.
REQUIRED = ("ackmode", "count", "encoding")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def get_request(body: dict) -> tuple[int, str, str, int | None]:
    """(count, ackmode, encoding, truncate) of a get's body, refused as
    RabbitMQ's rabbit_mgmt_wm_queue_get refuses it."""
    missing = [key for key in REQUIRED if key not in body]
    if missing:
        raise BadRequest("[" + ",".join(f"{{key_missing,{key}}}" for key in missing) + "]")
    count = _integer(body["count"])
    ackmode, encoding = body["ackmode"], body["encoding"]
    if encoding not in ("auto", "base64"):
        raise BadRequest("Unsupported encoding. Please use auto or base64.")
    # RabbitMQ fails with a 500 on any other ackmode; a 400 says which.
    if ackmode not in ACKMODES:
        raise BadRequest(f"ackmode must be one of {', '.join(ACKMODES)}, got {ackmode!r}")
    truncate = _integer(body["truncate"]) if "truncate" in body else None
    if truncate is not None and truncate < 0:  # RabbitMQ's handler crashes (500)
        raise BadRequest(f"truncate must not be negative, got {truncate}")
    return count, ackmode, encoding, truncate


def _integer(value) -> int:
    """rabbit_mgmt_util:parse_int: a number (a fraction truncated) or its
    decimal digits; anything else is refused naming the value."""
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, str) and _INTEGER.fullmatch(value))):
        raise BadRequest(["not_integer", value if not isinstance(value, float) else str(value)])
    return int(value)


def get(queue, count: int, ackmode: str, encoding: str, limit: int | None) -> list[dict]:
    """Take up to `count` messages (a negative count: all, as RabbitMQ's
    countdown never reaches zero); requeue, drop or dead-letter them as
    `ackmode` says (reject_requeue_false dead-letters, as in RabbitMQ)."""
    if ackmode not in ACKMODES:
        raise ValueError(f"ackmode must be one of {', '.join(ACKMODES)}")
    if encoding not in ("auto", "base64"):
        raise ValueError("encoding must be auto or base64")
    taken, shown = [], []
    left = count
    while left != 0:
        left -= 1
        entry = queue.take_one()
        if entry is None:
            break
        taken.append(entry)
        shown.append(_message_json(entry, queue.message_count, encoding, limit))
    # rabbit_mgmt_wm_queue_get: reject_* rejects, ack_requeue_true nacks
    # (4.3 counts only the first as a failed delivery).
    if ackmode == "reject_requeue_true":
        queue.requeue(taken, REJECTED)
    elif ackmode == "ack_requeue_true":
        queue.requeue(taken, NACKED)
    elif ackmode == "ack_requeue_false":
        queue.settle(taken)
    else:
        queue.reject(taken, REJECTED)
    return shown


def _message_json(entry, remaining: int, encoding: str, limit: int | None) -> dict:
    message = entry.message
    body = message.body
    payload = body[:limit] if limit is not None else body
    text = None
    if encoding == "auto":
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    props = {k: jsonable(v) for k, v in message.properties.as_dict().items()}
    return {
        "payload_bytes": len(body),
        "redelivered": entry.redelivered,
        # Earlier deliveries that came back (Qpid shows this count here).
        "delivery_count": entry.returns,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": remaining,
        "properties": props,
        "payload": text if text is not None else base64.b64encode(payload).decode(),
        "payload_encoding": "string" if text is not None else "base64",
    }


def publish(grant, vhost, exchange, body: dict) -> bool:
    """Publish one message through the virtual host's publish path, as
    RabbitMQ's management plugin does on a channel of its own: mandatory,
    in confirm mode, counted as such.  Whether a queue was routed to (and
    took it); a queue refusing it answers 400."""
    routing_key = str(body.get("routing_key", ""))
    payload = body.get("payload", "")
    encoding = body.get("payload_encoding", "string")
    if encoding == "string":
        raw = str(payload).encode("utf-8")
    elif encoding == "base64":
        try:
            raw = base64.b64decode(str(payload), validate=True)
        except binascii.Error as exc:
            raise ValueError(f"payload is not valid base64: {exc}") from None
    else:
        raise ValueError("payload_encoding must be string or base64")
    props = _properties(body.get("properties") or {})
    header = content_header(len(raw), encode_properties(props))
    message = Message.to(exchange.name, routing_key, header, raw)
    outcome = vhost.publish(message, grant, True, True)
    if outcome.refused:
        # rabbit_mgmt_wm_exchange_publish: its channel got a nack, which a
        # queue refusing the message gives even when another took it.
        raise BadRequest(REFUSED)
    return outcome.routed


def _properties(given: dict) -> Properties:
    if not isinstance(given, dict):
        raise ValueError("properties must be a JSON object")
    unknown = sorted(set(given) - _PROPERTY_NAMES)
    if unknown:
        raise ValueError(f"unknown message properties: {', '.join(unknown)}")
    values = {}
    for name, value in given.items():
        if name == "headers":
            if not isinstance(value, dict):
                raise ValueError("headers must be a JSON object")
            value = FieldTable(value)
        elif name in _INTEGER_PROPERTIES:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be an integer") from None
        else:
            value = str(value)
        values[name] = value
    return Properties(**values)
