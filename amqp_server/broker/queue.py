"""A queue: ready messages in order, consumers served round robin.

Delivery order follows RabbitMQ's classic queue: messages leave in publish
order, a requeued message goes back to the position it came from (ordered by
its per-queue sequence number), and consumers with spare prefetch take turns.
"""

from __future__ import annotations

import bisect
from collections import deque
from operator import attrgetter

from ..wire.table import FieldTable
from .message import Entry, Message

_SEQ = attrgetter("seq")


class Queue:
    is_queue = True

    def __init__(self, vhost: str, name: str, durable: bool = False,
                 exclusive_owner: object | None = None, auto_delete: bool = False,
                 arguments: FieldTable | None = None) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments or FieldTable()
        self.ready: deque[Entry] = deque()
        self.consumers: deque = deque()
        self.exclusive_consumer = None
        self.had_consumers = False
        self.unacked = 0
        self.next_seq = 0
        self.deleted = False
        # (source exchange name, binding key) -> Binding, for cleanup on delete
        self.bindings: dict[tuple, object] = {}
        self.published = 0
        self.delivered = 0
        self.acked = 0

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        return len(self.ready)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def enqueue(self, message: Message) -> None:
        entry = Entry(self.next_seq, message)
        self.next_seq += 1
        self.published += 1
        self.ready.append(entry)
        if self.consumers:
            self.dispatch()

    def dispatch(self) -> None:
        """Hand ready messages to consumers that have room, in turn."""
        ready = self.ready
        consumers = self.consumers
        misses = 0
        while ready and consumers and misses < len(consumers):
            consumer = consumers[0]
            consumers.rotate(-1)
            if consumer.can_take():
                entry = ready.popleft()
                self.unacked += 1
                self.delivered += 1
                entry.delivery_count += 1
                consumer.take(self, entry)
                misses = 0
            else:
                misses += 1

    def take_one(self) -> Entry | None:
        """basic.get: the head message, counted as delivered."""
        if not self.ready:
            return None
        entry = self.ready.popleft()
        self.unacked += 1
        self.delivered += 1
        entry.delivery_count += 1
        return entry

    def settle(self, count: int = 1) -> None:
        """Delivered messages acknowledged (or discarded) for good."""
        self.unacked -= count
        self.acked += count

    def requeue(self, entries: list[Entry]) -> None:
        """Return delivered messages to their original positions."""
        if not entries:
            return
        entries = sorted(entries, key=_SEQ)
        self.unacked -= len(entries)
        ready = self.ready
        for entry in entries:
            entry.redelivered = True
        if not ready or entries[-1].seq < ready[0].seq:
            ready.extendleft(reversed(entries))
        else:
            for entry in entries:
                ready.insert(bisect.bisect_left(ready, entry.seq, key=_SEQ), entry)
        if self.consumers:
            self.dispatch()

    def purge(self) -> int:
        count = len(self.ready)
        self.ready.clear()
        return count

    def add_consumer(self, consumer, exclusive: bool) -> None:
        self.consumers.append(consumer)
        self.had_consumers = True
        if exclusive:
            self.exclusive_consumer = consumer
        self.dispatch()

    def remove_consumer(self, consumer) -> None:
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        if self.exclusive_consumer is consumer:
            self.exclusive_consumer = None

    @property
    def auto_delete_due(self) -> bool:
        """An auto-delete queue goes when its last consumer does (RabbitMQ)."""
        return self.auto_delete and self.had_consumers and not self.consumers
