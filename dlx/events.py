"""The dead-letter log's event: one record per message that died, whether it
was republished or dropped.  Its fields are declared here once; the broker's
writer and the Spark audit (which builds its schema from FIELDS) both import
this module, and neither depends on the other.

Encoding rules, chosen so Spark reads the log natively: timestamps are
integer microseconds since the epoch, the body is base64, and AMQP header
and property values are JSON strings (tables mix types that one column
cannot hold).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .deaths import DeathHistory

# (name, type): "long", "string", "boolean", "strings" (list of string),
# "string_map" (string -> JSON string), "deaths" (list of death structs)
FIELDS: tuple[tuple[str, str], ...] = (
    ("node", "string"),              # the broker that wrote it (node_name); older logs lack it
    ("time", "long"),                # µs since the epoch
    ("vhost", "string"),
    ("queue", "string"),             # where it died
    ("reason", "string"),            # rejected | expired | maxlen | delivery_limit
    ("outcome", "string"),           # dead_lettered | dropped
    ("drop_cause", "string"),        # no_dlx | dlx_missing | no_route | cycle | target_full ...
    ("exchange", "string"),          # the exchange it was last published to
    ("routing_keys", "strings"),     # the keys it was last routed with (CC included, BCC not)
    ("dead_letter_exchange", "string"),
    ("dead_letter_routing_keys", "strings"),
    ("target_queues", "strings"),
    ("deaths", "deaths"),            # the x-death history after this death, most recent first
    ("first_death_reason", "string"),
    ("first_death_queue", "string"),
    ("first_death_exchange", "string"),
    ("message_id", "string"),
    ("correlation_id", "string"),
    ("properties", "string_map"),    # every basic property but headers, JSON-encoded
    ("headers", "string_map"),       # application headers (death headers aside), JSON-encoded
    ("body_size", "long"),
    ("body_sha256", "string"),
    ("body", "string"),              # base64 when body_size is within the configured limit
    ("body_included", "boolean"),
    # unique per event; a cluster's copies share it; older logs lack it
    ("event_id", "string"),
)
FIELD_NAMES = tuple(name for name, _ in FIELDS)

# The fields of one entry of `deaths`.
DEATH_FIELDS: tuple[tuple[str, str], ...] = (
    ("queue", "string"),
    ("reason", "string"),
    ("count", "long"),
    ("time", "long"),                # µs since the epoch
    ("exchange", "string"),
    ("routing_keys", "strings"),
    ("original_expiration", "string"),
)

DEATH_HEADERS = frozenset({"x-death", "x-first-death-reason", "x-first-death-queue",
                           "x-first-death-exchange", "x-last-death-reason",
                           "x-last-death-queue", "x-last-death-exchange"})


def json_value(value: object) -> str:
    """An AMQP field value as a JSON string (bytes as base64 text)."""
    return json.dumps(value, default=_fallback, separators=(",", ":"), ensure_ascii=False)


def _fallback(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def deaths_json(history: DeathHistory) -> list[dict[str, Any]]:
    return [{"queue": d.queue, "reason": d.reason, "count": d.count, "time": d.time * 1_000_000,
             "exchange": d.exchange, "routing_keys": list(d.routing_keys),
             "original_expiration": d.original_expiration} for d in history.deaths]


def body_fields(body: bytes, limit: int) -> dict[str, Any]:
    keep = len(body) <= limit
    return {"body_size": len(body), "body_sha256": hashlib.sha256(body).hexdigest(),
            "body": base64.b64encode(body).decode() if keep else None,
            "body_included": keep}


def string_map(table: Mapping[str, object] | None) -> dict[str, str]:
    return {str(key): json_value(value) for key, value in (table or {}).items()
            if key not in DEATH_HEADERS}
