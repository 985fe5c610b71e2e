"""A message's death history, kept as data and rendered as `x-death` only at
the edge (RabbitMQ 3.13: `mc:record_death/4`, `mc_amqpl:death_table/7`).

Entries are keyed by (queue, reason) and ordered most recent first.  Dying
again for a known key bumps its count and moves it to the front; the entry
keeps the exchange, routing keys, time and original expiration of its first
death, as RabbitMQ's does.  The first-death triple is set once and never
changes; the last-death triple follows every death (3.13's
`x-last-death-*` headers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from amqp_server.wire.table import FieldArray, FieldTable, Timestamp

from .text import as_optional_text, as_text

REASONS = ("rejected", "expired", "maxlen", "delivery_limit")


@dataclass(frozen=True)
class Death:
    queue: str
    reason: str
    exchange: str
    routing_keys: tuple[str, ...]
    count: int
    time: int  # seconds since the epoch, of the first death under this key
    original_expiration: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.queue, self.reason)


@dataclass(frozen=True)
class DeathHistory:
    deaths: tuple[Death, ...] = ()
    # (reason, queue, exchange) of the very first death, if this broker or
    # the publisher recorded one; never changed once set.
    first: tuple[str, str, str] | None = None
    last: tuple[str, str, str] | None = None

    @property
    def total(self) -> int:
        return sum(death.count for death in self.deaths)

    def queue_names(self) -> list[str]:
        """Queues the message died in, most recent first."""
        return [death.queue for death in self.deaths]


def record_death(history: DeathHistory, queue: str, reason: str, exchange: str,
                 routing_keys: tuple[str, ...], original_expiration: str | None,
                 now_seconds: int) -> DeathHistory:
    if reason not in REASONS:
        raise ValueError(f"unknown dead-letter reason {reason!r}")
    key = (queue, reason)
    others = []
    found = None
    for death in history.deaths:
        if found is None and death.key == key:
            found = death
        else:
            others.append(death)
    if found is not None:
        head = replace(found, count=found.count + 1)
    else:
        head = Death(queue, reason, exchange, tuple(routing_keys), 1, int(now_seconds),
                     original_expiration)
    triple = (reason, queue, exchange)
    # A message with no deaths yet gets new first-death values, even over
    # ones a publisher set by hand (3.13 lets annotations win).
    first = history.first if history.deaths else triple
    return DeathHistory((head, *others), first, triple)


def is_cycle(history: DeathHistory, target_queue: str) -> bool:
    """Would delivering to `target_queue` close a fully automatic cycle?

    RabbitMQ 3.13's `is_cycle_v2`: find the most recent death in the target
    queue; it is a cycle unless some death from then to now was a client
    rejection.
    """
    for death in history.deaths:
        if death.reason == "rejected":
            return False
        if death.queue == target_queue:
            return True
    return False


# ---- the x-death header --------------------------------------------------

def death_table(death: Death) -> FieldTable:
    table = FieldTable()
    if death.original_expiration is not None:
        table["original-expiration"] = death.original_expiration
        table.types["original-expiration"] = "longstr"
    keys = FieldArray(death.routing_keys)
    keys.types = ["longstr"] * len(keys)
    for name, type_name, value in (
        ("count", "long", death.count),
        ("reason", "longstr", death.reason),
        ("queue", "longstr", death.queue),
        ("time", "timestamp", Timestamp(death.time)),
        ("exchange", "longstr", death.exchange),
        ("routing-keys", "array", keys),
    ):
        table[name] = value
        table.types[name] = type_name
    return table


DEATH_HEADERS = ("x-death", "x-first-death-reason", "x-first-death-queue",
                 "x-first-death-exchange", "x-last-death-reason", "x-last-death-queue",
                 "x-last-death-exchange")


def death_headers(history: DeathHistory) -> FieldTable:
    """Only the headers the history renders: x-death and the summaries."""
    out = FieldTable()
    array = FieldArray(death_table(death) for death in history.deaths)
    array.types = ["table"] * len(array)
    _set(out, "x-death", array, "array")
    for prefix, triple in (("x-first-death", history.first), ("x-last-death", history.last)):
        if triple is not None:
            for suffix, value in zip(("reason", "queue", "exchange"), triple):
                _set(out, f"{prefix}-{suffix}", value, "longstr")
    return out


def without_death_headers(headers: FieldTable | None) -> FieldTable:
    out = FieldTable()
    if headers:
        types = getattr(headers, "types", {})
        for key, value in headers.items():
            if key not in DEATH_HEADERS:
                out[key] = value
                if key in types:
                    out.types[key] = types[key]
    return out


def render_headers(headers: FieldTable | None, history: DeathHistory) -> FieldTable:
    """The message's headers with `x-death` and the death summaries set."""
    out = without_death_headers(headers)
    rendered = death_headers(history)
    out.update(rendered)
    out.types.update(rendered.types)
    return out


def _set(table: FieldTable, key: str, value: object, type_name: str) -> None:
    table[key] = value
    table.types[key] = type_name


def history_from_headers(headers: FieldTable | None) -> DeathHistory:
    """Deaths a message already carries (3.13's `recover_deaths`): entries
    missing a field or naming an unknown reason are ignored."""
    if not headers:
        return DeathHistory()
    raw = headers.get("x-death")
    deaths = []
    if isinstance(raw, list):
        for entry in raw:
            death = _death_from_table(entry)
            if death is not None:
                deaths.append(death)
    first = _triple(headers, "x-first-death")
    last = _triple(headers, "x-last-death")
    if deaths and last is None:
        head = deaths[0]
        last = (head.reason, head.queue, head.exchange)
    return DeathHistory(tuple(deaths), first, last)


def _death_from_table(entry: object) -> Death | None:
    if not isinstance(entry, dict):
        return None
    try:
        queue = as_text(entry["queue"])
        reason = as_text(entry["reason"])
        exchange = as_text(entry["exchange"])
        keys = entry["routing-keys"]
        count = entry["count"]
        time = entry["time"]
    except KeyError:
        return None
    if (reason not in REASONS or not isinstance(keys, list)
            or not isinstance(count, int) or isinstance(count, bool)
            or not isinstance(time, int) or isinstance(time, bool)):
        return None
    expiration = entry.get("original-expiration")
    return Death(queue, reason, exchange, tuple(as_text(k) for k in keys), count, int(time),
                 as_optional_text(expiration))


def _triple(headers: FieldTable, prefix: str) -> tuple[str, str, str] | None:
    values = [headers.get(f"{prefix}-{suffix}") for suffix in ("reason", "queue", "exchange")]
    if any(value is None for value in values):
        return None
    reason, queue, exchange = (as_text(value) for value in values)
    return reason, queue, exchange
