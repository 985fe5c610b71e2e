"""A queue: ready messages in order, consumers served round robin, and the
rules that make messages leave without being consumed (TTL, length limits,
delivery limits).

Delivery order follows RabbitMQ's classic queue: messages leave in publish
order, a requeued message goes back to the position it came from (ordered by
its per-queue sequence number), and consumers with spare prefetch take turns.
A quorum queue puts returned messages at the head instead and counts the
returns, as rabbit_fifo does.

A message that comes back unsuccessfully is counted whenever a rule needs
the count (quorum delivery limit, Artemis max-delivery-attempts and
redelivery delay, Qpid's maximum delivery count; `dlx/redelivery.py`
decides).  A delayed one waits in `scheduled`, invisible to consumers, while
every other message keeps flowing.

What happens to a message that dies is decided in `dlx/`; the queue only
says which messages died and why, through `dead_letter_sink`.
"""

from __future__ import annotations

import itertools
import random
import sys
from collections import Counter
from typing import Callable

from policies.effective import QueueSettings, resolve
from dlx import limits

from ...wire.table import FieldTable
from ..message import Entry, Message
from ..timers import Alarm, Timers, now_ms
from .dispatch import PriorityGroups, RoundRobin, SingleActive
from .limits import LimitsPart
from .ordering import ready_for
from .outcome import ACCEPTED
from .paging import PagingPart, in_memory_cap
from .redelivery import RedeliveryPart
from .selection import SelectionPart


def _discard(queue: "Queue", messages: list[Message], reason: str) -> None:
    """The sink of a queue not in a virtual host: deaths are only counted."""
    queue.stats["dropped"][("no_dlx", reason)] += len(messages)


class Queue(LimitsPart, RedeliveryPart, PagingPart, SelectionPart):
    is_queue = True
    # Collision-avoidance jitter needs no state of its own per queue (a
    # Random is 2.5 KB); tests give a queue its own, seeded.
    rng = random.Random()

    def __init__(self, vhost: str, name: str, durable: bool = False,
                 exclusive_owner: object | None = None, auto_delete: bool = False,
                 arguments: FieldTable | None = None,
                 settings: tuple | None = None, timers: Timers | None = None) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments or FieldTable()
        # (effective settings, user policy, operator policy) from the vhost
        settings, self.policy, self.operator_policy = settings or (
            resolve(self.arguments), None, None)
        # Arguments only (no policy key): fixed for the queue's life.
        self.ready = ready_for(settings.max_priority)
        self.ready_bytes = 0
        self.consumers = (SingleActive(by_priority=not settings.is_quorum)
                          if settings.single_active_consumer else RoundRobin())
        self.exclusive_consumer = None
        self.had_consumers = False
        self.consumers_gone_at: float | None = None  # when the last one left (ms)
        self.auto_created = False  # an Artemis DLQ./EXP. queue (broker/auto_created.py)
        self.unacked = 0
        self.next_seq = 0
        self.deleted = False
        # (source exchange name, binding key) -> Binding, for cleanup on delete
        self.bindings: dict[tuple, object] = {}
        self.published = 0
        self.delivered = 0
        self.acked = 0
        self.stats = {"dead_lettered": Counter(), "dropped": Counter(), "expired": 0,
                      "rejected_publishes": 0}
        self.dead_letter_sink: Callable[[Queue, list[Message], str], None] = _discard
        self.timers = timers or Timers()
        self._ttl_alarm = Alarm(self.timers, self._on_ttl_alarm)
        # Quorum at-least-once: (message, reason) not yet accepted by a target.
        self.dlx_pending: list[tuple[Message, str]] = []
        # Delayed redeliveries: a heap of (due ms, tie, entry).
        self.scheduled: list[tuple[float, int, Entry]] = []
        self._scheduled_ties = itertools.count()
        self._redelivery_alarm = Alarm(self.timers, self._on_redelivery_alarm)
        # x-expires: the virtual host deletes a queue unused for that long.
        self.on_unused: Callable[[Queue], None] | None = None
        self.last_used = now_ms()
        self._expiry_timer = None
        self.saw_message_ttl = False
        self.settings = None
        # The message store, for a durable queue on a broker with a data dir.
        self.store = None
        # Paging (storage/paging.py): past page_limit messages or
        # page_bytes_limit body bytes in memory (the transient_ limits for a
        # message not in the store), further messages wait in the page
        # files of `lanes` (paging.Lane, made at the first) and nothing of
        # them stays in memory.
        self.paging = None
        self.in_memory_cap = in_memory_cap(settings)
        self.page_limit = self.page_bytes_limit = sys.maxsize
        self.transient_page_limit = self.transient_page_bytes_limit = sys.maxsize
        self.lanes = None
        self.paged_count = 0
        self.paged_bytes = 0
        self.paged_segments: Counter = Counter()  # store segment -> paged entries in it
        self.apply_settings(settings)

    def apply_settings(self, settings: QueueSettings) -> None:
        """Adopt new effective settings (declare, or a policy change)."""
        previous, self.settings = self.settings, settings
        self.is_quorum = settings.is_quorum
        self.redelivery = settings.redelivery
        # Returns are counted only where some rule reads the count.
        self.counts_returns = self.is_quorum or self.redelivery.active
        # A plain queue skips every per-message rule on its hot path.
        self.plain = not (settings.message_ttl is not None or settings.has_length_limit
                          or settings.is_quorum or settings.clamps_expiry)
        if settings.clamps_expiry:
            self.saw_message_ttl = True  # deadlines no longer grow with the queue
        if settings.has_length_limit and settings.overflow == limits.DROP_HEAD:
            self._drop_head()
        if previous is not None and settings.expires != previous.expires:
            self.touch()
        cap = in_memory_cap(settings)  # a policy may set queue-mode or the in-memory limits
        if cap != self.in_memory_cap:
            self.in_memory_cap = cap
            if self.paging is not None:
                self.attach_paging(self.paging)

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        """Ready messages, in memory and paged."""
        return len(self.ready) + self.paged_count

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def enqueue(self, message: Message) -> str:
        """Take a routed message; returns ACCEPTED or REJECTED (overflow)."""
        if self.plain and message.ttl is None:
            entry = Entry(self.next_seq, message)
            self.next_seq += 1
            self.published += 1
            if self.store is not None:
                self._persist(entry, message)
            consumers = self.consumers
            if consumers and not self.ready:
                # The hot path: straight to the next consumer with room.
                consumer = consumers.next_with_room()
                if consumer is not None:
                    # _deliver_to, inlined: this runs once per publish.
                    self.unacked += 1
                    self.delivered += 1
                    if entry.segment is not None:
                        self.store.delivered(self.vhost, self.name, entry)
                    consumer.take(self, entry)
                    return ACCEPTED
            # Messages already waiting mean no consumer has room: whatever
            # frees room (ack, qos, flow, a flushed socket) dispatches.
            self._append(entry, len(message.body))
            return ACCEPTED
        return self._enqueue_checked(message)

    def enqueue_run(self, messages: list) -> None:
        """Messages published back to back with the same exchange, routing
        key and properties (so no per-message TTL) into a plain queue,
        which never refuses one: `enqueue` for each, with the deliveries to
        one consumer written together."""
        seq = self.next_seq
        count = len(messages)
        entries = list(map(Entry, range(seq, seq + count), messages))
        self.next_seq = seq + count
        self.published += count
        if self.store is not None:
            for entry in entries:
                self._persist(entry, entry.message)
        if self.consumers and not self.ready:
            entries = self._hand_out(entries)
            if not entries:
                return
        sizes = [len(entry.message.body) for entry in entries]
        total = sum(sizes)
        if self._fits(len(entries), total, entries[0].segment is not None):
            self.ready.extend(entries)
            self.ready_bytes += total
        else:
            for entry, size in zip(entries, sizes):
                self._append(entry, size)

    def _hand_out(self, entries: list) -> list:
        """Give entries to consumers with room, in turn; returns the rest."""
        consumers = self.consumers
        sole = consumers.sole()
        if sole is not None:
            room = sole.room()
            if room:
                self._deliver_to(sole, entries[:room])
            return entries[room:]
        for index, entry in enumerate(entries):
            consumer = consumers.next_with_room()
            if consumer is None:
                return entries[index:]
            self._deliver_to(consumer, [entry])
        return []

    def _deliver_to(self, consumer, entries: list) -> None:
        count = len(entries)
        self.unacked += count
        self.delivered += count
        if self.store is not None:
            for entry in entries:
                if entry.segment is not None:
                    self.store.delivered(self.vhost, self.name, entry)
        if count == 1:
            consumer.take(self, entries[0])
        else:
            consumer.take_many(self, entries)

    def _pop(self) -> Entry:
        entry = self.ready.popleft()
        self.ready_bytes -= len(entry.message.body)
        if not self.ready and self.paged_count:
            self._page_in()  # an empty head means nothing is paged (the fast path relies on it)
        return entry

    def _persist(self, entry: Entry, message: Message) -> None:
        """A persistent message on a durable queue goes to the store."""
        if message.persistent:
            message.stored_gen = self.store.enqueue(self.vhost, self.name, entry, message)

    def _forget(self, entries) -> None:
        """Entries left for good: the store drops them too."""
        if self.store is not None:
            self.store.remove(self.vhost, self.name, entries)

    def dispatch(self) -> None:
        """Hand ready messages to consumers that have room, in turn."""
        if not self.plain or self.saw_message_ttl:
            now = now_ms()
            self.expire(now)
            self._dispatch(now)
        else:
            self._dispatch()

    def _dispatch(self, now: float | None = None) -> None:
        """The delivery loop: a single consumer takes batches, several take
        turns; with `now`, an entry that expired behind the head dies
        instead of being delivered (checked one at a time)."""
        sole = self.consumers.sole() if now is None else None
        if sole is not None:
            self._dispatch_batches(sole)
        else:
            self._dispatch_in_turn(now)
        if self.paged_count and len(self.ready) < self.page_limit >> 1:
            self._page_in()  # the next batch, before consumers run dry

    def _dispatch_in_turn(self, now: float | None) -> None:
        """One message at a time to each consumer with room, in turn."""
        ready = self.ready
        consumers = self.consumers
        while consumers:
            if not ready:
                if not self.paged_count:
                    break
                self._page_in()
            consumer = consumers.next_with_room()
            if consumer is None:
                break
            if now is not None and ready[0].deadline is not None and now >= ready[0].deadline:
                self.expire(now)
                continue
            entry = ready.popleft()
            self.ready_bytes -= len(entry.message.body)
            self._deliver_to(consumer, [entry])

    def _dispatch_batches(self, consumer) -> None:
        """A single consumer takes what it has room for in batches, each
        written at once and bounded by the connection's output room."""
        ready = self.ready
        popleft = ready.popleft
        while True:
            room = consumer.room()
            if not room:
                return
            if not ready:
                if not self.paged_count:
                    return
                self._page_in()
            budget = consumer.output_room()
            batch = []
            taken_bytes = 0
            for _ in range(min(room, len(ready))):
                entry = popleft()
                batch.append(entry)
                taken_bytes += len(entry.message.body)
                if taken_bytes >= budget:
                    break
            self.ready_bytes -= taken_bytes
            self._deliver_to(consumer, batch)

    def take_one(self) -> Entry | None:
        """basic.get: the head message, counted as delivered."""
        if self.settings.expires is not None:
            self.touch()
        if not self.plain or self.saw_message_ttl:
            self.expire(now_ms())
        if not self.message_count:
            return None
        entry = self._pop()
        self.unacked += 1
        self.delivered += 1
        if entry.segment is not None:
            self.store.delivered(self.vhost, self.name, entry)
        return entry

    def settle(self, entries) -> None:
        """Delivered messages acknowledged (or discarded) for good."""
        count = len(entries)
        self.unacked -= count
        self.acked += count
        if self.store is not None:
            self.store.remove(self.vhost, self.name, entries)

    def reject(self, entries: list[Entry]) -> None:
        """Delivered messages rejected without requeue: they die 'rejected'."""
        self.settle(entries)
        self.dead_letter_sink(self, [entry.message for entry in entries], "rejected")

    def purge(self) -> int:
        """Ready and delayed messages go (those out for delivery stay)."""
        count = self.message_count + len(self.scheduled)
        self._forget(self.ready)
        self._forget(self.waiting)
        self._forget_paged()
        self._drop_pages()
        self.ready.clear()
        self.scheduled.clear()
        self.ready_bytes = 0
        return count

    def close(self) -> None:
        """Deleted: stop timers.  Its messages are not dead-lettered."""
        if self.store is not None:
            self.store.drop_below(self.vhost, self.name, self.next_seq,
                                  [*self.ready, *self.waiting], self.paged_segments)
        self._drop_pages()
        self.deleted = True
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._expiry_timer = None
        self._ttl_alarm.cancel()
        self._redelivery_alarm.cancel()
        self.dlx_pending.clear()

    def add_consumer(self, consumer, exclusive: bool) -> None:
        if consumer.priority and isinstance(self.consumers, RoundRobin):
            self.consumers = PriorityGroups.of(self.consumers)
        self.consumers.add(consumer)
        self.had_consumers = True
        if exclusive:
            self.exclusive_consumer = consumer
        self.dispatch()

    def remove_consumer(self, consumer) -> None:
        if not self.consumers.discard(consumer):
            return
        if self.exclusive_consumer is consumer:
            self.exclusive_consumer = None
        if not self.consumers:
            self.consumers_gone_at = now_ms()
            self.touch()
        elif self.ready and not consumer.unacked:
            # A single active consumer's successor starts now; if the one
            # that went still holds messages, once they are settled or back
            # (first in line), as in RabbitMQ.
            self.dispatch()

    @property
    def auto_delete_due(self) -> bool:
        """An auto-delete queue goes when its last consumer does (RabbitMQ)."""
        return self.auto_delete and self.had_consumers and not self.consumers
