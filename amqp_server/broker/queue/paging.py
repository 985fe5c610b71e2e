"""The queue's paging part: which ready messages live in memory and which
in page files.  Past a threshold (messages or body bytes in memory), the
tail of a long queue waits in a page file (storage/paging.py) and nothing
of it stays in memory; it is read back in order as the head drains.

Paged messages go in lanes, each read back in its own order: a FIFO queue
has one, a priority queue one per priority (as rabbit_priority_queue keeps
a backing queue per priority), so a message paged at a high priority is
read back before lower ones in memory are served (the queue wires
ordering.PriorityReady to ask for it).

Interface (the queue calls it; the queue keeps the in-memory messages in
its ordering part and tells this part how many there are):

    adopt(settings)               the queue's effective settings (its in-memory cap)
    attach(paging)                page through the broker's `storage.paging.Paging`,
                                  at its limits (again when they change)
    attached                      a broker's Paging is configured
    count, bytes, segments        paged messages, their body bytes, and how
                                  many of them each store segment holds
    dead_letters                  paged dead letters by their latest death's reason
    count_in(lane)                paged messages of a lane
    top_lane()                    the highest lane holding any
    past_threshold(in_memory, ready_bytes, stored)
                                  a message joining the tail now is paged
    fits(in_memory, ready_bytes, count, size, stored)
                                  `count` more messages of `size` bytes stay in memory
    wants_refill(in_memory)       the head runs low: read the next batch back
    excess(in_memory)             how many of the in-memory tail to page out
    page_out(entry, lane)         an entry goes to its lane's page file
    page_stored(lane, items) -> body bytes
                                  stored records (recovery) join a lane as they are
    page_in(lane, in_memory) -> entries
                                  the next batch of a lane, in order
    paged_refs()                  (first seq of the one lane, None) or (None,
                                  refs naming every paged entry): what a purge
                                  tells the store
    drop()                        nothing is paged any more: the files go

It owns the page files (through the Paging it is given: scratch space,
wiped at start, never replicated), the lanes and the paged counts."""

from __future__ import annotations

import sys
from collections import Counter, deque

from ...wire.frames import shortstr
from ..message import Entry, Message
from .census import latest_reason, recovered_reasons

# A lazy queue (x-queue-mode: lazy) keeps only this much in memory, for
# every message, transient ones included.
LAZY_MESSAGES = 256
LAZY_BYTES = 1 << 20


def in_memory_cap(settings) -> tuple[int, int]:
    """(messages, body bytes) the queue's effective settings allow in
    memory: queue-mode lazy, or a quorum queue's max-in-memory-length/-bytes
    (argument or policy)."""
    count = size = sys.maxsize
    if settings.queue_mode == "lazy":
        count, size = LAZY_MESSAGES, LAZY_BYTES
    if settings.max_in_memory_length is not None:
        count = min(count, max(1, settings.max_in_memory_length))
    if settings.max_in_memory_bytes is not None:
        size = min(size, max(1, settings.max_in_memory_bytes))
    return count, size


class Lane:
    """Paged messages read back in order.  Every entry in the page file has
    a seq of at least `first_seq`, and no entry of the lane out of it
    (ready, delayed or delivered) has one that high.  `reasons`: the
    latest death's reason of each (None: not a dead letter), in the same
    order, as runs of [reason, how many]: a page file is read back in the
    order it was written, so reading one back needs no decoding."""

    __slots__ = ("count", "first_seq", "pages", "reasons")

    def __init__(self) -> None:
        self.pages = None
        self.count = 0
        self.first_seq = 0
        self.reasons: deque[list] = deque()


class PagedRef:
    """A paged entry as the store knows it (purge of a priority queue)."""

    __slots__ = ("segment", "seq")

    def __init__(self, seq: int, segment: int) -> None:
        self.seq = seq
        self.segment = segment


class Pager:
    def __init__(self, vhost: str, name: str, lane_count: int) -> None:
        self._vhost = vhost
        self._name = name
        self._lane_count = lane_count
        self._paging = None
        self.cap = (sys.maxsize, sys.maxsize)
        # Past limit messages or bytes_limit body bytes in memory (the
        # transient_ limits for a message not in the store), further
        # messages are paged.
        self.limit = self.bytes_limit = sys.maxsize
        self.transient_limit = self.transient_bytes_limit = sys.maxsize
        self._lanes: list[Lane] | None = None  # made at the first page
        self.count = 0
        self.bytes = 0
        self.segments: Counter = Counter()  # store segment -> paged entries in it
        # The census counts the dead letters in memory; these are the rest.
        self.dead_letters: Counter = Counter()

    def adopt(self, settings) -> None:
        """New effective settings: a policy may set queue-mode or the
        in-memory limits."""
        cap = in_memory_cap(settings)
        if cap != self.cap:
            self.cap = cap
            if self._paging is not None:
                self.attach(self._paging)

    def attach(self, paging) -> None:
        """Page through `paging` from now on, at its limits (they change
        under memory pressure) within the queue's own cap."""
        self._paging = paging
        count, size = self.cap
        limit, bytes_limit = paging.limits(stored=True)
        self.limit, self.bytes_limit = min(limit, count), min(bytes_limit, size)
        limit, bytes_limit = paging.limits(stored=False)
        self.transient_limit = min(limit, count)
        self.transient_bytes_limit = min(bytes_limit, size)

    @property
    def attached(self) -> bool:
        return self._paging is not None

    def count_in(self, lane: int) -> int:
        return self._lanes[lane].count if self._lanes is not None else 0

    def top_lane(self) -> int:
        return max(i for i, lane in enumerate(self._lanes) if lane.count)

    # ---- decisions -------------------------------------------------------

    def past_threshold(self, in_memory: int, ready_bytes: int, stored: bool) -> bool:
        if stored:
            return in_memory >= self.limit or ready_bytes >= self.bytes_limit
        return in_memory >= self.transient_limit or ready_bytes >= self.transient_bytes_limit

    def fits(self, in_memory: int, ready_bytes: int, count: int, size: int,
             stored: bool) -> bool:
        if self.count:
            return False
        if stored:
            limit, bytes_limit = self.limit, self.bytes_limit
        else:
            limit, bytes_limit = self.transient_limit, self.transient_bytes_limit
        return in_memory + count <= limit and ready_bytes + size < bytes_limit

    def wants_refill(self, in_memory: int) -> bool:
        return self.count > 0 and in_memory < self.limit >> 1

    def excess(self, in_memory: int) -> int:
        return max(0, in_memory - self.limit)

    # ---- the page files --------------------------------------------------

    def _lane(self, index: int) -> Lane:
        if self._lanes is None:
            self._lanes = [Lane() for _ in range(self._lane_count)]
        return self._lanes[index]

    def _pages(self, lane: Lane):
        if lane.pages is None:
            lane.pages = self._paging.open()
        return lane.pages

    def page_out(self, entry: Entry, index: int) -> None:
        # A quorum delivery copy is rebuilt from its original when paged in.
        message = entry.message.origin or entry.message
        keys = message.routing_keys
        lane = self._lane(index)
        stored = ["E", self._vhost, self._name, entry.seq, message.exchange,
                  message.routing_key, message.header, message.body,
                  list(keys) if keys != (message.routing_key,) else None,
                  list(message.bcc) or None, entry.deadline]
        if message.annotations:
            stored.append(message.annotations)  # as the store writes them
        self._pages(lane).append([entry.redelivered, entry.returns, entry.segment,
                                  entry.failed, stored])
        self._track(lane, entry.seq, 1, len(message.body),
                    () if entry.segment is None else (entry.segment,))
        self._note_reason(lane, latest_reason(message))

    def page_stored(self, index: int, items: list) -> int:
        """Recovery: stored messages (storage.message_store.StoredEntry, in
        order) join lane `index` as they were stored; returns their body
        bytes."""
        lane = self._lane(index)
        # A counted delivery before the crash is a delivery that failed.
        self._pages(lane).append_encoded(
            ((item.delivered or item.deliveries > 0, item.deliveries, item.segment, item.failed),
             item.payload) for item in items)
        size = sum(item.body_size for item in items)
        self._track(lane, items[0].seq, len(items), size, (item.segment for item in items))
        for reason in recovered_reasons([item.payload for item in items],
                                        lambda index: items[index].record()[6]):
            self._note_reason(lane, reason)
        return size

    def _track(self, lane: Lane, first_seq: int, count: int, size: int, segments) -> None:
        """`count` entries of `lane` from `first_seq` on, of `size` body
        bytes and in store `segments`, were paged."""
        if not lane.count:
            lane.first_seq = first_seq
        lane.count += count
        self.count += count
        self.bytes += size
        self.segments.update(segments)

    def page_in(self, index: int, in_memory: int) -> list[Entry]:
        """The next paged entries of lane `index`, up to half the threshold
        in memory (in messages and in bytes)."""
        lane = self._lanes[index]
        room = max(1, (self.limit >> 1) - in_memory)
        byte_room = max(1, self.bytes_limit >> 1)
        routes: dict[tuple, tuple] = {}
        entries = []
        while room > 0 and byte_room > 0 and lane.count:
            records = lane.pages.read(min(room, 256))
            if not records:
                break
            for redelivered, returns, segment, failed, stored in records:
                (_, _, _, seq, exchange, routing_key, header, body, keys, bcc, deadline,
                 *annotations) = stored
                shared = routes.get((exchange, routing_key))
                if shared is None:
                    shared = routes[(exchange, routing_key)] = (
                        shortstr(exchange) + shortstr(routing_key), (routing_key,))
                message = Message(exchange, routing_key, shared[0], header, body,
                                  tuple(keys) if keys else shared[1])
                if bcc:
                    message.bcc = tuple(bcc)
                if annotations:
                    message.annotations = annotations[0]
                self._take_reason(lane)
                entry = Entry(seq, message)
                entry.redelivered = redelivered
                entry.deadline = deadline
                entry.returns = returns
                entry.failed = failed
                entry.segment = segment
                if segment is not None:
                    self.segments[segment] -= 1
                entries.append(entry)
                lane.count -= 1
                self.count -= 1
                self.bytes -= len(body)
                lane.first_seq = seq + 1
                room -= 1
                byte_room -= len(body)
        if not lane.count:
            lane.pages.clear()
        if not self.count:
            self.drop()
        return entries

    def _note_reason(self, lane: Lane, reason: str | None) -> None:
        runs = lane.reasons
        if runs and runs[-1][0] == reason:
            runs[-1][1] += 1
        else:
            runs.append([reason, 1])
        if reason is not None:
            self.dead_letters[reason] += 1

    def _take_reason(self, lane: Lane) -> None:
        """The lane's next paged message was read back."""
        runs = lane.reasons
        if not runs:
            return
        run = runs[0]
        run[1] -= 1
        if not run[1]:
            runs.popleft()
        reason = run[0]
        if reason is not None:
            dead_letters = self.dead_letters
            if dead_letters[reason] > 1:
                dead_letters[reason] -= 1
            else:
                dead_letters.pop(reason, None)

    def paged_refs(self):
        """What a purge tells the store: a FIFO queue's paged entries are
        all from its lane's first seq on, (first seq, None); a priority
        queue's lanes interleave with what is delivered, so they are read
        and named, (None, refs).  Reads the lanes to their end."""
        if len(self._lanes) == 1:
            return self._lanes[0].first_seq, None
        refs = []
        for lane in self._lanes:
            while lane.count and (records := lane.pages.read(4096)):
                refs.extend(PagedRef(stored[3], segment)
                            for _, _, segment, _, stored in records if segment is not None)
                lane.count -= len(records)
        return None, refs

    def drop(self) -> None:
        for lane in self._lanes or ():
            if lane.pages is not None:
                lane.pages.clear()
            lane.count = 0
            lane.reasons.clear()
        self.count = self.bytes = 0
        self.segments.clear()
        self.dead_letters.clear()
