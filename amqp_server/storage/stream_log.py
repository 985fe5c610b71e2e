"""One stream's append-only log: numbered segment files of its own, written
and fsynced by the message store's flushes.

The log rides on the message store's segment log (segments.py): every
flush of the store also writes what this log buffered since the last one,
in the same worker-thread step and before the store reports the flush
synced.  So a message published to a stream is confirmed exactly as a
persistent message is (its `stored_gen` is the store's generation), one
fsync per file covers every append of a flush, and a flush that fails
confirms nothing.  Records use the store's framing (records.py):

  ["S", offset, timestamp ms, route, header, body(, filter value)]

`route` is the exchange and routing key as basic.deliver carries them; the
filter value is the message's `x-stream-filter-value` header, when it has
one (3.13's filtering).

In memory the log keeps a few numbers per segment and one position every
INDEX_EVERY messages, never anything per message: consumers read their
messages back from the files.  Readers see only what is on disk (the
`committed` offset), as RabbitMQ's readers see only committed chunks.
Retention deletes whole segments from the oldest, never the one being
written (policies/stream_rules.py decides which).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import records
from .files import SegmentFiles

log = logging.getLogger("amqp_server.storage")

SUFFIX = ".seg"
REDRIVEN = "redriven"
INDEX_EVERY = 1024  # messages between two remembered positions of a segment
SCAN_LIMIT = 4096   # messages a reader passes over in one read, at most
READ_CHUNK = 256 << 10  # bytes a reader reads from a segment at a time


@dataclass
class Segment:
    number: int
    first: int                       # offset of its first message
    count: int = 0                   # messages in it
    size: int = 0                    # bytes (written and buffered)
    oldest: float | None = None      # wall-clock ms of its first message
    newest: float | None = None      # and of its last
    # (offset, byte position) of every INDEX_EVERY-th message
    marks: list[tuple[int, int]] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.first + self.count


class StoredMessage:
    """A message read back, and where the next one starts (for readers
    that follow another's reads: Reader.move_to)."""

    __slots__ = ("offset", "timestamp", "route", "header", "body", "filter_value",  # noqa: RUF023
                 "segment", "end")

    def __init__(self, offset: int, timestamp: float, route: bytes, header: bytes,
                 body: bytes, filter_value: str | None, segment: int, end: int) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.route = route
        self.header = header
        self.body = body
        self.filter_value = filter_value
        self.segment = segment
        self.end = end


class StreamLog:
    def __init__(self, directory: Path, segment_size: int,
                 request_flush: Callable[[], None] = lambda: None,
                 appended: Callable[[int], None] | None = None) -> None:
        self.directory = directory
        self.segment_size = max(1, segment_size)
        self.request_flush = request_flush
        # Told of each append's size: the store counts it in its backlog,
        # so publishers into a stream are held back as others are.
        self.appended = appended or (lambda size: request_flush())
        self.segments: list[Segment] = []
        self.next_offset = 0
        self.committed = 0         # offsets below this are on disk
        self.on_committed: Callable[[], None] = lambda: None
        # (segment number, its records' bytes in order) since the last
        # flush: joined once per segment at the flush, so the writer
        # thread (which holds the GIL while it runs Python) writes each
        # segment's share with one call, not one per record.
        self._buffer: list[tuple[int, list[bytes]]] = []
        self._doomed: list[int] = []
        self._pending: deque[tuple[int, int]] = deque()  # (generation, next offset then)
        self._files = SegmentFiles(self._path)
        self._pack = records.packer().pack  # appends come from the event loop only
        # Held by the writer thread while it writes this log, so a delete
        # never renames the directory under a write.
        self._writing = threading.Lock()
        self._deleting = False
        self.deleted = False
        # Offsets the workbench redrove (copied back to their origin): kept
        # in a file of their own, one a line, so a second redrive is a choice.
        self.redriven: set[int] = set()
        # A clustered leader's (message_store.py): the log's directory as
        # the followers' copies name it, and what is told of each append
        # to the redriven marks (the bytes appended).
        self.name: str | None = None
        self.on_redriven: Callable[[bytes], None] | None = None

    # ---- opening ------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Read the segments back (after a restart or a kill -9): a torn
        tail is cut off; appends go on in a new segment."""
        problems: list[str] = []
        self.directory.mkdir(parents=True, exist_ok=True)
        numbers = sorted(int(path.stem) for path in self.directory.glob(f"*{SUFFIX}")
                         if path.stem.isdigit())
        for number in numbers:
            segment = self._scan(number, problems)
            if segment is not None and segment.count:
                self.segments.append(segment)
                self.next_offset = segment.end
            else:
                self._path(number).unlink(missing_ok=True)
        if self.segments:
            first = self.segments[0].first
            self.next_offset = max(self.next_offset, first)
        self.committed = self.next_offset
        self._start_segment((numbers[-1] + 1) if numbers else 1)
        marks = self.directory / REDRIVEN
        if marks.exists():
            self.redriven = {int(line) for line in marks.read_text().split() if line.isdigit()}
        return problems

    def mark_redriven(self, offsets: list[int]) -> None:
        """Note offsets as redriven, on disk before this returns."""
        fresh = [offset for offset in offsets if offset not in self.redriven]
        if not fresh:
            return
        data = "".join(f"{offset}\n" for offset in fresh).encode()
        with self._writing, open(self.directory / REDRIVEN, "ab") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        self.redriven.update(fresh)
        if self.on_redriven is not None:
            self.on_redriven(data)

    def _scan(self, number: int, problems: list[str]) -> Segment | None:
        path = self._path(number)
        segment = None
        position = 0
        with open(path, "rb") as handle:
            while True:
                found = _read_record(handle)
                if found is None:
                    break
                record, size = found
                if record is _DAMAGED:
                    problems.append(f"{path}: damaged record at byte {position}; "
                                    "the rest of the segment is cut off")
                    break
                offset, stamp = record[1], record[2]
                if segment is None:
                    segment = Segment(number, offset, oldest=stamp)
                if (offset - segment.first) % INDEX_EVERY == 0:
                    segment.marks.append((offset, position))
                segment.count = offset - segment.first + 1
                segment.newest = stamp
                position += size
        if position < path.stat().st_size:
            with open(path, "r+b") as handle:
                handle.truncate(position)
        if segment is not None:
            segment.size = position
        return segment

    def _start_segment(self, number: int) -> None:
        self.segments.append(Segment(number, self.next_offset))

    # ---- appending ------------------------------------------------------------------

    def append(self, route: bytes, header: bytes, body: bytes, now: float,
               filter_value: str | None = None) -> int:
        """Buffer one message; returns its offset.  On disk with the store's
        next flush."""
        return self.append_run(((route, header, body, filter_value),), now)

    def append_run(self, rows, now: float, ends: list | None = None) -> int:
        """Buffer messages published together, `rows` of (route, header,
        body, filter value or None); returns the first one's offset.  With
        `ends`, each message's (segment number, byte position after it) is
        appended to it, where a reader at the tail goes on from."""
        segments = self.segments
        active = segments[-1]
        pack, frame = self._pack, records.frame
        first = offset = self.next_offset
        total = 0
        chunks = self._chunks_of(active.number)
        for route, header, body, value in rows:
            if active.size >= self.segment_size and active.count:
                self.next_offset = offset
                self._start_segment(active.number + 1)
                active = segments[-1]
                chunks = self._chunks_of(active.number)
            encoded = frame(pack(["S", offset, now, route, header, body] if value is None
                                 else ["S", offset, now, route, header, body, value]))
            if active.count % INDEX_EVERY == 0:
                active.marks.append((offset, active.size))
                if active.oldest is None:  # its first message (always at a mark)
                    active.oldest = now
            active.count += 1
            active.newest = now
            active.size += len(encoded)
            chunks.append(encoded)
            total += len(encoded)
            if ends is not None:
                ends.append((active.number, active.size))
            offset += 1
        self.next_offset = offset
        self.appended(total)
        return first

    def _chunks_of(self, number: int) -> list[bytes]:
        """The list segment `number`'s appends since the last flush go to."""
        buffer = self._buffer
        if buffer and buffer[-1][0] == number:
            return buffer[-1][1]
        chunks: list[bytes] = []
        buffer.append((number, chunks))
        return chunks

    # ---- the store's flush (segments.SegmentLog's riders) ---------------------------

    def take(self, generation: int):
        """At the start of a store flush (event loop): what this flush
        writes for the log, or None."""
        if self.deleted:
            return None
        if self._deleting:
            self.deleted = True
            return ("delete",)
        if not self._buffer and not self._doomed:
            return None
        batch = [(number, b"".join(chunks)) for number, chunks in self._buffer]
        self._buffer = []
        doomed, self._doomed = self._doomed, []
        self._pending.append((generation, self.next_offset))
        return ("write", batch, doomed)

    def write(self, work) -> None:
        """On the store's writer thread: append, fsync, delete segments."""
        with self._writing:
            self._write(work)

    def _write(self, work) -> None:
        if work[0] == "delete":
            self._files.close()
            shutil.rmtree(self.directory, ignore_errors=True)
            return
        _, batch, doomed = work
        files = self._files
        for number, encoded in batch:
            files.append(number, encoded)
        files.sync()
        files.remove(doomed)

    def synced(self, generation: int) -> None:
        """The store's flush `generation` is on disk (event loop)."""
        pending = self._pending
        upto = None
        while pending and pending[0][0] <= generation:
            upto = pending.popleft()[1]
        if upto is not None and upto > self.committed:
            self.committed = upto
            self.on_committed()

    # ---- retention and deletion ------------------------------------------------------

    def remove_oldest(self, count: int) -> int:
        """Retention: the `count` oldest segments go whole (never the one
        being written); returns the messages they held."""
        count = min(count, len(self.segments) - 1)
        if count <= 0:
            return 0
        gone, self.segments = self.segments[:count], self.segments[count:]
        self._doomed.extend(segment.number for segment in gone)
        self.request_flush()
        return sum(segment.count for segment in gone)

    def delete(self, trash: Path) -> None:
        """The stream is deleted: its directory moves into `trash` at once
        (a stream declared again under the name starts empty) and is
        removed with the next flush."""
        with self._writing:
            trash.mkdir(parents=True, exist_ok=True)
            moved = trash / uuid.uuid4().hex
            if self.directory.exists():
                self.directory.rename(moved)
            self.directory = moved
        self._deleting = True
        self._buffer.clear()
        self.request_flush()

    def close(self) -> None:
        self._files.close()

    # ---- views ---------------------------------------------------------------------------

    @property
    def first_offset(self) -> int:
        for segment in self.segments:
            if segment.count:
                return segment.first
        return self.next_offset

    @property
    def message_count(self) -> int:
        """Messages on disk: what readers can see (RabbitMQ counts the
        committed ones too)."""
        return max(0, self.committed - self.first_offset)

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self.segments)

    @property
    def segment_count(self) -> int:
        return sum(1 for segment in self.segments if segment.count)

    def first_at_or_after(self, stamp: float) -> int:
        """The offset of the first segment holding a message at or after
        `stamp` (ms); the reader skips the earlier ones of that segment."""
        for segment in self.segments:
            if segment.count and segment.newest is not None and segment.newest >= stamp:
                return segment.first
        return self.next_offset

    def reader(self, offset: int, not_before: float | None = None,
               wanted: Callable[[str | None], bool] | None = None) -> Reader:
        return Reader(self, offset, not_before, wanted)

    def _path(self, number: int) -> Path:
        return self.directory / f"{number:08d}{SUFFIX}"


class Reader:
    """One consumer's place in a log: an open segment file read in chunks,
    moving forward only.  Readers of one stream usually read the same
    messages one after the other: `move_to` lets a reader jump past
    messages its queue took from another reader's reads, to the file
    position those reads reported."""

    def __init__(self, stream: StreamLog, offset: int, not_before: float | None,
                 wanted: Callable[[str | None], bool] | None = None) -> None:
        self.log = stream
        self.offset = offset
        self.not_before = not_before  # a timestamp spec: skip older messages
        # A filter (3.13): which filter values the reader wants; the others
        # are passed over without taking a credit.
        self.wanted = wanted
        # Set when a read stopped at SCAN_LIMIT passed-over messages: there
        # may be more to read at once.
        self.more = False
        self._handle = None
        self._segment: Segment | None = None
        self._buffer = b""
        self._pos = 0        # of the next record in _buffer
        self._file_pos = 0   # where _buffer starts in the file
        self._hint: tuple[int, int] | None = None  # (segment, position) of self.offset

    def move_to(self, offset: int, segment: int, position: int) -> None:
        """Continue at `offset`, which starts at byte `position` of segment
        number `segment`."""
        self.offset = offset
        self._hint = (segment, position)

    def read(self, limit: int) -> list[StoredMessage]:
        """Up to `limit` committed messages from the reader's offset on
        (those its filter wants); at most SCAN_LIMIT passed over in one
        call, so a long run of others never holds up the event loop."""
        out: list[StoredMessage] = []
        stream = self.log
        wanted = self.wanted
        skipped = 0
        self.more = False
        if self._hint is not None:
            self._follow_hint()
        while len(out) < limit and self.offset < stream.committed:
            if skipped >= SCAN_LIMIT:
                self.more = True
                break
            if self._handle is None and not self._open():
                break
            record = self._next()
            if record is None or record is _DAMAGED:
                segment = self._segment
                self._close()
                if segment is not None and self.offset < segment.end:
                    # Cut short (retention removed it while open, or damage):
                    # go on from the next segment.
                    self.offset = segment.end
                continue
            offset = record[1]
            if offset < self.offset:
                continue
            self.offset = offset + 1
            if self.not_before is not None:
                if record[2] < self.not_before:
                    skipped += 1
                    continue
                self.not_before = None
            value = record[6] if len(record) > 6 else None
            if wanted is not None and not wanted(value):
                skipped += 1
                continue
            out.append(StoredMessage(offset, record[2], record[3], record[4], record[5], value,
                                     self._segment.number, self._file_pos + self._pos))
        return out

    def _next(self):
        """The next record of the open segment; None at the end of what is
        written, _DAMAGED for one that fails its checks."""
        head, crc32, decode = records.head, zlib.crc32, records.decode_payload
        while True:
            buffer, pos = self._buffer, self._pos
            if len(buffer) - pos >= records.HEAD_SIZE:
                magic, length, crc = head(buffer, pos)
                if magic != records.MAGIC or length > records.MAX_RECORD:
                    return _DAMAGED
                end = pos + records.HEAD_SIZE + length
                if end <= len(buffer):
                    payload = memoryview(buffer)[pos + records.HEAD_SIZE:end]
                    if crc32(payload) != crc:
                        return _DAMAGED
                    try:
                        record = decode(payload)
                    except Exception:  # msgpack's errors: a damaged record
                        return _DAMAGED
                    self._pos = end
                    return record
            chunk = self._handle.read(READ_CHUNK)
            if not chunk:
                return None
            self._file_pos += pos
            self._buffer = buffer[pos:] + chunk
            self._pos = 0

    def _follow_hint(self) -> None:
        number, position = self._hint
        self._hint = None
        segment = self._segment
        if segment is not None and segment.number == number:
            if self._file_pos <= position <= self._file_pos + len(self._buffer):
                self._pos = position - self._file_pos
                return
            self._seek(position)
            return
        for segment in self.log.segments:
            if segment.number == number:
                self._close()
                try:
                    self._handle = open(self.log._path(number), "rb")
                except FileNotFoundError:
                    return  # gone: read() finds the first segment there is
                self._segment = segment
                self._seek(position)
                return

    def _seek(self, position: int) -> None:
        self._handle.seek(position)
        self._buffer, self._pos, self._file_pos = b"", 0, position

    def _open(self) -> bool:
        stream = self.log
        first = stream.first_offset
        self.offset = max(self.offset, first)
        for segment in stream.segments:
            if segment.first <= self.offset < segment.end:
                position = 0
                for mark_offset, mark_position in segment.marks:
                    if mark_offset > self.offset:
                        break
                    position = mark_position
                try:
                    handle = open(stream._path(segment.number), "rb")
                except FileNotFoundError:
                    self.offset = segment.end
                    continue
                self._handle, self._segment = handle, segment
                self._seek(position)
                return True
        return False

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._segment = None
        self._buffer, self._pos, self._file_pos = b"", 0, 0

    def close(self) -> None:
        self._close()


_DAMAGED = object()


def _read_record(handle):
    """(record, bytes taken) at the handle's position, None at the end of
    what is written, (_DAMAGED, 0) for a record that fails its checks
    (recovery's scan)."""
    head = handle.read(records.HEAD_SIZE)
    if len(head) < records.HEAD_SIZE:
        if head:
            handle.seek(-len(head), os.SEEK_CUR)
        return None
    magic, length, crc = records.head(head, 0)
    if magic != records.MAGIC or length > records.MAX_RECORD:
        return (_DAMAGED, 0)
    payload = handle.read(length)
    if len(payload) < length:
        handle.seek(-(len(head) + len(payload)), os.SEEK_CUR)
        return None
    if zlib.crc32(payload) != crc:
        return (_DAMAGED, 0)
    try:
        record = records.decode_payload(payload)
    except Exception:  # msgpack's errors: a damaged record
        return (_DAMAGED, 0)
    return record, records.HEAD_SIZE + length
