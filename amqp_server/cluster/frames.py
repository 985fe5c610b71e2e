"""Frames of the replication stream between a leader and its followers.

Each frame is a msgpack list framed as the stores frame their records
(storage/records.py: a marker, the length, a CRC-32), so a damaged frame is
noticed, never applied.  The first item names the frame; data frames carry
their log sequence number (LSN) second.

Leader to follower:

    ["snap", epoch, lsn]                 a full copy follows: forget yours
    ["file", path, offset, bytes]        a piece of one file of the copy
    ["ready", lsn]                       the copy is whole, up to `lsn`
    ["resume", epoch, lsn, from epoch]   your copy (`lsn` of term `from epoch`) is
                                         good: frames of term `epoch` after it follow
    ["m", lsn, [[segment, bytes]...], [doomed segment...]]
                                         a message store flush
    ["d", lsn, bytes]                    one definition log record
    ["dr", lsn, bytes]                   the definition log compacted: its new content
    ["p", lsn, bytes]                    the policies document
    ["l", lsn, node, log id, [[head, header, body, number]...]]
                                         dead-letter log events, `node` dead-lettered them
    ["s", lsn, stream, [[segment, bytes]...], [doomed segment...]]
                                         a stream's log, written by a message store flush
                                         (`stream`: its directory, streams/<vhost>/<queue>)
    ["sx", lsn, stream]                  a stream deleted: its directory goes
    ["sr", lsn, stream, bytes]           offsets appended to a stream's redriven marks
    ["af", lsn, path, offset, bytes, size]
                                         a piece of a new dead-letter archive file
                                         (`path` inside the archive); whole at `size`
    ["al", lsn, offset, bytes]           the archive's redriven ledger appended to

Follower to leader:

    ["follow", epoch, lsn]               what I hold (epoch None: nothing usable)
    ["ack", lsn]                         everything up to `lsn` is on my disk
"""

from __future__ import annotations

import re
from collections import deque

from ..storage import records
from ..storage.archive import ARCHIVE_DIR, LEDGER

SNAPSHOT, FILE, READY, RESUME = "snap", "file", "ready", "resume"
MESSAGES, DEFINITION, DEFINITIONS_REPLACED, POLICIES, DEAD_LETTERS = "m", "d", "dr", "p", "l"
STREAM, STREAM_DELETED, STREAM_REDRIVEN = "s", "sx", "sr"
ARCHIVE_FILE, ARCHIVE_LEDGER = "af", "al"
DATA_KINDS = frozenset({MESSAGES, DEFINITION, DEFINITIONS_REPLACED, POLICIES, DEAD_LETTERS,
                        STREAM, STREAM_DELETED, STREAM_REDRIVEN, ARCHIVE_FILE,
                        ARCHIVE_LEDGER})
FOLLOW, ACK = "follow", "ack"

# Files a copy may name, relative to the data directory: nothing else is
# ever written from a frame, whoever sent it.
DEFINITIONS_FILE = "definitions/log"
POLICIES_FILE = "policies.json"
_SEGMENT = re.compile(r"messages/(\d{8})\.seg")
# A stream's directory: its vhost's and its name's UTF-8 in hex
# (storage/message_store.py), so nothing in it can climb out.
_STREAM = re.compile(r"streams/[0-9a-f]+/[0-9a-f]+")
_STREAM_FILE = re.compile(r"(streams/[0-9a-f]+/[0-9a-f]+)/(\d{8}\.seg|redriven)")
# The archive's files, whatever their format (storage/archive.py): the
# partitions the archive writes, a name that is not hidden, no other
# directory.  Paths in the archive frames are inside the archive; in a
# copy they are under ARCHIVE, mapped to the follower's own archive.
ARCHIVE = ARCHIVE_DIR
ARCHIVE_LEDGER_NAME = LEDGER
_ARCHIVE_FILE = re.compile(r"node=[^/]+/day=[0-9-]+/archive-[^/]+")


def segment_path(number: int) -> str:
    return f"messages/{number:08d}.seg"


def stream_segment_path(stream: str, number: int) -> str:
    return f"{stream}/{number:08d}.seg"


def stream_allowed(stream: str) -> bool:
    return _STREAM.fullmatch(stream) is not None


def archive_file_allowed(path: str) -> bool:
    return _ARCHIVE_FILE.fullmatch(path) is not None and "/.." not in path


def copy_path_allowed(path: str) -> bool:
    if path in (DEFINITIONS_FILE, POLICIES_FILE, f"{ARCHIVE}/{ARCHIVE_LEDGER_NAME}"):
        return True
    if _SEGMENT.fullmatch(path) is not None or _STREAM_FILE.fullmatch(path) is not None:
        return True
    return path.startswith(ARCHIVE + "/") and archive_file_allowed(path[len(ARCHIVE) + 1:])


def encode(frame: list) -> bytes:
    return records.encode(frame)


class FrameError(ValueError):
    """The peer sent something that is not a frame of this stream."""


class FrameReader:
    """Bytes in, frames out; a frame split over reads waits for its rest."""

    def __init__(self, max_frame: int = records.MAX_RECORD) -> None:
        self._buffer = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list:
        self._buffer += data
        buffer = self._buffer
        frames = []
        pos = 0
        size = len(buffer)
        while size - pos >= records.HEAD_SIZE:
            magic, length, _crc = records.head(buffer, pos)
            if magic != records.MAGIC or length > self.max_frame:
                raise FrameError("not a replication frame")
            end = pos + records.HEAD_SIZE + length
            if end > size:
                break
            decoded, problems, _ = records.decode_all(bytes(buffer[pos:end]))
            if problems or len(decoded) != 1 or not isinstance(decoded[0], list) \
                    or not decoded[0] or not isinstance(decoded[0][0], str):
                raise FrameError("damaged replication frame")
            frames.append(decoded[0])
            pos = end
        if pos:
            del buffer[:pos]
        return frames


class FrameStream:
    """Frames read from an asyncio stream, one at a time or all that came."""

    def __init__(self, reader, max_frame: int = records.MAX_RECORD) -> None:
        self.reader = reader
        self._decoder = FrameReader(max_frame)
        self._ready: deque[list] = deque()

    async def next(self) -> list | None:
        """The next frame; None when the peer closed the connection."""
        while not self._ready:
            data = await self.reader.read(1 << 20)
            if not data:
                return None
            self._ready.extend(self._decoder.feed(data))
        return self._ready.popleft()

    def ready(self) -> list[list]:
        """Frames already read and decoded, without waiting for more."""
        ready = list(self._ready)
        self._ready.clear()
        return ready
