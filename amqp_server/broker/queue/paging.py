"""The queue's paging part: past a threshold (messages or body bytes), the
tail of a long queue waits in a page file (storage/paging.py) and nothing
of it stays in memory; it is read back in order as the head drains.

Paged messages go in lanes, each read back in its own order: a FIFO queue
has one, a priority queue one per priority (as rabbit_priority_queue keeps
a backing queue per priority), so a message paged at a high priority is
read back before lower ones in memory are served (ordering.PriorityReady
asks for it)."""

from __future__ import annotations

import sys

from ...wire.frames import shortstr
from ...wire.properties import message_priority
from ..message import HEADER_PREFIX, Entry, Message


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
    (ready, delayed or delivered) has one that high."""

    __slots__ = ("pages", "count", "first_seq")

    def __init__(self) -> None:
        self.pages = None
        self.count = 0
        self.first_seq = 0


class _PagedRef:
    """A paged entry as the store knows it (purge of a priority queue)."""

    __slots__ = ("seq", "segment")

    def __init__(self, seq: int, segment: int) -> None:
        self.seq = seq
        self.segment = segment


class PagingPart:
    def attach_paging(self, paging) -> None:
        self.paging = paging
        count, size = self.in_memory_cap
        limit, bytes_limit = paging.limits(stored=True)
        self.page_limit, self.page_bytes_limit = min(limit, count), min(bytes_limit, size)
        limit, bytes_limit = paging.limits(stored=False)
        self.transient_page_limit = min(limit, count)
        self.transient_page_bytes_limit = min(bytes_limit, size)

    def pages_next(self, stored: bool = True, entry: Entry | None = None) -> bool:
        """A message joining the tail now is paged: the queue is past its
        threshold for such a message, or (to keep the order) something is
        paged already in its lane (any lane, without an `entry`)."""
        if self.paged_count and (entry is None or self.lanes[self.ready.lane_of(entry)].count):
            return True
        if not self.ready.pages:
            return False
        if stored:
            return len(self.ready) >= self.page_limit or self.ready_bytes >= self.page_bytes_limit
        return (len(self.ready) >= self.transient_page_limit
                or self.ready_bytes >= self.transient_page_bytes_limit)

    def _fits(self, count: int, size: int, stored: bool) -> bool:
        """`count` more messages of `size` bytes in all join the tail in
        memory: none of them would be paged (see `pages_next`)."""
        if self.paged_count:
            return False
        if stored:
            limit, bytes_limit = self.page_limit, self.page_bytes_limit
        else:
            limit, bytes_limit = self.transient_page_limit, self.transient_page_bytes_limit
        return len(self.ready) + count <= limit and self.ready_bytes + size < bytes_limit

    def _append(self, entry: Entry, size: int) -> None:
        if self.pages_next(entry.segment is not None, entry):
            self._page_out(entry)
        else:
            self.ready.append(entry)
        self.ready_bytes += size

    def _lane(self, index: int) -> Lane:
        if self.lanes is None:
            self.lanes = [Lane() for _ in range(self.ready.lane_count)]
            self.ready.watch(self.lanes, self._page_in)
        return self.lanes[index]

    def _page_out(self, entry: Entry) -> None:
        # A quorum delivery copy is rebuilt from its original when paged in.
        message = entry.message.origin or entry.message
        keys = message.routing_keys
        lane = self._lane(self.ready.lane_of(entry))
        self._pages(lane).append([
            entry.redelivered, entry.returns, entry.segment,
            ["E", self.vhost, self.name, entry.seq, message.exchange, message.routing_key,
             message.header, message.body,
             list(keys) if keys != (message.routing_key,) else None,
             list(message.bcc) or None, entry.deadline]])
        self._track_paged(lane, entry.seq, 1, len(message.body),
                          () if entry.segment is None else (entry.segment,))

    def page_stored(self, items: list) -> None:
        """Recovery: stored messages (storage.message_store.StoredEntry, in
        order) join the paged tail as they were stored."""
        if self.ready.lane_count == 1:
            by_lane = {0: items}
        else:
            by_lane = {}
            for item in items:
                header = item.record()[6]
                level = self.ready.level_of(message_priority(header, HEADER_PREFIX))
                by_lane.setdefault(level, []).append(item)
        for index, lane_items in by_lane.items():
            lane = self._lane(index)
            # A counted delivery before the crash is a delivery that failed.
            self._pages(lane).append_encoded(
                ((item.delivered or item.deliveries > 0, item.deliveries, item.segment),
                 item.payload) for item in lane_items)
            size = sum(item.body_size for item in lane_items)
            self._track_paged(lane, lane_items[0].seq, len(lane_items), size,
                              (item.segment for item in lane_items))
            self.ready_bytes += size
        if any(item.deadline is not None for item in items):
            self.saw_message_ttl = True

    def _pages(self, lane: Lane):
        if lane.pages is None:
            lane.pages = self.paging.open()
        return lane.pages

    def _track_paged(self, lane: Lane, first_seq: int, count: int, size: int,
                     segments) -> None:
        """`count` entries of `lane` from `first_seq` on, of `size` body
        bytes and in store `segments`, were paged."""
        if not lane.count:
            lane.first_seq = first_seq
        lane.count += count
        self.paged_count += count
        self.paged_bytes += size
        self.paged_segments.update(segments)

    def _page_in(self, index: int | None = None) -> None:
        """The next paged messages of a lane (without `index`, the highest
        lane with any) join the in-memory head, up to half the threshold
        (in messages and in bytes)."""
        lanes = self.lanes
        if index is None:
            index = max(i for i, lane in enumerate(lanes) if lane.count)
        lane = lanes[index]
        ready = self.ready
        room = max(1, (self.page_limit >> 1) - len(ready))
        byte_room = max(1, self.page_bytes_limit >> 1)
        routes: dict[tuple, tuple] = {}
        while room > 0 and byte_room > 0 and lane.count:
            records = lane.pages.read(min(room, 256))
            if not records:
                break
            for redelivered, returns, segment, stored in records:
                _, _, _, seq, exchange, routing_key, header, body, keys, bcc, deadline = stored
                shared = routes.get((exchange, routing_key))
                if shared is None:
                    shared = routes[(exchange, routing_key)] = (
                        shortstr(exchange) + shortstr(routing_key), (routing_key,))
                message = Message(exchange, routing_key, shared[0], header, body,
                                  tuple(keys) if keys else shared[1])
                if bcc:
                    message.bcc = tuple(bcc)
                entry = Entry(seq, message)
                entry.redelivered = redelivered
                entry.deadline = deadline
                entry.returns = returns
                entry.segment = segment
                if returns and self.is_quorum:
                    entry.message = message.with_delivery_count(returns)
                if segment is not None:
                    self.paged_segments[segment] -= 1
                ready.append(entry)
                lane.count -= 1
                self.paged_count -= 1
                self.paged_bytes -= len(body)
                lane.first_seq = seq + 1
                room -= 1
                byte_room -= len(body)
        if not lane.count:
            lane.pages.clear()
        if not self.paged_count:
            self._drop_pages()

    def page_out_tail(self) -> int:
        """Memory is short: a classic queue's in-memory tail past the
        (pressure) threshold goes to disk.  Only while nothing is paged
        yet (a lane is read in order) and only where the head is in seq
        order (quorum queues put returned messages at the head)."""
        ready = self.ready
        if self.paged_count or self.is_quorum or self.paging is None:
            return 0
        keep = self.page_limit
        count = len(ready) - keep
        if count <= 0:
            return 0
        if self.scheduled and (ready.lane_count > 1 or any(
                item[2].seq >= ready[keep].seq for item in self.scheduled)):
            return 0  # a delayed message could come back behind paged newer ones
        # The newest of the lowest priority first: each lane's part is a
        # tail of its level, paged oldest first.
        tail = [ready.pop() for _ in range(count)]
        for entry in reversed(tail):
            self._page_out(entry)
        return count

    def _forget_paged(self) -> None:
        """Purge: the store forgets every paged entry.  A FIFO queue's are
        all from its lane's first seq on; a priority queue's lanes
        interleave with what is delivered, so they are read and named."""
        if not self.paged_count or self.store is None:
            return
        if len(self.lanes) == 1:
            self.store.drop_from(self.vhost, self.name, self.lanes[0].first_seq,
                                 self.paged_segments)
            return
        refs = []
        for lane in self.lanes:
            while lane.count and (records := lane.pages.read(4096)):
                refs.extend(_PagedRef(stored[3], segment)
                            for _, _, segment, stored in records if segment is not None)
                lane.count -= len(records)
        self.store.remove(self.vhost, self.name, refs)

    def _drop_pages(self) -> None:
        """Nothing is paged any more: the page files go."""
        for lane in self.lanes or ():
            if lane.pages is not None:
                lane.pages.clear()
            lane.count = 0
        self.paged_count = self.paged_bytes = 0
        self.paged_segments.clear()
