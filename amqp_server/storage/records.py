"""Framing of log records: a magic marker, the payload length, a CRC-32 of
the payload, then the msgpack payload.

The marker lets a reader find the next record after a damaged one: a
flipped byte costs that one record, never the records after it; a torn tail
(a crash in the middle of a write) is recognised and reported with its
offset.
"""

from __future__ import annotations

import struct
import zlib

import msgpack

MAGIC = b"\xa5\x5a"
_HEAD = HEAD = struct.Struct(">2sII")  # magic, payload length, crc32
HEAD_SIZE = _HEAD.size
MAX_RECORD = 256 << 20  # larger than any message the broker accepts, plus framing


def head(data, pos: int) -> tuple[bytes, int, int]:
    """(marker, payload length, crc32) of the record starting at `pos`."""
    return _HEAD.unpack_from(data, pos)


def encode(payload: object) -> bytes:
    return frame(msgpack.packb(payload, use_bin_type=True, unicode_errors="surrogateescape"))


def packer() -> msgpack.Packer:
    """A packer of payloads as `encode` packs them, for one thread's hot
    path: msgpack.packb builds a Packer per call, a third of its time.
    A Packer is not safe to share between threads."""
    return msgpack.Packer(use_bin_type=True, unicode_errors="surrogateescape")


def frame(body) -> bytes:
    """A packed payload with its marker, length and checksum."""
    return _HEAD.pack(MAGIC, len(body), zlib.crc32(body)) + bytes(body)


def frame_head(body: bytes) -> bytes:
    """What `frame` puts before a packed payload: written before it, the
    two make the record without a copy of the payload."""
    return _HEAD.pack(MAGIC, len(body), zlib.crc32(body))


def decode_all(data: bytes, payloads: list | None = None
               ) -> tuple[list, list[tuple[int, str]], int]:
    """(records, problems as (offset, what), end of the last good record).
    With `payloads`, each record's encoded payload (a view into `data`) is
    appended to it too, in step with the records.

    Damaged stretches are skipped by searching for the next marker that
    starts a valid record."""
    records: list = []
    problems: list[tuple[int, str]] = []
    pos = 0
    good_end = 0
    size = len(data)
    view = memoryview(data)
    head = _HEAD.unpack_from
    crc32 = zlib.crc32
    while pos < size:
        # The common case inline (a million records take seconds otherwise).
        if size - pos >= HEAD_SIZE:
            magic, length, crc = head(data, pos)
            end = pos + HEAD_SIZE + length
            if magic == MAGIC and end <= size:
                body = view[pos + HEAD_SIZE:end]
                if crc32(body) == crc:
                    record = _unpack(body)
                    if record is not None:
                        records.append(record)
                        if payloads is not None:
                            payloads.append(body)
                        pos = good_end = end
                        continue
        start = pos
        pos = data.find(MAGIC, pos + 1)
        while pos != -1 and _record_at(data, pos) is None:
            pos = data.find(MAGIC, pos + 1)
        if pos == -1:
            problems.append((start, f"torn or corrupt tail of {size - start} bytes"))
            break
        problems.append((start, f"corrupt record; skipped {pos - start} bytes"))
    return records, problems, good_end


def decode_payload(payload) -> object:
    return msgpack.unpackb(payload, raw=False, unicode_errors="surrogateescape")


def _unpack(body):
    try:
        return msgpack.unpackb(body, raw=False, unicode_errors="surrogateescape")
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None


def _record_at(data: bytes, pos: int):
    if len(data) - pos < HEAD_SIZE:
        return None
    magic, length, crc = _HEAD.unpack_from(data, pos)
    if magic != MAGIC or length > MAX_RECORD:
        return None
    start = pos + HEAD_SIZE
    end = start + length
    if end > len(data):
        return None
    body = data[start:end]
    if zlib.crc32(body) != crc:
        return None
    return _unpack(body)
