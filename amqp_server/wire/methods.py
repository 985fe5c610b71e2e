"""Method frame payloads, encoded and decoded from pamqp's AMQP spec classes.

pamqp's command classes carry the whole 0-9-1 spec (field names, field types,
class and method ids), which is what we take from it.  We do not call its
marshal/unmarshal for two reasons: its constructors and marshal validate names
against the spec's regexes, which RabbitMQ (and so every client) does not
enforce, and its table codec forgets wire types (see `table.py`).  Bytes are
checked against pamqp's own marshal in the tests.
"""

from __future__ import annotations

import struct

from pamqp import commands

from .table import decode_table, encode_table

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_NUMBERS = {"octet": _U8, "short": _U16, "long": _U32, "longlong": _U64, "timestamp": _U64}


class MethodDecodeError(ValueError):
    """The payload does not decode as the method its ids name."""


class UnknownMethod(MethodDecodeError):
    def __init__(self, class_id: int, method_id: int) -> None:
        super().__init__(f"unknown method {class_id}.{method_id}")
        self.class_id = class_id
        self.method_id = method_id


def _fields(cls: type) -> tuple[tuple[str, str], ...]:
    return tuple((name, cls.amqp_type(name)) for name in cls.__slots__)


# index (class_id << 16 | method_id) -> (pamqp class, ((field, type), ...))
SPEC: dict[int, tuple[type, tuple[tuple[str, str], ...]]] = {
    index: (cls, _fields(cls)) for index, cls in commands.INDEX_MAPPING.items()
}


# decode_method's view of each method's fields: (name, kind, unpack, size),
# with `unpack` and `size` set for numbers.
_NUMBER, _BIT, _SHORTSTR, _LONGSTR, _TABLE = range(5)
_KINDS = {"bit": _BIT, "shortstr": _SHORTSTR, "longstr": _LONGSTR, "table": _TABLE}
_DECODING = {
    index: (cls, tuple(
        (name, _NUMBER, _NUMBERS[kind].unpack_from, _NUMBERS[kind].size) if kind in _NUMBERS
        else (name, _KINDS[kind], None, 0) for name, kind in fields))
    for index, (cls, fields) in SPEC.items()
}


def decode_method(payload: bytes | memoryview) -> object:
    """Decode a method frame payload into an instance of pamqp's class.
    Every length is held against the end of the payload before what it
    covers is read."""
    if len(payload) < 4:
        raise MethodDecodeError("method frame shorter than its ids")
    (index,) = _U32.unpack_from(payload, 0)
    entry = _DECODING.get(index)
    if entry is None:
        raise UnknownMethod(index >> 16, index & 0xFFFF)
    cls, fields = entry
    method = cls.__new__(cls)
    data = bytes(payload)
    offset = 4
    end = len(data)
    bit_byte = 0
    bit_pos = 8  # 8 means "no bit octet loaded"
    for name, kind, unpack, size in fields:
        if kind == _BIT:
            if bit_pos == 8:
                if offset >= end:
                    raise _truncated(cls, name)
                bit_byte = data[offset]
                offset += 1
                bit_pos = 0
            setattr(method, name, bool(bit_byte & (1 << bit_pos)))
            bit_pos += 1
            continue
        bit_pos = 8
        if kind == _NUMBER:
            if offset + size > end:
                raise _truncated(cls, name)
            (value,) = unpack(data, offset)
            offset += size
        elif kind == _SHORTSTR:
            if offset >= end:
                raise _truncated(cls, name)
            length = data[offset]
            offset += 1
            if offset + length > end:
                raise MethodDecodeError("short string exceeds frame")
            value = data[offset:offset + length].decode("utf-8", "surrogateescape")
            offset += length
        elif kind == _LONGSTR:
            if offset + 4 > end:
                raise _truncated(cls, name)
            (length,) = _U32.unpack_from(data, offset)
            offset += 4
            if offset + length > end:
                raise MethodDecodeError("long string exceeds frame")
            value = data[offset:offset + length]
            offset += length
        else:
            try:
                value, offset = decode_table(data, offset)
            except ValueError as exc:
                raise MethodDecodeError(f"malformed {cls.name}: {exc}") from None
        setattr(method, name, value)
    return method


def _truncated(cls: type, name: str) -> MethodDecodeError:
    return MethodDecodeError(f"malformed {cls.name}: {name} exceeds frame")


def encode_method(method: object) -> bytes:
    """Encode a method (a pamqp command instance) into a frame payload."""
    cls = type(method)
    _, fields = SPEC[cls.index]
    out = [_U32.pack(cls.index)]
    bit_byte = 0
    bit_pos = -1  # -1 means no bit octet is open
    for name, kind in fields:
        value = getattr(method, name, None)
        if kind == "bit":
            if bit_pos == -1 or bit_pos == 8:
                if bit_pos == 8:
                    out.append(_U8.pack(bit_byte))
                bit_byte, bit_pos = 0, 0
            if value:
                bit_byte |= 1 << bit_pos
            bit_pos += 1
            continue
        if bit_pos != -1:
            out.append(_U8.pack(bit_byte))
            bit_pos = -1
        if kind == "shortstr":
            raw = (value or "").encode("utf-8", "surrogateescape")
            out.append(_U8.pack(len(raw)))
            out.append(raw)
        elif kind == "octet":
            out.append(_U8.pack(value or 0))
        elif kind == "short":
            out.append(_U16.pack(value or 0))
        elif kind == "long":
            out.append(_U32.pack(value or 0))
        elif kind in ("longlong", "timestamp"):
            out.append(_U64.pack(value or 0))
        elif kind == "longstr":
            raw = value or b""
            if isinstance(raw, str):
                raw = raw.encode("utf-8", "surrogateescape")
            out.append(_U32.pack(len(raw)))
            out.append(bytes(raw))
        elif kind == "table":
            out.append(encode_table(value))
    if bit_pos != -1:
        out.append(_U8.pack(bit_byte))
    return b"".join(out)


def make(cls: type, **values) -> object:
    """Build a method without pamqp's validation, defaulting unset fields."""
    method = cls.__new__(cls)
    for name, kind in SPEC[cls.index][1]:
        if name in values:
            setattr(method, name, values.pop(name))
        else:
            setattr(method, name, _DEFAULTS[kind])
    if values:
        raise TypeError(f"{cls.name} has no fields {sorted(values)}")
    return method


_DEFAULTS = {
    "bit": False,
    "shortstr": "",
    "octet": 0,
    "short": 0,
    "long": 0,
    "longlong": 0,
    "timestamp": 0,
    "longstr": b"",
    "table": None,
}
