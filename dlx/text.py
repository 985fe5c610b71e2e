"""Header and property values as text.

AMQP field tables carry strings as long strings (bytes on the wire, which
pamqp may or may not decode) and clients put `None` where a property is
unset. Every place that shows or compares such a value wants the same
answer, so it is decided once here.
"""

from __future__ import annotations


def as_text(value: object) -> str:
    """`value` as text: bytes decoded as UTF-8 (undecodable bytes replaced,
    never an error: the value came from a client), `None` as the empty
    string, anything else through `str`."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def as_optional_text(value: object) -> str | None:
    """As `as_text`, but an unset value stays `None` (a message id that was
    never given is not the empty id)."""
    return None if value is None else as_text(value)
