"""The 14 basic properties, decoded only when a feature asks for them.

Messages keep their properties as the bytes the publisher sent; routing and
delivering never look inside.  TTL, the headers exchange and dead-lettering
call `decode_properties` and, when they change something, `encode_properties`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields

from .table import FieldTable, Timestamp, check_table_body, decode_table, encode_table

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

# (name, flag bit, type) in wire order, from the 0-9-1 spec.
PROPERTY_SPEC = (
    ("content_type", 1 << 15, "shortstr"),
    ("content_encoding", 1 << 14, "shortstr"),
    ("headers", 1 << 13, "table"),
    ("delivery_mode", 1 << 12, "octet"),
    ("priority", 1 << 11, "octet"),
    ("correlation_id", 1 << 10, "shortstr"),
    ("reply_to", 1 << 9, "shortstr"),
    ("expiration", 1 << 8, "shortstr"),
    ("message_id", 1 << 7, "shortstr"),
    ("timestamp", 1 << 6, "timestamp"),
    ("type", 1 << 5, "shortstr"),
    ("user_id", 1 << 4, "shortstr"),
    ("app_id", 1 << 3, "shortstr"),
    ("cluster_id", 1 << 2, "shortstr"),
)


@dataclass
class Properties:
    content_type: str | None = None
    content_encoding: str | None = None
    headers: FieldTable | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


def _property_flags(raw: bytes) -> tuple[int, int]:
    """(the first flag word, where the values start).  Continuation words
    exist in the grammar but no 0-9-1 property uses them; they are skipped."""
    if len(raw) < 2:
        raise ValueError("content header properties truncated")
    (flags,) = _U16.unpack_from(raw, 0)
    offset = 2
    last = flags
    while last & 1:
        if offset + 2 > len(raw):
            raise ValueError("content header property flags truncated")
        (last,) = _U16.unpack_from(raw, offset)
        offset += 2
    return flags, offset


# The properties each flag word announces, in order: a publish walks only
# those.  Keyed by the defined bits alone, so at most 2**14 entries.
_PRESENT: dict[int, tuple] = {}
_DEFINED_BITS = sum(bit for _, bit, _ in PROPERTY_SPEC)


def _present(flags: int) -> tuple:
    flags &= _DEFINED_BITS
    present = _PRESENT.get(flags)
    if present is None:
        present = _PRESENT[flags] = tuple(
            (name, kind) for name, bit, kind in PROPERTY_SPEC if flags & bit)
    return present


def decode_properties(raw: bytes) -> Properties:
    """Decode property flags and values (the part of a content header after
    class, weight and body size)."""
    flags, offset = _property_flags(raw)
    props = Properties()
    end = len(raw)
    for name, kind in _present(flags):
        if kind == "shortstr":
            if offset >= end:
                raise ValueError(f"property {name} exceeds header")
            length = raw[offset]
            offset += 1
            if offset + length > end:
                raise ValueError(f"property {name} exceeds header")
            value: object = raw[offset : offset + length].decode("utf-8", "surrogateescape")
            offset += length
        elif kind == "octet":
            if offset >= end:
                raise ValueError(f"property {name} exceeds header")
            value = raw[offset]
            offset += 1
        elif kind == "timestamp":
            if offset + 8 > end:
                raise ValueError(f"property {name} exceeds header")
            value = Timestamp(_U64.unpack_from(raw, offset)[0])
            offset += 8
        else:
            value, offset = decode_table(raw, offset)
        setattr(props, name, value)
    return props


_SIZES = {"octet": 1, "timestamp": 8}


def scan_properties(header: bytes, offset: int) -> Layout | None:
    """What a publish must pass before the broker keeps its content header
    undecoded: every property the flags announce fits, and the headers
    table is well formed (checked, not decoded).  Returns where the headers
    table and the expiration are (as `locate`), or None for a header with
    continuation flags, which no client sends (then checked by decoding).
    Raises ValueError otherwise."""
    # `locate`'s walk, carried on to the last property: written out here
    # rather than called, as this runs for every publish whose properties
    # differ from the one before.  Each length is read only where the
    # header still holds it; one that runs past the end shows at the next
    # read or at the last check.
    end = len(header)
    if offset + 2 > end:
        raise ValueError(_TRUNCATED)
    (flags,) = _U16.unpack_from(header, offset)
    if flags & 1:
        decode_properties(header[offset:])
        return None
    pos = offset + 2
    if flags & 0x8000:  # content-type
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    if flags & 0x4000:  # content-encoding
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    h_start = pos
    if flags & _HEADERS_BIT:
        if pos + 4 > end:
            raise ValueError(_TRUNCATED)
        pos += 4 + _U32.unpack_from(header, pos)[0]
    h_end = pos
    if flags & 0x1000:  # delivery-mode
        pos += 1
    if flags & 0x0800:  # priority
        pos += 1
    if flags & 0x0400:  # correlation-id
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    if flags & 0x0200:  # reply-to
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    e_start = pos
    if flags & _EXPIRATION_BIT:
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    e_end = pos
    if flags & 0x0080:  # message-id
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    if flags & 0x0040:  # timestamp
        pos += 8
    if flags & 0x003C:  # type, user-id, app-id, cluster-id
        for bit in (0x0020, 0x0010, 0x0008, 0x0004):
            if flags & bit:
                if pos >= end:
                    raise ValueError(_TRUNCATED)
                pos += 1 + header[pos]
    if pos > end:
        raise ValueError(_TRUNCATED)
    if h_end > h_start:
        check_table_body(header, h_start + 4, h_end)
    return Layout((flags, h_start, h_end, e_start, e_end))


def encode_properties(props: Properties, raw_headers: bytes | None = None) -> bytes:
    """Flags and values; `raw_headers`, an already encoded table, stands in
    for `props.headers` when given."""
    flags = 0
    parts: list[bytes] = []
    for name, bit, kind in PROPERTY_SPEC:
        value = getattr(props, name)
        if name == "headers" and raw_headers is not None:
            flags |= bit
            parts.append(raw_headers)
            continue
        if value is None:
            continue
        flags |= bit
        if kind == "shortstr":
            encoded = value.encode("utf-8", "surrogateescape")
            if len(encoded) > 255:
                raise ValueError(f"property {name} longer than 255 bytes")
            parts.append(_U8.pack(len(encoded)) + encoded)
        elif kind == "octet":
            parts.append(_U8.pack(value))
        elif kind == "timestamp":
            parts.append(_U64.pack(int(value)))
        else:
            parts.append(encode_table(value))
    return _U16.pack(flags) + b"".join(parts)


_HEADERS_BIT = 1 << 13
_EXPIRATION_BIT = 1 << 8
_TRUNCATED = "content header properties truncated"


class Layout(tuple):
    """Where the headers table and the expiration sit in an encoded content
    header: (flags, headers start, headers end, expiration start,
    expiration end); an absent property has start == end at the place it
    would occupy."""

    __slots__ = ()


def locate(header: bytes, offset: int) -> Layout | None:
    """Find the headers table and expiration without decoding anything.
    `offset` is where the property flags start.  None when the header uses
    continuation flags (the caller then decodes it); ValueError when a
    length runs past the header.  Runs when a message is inspected and
    once per dead letter, so it is written out by hand: only the first
    eight properties (up to expiration) matter."""
    end = len(header)
    if offset + 2 > end:
        raise ValueError(_TRUNCATED)
    (flags,) = _U16.unpack_from(header, offset)
    if flags & 1:
        return None
    # Each length is read only where the header still holds it; a length
    # that runs past the end shows at the next read, or at the last check.
    pos = offset + 2
    if flags & 0x8000:  # content-type
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    if flags & 0x4000:  # content-encoding
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    h_start = pos
    if flags & _HEADERS_BIT:
        if pos + 4 > end:
            raise ValueError(_TRUNCATED)
        pos += 4 + _U32.unpack_from(header, pos)[0]
    h_end = pos
    if flags & 0x1000:  # delivery-mode
        pos += 1
    if flags & 0x0800:  # priority
        pos += 1
    if flags & 0x0400:  # correlation-id
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    if flags & 0x0200:  # reply-to
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    e_start = pos
    if flags & _EXPIRATION_BIT:
        if pos >= end:
            raise ValueError(_TRUNCATED)
        pos += 1 + header[pos]
    if pos > end:
        raise ValueError(_TRUNCATED)
    return Layout((flags, h_start, h_end, e_start, pos))


def splice_dead_letter(header: bytes, offset: int, layout: Layout, new_headers: bytes) -> bytes:
    """The header with its headers table replaced by `new_headers` (an
    encoded table) and the expiration removed; everything else byte for byte."""
    flags, h_start, h_end, e_start, e_end = layout
    new_flags = (flags | _HEADERS_BIT) & ~_EXPIRATION_BIT
    return b"".join((header[:offset], _U16.pack(new_flags), header[offset + 2:h_start],
                     new_headers, header[h_end:e_start], header[e_end:]))


def splice_headers(header: bytes, offset: int, layout: Layout, new_headers: bytes) -> bytes:
    """The header with its headers table replaced by `new_headers` (an
    encoded table); everything else byte for byte."""
    flags, h_start, h_end, _, _ = layout
    return b"".join((header[:offset], _U16.pack(flags | _HEADERS_BIT),
                     header[offset + 2:h_start], new_headers, header[h_end:]))


def _past_headers(header: bytes, offset: int, flags: int) -> int:
    """Where the properties after the headers table start (content-type,
    content-encoding and headers skipped, not decoded)."""
    pos = offset + 2
    if flags & (1 << 15):
        pos += 1 + header[pos]
    if flags & (1 << 14):
        pos += 1 + header[pos]
    if flags & _HEADERS_BIT:
        pos += 4 + _U32.unpack_from(header, pos)[0]
    return pos


def delivery_mode(header: bytes, offset: int) -> int | None:
    """The delivery-mode property read in place."""
    (flags,) = _U16.unpack_from(header, offset)
    if not flags & (1 << 12):
        return None
    return header[_past_headers(header, offset, flags)]


def message_priority(header: bytes, offset: int) -> int | None:
    """The priority property read in place (what comes before it skipped)."""
    (flags,) = _U16.unpack_from(header, offset)
    if not flags & (1 << 11):
        return None
    pos = _past_headers(header, offset, flags)
    if flags & (1 << 12):
        pos += 1
    return header[pos]


def property_span(header: bytes, offset: int, wanted: str) -> tuple[int, int] | None:
    """Where property `wanted` sits, its length prefix included, read in
    place (what comes before it skipped, never decoded); None when absent.
    The header has passed `scan_properties`."""
    flags, pos = _property_flags(header[offset:offset + 8])
    pos += offset
    for name, kind in _present(flags):
        if kind == "shortstr":
            end = pos + 1 + header[pos]
        elif kind == "table":
            end = pos + 4 + _U32.unpack_from(header, pos)[0]
        else:
            end = pos + _SIZES[kind]
        if name == wanted:
            return pos, end
        pos = end
    return None


def user_id(header: bytes, offset: int) -> str | None:
    """The user-id property read in place."""
    span = property_span(header, offset, "user_id")
    if span is None:
        return None
    return header[span[0] + 1:span[1]].decode("utf-8", "surrogateescape")


def simple_properties(header: bytes, offset: int) -> dict:
    """Every property except the headers table, read in place (the table
    is skipped, not decoded): what a log line needs, cheaply."""
    (flags,) = _U16.unpack_from(header, offset)
    pos = offset + 2
    found = {}
    for name, bit, kind in PROPERTY_SPEC:
        if not flags & bit:
            continue
        if kind == "shortstr":
            length = header[pos]
            found[name] = header[pos + 1:pos + 1 + length].decode("utf-8", "surrogateescape")
            pos += 1 + length
        elif kind == "octet":
            found[name] = header[pos]
            pos += 1
        elif kind == "timestamp":
            found[name] = _U64.unpack_from(header, pos)[0]
            pos += 8
        else:
            pos += 4 + _U32.unpack_from(header, pos)[0]
    return found
