"""Persistent messages of durable queues, on top of the segment log.

Records (msgpack lists, the first item says what it is):
  ["E", vhost, queue, seq, exchange, routing_key, header, body, routing_keys,
   bcc, deadline, annotations]          a message entered a queue (annotations:
                                        broker/message.py's, left out when none)
  ["R", vhost, queue, [seq, ...]]       entries left for good (ack, death, drop)
  ["D", vhost, queue, [seq, ...]]       entries were delivered (for redelivered=true)
  ["P", vhost, queue, upto]             every entry below `upto` left (delete)
  ["T", vhost, queue, start]            every entry from `start` on left (a purged
                                        paged tail, whose seqs are not in memory)
  ["C", vhost, queue, [[seq, deliveries, due, failed], ...]]
                                        delivery counts, and when a delayed
                                        redelivery is due (ms, or None); failed:
                                        a 4.3 quorum queue's failed deliveries
                                        (left out when it counts none)

Removals and delivery marks are batched per flush; entries are appended at
once.  A publisher waiting for a confirm waits for the flush that carries
its entry (`generation`), never for a fixed interval.  An entry's record
waits in the log's buffer as an `Enqueued`, which shares the message's
header and body until the flush frames it.
"""

from __future__ import annotations

import logging
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from zlib import crc32

from dlx.redelivery import persists_count

from . import records
from .replication import ReplicatedPositions, Shipping
from .segments import SegmentLog
from .stream_log import StreamLog

log = logging.getLogger("amqp_server.storage")


class StoredEntry:
    """A recovered message: its "E" record still encoded (`payload`, a view
    into the segment just read), so messages that go straight to a page
    file are never decoded into objects twice."""

    __slots__ = ("seq", "segment", "payload", "body_size", "deadline", "delivered",
                 "deliveries", "due", "failed")

    def __init__(self, seq: int, segment: int, payload, body_size: int,
                 deadline: float | None) -> None:
        self.seq = seq
        self.segment = segment
        self.payload = payload
        self.body_size = body_size
        self.deadline = deadline
        self.delivered = False
        self.deliveries = 0
        self.due = None
        self.failed = None

    def record(self) -> list:
        """["E", vhost, queue, seq, exchange, routing_key, header, body,
        routing_keys, bcc, deadline, annotations]: annotations always there
        (None in records written without them)."""
        record = records.decode_payload(self.payload)
        if len(record) == 11:
            record.append(None)
        return record


@dataclass
class Recovered:
    queues: dict = field(default_factory=dict)  # (vhost, queue) -> [StoredEntry] by seq
    problems: list = field(default_factory=list)


_HEAD = records.HEAD
_ARRAY_OF_11 = b"\x9b"  # msgpack's fixarray head for an "E" record's 11 items
_ARRAY_OF_12 = b"\x9c"  # ... and for one with annotations
_NO_EXTRAS = b"\xc0\xc0\xc0"  # routing keys, BCC and deadline all nil


def _bin_head(size: int) -> bytes:
    """msgpack's head of a bin of `size` bytes (bin 8, 16 or 32)."""
    if size < 0x100:
        return bytes((0xC4, size))
    if size < 0x10000:
        return b"\xc5" + size.to_bytes(2, "big")
    return b"\xc6" + size.to_bytes(4, "big")


class Enqueued:
    """An "E" record waiting in the log's buffer: what its list holds,
    sharing the message's header and body.  At the flush it frames itself
    (`frame_into`) byte for byte as records.encode frames the list
    (`as_list`), but with the body written as it is after its msgpack head,
    not packed into a copy first, and the fields a run of them shares (the
    queue, the exchange and routing key, a header object) packed once."""

    __slots__ = ("vhost", "queue", "seq", "exchange", "routing_key", "header", "body",
                 "keys", "bcc", "deadline", "annotations")

    def __init__(self, vhost: str, queue: str, entry, message) -> None:
        self.vhost = vhost
        self.queue = queue
        self.seq = entry.seq
        self.exchange = message.exchange
        self.routing_key = message.routing_key
        self.header = message.header
        self.body = message.body
        keys = message.routing_keys
        self.keys = list(keys) if keys != (message.routing_key,) else None
        self.bcc = list(message.bcc) or None
        self.deadline = entry.deadline
        # broker/message.py's annotations (a 4.3 delivery count carried by
        # a dead letter): a twelfth item, left out when there are none.
        self.annotations = message.annotations or None

    def as_list(self) -> list:
        record = ["E", self.vhost, self.queue, self.seq, self.exchange, self.routing_key,
                  self.header, self.body, self.keys, self.bcc, self.deadline]
        if self.annotations:
            record.append(self.annotations)
        return record

    def frame_into(self, parts: list, memo: dict, pack) -> None:
        """Append the framed record's pieces to `parts`; `memo` is the
        flush's, shared by the records framed in it."""
        last = memo.get(Enqueued)
        if last is None:
            last = memo[Enqueued] = [None] * 8
        if self.vhost is not last[0] or self.queue is not last[1]:
            last[0], last[1] = self.vhost, self.queue
            last[2] = _ARRAY_OF_11 + pack("E") + pack(self.vhost) + pack(self.queue)
        if self.exchange is not last[3] or self.routing_key is not last[4]:
            last[3], last[4] = self.exchange, self.routing_key
            last[5] = pack(self.exchange) + pack(self.routing_key)
        if self.header is not last[6]:
            last[6] = self.header
            last[7] = pack(self.header)
        body = self.body
        head = last[2]
        if self.annotations:
            head = _ARRAY_OF_12 + head[1:]
        lead = b"".join((head, pack(self.seq), last[5], last[7], _bin_head(len(body))))
        if self.annotations:
            tail = (pack(self.keys) + pack(self.bcc) + pack(self.deadline)
                    + pack(self.annotations))
        elif self.keys is None and self.bcc is None and self.deadline is None:
            tail = _NO_EXTRAS
        else:
            tail = pack(self.keys) + pack(self.bcc) + pack(self.deadline)
        crc = crc32(tail, crc32(body, crc32(lead)))
        parts += (_HEAD.pack(records.MAGIC, len(lead) + len(body) + len(tail), crc), lead,
                  body, tail)


class MessageStore:
    def __init__(self, directory: str | Path, segment_size: int = 64 << 20) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log = SegmentLog(self.directory, segment_size, on_synced=self._synced)
        self.log.before_flush = self._emit_batched
        self._removed: dict[tuple, list[int]] = defaultdict(list)
        self._delivered: dict[tuple, list[int]] = defaultdict(list)
        self._waiting: set = set()
        # Artemis's max-redelivery-records: count records per message, at most.
        self.max_redelivery_records = 10
        # A clustered leader's replication stream (storage/replication.py).
        self._positions: ReplicatedPositions | None = None
        self._shipping: Shipping | None = None
        # Streams' logs (stream_log.py) live beside this store and ride on
        # its flushes.
        self.streams_directory = self.directory.parent / "streams"
        self._trash_emptied = False
        # Streams opened before recover() are the ones the definitions
        # restored; one opened after it was declared now.
        self._recovered = False

    # ---- recovery --------------------------------------------------------

    def recover(self) -> Recovered:
        result = Recovered()
        queues: dict[tuple, dict[int, StoredEntry]] = defaultdict(dict)
        numbers = []
        for number, path in self.log.existing():
            numbers.append(number)
            data = path.read_bytes()
            payloads: list = []
            found, problems, good_end = records.decode_all(data, payloads)
            for offset, what in problems:
                message = f"{path.name} at offset {offset}: {what}"
                result.problems.append(message)
                log.warning("message store: %s", message)
            if good_end < len(data) and problems and "tail" in problems[-1][1]:
                with open(path, "r+b") as handle:
                    handle.truncate(good_end)
            replay = self._replay
            for record, payload in zip(found, payloads):
                try:
                    if record[0] == "E":  # most records: without a call each
                        queues[(record[1], record[2])][record[3]] = StoredEntry(
                            record[3], number, payload, len(record[7]), record[10])
                    else:
                        replay(record, queues)
                except (LookupError, TypeError, ValueError) as exc:
                    log.warning("message store: skipping malformed record %r: %s",
                                record[:3] if isinstance(record, list) else record, exc)
        for key, entries in queues.items():
            ordered = [entries[seq] for seq in sorted(_whole_numbers(entries, key))]
            result.queues[key] = ordered
            for entry in ordered:
                self.log.live[entry.segment] += 1
        self.log.start_after(numbers)
        self._recovered = True
        return result

    @staticmethod
    def _replay(record, queues: dict) -> None:
        """Everything but an entry: removals, delivery marks and counts."""
        kind = record[0]
        key = (record[1], record[2])
        if kind == "R":
            entries = queues.get(key)
            if entries:
                for seq in record[3]:
                    entries.pop(seq, None)
        elif kind == "D":
            entries = queues.get(key, {})
            for seq in record[3]:
                if seq in entries:
                    entries[seq].delivered = True
        elif kind == "C":
            entries = queues.get(key, {})
            for seq, deliveries, due, *failed in record[3]:
                stored = entries.get(seq)
                if stored is not None:
                    stored.deliveries = deliveries
                    stored.due = due
                    stored.failed = failed[0] if failed else None
        elif kind == "P":
            entries = queues.get(key)
            if entries:
                for seq in [s for s in entries if s < record[3]]:
                    del entries[seq]
        elif kind == "T":
            entries = queues.get(key)
            if entries:
                for seq in [s for s in entries if s >= record[3]]:
                    del entries[seq]

    # ---- writing ---------------------------------------------------------

    def attach(self, loop) -> None:
        self.log.attach(loop)

    def enqueue(self, vhost: str, queue: str, entry, message) -> int:
        """Append an entry; sets entry.segment, returns the generation whose
        flush makes it durable."""
        size = len(message.header) + len(message.body) + len(queue) + 48
        segment, generation = self.log.append(Enqueued(vhost, queue, entry, message), size,
                                              live=1)
        entry.segment = segment
        return generation

    def enqueue_run(self, vhost: str, queue: str, entries: list) -> None:
        """`enqueue` for entries published together, all persistent: each
        message's `stored_gen` set, the log asked to flush once."""
        append = self.log.append
        for entry in entries:
            message = entry.message
            entry.segment, message.stored_gen = append(
                Enqueued(vhost, queue, entry, message),
                len(message.header) + len(message.body) + len(queue) + 48, 1, False)
        self.log.request_flush()

    def remove(self, vhost: str, queue: str, entries) -> None:
        seqs = self._removed[(vhost, queue)]
        released: dict[int, int] = {}  # segment -> records gone from it
        for entry in entries:
            segment = entry.segment
            if segment is not None:
                entry.segment = None
                seqs.append(entry.seq)
                released[segment] = released.get(segment, 0) + 1
        for segment, count in released.items():
            self.log.release(segment, count)
        if not seqs:
            del self._removed[(vhost, queue)]

    def delivered(self, vhost: str, queue: str, entry) -> None:
        if entry.segment is not None:
            self._delivered[(vhost, queue)].append(entry.seq)

    def returned(self, vhost: str, queue: str, entry, due: float | None,
                 always: bool = False) -> None:
        """A delivery came back: its count (and when a delayed redelivery is
        due) goes out with the next flush, as Artemis persists a rollback.
        `always`: a quorum queue's count, which RabbitMQ keeps in its log.
        Appended at once, never batched, so count records keep their order."""
        if always or persists_count(entry.returns, self.max_redelivery_records):
            counts = [entry.seq, entry.returns, due]
            if entry.failed is not None:
                counts.append(entry.failed)
            self.log.append(["C", vhost, queue, [counts]], len(queue) + 32)

    def count_delivery(self, vhost: str, queue: str, entry) -> int:
        """persist-delivery-count-before-delivery: the count including the
        delivery about to happen; returns the generation to wait for (0:
        nothing written)."""
        deliveries = entry.returns + 1
        if entry.segment is None or not persists_count(deliveries, self.max_redelivery_records):
            return 0
        record = ["C", vhost, queue, [[entry.seq, deliveries, None]]]
        return self.log.append(record, len(queue) + 32)[1]

    def drop_below(self, vhost: str, queue: str, upto: int, entries,
                   paged: Counter | None = None) -> None:
        """Delete: every entry below `upto` is gone; `entries` are those in
        memory, `paged` counts the paged-out ones per segment."""
        live = [entry for entry in entries if entry.segment is not None]
        if not live and not (paged and +paged):
            return
        self.log.append(["P", vhost, queue, upto], len(queue) + 24)
        for entry in live:
            self.log.release(entry.segment)
            entry.segment = None
        self._release_paged(paged)

    def drop_from(self, vhost: str, queue: str, start: int, paged: Counter) -> None:
        """Purge of a paged tail: every entry from `start` on is gone."""
        if not +paged:
            return
        self.log.append(["T", vhost, queue, start], len(queue) + 24)
        self._release_paged(paged)

    def _release_paged(self, paged: Counter | None) -> None:
        for segment, count in (paged or {}).items():
            if count:
                self.log.release(segment, count)

    def _emit_batched(self) -> None:
        for kind, table in (("D", self._delivered), ("R", self._removed)):
            for (vhost, queue), seqs in table.items():
                self.log.append([kind, vhost, queue, seqs], len(queue) + 16 + 5 * len(seqs),
                                schedule=False)
            table.clear()

    # ---- durability notifications -----------------------------------------

    def ship_to(self, shipping: Shipping) -> None:
        """From now on every flush goes to the followers too, and a
        generation counts as synced once it is on every in-sync copy."""
        positions = self._positions = ReplicatedPositions(shipping, self.log.synced)

        def written(generation: int, chunks: list, doomed: list, rides: list) -> None:
            # Streams' writes first: the flush's own frame comes last, so
            # its position counts as synced only once theirs are too.
            for stream, work in rides:
                frame = _stream_frame(stream.name, work)
                if frame is not None:
                    shipping.ship_from_thread(frame, _ignore)
            shipping.ship_from_thread(["m", 0, chunks, doomed],
                                      lambda lsn: positions.shipped(generation, lsn))

        self.log.on_written = written
        self._shipping = shipping
        for stream in self.log.riders:
            self._ship_redriven(stream)
        shipping.watch(self)

    def _ship_redriven(self, stream: StreamLog) -> None:
        """A stream's redriven marks go to the followers as they are noted
        (on the loop: the workbench's answer waits until they are there)."""
        shipping, name = self._shipping, stream.name
        if shipping is not None:
            stream.on_redriven = lambda data: shipping.ship(["sr", 0, name, data])

    def replication_progress(self) -> None:
        self._synced(self.log.synced)

    @property
    def synced(self) -> int:
        local = self.log.synced
        return local if self._positions is None else self._positions.synced(local)

    def wait(self, channel) -> None:
        """`channel` has confirms waiting for a flush."""
        self._waiting.add(channel)

    # ---- streams ------------------------------------------------------------

    def open_stream(self, vhost: str, queue: str, segment_size: int
                    ) -> tuple[StreamLog, list[str]]:
        """A stream's log, read back from its directory (hex-named, so any
        vhost or queue name is a safe file name); returns it and what could
        not be read."""
        trash = self.streams_directory / ".trash"
        if not self._trash_emptied:
            self._trash_emptied = True
            shutil.rmtree(trash, ignore_errors=True)  # deleted before a crash
        directory = self.streams_directory / vhost.encode().hex() / queue.encode().hex()
        if self._recovered and directory.exists():
            # Declared now, yet its directory is there: what a deletion
            # left (in a cluster, a copy that had the queue's deletion and
            # not yet its files' removal when its leader died).  A stream
            # declared again starts empty: the leftover is deleted as a
            # stream is, on the followers' copies too, before the new
            # stream's first appends (riders are written in order).
            self.delete_stream(self._log_at(directory, segment_size))
        stream = self._log_at(directory, segment_size)
        problems = stream.recover()
        self._ship_redriven(stream)
        return stream, problems

    def _log_at(self, directory: Path, segment_size: int) -> StreamLog:
        stream = StreamLog(directory, segment_size, self.log.request_flush,
                           self.log.rider_appended)
        # Its name in replication frames: the directory under the data directory.
        stream.name = directory.relative_to(self.directory.parent).as_posix()
        self.log.riders.append(stream)
        return stream

    @property
    def next_generation(self) -> int:
        """The flush that will write what is appended now (a stream's
        messages wait for it to be confirmed)."""
        return self.log.generation

    def delete_stream(self, stream: StreamLog) -> None:
        stream.delete(self.streams_directory / ".trash")

    def _synced(self, generation: int) -> None:
        riders = self.log.riders
        if riders:
            # Stream readers see what is on every in-sync copy, as
            # RabbitMQ's see only committed chunks.
            synced = self.synced
            for stream in riders:
                stream.synced(synced)
            if any(stream.deleted for stream in riders):
                self.log.riders = [stream for stream in riders if not stream.deleted]
        waiting, self._waiting = self._waiting, set()
        for channel in waiting:
            channel.durable_progress()

    def flush_now(self) -> None:
        self.log.flush_now()

    async def shutdown(self) -> None:
        await self.log.drain()
        self.log.close()

    def close(self) -> None:
        self.log.close()


def _ignore(lsn: int) -> None:
    pass


def _stream_frame(name: str | None, work) -> list | None:
    """The replication frame of what a flush wrote for one stream
    (StreamLog.take's work): its appends by segment and its doomed
    segments, or its deletion."""
    if name is None:
        return None
    if work[0] == "delete":
        return ["sx", 0, name]
    _, batch, doomed = work  # batch: (segment number, its bytes), one a segment
    return ["s", 0, name, [[number, data] for number, data in batch], list(doomed)]


def _whole_numbers(entries: dict, key: tuple):
    """The seqs of `entries`, leaving out (and reporting) any that is not
    an integer, which only a malformed record can make."""
    if all(type(seq) is int for seq in entries):
        return entries
    bad = [seq for seq in entries if type(seq) is not int]
    log.warning("message store: skipping %d entries of %r with malformed seqs", len(bad), key)
    for seq in bad:
        del entries[seq]
    return entries
