"""An append-only log split into numbered segment files, with group commit.

Appends only fill a buffer.  One flush at a time encodes everything
buffered (on the event loop's thread) and writes and fsyncs it on a worker
thread; whatever arrives meanwhile waits for the next flush, so one fsync
covers every record written since the previous one, however many
publishers there are.  `on_synced(generation)` tells the owner which
appends are now on disk.

The worker thread only writes: encoding there held the interpreter's lock
for milliseconds at a stretch, which the event loop waited out after each
of its system calls (the lock changes hands every 5 ms under contention),
more than the encoding costs it.

Publishers can outrun the writer; past `backlog_high` bytes not yet written
the log reports congestion (`on_congestion(True)`), and again when the
backlog is under `backlog_low`, so the owner can stop reading publishers
meanwhile (RabbitMQ's credit flow) instead of buffering without bound.

Segments roll at a size; a segment is deleted when nothing in it is live
any more and every older segment is gone too (removal records refer only to
the same or older segments, so deleting from the front keeps recovery exact).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from . import records
from .files import SegmentFiles

log = logging.getLogger("amqp_server.storage")

SEGMENT_SUFFIX = ".seg"


class SegmentLog:
    def __init__(self, directory: Path, segment_size: int = 64 << 20,
                 on_synced: Callable[[int], None] | None = None) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.on_synced = on_synced or (lambda generation: None)
        self.live: Counter = Counter()  # segment number -> live records
        self.segments: list[int] = []   # existing segment numbers, ascending
        self.active = 0
        self.active_size = 0
        self.generation = 1            # the flush that will carry new appends
        self.synced = 0                # every append of generations <= this is on disk
        self._buffer: list[tuple[int, list]] = []
        self._loop = None
        self._executor = None
        self._flushing = False
        self._flush_scheduled = False
        self._again = False
        self._files = SegmentFiles(self._path)
        self._pack = records.packer().pack  # encodes on the event loop's thread only
        # Called at the start of each flush, so the owner can add batched records.
        self.before_flush: Callable[[], None] = lambda: None
        self.backlog_high = 32 << 20
        self.backlog_low = 8 << 20
        self.congested = False
        self.on_congestion: Callable[[bool], None] = lambda congested: None
        self._buffer_bytes = 0
        self._inflight_bytes = 0
        # A clustered leader's: called on the writer thread with each
        # flush's generation, its encoded records by segment, the
        # segments it deletes and what its riders wrote ((rider, work)
        # pairs), once written and before the fsync, so the followers
        # write them while this disk syncs.
        self.on_written: Callable[[int, list, list, list], None] | None = None
        # Logs of their own written by this log's flushes (a stream's,
        # stream_log.py): `take(generation)` on the loop at the start of a
        # flush, `write(work)` on the writer thread before the flush counts
        # as synced.
        self.riders: list = []

    # ---- reading at start ---------------------------------------------

    def existing(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob(f"*{SEGMENT_SUFFIX}"):
            try:
                found.append((int(path.stem), path))
            except ValueError:
                log.warning("ignoring unexpected file %s in the message store", path)
        return sorted(found)

    def start_after(self, numbers: list[int]) -> None:
        """Continue appending after recovery: into a fresh segment, so a
        truncated tail is never extended."""
        self.segments = list(numbers)
        self.active = (numbers[-1] + 1) if numbers else 1
        self.active_size = 0
        self.segments.append(self.active)

    def attach(self, loop, executor=None) -> None:
        self._loop = loop
        self._executor = executor

    # ---- appending -----------------------------------------------------

    def append(self, record: list, size: int, live: int = 0,
               schedule: bool = True) -> tuple[int, int]:
        """Buffer a record (encoded at write time; `size` estimates its
        encoded length for rolling); returns (segment, generation)."""
        if self.active_size >= self.segment_size:
            self.active += 1
            self.active_size = 0
            self.segments.append(self.active)
        self.active_size += size
        self._buffer_bytes += size
        if (not self.congested and self._loop is not None
                and self._buffer_bytes + self._inflight_bytes > self.backlog_high):
            self.congested = True
            self.on_congestion(True)
        self._buffer.append((self.active, record))
        if live:
            self.live[self.active] += live
        if schedule:
            self._schedule()
        return self.active, self.generation

    def release(self, segment: int, count: int = 1) -> None:
        """`count` live records of `segment` are gone; the removal records
        the owner batches go out with the next flush."""
        self.live[segment] -= count
        self._schedule()

    def _schedule(self) -> None:
        if self._loop is None:
            return  # without a loop the owner calls flush_now()
        if self._flushing:
            self._again = True  # picked up when the flush in flight finishes
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._start_flush)

    # ---- flushing --------------------------------------------------------

    def _start_flush(self) -> None:
        self._flush_scheduled = False
        if self._flushing:
            return
        self.before_flush()
        batch, self._buffer = self._buffer, []
        doomed = self._doomed()
        generation = self.generation
        rides = self._rides(generation)
        if not batch and not doomed and not rides:
            return
        self.generation += 1
        self._flushing = True
        self._inflight_bytes, self._buffer_bytes = self._buffer_bytes, 0
        future = self._loop.run_in_executor(self._executor, self._write, self._encode(batch),
                                            doomed, generation, rides)
        future.add_done_callback(lambda f: self._finished(f, generation))

    def _finished(self, future, generation: int) -> None:
        self._flushing = False
        self._inflight_bytes = 0
        if self.congested and self._buffer_bytes < self.backlog_low:
            self.congested = False
            self.on_congestion(False)
        error = future.exception()
        if error is not None:
            # Nothing is confirmed that is not on disk; the log says why.
            log.error("message store write failed: %s", error)
            return
        self.synced = generation
        self.on_synced(generation)
        if self._again or self._buffer:
            self._again = False
            self._schedule()

    def flush_now(self) -> None:
        """Synchronous flush (no event loop: tools and tests)."""
        self.before_flush()
        batch, self._buffer = self._buffer, []
        self._buffer_bytes = 0
        generation = self.generation
        self.generation += 1
        self._write(self._encode(batch), self._doomed(), generation, self._rides(generation))
        self.synced = generation
        self.on_synced(generation)

    def request_flush(self) -> None:
        """A rider has something to write."""
        self._schedule()

    def rider_appended(self, size: int) -> None:
        """A rider buffered `size` bytes more: they count in the backlog
        (congestion) as this log's own appends do."""
        self._buffer_bytes += size
        if (not self.congested and self._loop is not None
                and self._buffer_bytes + self._inflight_bytes > self.backlog_high):
            self.congested = True
            self.on_congestion(True)
        self._schedule()

    def _rides(self, generation: int) -> list:
        rides = []
        for rider in self.riders:
            work = rider.take(generation)
            if work is not None:
                rides.append((rider, work))
        return rides

    def _doomed(self) -> list[int]:
        """Front segments with nothing live, never the active one."""
        doomed = []
        for number in self.segments:
            if number == self.active or self.live[number] > 0:
                break
            doomed.append(number)
        if doomed:
            self.segments = self.segments[len(doomed):]
            for number in doomed:
                self.live.pop(number, None)
        return doomed

    def _encode(self, batch: list[tuple[int, list]]) -> list[list]:
        """The buffered records encoded, as [segment number, bytes] for
        each run of them in one segment, in order.  A record is a list,
        packed here, or an object that frames itself
        (`frame_into(parts, memo, pack)`: message_store.Enqueued)."""
        pack = self._pack
        head = records.frame_head
        chunks: list[list] = []
        number = None
        parts: list[bytes] = []
        memo: dict = {}
        for segment, record in batch:
            if segment != number:
                if parts:
                    chunks.append([number, b"".join(parts)])
                number, parts = segment, []
            if type(record) is not list:
                record.frame_into(parts, memo, pack)
                continue
            body = pack(record)
            parts.append(head(body))
            parts.append(body)
        if parts:
            chunks.append([number, b"".join(parts)])
        return chunks

    def _write(self, chunks: list[list], doomed: list[int], generation: int,
               rides: list = ()) -> None:
        """Worker thread: append the encoded records (`_encode`), fsync,
        then delete dead segments; the riders' writes too."""
        for rider, work in rides:
            rider.write(work)
        files = self._files
        for number, data in chunks:
            files.append(number, data)
        if self.on_written is not None:
            self.on_written(generation, chunks, doomed, rides)
        files.sync()
        files.remove(doomed)

    def _path(self, number: int) -> Path:
        return self.directory / f"{number:08d}{SEGMENT_SUFFIX}"

    async def drain(self) -> None:
        """Wait for the flush in flight, then write what is left (shutdown)."""
        while self._flushing:
            await asyncio.sleep(0.005)
        self._loop = None
        self._flush_scheduled = False
        self.flush_now()

    def close(self) -> None:
        self._files.close()
        for rider in self.riders:
            rider.close()

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for _, p in self.existing() if p.exists())
