"""Where a dead letter goes back to, and which dead letters a filter picks:
pure functions of a message's headers, properties and body.

A redrive sends a message back where it came from.  RabbitMQ records that
in `x-death`: the entry of the very first death (named by the
`x-first-death-queue`/`-reason` headers; without them the oldest entry,
the last one, since entries are kept most recent first) holds the exchange
the message was published to and the routing keys it had then, CC keys
included.  A message Artemis's way moved carries `_AMQ_ORIG_ADDRESS`: the
exchange it was sent to, or its routing key when that was the default
exchange (`dlx/addresses.py`); it is used when there is no `x-death`.

The headers are left as they are, `x-death` included, so a message that
dies again counts on from its earlier deaths (3.13 honours a published
`x-death`).  One is added: `x-redrive-count`, how often the message was
redriven, so that a message that died again after a redrive is told from
one a dead-letter loop brought back (both die again in a queue they died
in before: the audit reads the header from the dead-letter log).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from amqp_server.wire.table import FieldTable

from .addresses import ORIG_ADDRESS, ORIG_QUEUE
from .deaths import REASONS, Death, DeathHistory, history_from_headers
from .text import as_optional_text, as_text

# Names that say a queue holds dead letters: Qpid's `<queue>_DLQ`, and
# Artemis's auto-created `DLQ.<address>` and `EXP.<address>` (its default
# prefixes).
DEAD_LETTER_SUFFIXES = ("_DLQ",)
DEAD_LETTER_PREFIXES = ("DLQ.", "EXP.")

FROM_X_DEATH = "x-death"
FROM_ADDRESS = ORIG_ADDRESS
# Times the message was redriven: a long, as x-delivery-count.
REDRIVE_COUNT = "x-redrive-count"


def named_like_dead_letters(name: str) -> bool:
    return name.endswith(DEAD_LETTER_SUFFIXES) or name.startswith(DEAD_LETTER_PREFIXES)


def is_dead_letter(headers: FieldTable | None) -> bool:
    """The message died at least once, RabbitMQ's way or Artemis's."""
    if not headers:
        return False
    return bool(history_from_headers(headers).deaths) or ORIG_ADDRESS in headers


@dataclass(frozen=True)
class Origin:
    """Where a redrive publishes a message: an exchange and its routing keys."""

    exchange: str
    routing_keys: tuple[str, ...]
    source: str  # FROM_X_DEATH or FROM_ADDRESS: what said so


def first_death(history: DeathHistory) -> Death | None:
    """The x-death entry of the message's first death."""
    if not history.deaths:
        return None
    if history.first is not None:
        reason, queue, _exchange = history.first
        for death in history.deaths:
            if death.queue == queue and death.reason == reason:
                return death
    return history.deaths[-1]


def origin_of(headers: FieldTable | None, routing_key: str,
              exchanges: Collection[str]) -> Origin | None:
    """Where the message came from, or None when nothing says.

    `exchanges`: the names of the exchanges that exist, to tell an
    `_AMQ_ORIG_ADDRESS` naming an exchange (publish there with the message's
    routing key) from one naming a queue reached through the default
    exchange (publish to "" with the address as the key)."""
    history = history_from_headers(headers)
    death = first_death(history)
    if death is not None and death.routing_keys:
        return Origin(death.exchange, death.routing_keys, FROM_X_DEATH)
    address = as_text(headers.get(ORIG_ADDRESS) if headers else None)
    if address:
        if address in exchanges:
            return Origin(address, (routing_key,), FROM_ADDRESS)
        return Origin("", (address,), FROM_ADDRESS)
    return None


def redrive_count(headers: Mapping[str, object] | None) -> int:
    """How often the message was redriven (0: never, or a count this
    broker did not write)."""
    count = (headers or {}).get(REDRIVE_COUNT)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def redriven_headers(headers: Mapping[str, object] | None) -> FieldTable:
    """The headers of a redriven copy: the message's own, `x-death`
    included, with REDRIVE_COUNT one more."""
    copy = FieldTable(headers or {})
    copy.types.update(getattr(headers, "types", None) or {})
    copy[REDRIVE_COUNT] = redrive_count(headers) + 1
    copy.types[REDRIVE_COUNT] = "long"
    return copy


@dataclass(frozen=True)
class Facts:
    """What the workbench shows and filters a dead letter by."""

    reason: str | None            # of its most recent death
    original_queue: str | None    # the queue it first died in
    original_exchange: str | None
    died_at: int | None           # seconds since the epoch: x-death's latest `time`
    deaths: int                   # every death counted
    message_id: str | None


def facts_of(headers: FieldTable | None, message_id: str | None) -> Facts:
    history = history_from_headers(headers)
    table: Mapping[str, object] = headers or {}
    first = first_death(history)
    latest = history.deaths[0] if history.deaths else None
    original_queue = first.queue if first else as_text(table.get(ORIG_QUEUE)) or None
    original_exchange = first.exchange if first else as_text(table.get(ORIG_ADDRESS)) or None
    return Facts(
        reason=latest.reason if latest else None,
        original_queue=original_queue,
        original_exchange=original_exchange,
        # x-death keeps the time of the FIRST death under each (queue,
        # reason) and only counts the later ones, and the broker records
        # no enqueue time with a message: this is the latest of those
        # first times, shown as "first died", never as the last death.
        died_at=max((d.time for d in history.deaths), default=None),
        deaths=history.total,
        message_id=message_id)


@dataclass(frozen=True)
class Filter:
    """Every field that is set must match; an empty filter takes all."""

    reason: str | None = None
    original_queue: str | None = None
    original_exchange: str | None = None
    since: int | None = None   # seconds since the epoch, inclusive, on died_at
    until: int | None = None   # exclusive, on died_at
    message_id: str | None = None
    body_contains: bytes | None = None

    @property
    def empty(self) -> bool:
        return self == Filter()

    def matches(self, facts: Facts, body: bytes) -> bool:
        if self.reason is not None and facts.reason != self.reason:
            return False
        if self.original_queue is not None and facts.original_queue != self.original_queue:
            return False
        if (self.original_exchange is not None
                and facts.original_exchange != self.original_exchange):
            return False
        if self.since is not None and (facts.died_at is None or facts.died_at < self.since):
            return False
        if self.until is not None and (facts.died_at is None or facts.died_at >= self.until):
            return False
        if self.message_id is not None and facts.message_id != self.message_id:
            return False
        if self.body_contains is not None and self.body_contains not in body:
            return False
        return True


FILTER_KEYS = ("reason", "original_queue", "original_exchange", "since", "until",
               "message_id", "body")


def parse_filter(given: Mapping[str, object]) -> Filter:
    """A filter from query parameters or a JSON object; ValueError names
    the bad field.  Empty strings mean "not set", as an empty form field."""
    unknown = sorted(set(given) - set(FILTER_KEYS))
    if unknown:
        raise ValueError(f"unknown filter fields: {', '.join(unknown)} "
                         f"(known: {', '.join(FILTER_KEYS)})")
    values = {key: given[key] for key in FILTER_KEYS
              if given.get(key) not in (None, "")}
    for key, value in values.items():
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise ValueError(f"{key} must be a string")
    reason = values.get("reason")
    if reason is not None and reason not in REASONS:
        raise ValueError(f"reason must be one of {', '.join(REASONS)}, got {reason!r}")
    body = values.get("body")
    return Filter(
        reason=reason,
        original_queue=as_optional_text(values.get("original_queue")),
        original_exchange=as_optional_text(values.get("original_exchange")),
        since=parse_time(values["since"], "since") if "since" in values else None,
        until=parse_time(values["until"], "until") if "until" in values else None,
        message_id=as_optional_text(values.get("message_id")),
        body_contains=str(body).encode("utf-8") if body is not None else None)


def parse_time(value: object, name: str) -> int:
    """Seconds since the epoch from an integer or ISO 8601 (UTC unless it
    says otherwise)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name} must be seconds since the epoch or an ISO 8601 time, "
                         f"got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp())


# ---- replay candidates from the audit ----------------------------------------

CANDIDATE_FIELDS = ("node", "vhost", "queue", "message_id", "body_sha256", "died_in",
                    "reason", "exchange", "routing_keys", "time", "expires_again")


@dataclass(frozen=True)
class Candidate:
    """One line of the audit's replay-candidates.ndjson: a message now in
    `queue` (a dead-letter queue of `vhost`), known by its id and body."""

    vhost: str
    queue: str
    message_id: str | None
    body_sha256: str
    died_in: str | None
    line: int

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.message_id, self.body_sha256)


def parse_candidates(text: str) -> list[Candidate]:
    """Every candidate of an NDJSON document; ValueError names the line."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not JSON: {exc.msg}") from None
        if not isinstance(item, dict):
            raise ValueError(f"line {number}: not a JSON object")
        missing = [key for key in ("vhost", "queue", "body_sha256") if not item.get(key)]
        if missing:
            raise ValueError(f"line {number}: missing {', '.join(missing)}")
        digest = str(item["body_sha256"]).lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"line {number}: body_sha256 is not a SHA-256 hex digest")
        message_id = item.get("message_id")
        found.append(Candidate(str(item["vhost"]), str(item["queue"]),
                               None if message_id in (None, "") else str(message_id),
                               digest, as_optional_text(item.get("died_in")), number))
    return found


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()
