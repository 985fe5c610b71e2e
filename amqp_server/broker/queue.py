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

import bisect
import heapq
import itertools
import random
import sys
from collections import Counter, deque
from operator import attrgetter
from typing import Callable

from dlx import limits
from dlx.expiry import clamp_ttl, effective_ttl
from dlx.redelivery import DEAD, LATER, after_return
from policies.effective import QueueSettings, resolve

from ..wire.frames import shortstr
from ..wire.table import FieldTable
from .message import Entry, Message
from .timers import Alarm, Timers, now_ms

_SEQ = attrgetter("seq")

ACCEPTED = "accepted"
REJECTED = "rejected"


def _discard(queue: "Queue", messages: list[Message], reason: str) -> None:
    """The sink of a queue not in a virtual host: deaths are only counted."""
    queue.stats["dropped"][("no_dlx", reason)] += len(messages)


class Queue:
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
        self.ready: deque[Entry] = deque()
        self.ready_bytes = 0
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
        # message not in the store), further messages wait in `pages` and
        # nothing of them stays in memory.  Every paged entry's seq is at
        # least `paged_from`, and nothing out of the page file (ready,
        # delayed or delivered) has one that high.
        self.paging = None
        self.page_limit = self.page_bytes_limit = sys.maxsize
        self.transient_page_limit = self.transient_page_bytes_limit = sys.maxsize
        self.pages = None
        self.paged_count = 0
        self.paged_bytes = 0
        self.paged_from = 0
        self.paged_segments: Counter = Counter()  # store segment -> paged entries in it
        # (effective settings, user policy, operator policy) from the vhost
        settings, self.policy, self.operator_policy = settings or (
            resolve(self.arguments), None, None)
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

    # ---- state ---------------------------------------------------------

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

    # ---- arriving ------------------------------------------------------

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
                for _ in range(len(consumers)):
                    consumer = consumers[0]
                    consumers.rotate(-1)
                    if consumer.can_take():
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
        if len(consumers) == 1:
            room = consumers[0].room()
            if room:
                self._deliver_to(consumers[0], entries[:room])
            return entries[room:]
        for index, entry in enumerate(entries):
            for _ in range(len(consumers)):
                consumer = consumers[0]
                consumers.rotate(-1)
                if consumer.can_take():
                    self._deliver_to(consumer, [entry])
                    break
            else:
                return entries[index:]
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

    def _enqueue_checked(self, message: Message) -> str:
        settings = self.settings
        if settings.has_length_limit:
            verdict = limits.publish_verdict(
                settings.overflow, self.message_count + len(self.dlx_pending), self.ready_bytes,
                len(message.body), settings.max_length, settings.max_length_bytes)
            if verdict != limits.ACCEPT:
                self.stats["rejected_publishes"] += 1
                if verdict == limits.REJECT_DLX:
                    self.dead_letter_sink(self, [message], "maxlen")
                return REJECTED
        now = now_ms()
        entry = Entry(self.next_seq, message)
        ttl = effective_ttl(settings.message_ttl, message.ttl)
        if settings.clamps_expiry:
            ttl = clamp_ttl(ttl, settings.expiry_delay, settings.min_expiry_delay,
                            settings.max_expiry_delay)
        entry.deadline = None if ttl is None else now + ttl
        if message.ttl is not None:
            self.saw_message_ttl = True
        if self.store is not None:
            self._persist(entry, message)
        self.next_seq += 1
        self.published += 1
        was_empty = not self.ready
        self._append(entry, len(message.body))
        if self.consumers and was_empty:
            # A consumer waiting for it gets it even with a TTL of 0
            # (RabbitMQ's attempt_delivery comes before any expiry check).
            self._dispatch()
        if settings.has_length_limit and settings.overflow == limits.DROP_HEAD:
            self._drop_head()
        if self.ready and self.ready[0].deadline is not None:
            self.expire(now)
        return ACCEPTED

    def _drop_head(self) -> None:
        settings = self.settings
        dropped = []
        while self.message_count and limits.over_limit(
                self.message_count + len(self.dlx_pending), self.ready_bytes,
                settings.max_length, settings.max_length_bytes):
            dropped.append(self._pop())
        if dropped:
            self._forget(dropped)
            self.dead_letter_sink(self, [entry.message for entry in dropped], "maxlen")

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

    # ---- paging --------------------------------------------------------

    def attach_paging(self, paging) -> None:
        self.paging = paging
        self.page_limit, self.page_bytes_limit = paging.limits(stored=True)
        self.transient_page_limit, self.transient_page_bytes_limit = paging.limits(stored=False)

    def pages_next(self, stored: bool = True) -> bool:
        """A message joining the tail now is paged: the queue is past its
        threshold for such a message, or (to keep the order) something is
        paged already."""
        if self.paged_count:
            return True
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

    # A paged entry is [redelivered, returns, segment, message], the message
    # in the message store's own "E" record shape, so recovery copies a
    # stored record into a page file without decoding it again.

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
        if self.paged_count or self.is_quorum or self.paging is None:
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

    # ---- leaving -------------------------------------------------------

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
        if now is None and len(self.consumers) == 1:
            self._dispatch_batches(self.consumers[0])
        else:
            self._dispatch_in_turn(now)
        if self.paged_count and len(self.ready) < self.page_limit >> 1:
            self._page_in()  # the next batch, before consumers run dry

    def _dispatch_in_turn(self, now: float | None) -> None:
        """One message at a time to each consumer with room, in turn."""
        ready = self.ready
        consumers = self.consumers
        misses = 0
        while consumers and misses < len(consumers):
            if not ready:
                if not self.paged_count:
                    break
                self._page_in()
            consumer = consumers[0]
            consumers.rotate(-1)
            if consumer.can_take():
                if now is not None and ready[0].deadline is not None and now >= ready[0].deadline:
                    self.expire(now)
                    continue
                entry = ready.popleft()
                self.ready_bytes -= len(entry.message.body)
                self._deliver_to(consumer, [entry])
                misses = 0
            else:
                misses += 1

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

    def requeue(self, entries: list[Entry], by_client: bool = True) -> None:
        """Delivered messages come back: nack/reject with requeue and recover
        (`by_client`), or their channel closed.  Where returns are counted, a
        message may die, wait out a redelivery delay, or come straight back."""
        if not entries:
            return
        self.unacked -= len(entries)
        if self.counts_returns:
            entries = self._count_returns(entries, by_client)
            if not entries:
                return
        self._put_back(entries)

    def _put_back(self, entries: list[Entry]) -> None:
        for entry in entries:
            entry.redelivered = True
            self.ready_bytes += len(entry.message.body)
        if self.is_quorum:
            self.ready.extendleft(reversed(entries))
        else:
            entries = sorted(entries, key=_SEQ)
            ready = self.ready
            if not ready or entries[-1].seq < ready[0].seq:
                ready.extendleft(reversed(entries))
            else:
                for entry in entries:
                    ready.insert(bisect.bisect_left(ready, entry.seq, key=_SEQ), entry)
        if self.settings.has_length_limit and self.settings.overflow == limits.DROP_HEAD:
            self._drop_head()
        if self.consumers:
            self.dispatch()

    def _count_returns(self, entries: list[Entry], by_client: bool) -> list[Entry]:
        """Entries that come back now; the rest died or wait."""
        back, dead = [], []
        now = None
        for entry in entries:
            entry.returns += 1
            fate, delay = after_return(entry.returns, self.redelivery, by_client, self.rng)
            if fate == DEAD:
                dead.append(entry)
                continue
            if self.is_quorum:
                entry.message = entry.message.with_delivery_count(entry.returns)
            due = None
            if fate == LATER:
                now = now_ms() if now is None else now
                due = now + delay
                self.hold_until(entry, due)
            else:
                back.append(entry)
            if entry.segment is not None:
                self.store.returned(self.vhost, self.name, entry, due, self.is_quorum)
        if dead:
            self._forget(dead)
            self.dead_letter_sink(self, [entry.message for entry in dead], "delivery_limit")
        return back

    def hold_until(self, entry: Entry, due: float) -> None:
        """Keep `entry` from consumers until wall-clock `due` (ms)."""
        entry.redelivered = True
        heapq.heappush(self.scheduled, (due, next(self._scheduled_ties), entry))
        self._redelivery_alarm.arm(due)

    def _on_redelivery_alarm(self) -> None:
        if not self.deleted:
            self.redeliver_due(now_ms())

    def redeliver_due(self, now: float) -> int:
        """Delayed messages whose time has come go back to the queue."""
        due = []
        scheduled = self.scheduled
        while scheduled and scheduled[0][0] <= now:
            due.append(heapq.heappop(scheduled)[2])
        if due:
            self._put_back(due)
        if scheduled:
            self._redelivery_alarm.arm(scheduled[0][0])
        return len(due)

    # ---- expiry --------------------------------------------------------

    def expire(self, now: float) -> int:
        """Dead-letter expired messages at the head; arm a timer for the next
        deadline there."""
        ready = self.ready
        count = 0
        while True:
            # In chunks, so a mass expiry never holds every original and
            # every dead letter in memory at once.
            expired = []
            while len(expired) < 1024:
                if not ready:
                    if not self.paged_count:
                        break
                    self._page_in()
                deadline = ready[0].deadline
                if deadline is None or now < deadline:
                    break
                entry = ready.popleft()
                self.ready_bytes -= len(entry.message.body)
                expired.append(entry)
            if not expired:
                break
            count += len(expired)
            self._died_expired(expired)
        self._arm_ttl_alarm()
        return count

    def sweep(self, now: float) -> int:
        """The reaper's pass: expired messages anywhere in the queue go, not
        only at the head (RabbitMQ waits for them to reach the head)."""
        if self.scheduled:
            self.redeliver_due(now)
            self._expire_scheduled(now)
        count = self.expire(now)
        if self.dlx_pending:
            self.retry_dead_letters()
        if not self.saw_message_ttl or not self.ready:
            return count
        expired = [e for e in self.ready if e.deadline is not None and now >= e.deadline]
        if expired:
            gone = {id(e) for e in expired}
            self.ready = deque(e for e in self.ready if id(e) not in gone)
            self.ready_bytes -= sum(len(e.message.body) for e in expired)
            if not self.ready and self.paged_count:
                self._page_in()
            self._died_expired(expired)
        return count + len(expired)

    def _expire_scheduled(self, now: float) -> None:
        expired = [item[2] for item in self.scheduled
                   if item[2].deadline is not None and now >= item[2].deadline]
        if expired:
            gone = {id(entry) for entry in expired}
            self.scheduled = [item for item in self.scheduled if id(item[2]) not in gone]
            heapq.heapify(self.scheduled)
            self._died_expired(expired)

    def _died_expired(self, entries: list[Entry]) -> None:
        self.stats["expired"] += len(entries)
        self._forget(entries)
        self.dead_letter_sink(self, [entry.message for entry in entries], "expired")

    def _arm_ttl_alarm(self) -> None:
        if not self.ready or self.deleted:
            return
        deadline = self.ready[0].deadline
        if deadline is not None:
            self._ttl_alarm.arm(deadline)

    def _on_ttl_alarm(self) -> None:
        if not self.deleted:
            self.expire(now_ms())

    # ---- x-expires -----------------------------------------------------

    def touch(self) -> None:
        """Declared, consumed from or got from: the queue is in use
        (rabbit_amqqueue_process: ensure_expiry_timer)."""
        self.last_used = now_ms()
        expires = self.settings.expires
        if expires is not None and not self.consumers and self._expiry_timer is None:
            self._expiry_timer = self.timers.call_at(self.last_used + expires,
                                                     self._check_unused)

    def _check_unused(self) -> None:
        self._expiry_timer = None
        expires = self.settings.expires
        if self.deleted or expires is None or self.consumers:
            return
        due = self.last_used + expires
        if now_ms() >= due:
            if self.on_unused is not None:
                self.on_unused(self)  # deleted; its messages are not dead-lettered
        else:
            self._expiry_timer = self.timers.call_at(due, self._check_unused)

    # ---- at-least-once dead-lettering ----------------------------------

    def hold_dead_letter(self, message: Message, reason: str) -> None:
        """A dead letter no target accepted yet stays here (3.13 quorum
        at-least-once) and counts toward the length limit."""
        self.dlx_pending.append((message, reason))

    def retry_dead_letters(self) -> None:
        pending, self.dlx_pending = self.dlx_pending, []
        by_reason: dict[str, list[Message]] = {}
        for message, reason in pending:
            by_reason.setdefault(reason, []).append(message)
        for reason, messages in by_reason.items():
            self.dead_letter_sink(self, messages, reason)

    # ---- management ----------------------------------------------------

    @property
    def waiting(self) -> list[Entry]:
        """Messages held back by a redelivery delay."""
        return [item[2] for item in self.scheduled]

    def purge(self) -> int:
        """Ready and delayed messages go (those out for delivery stay)."""
        count = self.message_count + len(self.scheduled)
        self._forget(self.ready)
        self._forget(self.waiting)
        if self.paged_count and self.store is not None:
            self.store.drop_from(self.vhost, self.name, self.paged_from, self.paged_segments)
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
        if not self.consumers:
            self.touch()

    @property
    def auto_delete_due(self) -> bool:
        """An auto-delete queue goes when its last consumer does (RabbitMQ)."""
        return self.auto_delete and self.had_consumers and not self.consumers
