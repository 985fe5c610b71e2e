"""AMQP 0-9-1 field tables and arrays that remember their wire types.

pamqp decodes a table into plain Python values and re-encodes by guessing
types, so `x-message-ttl` sent as a signed 32-bit int may come back as a
short.  A broker has to do better on two counts: RabbitMQ names the wire
type in its "inequivalent arg" errors ("the value '1000' of type
'signedint'"), and headers it passes on must keep their exact bytes.  So a
decoded table is a dict that also records the RabbitMQ type name of each
value, and encoding writes that type back.  Values built in Python without a
recorded type get one inferred the way RabbitMQ's own encoder would.

Type names are RabbitMQ's (rabbit_binary_parser.erl).  'L' is read as a
signed 64-bit `long`, as RabbitMQ reads it (AMQP 0-9-1 errata).
"""

from __future__ import annotations

import datetime
import decimal
import struct

_U8 = struct.Struct(">B")
_I8 = struct.Struct(">b")
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_DECIMAL = struct.Struct(">Bi")


class Timestamp(int):
    """Seconds since the epoch, kept as the integer that was on the wire."""

    def __repr__(self) -> str:
        return f"Timestamp({int(self)})"


class FieldTable(dict):
    """A decoded field table; `types` maps each key to its wire type name."""

    __slots__ = ("types",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.types: dict[str, str] = {}

    def type_of(self, key: str) -> str:
        """The RabbitMQ type name of a value, recorded or inferred."""
        return self.types.get(key) or infer_type(self[key])


class FieldArray(list):
    """A decoded field array; `types` holds each element's wire type name."""

    __slots__ = ("types",)

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.types: list[str] = []


_FIXED = {
    # tag: (type name, struct)
    0x62: ("byte", _I8),  # b
    0x42: ("unsignedbyte", _U8),  # B
    0x73: ("short", _I16),  # s
    0x75: ("unsignedshort", _U16),  # u
    0x49: ("signedint", _I32),  # I
    0x69: ("unsignedint", _U32),  # i
    0x6C: ("long", _I64),  # l
    0x4C: ("long", _I64),  # L
    0x66: ("float", _F32),  # f
    0x64: ("double", _F64),  # d
}


def _decode_value(data: bytes, offset: int, end: int) -> tuple[str, object, int]:
    if offset >= end:
        raise ValueError("field value truncated")
    tag = data[offset]
    offset += 1
    fixed = _FIXED.get(tag)
    if fixed is not None:
        type_name, st = fixed
        if offset + st.size > end:
            raise ValueError("field value truncated")
        return type_name, st.unpack_from(data, offset)[0], offset + st.size
    if tag == 0x53:  # S
        (length,) = _read(_U32, data, offset, end)
        offset += 4
        if offset + length > end:
            raise ValueError("long string exceeds table")
        raw = bytes(data[offset : offset + length])
        try:
            value: object = raw.decode("utf-8")
        except UnicodeDecodeError:
            value = raw
        return "longstr", value, offset + length
    if tag == 0x74:  # t
        (byte,) = _read(_U8, data, offset, end)
        return "bool", byte != 0, offset + 1
    if tag == 0x46:  # F
        (length,) = _read(_U32, data, offset, end)
        offset += 4
        if offset + length > end:
            raise ValueError("nested table exceeds table")
        return "table", _decode_table_body(data, offset, offset + length), offset + length
    if tag == 0x41:  # A
        (length,) = _read(_U32, data, offset, end)
        offset += 4
        if offset + length > end:
            raise ValueError("array exceeds table")
        return "array", _decode_array_body(data, offset, offset + length), offset + length
    if tag == 0x54:  # T
        (seconds,) = _read(_U64, data, offset, end)
        return "timestamp", Timestamp(seconds), offset + 8
    if tag == 0x44:  # D
        places, unscaled = _read(_DECIMAL, data, offset, end)
        return "decimal", decimal.Decimal(unscaled).scaleb(-places), offset + 5
    if tag == 0x78:  # x
        (length,) = _read(_U32, data, offset, end)
        offset += 4
        if offset + length > end:
            raise ValueError("byte array exceeds table")
        return "binary", bytes(data[offset : offset + length]), offset + length
    if tag == 0x56:  # V
        return "void", None, offset
    raise ValueError(f"unknown field type {chr(tag)!r}")


def _read(st: struct.Struct, data: bytes, offset: int, end: int) -> tuple:
    if offset + st.size > end:
        raise ValueError("field value truncated")
    return st.unpack_from(data, offset)


def _decode_table_body(data: bytes, offset: int, end: int) -> FieldTable:
    table = FieldTable()
    types = table.types
    while offset < end:
        key_len = data[offset]
        offset += 1
        if offset + key_len > end:
            raise ValueError("table key exceeds table")
        key = bytes(data[offset : offset + key_len]).decode("utf-8", "surrogateescape")
        offset += key_len
        type_name, value, offset = _decode_value(data, offset, end)
        table[key] = value
        types[key] = type_name
    return table


def _decode_array_body(data: bytes, offset: int, end: int) -> FieldArray:
    array = FieldArray()
    while offset < end:
        type_name, value, offset = _decode_value(data, offset, end)
        array.append(value)
        array.types.append(type_name)
    return array


def decode_table(data: bytes, offset: int = 0) -> tuple[FieldTable, int]:
    """Decode a length-prefixed table at `offset`; returns (table, next offset)."""
    (length,) = _read(_U32, data, offset, len(data))
    start = offset + 4
    end = start + length
    if end > len(data):
        raise ValueError("table length exceeds data")
    return _decode_table_body(data, start, end), end


def decode_table_body(data: bytes) -> FieldTable:
    """Decode a table without its length prefix (the AMQPLAIN response form)."""
    return _decode_table_body(data, 0, len(data))


# Reading a table without decoding it: the octets each fixed-size value
# takes after its tag, and the tags whose value starts with a 32-bit length.
_SIZE_AFTER_TAG = {**{tag: st.size for tag, (_, st) in _FIXED.items()},
                   0x74: 1, 0x54: 8, 0x44: 5, 0x56: 0}
_LENGTH_PREFIXED = frozenset((0x53, 0x78, 0x46, 0x41))  # S, x, F, A


def _skip_value(data: bytes, offset: int, end: int) -> int:
    """Where the value at `offset` ends; nested tables and arrays are
    checked too, so what passes is what the decoder would accept.  Every
    length is held against `end`, the end of the table or array that
    holds the value, before anything it covers is read."""
    if offset >= end:
        raise ValueError("field value truncated")
    tag = data[offset]
    offset += 1
    size = _SIZE_AFTER_TAG.get(tag)
    if size is None:
        if tag not in _LENGTH_PREFIXED:
            raise ValueError(f"unknown field type {chr(tag)!r}")
        (size,) = _read(_U32, data, offset, end)
        offset += 4
        if offset + size > end:
            raise ValueError("field value exceeds table")
        if tag == 0x46:
            check_table_body(data, offset, offset + size)
        elif tag == 0x41:
            inner, inner_end = offset, offset + size
            while inner < inner_end:
                inner = _skip_value(data, inner, inner_end)
        return offset + size
    offset += size
    if offset > end:
        raise ValueError("field value exceeds table")
    return offset


def check_table_body(data: bytes, offset: int, end: int) -> None:
    """ValueError unless data[offset:end] holds well-formed table entries;
    nothing is built."""
    if end > len(data):
        raise ValueError("table length exceeds data")
    while offset < end:
        # A key's length octet is inside the table; where the key ends,
        # `_skip_value` holds against `end` before it reads the tag.
        offset = _skip_value(data, offset + 1 + data[offset], end)


def value_end(data, offset: int, end: int | None = None) -> int:
    """Where the value at `offset` (its type tag) ends, by its lengths
    alone: for data already checked (a stored header), where _skip_value's
    checks would be spent again.  `end` is taken as _skip_value takes it,
    and not held against."""
    size = _SIZE_AFTER_TAG.get(data[offset])
    if size is None:
        size = 4 + _U32.unpack_from(data, offset + 1)[0]
    return offset + 1 + size


def table_entries(data: bytes, offset: int, end: int, checked: bool = False):
    """(key, type tag, value offset, value end) of each entry of the table
    body data[offset:end], not decoded; its values checked as the decoder
    would check them unless `checked` says they were (a stored header was
    checked when it was published)."""
    end_of = value_end if checked else _skip_value
    while offset < end:
        key_end = offset + 1 + data[offset]
        after = end_of(data, key_end, end)
        yield bytes(data[offset + 1:key_end]), data[key_end], key_end, after
        offset = after


def split_table(data: bytes, offset: int, end: int,
                wanted: frozenset[bytes]) -> tuple[bytes, bytes]:
    """A table body cut in two without decoding anything: the encoded
    entries whose keys are not in `wanted`, and those whose keys are."""
    kept: list = []
    picked: list = []
    while offset < end:
        start = offset
        key_end = offset + 1 + data[offset]
        offset = _skip_value(data, key_end, end)
        (picked if data[start + 1:key_end] in wanted else kept).append(data[start:offset])
    return b"".join(kept), b"".join(picked)


def infer_type(value: object) -> str:
    """The type RabbitMQ would give a value it encodes itself."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (Timestamp, datetime.datetime)):
        return "timestamp"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    if value is None:
        return "void"
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


_FIXED_BY_NAME = {
    "byte": (b"b", _I8),
    "unsignedbyte": (b"B", _U8),
    "short": (b"s", _I16),
    "unsignedshort": (b"u", _U16),
    "signedint": (b"I", _I32),
    "unsignedint": (b"i", _U32),
    "long": (b"l", _I64),
    "float": (b"f", _F32),
    "double": (b"d", _F64),
}


def _encode_value(value: object, type_name: str | None, out: list[bytes]) -> None:
    if type_name is None:
        type_name = infer_type(value)
    fixed = _FIXED_BY_NAME.get(type_name)
    if fixed is not None:
        tag, st = fixed
        out.append(tag)
        out.append(st.pack(value))
    elif type_name == "longstr":
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
        out.append(b"S")
        out.append(_U32.pack(len(raw)))
        out.append(raw)
    elif type_name == "bool":
        out.append(b"t\x01" if value else b"t\x00")
    elif type_name == "table":
        out.append(b"F")
        out.append(encode_table(value))
    elif type_name == "array":
        out.append(b"A")
        out.append(encode_array(value))
    elif type_name == "timestamp":
        if isinstance(value, datetime.datetime):
            value = int(value.timestamp())
        out.append(b"T")
        out.append(_U64.pack(value))
    elif type_name == "decimal":
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        places = -exponent if exponent < 0 else 0
        if exponent > 0:
            unscaled *= 10**exponent
        out.append(b"D")
        out.append(_DECIMAL.pack(places, unscaled))
    elif type_name == "binary":
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
        out.append(b"x")
        out.append(_U32.pack(len(raw)))
        out.append(raw)
    elif type_name == "void":
        out.append(b"V")
    else:
        raise TypeError(f"unknown field type {type_name!r}")


def encode_table(table: dict | None) -> bytes:
    """Encode a table with its length prefix, keeping recorded wire types."""
    if not table:
        return b"\x00\x00\x00\x00"
    body = encode_table_pairs(table)
    return _U32.pack(len(body)) + body


def encode_table_pairs(table: dict) -> bytes:
    """A table's key/value pairs without the length prefix, so that encoded
    parts can be joined into one table."""
    types = getattr(table, "types", None) or {}
    out: list[bytes] = []
    for key, value in table.items():
        raw_key = key.encode("utf-8", "surrogateescape")
        if len(raw_key) > 255:
            raise ValueError(f"table key longer than 255 bytes: {key[:40]!r}...")
        out.append(_U8.pack(len(raw_key)))
        out.append(raw_key)
        _encode_value(value, types.get(key), out)
    return b"".join(out)


def encode_entry(name: str, type_name: str, value: object) -> bytes:
    """One table entry (key and typed value), as `encode_table_pairs`
    writes it; a `long`, the common case, without building a table."""
    if type_name == "long" and type(value) is int:
        key = name.encode("utf-8", "surrogateescape")
        return bytes((len(key),)) + key + b"l" + _I64.pack(value)
    table = FieldTable({name: value})
    table.types[name] = type_name
    return encode_table_pairs(table)


def encode_array(array: list) -> bytes:
    types = getattr(array, "types", None) or []
    out: list[bytes] = []
    for index, value in enumerate(array):
        _encode_value(value, types[index] if index < len(types) else None, out)
    body = b"".join(out)
    return _U32.pack(len(body)) + body


def typed_value(table: FieldTable, key: str) -> tuple[str, object] | None:
    """(type name, value) as RabbitMQ's table_lookup returns it, or None."""
    if key not in table:
        return None
    return table.type_of(key), table[key]
