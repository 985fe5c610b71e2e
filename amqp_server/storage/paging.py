"""Queue tails paged out to disk, so a long queue costs memory only at its
head (as RabbitMQ's classic queues v2 keep only the next messages in memory).

A queue past its threshold appends each further message, whole, to its page
file and keeps nothing of it in memory; when the in-memory head runs low it
reads the next batch back, in queue order.  Page files are scratch space:
written without fsync and wiped at start, because a persistent message is
also in the message store, which recovery reads.

A page file is a run of chunk files of msgpack records; a chunk is deleted
once it has been read to its end, so disk use follows the paged messages.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import sys
from collections import deque
from pathlib import Path

import msgpack

log = logging.getLogger("amqp_server.storage")

CHUNK_SIZE = 16 << 20
_READ_SIZE = 1 << 20
_MAX_RECORD = 1 << 30  # above the largest message the broker accepts
# Encoded (redelivered, returns, segment, failed) prefixes: few distinct ones.
_HEADS: dict[tuple, bytes] = {}


class Paging:
    """Where queues page to and when: a persistent message (on disk anyway)
    once a queue holds `limit` messages or `bytes_limit` body bytes in
    memory; under memory pressure any message past `pressure_limit`, so
    transient queues give memory back too (RabbitMQ pages them at half the
    memory watermark)."""

    def __init__(self, directory: str | Path, limit: int, bytes_limit: int,
                 pressure_limit: int = 1024) -> None:
        self.directory = Path(directory)
        # Left over from the previous run: nothing in it is needed.
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.limit = limit
        self.bytes_limit = bytes_limit
        self.pressure_limit = min(pressure_limit, limit)
        self.under_pressure = False
        self._ids = itertools.count(1)

    def open(self) -> PageFile:
        return PageFile(self.directory, next(self._ids))

    def limits(self, stored: bool) -> tuple[int, int]:
        """(messages, body bytes) a queue keeps in memory before it pages
        a message that is in the message store (`stored`) or is not."""
        if self.under_pressure:
            return self.pressure_limit, self.bytes_limit
        if stored:
            return self.limit, self.bytes_limit
        return sys.maxsize, sys.maxsize

    def set_pressure(self, on: bool) -> bool:
        """Memory pressure on or off; True when that is a change."""
        changed, self.under_pressure = on != self.under_pressure, on
        return changed


class PageFile:
    """One queue's paged-out messages, first in first out."""

    def __init__(self, directory: Path, ident: int, chunk_size: int = CHUNK_SIZE) -> None:
        self.directory = directory
        self.ident = ident
        self.chunk_size = chunk_size
        self._chunks: deque[int] = deque()
        self._writer = None
        self._written = 0
        self._reader = None
        self._unpacker = None
        self._next_chunk = 0

    def _path(self, number: int) -> Path:
        return self.directory / f"{self.ident}.{number:06d}.page"

    def append(self, record: list) -> None:
        if self._writer is None or self._written >= self.chunk_size:
            self._roll()
        data = msgpack.packb(record, use_bin_type=True, unicode_errors="surrogateescape")
        self._writer.write(data)
        self._written += len(data)

    def append_encoded(self, items) -> None:
        """Append [*head, <encoded>] for each (head, encoded) of `items`:
        `encoded` is already msgpack (a stored record), written as it is."""
        heads = _HEADS
        for head, encoded in items:
            if self._writer is None or self._written >= self.chunk_size:
                self._roll()
            prefix = heads.get(head)
            if prefix is None:
                packed = msgpack.packb(head)
                # `head` packs as a fixarray (0x90 | length, under 15 items):
                # one more element, the encoded record, follows it.
                prefix = heads[head] = bytes((packed[0] + 1,)) + packed[1:]
            self._writer.write(prefix)
            self._writer.write(encoded)
            self._written += len(prefix) + len(encoded)

    def _roll(self) -> None:
        if self._writer is not None:
            self._writer.close()
        number = self._next_chunk
        self._next_chunk += 1
        self._writer = open(self._path(number), "wb")
        self._written = 0
        self._chunks.append(number)

    def read(self, count: int) -> list[list]:
        """Up to `count` records from the front (fewer only when the file
        holds fewer)."""
        found: list[list] = []
        while len(found) < count and self._chunks:
            if self._unpacker is None:
                self._open_front()
            if self._chunks[0] == self._chunks[-1] and self._writer is not None:
                self._writer.flush()
            for record in self._unpacker:
                found.append(record)
                if len(found) >= count:
                    return found
            if len(self._chunks) == 1:
                break  # the chunk being written: nothing more yet
            self._close_front()
        return found

    def _open_front(self) -> None:
        self._reader = open(self._path(self._chunks[0]), "rb")
        self._unpacker = msgpack.Unpacker(self._reader, read_size=_READ_SIZE, raw=False,
                                          unicode_errors="surrogateescape",
                                          max_buffer_size=_MAX_RECORD)

    def _close_front(self) -> None:
        self._reader.close()
        self._reader = self._unpacker = None
        number = self._chunks.popleft()
        self._path(number).unlink(missing_ok=True)

    def clear(self) -> None:
        """Everything paged is gone (purge, delete, or read back whole)."""
        if self._reader is not None:
            self._reader.close()
        if self._writer is not None:
            self._writer.close()
        self._reader = self._unpacker = self._writer = None
        for number in self._chunks:
            self._path(number).unlink(missing_ok=True)
        self._chunks.clear()
        self._written = 0

    def disk_bytes(self) -> int:
        return sum(self._path(n).stat().st_size for n in self._chunks
                   if self._path(n).exists())
