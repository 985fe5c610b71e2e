"""Message TTL: parsing the `expiration` property and computing deadlines.

A message's deadline is its enqueue time plus the lower of the queue's
message TTL and its own expiration (RabbitMQ applies whichever is lower).
A message is expired once the clock reaches its deadline, so a TTL of 0
expires at once unless a consumer takes the message on arrival.
"""

from __future__ import annotations

# rabbit_misc:check_expiry/1: ten years in milliseconds.
MAX_EXPIRY_MS = 315_360_000_000


class ExpirationError(ValueError):
    """An `expiration` property RabbitMQ refuses; str() is its error term."""


def parse_expiration(value: str) -> int:
    """Milliseconds from an `expiration` property, or ExpirationError with
    the term RabbitMQ prints ("invalid expiration '...': <term>")."""
    text = value  # string:to_integer: no leading spaces; anything after is left over
    digits = text[1:] if text[:1] in "+-" else text
    count = len(digits) - len(digits.lstrip("0123456789"))
    if count == 0:
        raise ExpirationError("no_integer")
    number = int(text[: len(text) - len(digits) + count])
    rest = digits[count:]
    if rest:
        raise ExpirationError(f'{{leftover_string,"{rest}"}}')
    check = expiry_error(number)
    if check:
        raise ExpirationError(check)
    return number


def expiry_error(milliseconds: int) -> str | None:
    """RabbitMQ's check_expiry/1 result as printed, or None when valid."""
    if milliseconds < 0:
        return f"{{value_negative,{milliseconds}}}"
    if milliseconds > MAX_EXPIRY_MS:
        return f"{{value_too_large,{milliseconds}}}"
    return None


def effective_ttl(queue_ttl: int | None, message_ttl: int | None) -> int | None:
    if queue_ttl is None:
        return message_ttl
    if message_ttl is None:
        return queue_ttl
    return min(queue_ttl, message_ttl)


def deadline(enqueued_ms: float, queue_ttl: int | None, message_ttl: int | None) -> float | None:
    ttl = effective_ttl(queue_ttl, message_ttl)
    return None if ttl is None else enqueued_ms + ttl


def is_expired(deadline_ms: float | None, now_ms: float) -> bool:
    return deadline_ms is not None and now_ms >= deadline_ms


DISABLED = -1


def clamp_ttl(ttl: int | None, expiry_delay: int = DISABLED, min_delay: int = DISABLED,
              max_delay: int = DISABLED) -> int | None:
    """Artemis's expiry-delay rules (seed 003; PostOffice.applyExpiryDelay)
    applied to a message's TTL in ms, None meaning it never expires.

    `expiry-delay` other than -1 gives messages without an expiration that
    TTL and leaves the others alone, overriding min/max.  Otherwise a message
    without an expiration, or one above `max`, gets `max`; failing that, one
    below `min` (no expiration counts as below) gets `min`."""
    if expiry_delay >= 0:
        return expiry_delay if ttl is None else ttl
    if max_delay >= 0 and (ttl is None or ttl > max_delay):
        return max_delay
    if min_delay >= 0 and (ttl is None or ttl < min_delay):
        return min_delay
    return ttl


def clamps(expiry_delay: int, min_delay: int, max_delay: int) -> bool:
    return expiry_delay >= 0 or min_delay >= 0 or max_delay >= 0
