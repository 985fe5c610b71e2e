"""The queue's paging part: past a threshold (messages or body bytes), the
tail of a long queue waits in a page file (storage/paging.py) and nothing
of it stays in memory; it is read back in order as the head drains.  Every
paged entry's seq is at least `paged_from`, and nothing out of the page
file (ready, delayed or delivered) has one that high."""

from __future__ import annotations

import sys

from ...wire.frames import shortstr
from ..message import Entry, Message


# A lazy queue (x-queue-mode: lazy) keeps only this much in memory, for
# every message, transient ones included.
LAZY_MESSAGES = 256
LAZY_BYTES = 1 << 20


def in_memory_cap(arguments) -> tuple[int, int]:
    """(messages, body bytes) the queue's arguments allow in memory:
    x-queue-mode lazy, or a quorum queue's x-max-in-memory-length/-bytes."""
    count = size = sys.maxsize
    if arguments.get("x-queue-mode") == "lazy":
        count, size = LAZY_MESSAGES, LAZY_BYTES
    if "x-max-in-memory-length" in arguments:
        count = min(count, max(1, arguments["x-max-in-memory-length"]))
    if "x-max-in-memory-bytes" in arguments:
        size = min(size, max(1, arguments["x-max-in-memory-bytes"]))
    return count, size


class PagingPart:
    def attach_paging(self, paging) -> None:
        self.paging = paging
        count, size = self.in_memory_cap
        limit, bytes_limit = paging.limits(stored=True)
        self.page_limit, self.page_bytes_limit = min(limit, count), min(bytes_limit, size)
        limit, bytes_limit = paging.limits(stored=False)
        self.transient_page_limit = min(limit, count)
        self.transient_page_bytes_limit = min(bytes_limit, size)

    def pages_next(self, stored: bool = True) -> bool:
        """A message joining the tail now is paged: the queue is past its
        threshold for such a message, or (to keep the order) something is
        paged already."""
        if self.paged_count:
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
        if self.pages_next(entry.segment is not None):
            self._page_out(entry)
        else:
            self.ready.append(entry)
        self.ready_bytes += size

    def _page_out(self, entry: Entry) -> None:
        # A quorum delivery copy is rebuilt from its original when paged in.
        message = entry.message.origin or entry.message
        keys = message.routing_keys
        self._pages().append([
            entry.redelivered, entry.returns, entry.segment,
            ["E", self.vhost, self.name, entry.seq, message.exchange, message.routing_key,
             message.header, message.body,
             list(keys) if keys != (message.routing_key,) else None,
             list(message.bcc) or None, entry.deadline]])
        self._track_paged(entry.seq, 1, len(message.body),
                          () if entry.segment is None else (entry.segment,))

    def page_stored(self, items: list) -> None:
        """Recovery: stored messages (storage.message_store.StoredEntry, in
        order) join the paged tail as they were stored."""
        # A counted delivery before the crash is a delivery that failed.
        self._pages().append_encoded(
            ((item.delivered or item.deliveries > 0, item.deliveries, item.segment),
             item.payload) for item in items)
        size = sum(item.body_size for item in items)
        self._track_paged(items[0].seq, len(items), size, (item.segment for item in items))
        self.ready_bytes += size
        if any(item.deadline is not None for item in items):
            self.saw_message_ttl = True

    def _pages(self):
        if self.pages is None:
            self.pages = self.paging.open()
        return self.pages

    def _track_paged(self, first_seq: int, count: int, size: int, segments) -> None:
        """`count` entries from `first_seq` on, of `size` body bytes and in
        store `segments`, were paged."""
        if not self.paged_count:
            self.paged_from = first_seq
        self.paged_count += count
        self.paged_bytes += size
        self.paged_segments.update(segments)

    def _page_in(self) -> None:
        """The next paged messages join the in-memory head, up to half the
        threshold (in messages and in bytes)."""
        ready = self.ready
        room = max(1, (self.page_limit >> 1) - len(ready))
        byte_room = max(1, self.page_bytes_limit >> 1)
        routes: dict[tuple, tuple] = {}
        while room > 0 and byte_room > 0 and self.paged_count:
            records = self.pages.read(min(room, 256))
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
                self.paged_count -= 1
                self.paged_bytes -= len(body)
                self.paged_from = seq + 1
                room -= 1
                byte_room -= len(body)
        if not self.paged_count:
            self._drop_pages()

    def page_out_tail(self) -> int:
        """Memory is short: a classic queue's in-memory tail past the
        (pressure) threshold goes to disk.  Only while nothing is paged
        yet (the page file is read in order) and only where the head is in
        seq order (quorum queues put returned messages at the head)."""
        ready = self.ready
        if self.paged_count or self.is_quorum or self.paging is None or not ready.pages:
            return 0
        keep = self.page_limit
        count = len(ready) - keep
        if count <= 0:
            return 0
        if any(item[2].seq >= ready[keep].seq for item in self.scheduled):
            return 0  # a recovered delayed message is newer than the tail
        tail = [ready.pop() for _ in range(count)]
        for entry in reversed(tail):
            self._page_out(entry)
        return count

    def _drop_pages(self) -> None:
        """Nothing is paged any more: the page file goes."""
        if self.pages is not None:
            self.pages.clear()
        self.paged_count = self.paged_bytes = 0
        self.paged_segments.clear()
