"""Delayed and scheduled delivery: when a message that asks to wait is due.

Two ways to ask, from the two brokers applications retry with:

- RabbitMQ's delayed-message exchange plugin (rabbitmq-delayed-message-
  exchange, `rabbit_delayed_message_utils:get_delay/1` and
  `rabbit_exchange_type_delayed_message:delay_message/2`, 3.13 series): an
  `x-delay` header in milliseconds, relative to the publish.  Only a delay
  in 1 .. 2^32-1 ms delays (an Erlang timer's range); anything else,
  negative, zero, too large or of a type it does not read, routes at once.
  Integers of most widths count; a float is truncated; a string (or byte
  array) is read as a base-10 integer, and one that is not an integer
  crashes the publishing channel there (`binary_to_integer`), which closes
  the connection with 541.  Delivered messages carry `x-delay` negated,
  so that an exchange further on does not delay them again.
- ActiveMQ Artemis's scheduled delivery: a `_AMQ_SCHED_DELIVERY` property
  holding an absolute time in ms since the epoch; a time not in the future
  delivers at once.

Pure functions of the header table and the clock the caller passes in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

DELAY_HEADER = "x-delay"
SCHEDULED_HEADER = "_AMQ_SCHED_DELIVERY"
# ?ERL_MAX_T in rabbit_exchange_type_delayed_message.erl: erlang:start_timer's limit.
MAX_DELAY_MS = 2**32 - 1

# The plugin's 3.13 lists, in this broker's (RabbitMQ 0-9-1) type names.
# It reads headers through the message container, which names 0-9-1 types
# as AMQP 1.0 does: long, ubyte, short, ushort, int, uint.  A signed byte
# (1.0 `byte`), a decimal, a timestamp or a boolean is none of them, so it
# does not delay (the 3.12 series still read `byte` and `decimal`).
_INTEGER_TYPES = frozenset(("long", "unsignedbyte", "short", "unsignedshort",
                            "signedint", "unsignedint"))
_STRING_TYPES = frozenset(("longstr", "binary"))
_FLOAT_TYPES = frozenset(("float", "double"))
# binary_to_integer/1: an optional sign, then decimal digits, nothing else.
_ERLANG_INTEGER = re.compile(r"[+-]?[0-9]+")


class DelayError(ValueError):
    """An `x-delay` string that is not an integer: the plugin's channel
    crashes on it (RabbitMQ then closes the connection with 541)."""


@dataclass(frozen=True, slots=True)
class Delay:
    """`x-delay` as the plugin reads it: `ms` is the integer it found (None:
    no header or a type it does not read); `delays` whether that holds the
    message back."""

    ms: int | None

    @property
    def delays(self) -> bool:
        return self.ms is not None and 0 < self.ms <= MAX_DELAY_MS


NO_DELAY = Delay(None)


def read_delay(headers: Mapping[str, object] | None,
               types: Mapping[str, str] | None = None) -> Delay:
    """The `x-delay` of a message's headers (a mapping; `types` its wire
    type names, from the decoded FieldTable).  Raises DelayError for a
    string that is not a base-10 integer."""
    if not headers or DELAY_HEADER not in headers:
        return NO_DELAY
    value = headers[DELAY_HEADER]
    kind = (types or {}).get(DELAY_HEADER) or _kind_of(value)
    if kind in _INTEGER_TYPES and isinstance(value, int):
        return Delay(int(value))
    if kind in _STRING_TYPES:
        text = value.decode("latin-1") if isinstance(value, (bytes, bytearray)) else str(value)
        if not _ERLANG_INTEGER.fullmatch(text):
            raise DelayError(f"x-delay header {text!r} is not an integer")
        return Delay(_bounded_integer(text, MAX_DELAY_MS + 1))
    if kind in _FLOAT_TYPES and isinstance(value, (int, float)):
        if not math.isfinite(value):
            return NO_DELAY  # Erlang has no such float; nothing to truncate
        return Delay(math.trunc(value))
    return NO_DELAY


def read_delay_leniently(headers: Mapping[str, object] | None,
                        types: Mapping[str, str] | None = None) -> Delay:
    """`read_delay` where no client waits for an answer (a dead letter, a
    management move): a string that is not an integer routes at once."""
    try:
        return read_delay(headers, types)
    except DelayError:
        return NO_DELAY


def _kind_of(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (str, bytes, bytearray)):
        return "longstr"
    return "other"


def due_at(now_ms: float, delay: Delay) -> float | None:
    """When a message published at `now_ms` is due (None: route it now)."""
    return now_ms + delay.ms if delay.delays and delay.ms is not None else None


def delivered_delay(delay: Delay) -> int:
    """The `x-delay` a delayed message carries once routed: negated, as
    `swap_delay_header/1` does, so no exchange on its way delays it again."""
    return -(delay.ms or 0)


def scheduled_time(headers: Mapping[str, object] | None) -> int | None:
    """Artemis's `_AMQ_SCHED_DELIVERY`: an absolute time in ms since the
    epoch (an integer, or a string of one, as Artemis's typed properties
    convert it); None when there is none or it is not an integer."""
    if not headers or SCHEDULED_HEADER not in headers:
        return None
    value = headers[SCHEDULED_HEADER]
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if not _ERLANG_INTEGER.fullmatch(text):
            return None
        at = _bounded_integer(text, _LONG_END)
        # Artemis reads a Java long: a time past one is not a time.
        return at if -_LONG_END < at < _LONG_END else None
    return None


_LONG_END = 2**63


# Python's int() refuses strings of over 4,300 digits (CPython's guard
# against slow conversions); Erlang reads any.
_MAX_DIGITS = 4000


def _bounded_integer(text: str, bound: int) -> int:
    """The integer `text` spells (an _ERLANG_INTEGER); +-`bound` for one
    too long for int() to read, all of which are far past `bound`."""
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        return sign * bound
    return sign * int(digits)


def scheduled_for(headers: Mapping[str, object] | None, now_ms: float) -> float | None:
    """When a message is scheduled for, if that lies after `now_ms`; None
    otherwise (Artemis delivers a time already past at once)."""
    at = scheduled_time(headers)
    return float(at) if at is not None and at > now_ms else None
