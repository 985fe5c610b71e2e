"""A queue: ready messages in order, consumers served in turn, and the rules
that make messages leave without being consumed, built from parts that
own their state (DESIGN.md, "A queue is built from parts"):

- `ready` (ordering.py): which ready message is next;
- `consumers` (dispatch.py): which consumer gets it;
- `limits` (limits.py): length limits, TTL, x-expires;
- `redelivery` (redelivery.py): returns, delays, delivery limits, held
  dead letters;
- `pager` (paging.py): which ready messages live in page files;
- `selection` (selection.py): messages the workbench takes out by seq;
- `arrivals` (arrivals.py): when its messages arrived, to the second;
- `credit` (credit.py): whether its publishers wait for it to drain.

The queue is the only one that talks to more than one part.  What its
decisions ask of the world (deliveries, dead letters, the store, timers)
comes back as effects (effects.py), carried out by `carry_out` once the
decision is made: no decision calls a channel, the store or the
dead-letterer.  The clock and the random source come from the virtual
host; tests pass fakes.

Delivery order follows RabbitMQ's classic queue: messages leave in publish
order, a requeued message goes back to the position it came from (ordered
by its per-queue sequence number), and consumers with spare prefetch take
turns.  A quorum queue puts returned messages at the head instead and
counts the returns, as rabbit_fifo does.  What happens to a message that
dies is decided in `dlx/`; the queue only says which messages died and
why.

The commands (what channels, the virtual host, the broker and the
workbench call):

    enqueue(message) -> TAKEN | REFUSED        a routed message
    enqueue_run(messages, layouts)   a run into a plain queue (never refused)
    dispatch()                       hand ready messages to consumers with room
    take_one() -> Entry | None       basic.get
    settle(entries)                  acknowledged (or discarded) for good
    requeue(entries, how)            given back (how: dlx.redelivery's REJECTED,
                                     NACKED, RECOVERED, CLOSED, TIMED_OUT):
                                     counted, delayed, or back
    reject(entries, how)             rejected without requeue: dead-lettered
    add_consumer / remove_consumer
    await_credit(sender) -> bool     a publisher waits while it withholds credit
    forget_sender(sender), credit_tick()
    expire(now), sweep(now)          TTL at the head; the reaper's pass
    touch()                          used (x-expires)
    withdraw / restore_withdrawn / discard_withdrawn   the workbench
    purge(), close()
    mark_arrivals(now)               the broker's tick (arrivals.py)
    apply_settings(settings), attach_paging(paging), page_out_tail()
    pages_next(), page_stored(items), restore(entry, due), restored_up_to(seq)
                                     recovery (boot.py)
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

from dlx.redelivery import REJECTED as REJECTED_BACK
from policies.effective import QueueSettings, resolve

from ...wire.table import FieldTable
from ..message import Entry, Message
from ..timers import Alarm, Timers, now_ms
from .arrivals import Arrivals
from .census import Census, take_census
from .credit import Credit
from .dispatch import PriorityGroups, RoundRobin, SingleActive, SingleActiveByPriority
from .effects import (
    EXPIRES,
    REDELIVERY,
    TTL,
    ArmTimer,
    CountReturn,
    DeadLetter,
    Deliver,
    Forget,
    GrantCredit,
    Unused,
)
from .limits import ACCEPT, REJECT_DLX, Limits
from .ordering import ready_for
from .outcome import REFUSED, TAKEN, Offer
from .paging import Pager
from .redelivery import Redelivery
from .selection import Selection

MAXLEN = "maxlen"
EXPIRED = "expired"
REJECTED_REASON = "rejected"
# A mass expiry is dead-lettered in chunks, so it never holds every
# original and every dead letter in memory at once.
EXPIRY_CHUNK = 1024

# Collision-avoidance jitter needs no state of its own per queue (a Random
# is 2.5 KB): queues made without a virtual host share this one.
_RNG = random.Random()


def _discard(queue: Queue, messages: list[Message], reason: str) -> None:
    """The sink of a queue not in a virtual host: deaths are only counted."""
    queue.stats["dropped"][("no_dlx", reason)] += len(messages)


def _dispatch_for(settings: QueueSettings):
    if not settings.single_active_consumer:
        return RoundRobin()
    if settings.is_quorum_4x:
        return SingleActiveByPriority()  # rabbit_fifo since 4.0
    return SingleActive(by_priority=not settings.is_quorum)


class Queue:
    is_queue = True

    def __init__(self, vhost: str, name: str, durable: bool = False,
                 exclusive_owner: object | None = None, auto_delete: bool = False,
                 arguments: FieldTable | None = None,
                 settings: tuple | None = None, timers: Timers | None = None,
                 clock: Callable[[], float] = now_ms, rng=None) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments or FieldTable()
        # (effective settings, user policy, operator policy) from the vhost
        settings, self.policy, self.operator_policy = settings or (
            resolve(self.arguments), None, None)
        self.clock = clock  # wall-clock ms
        # The parts.  Ordering and dispatch follow the arguments only (no
        # policy key): fixed for the queue's life.
        self.ready = ready_for(settings.max_priority, settings.is_quorum_4x)
        self.consumers = _dispatch_for(settings)
        self.limits = Limits(clock())
        self.redelivery = Redelivery(rng if rng is not None else _RNG)
        self.pager = Pager(vhost, name, self.ready.lane_count)
        self.selection = Selection()
        self.arrivals = Arrivals()
        self.credit = Credit()
        # Read by the publish path after each enqueue: the publisher waits.
        self.withholds_credit = False
        self._marked_seq = 0  # next_seq at the last tick that marked
        self._census: tuple[tuple, Census] | None = None
        # The queue's own state: what the parts share.
        self.ready_bytes = 0  # body bytes of the ready messages, in memory and paged
        self.exclusive_consumer = None
        self.had_consumers = False
        self.consumers_gone_at: float | None = None  # when the last one left (ms)
        self.auto_created = False  # an Artemis DLQ./EXP. queue (broker/auto_created.py)
        # When the dead-letter watch first found it empty, never having had
        # a dead letter (broker/dead_letter_watch.py); None: not seen so.
        self.quiet_since: float | None = None
        self.unacked = 0  # delivered (or withdrawn) and not settled
        self.next_seq = 0
        self.deleted = False
        # (source exchange name, binding key) -> Binding, for cleanup on delete
        self.bindings: dict[tuple, object] = {}
        self.published = 0
        self.delivered = 0
        self.acked = 0
        # dead_letters_received: dead letters other queues' deaths put
        # here, by reason (the dead-letterer counts them); archived: dead
        # letters retention archived out of it (broker/archiving.py).
        self.stats = {"dead_lettered": Counter(), "dropped": Counter(), "expired": 0,
                      "rejected_publishes": 0, "dead_letters_received": Counter(),
                      "archived": 0}
        # The shell: where effects go.  The virtual host sets the sinks.
        # dead_letter_sink(queue, messages, reason) -> held (message, reason)
        self.dead_letter_sink: Callable[..., list | None] = _discard
        self.on_unused: Callable[[Queue], None] | None = None  # x-expires: delete it
        # The message store, for a durable queue on a broker with a data dir.
        self.store = None
        self.timers = timers or Timers()
        self._alarms = {TTL: Alarm(self.timers, self._on_ttl_timer),
                        REDELIVERY: Alarm(self.timers, self._on_redelivery_timer)}
        self._expiry_timer = None
        self._watching = False  # the ordering asks the pager for paged lanes
        self.settings = None
        self.apply_settings(settings)

    def apply_settings(self, settings: QueueSettings) -> None:
        """Adopt new effective settings (declare, or a policy change)."""
        previous, self.settings = self.settings, settings
        self.is_quorum = settings.is_quorum
        self.limits.apply(settings)
        self.redelivery.apply(settings)
        # A plain queue skips every per-message rule on its hot path.
        self.plain = not (settings.message_ttl is not None or settings.has_length_limit
                          or settings.is_quorum or settings.clamps_expiry)
        if self.limits.sheds_head:
            self.carry_out(self._drop_head())
        if previous is not None and settings.expires != previous.expires:
            self.touch()
        self.pager.adopt(settings)

    # ---- views -------------------------------------------------------------

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        """Ready messages, in memory and paged."""
        return len(self.ready) + self.pager.count

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    @property
    def paged_count(self) -> int:
        return self.pager.count

    @property
    def paged_bytes(self) -> int:
        return self.pager.bytes

    def by_priority(self) -> dict[int, int]:
        """A 4.3 quorum queue's ready messages at each priority that has
        any, in memory and paged (its returned ones aside)."""
        counts = self.ready.by_priority()
        for lane in range(self.ready.lane_count):
            paged = self.pager.count_in(lane)
            if paged:
                counts[lane] = counts.get(lane, 0) + paged
        return counts

    @property
    def delayed(self) -> list[Entry]:
        """Messages held back by a redelivery delay."""
        return self.redelivery.delayed

    @property
    def delayed_count(self) -> int:
        return self.redelivery.delayed_count

    @property
    def held_count(self) -> int:
        """Dead letters no target took yet (quorum at-least-once)."""
        return self.redelivery.held_count

    def oldest_age(self, now: float) -> float:
        """Seconds (at least) since the message at the head arrived; 0
        for an empty queue or one that arrived since the last tick."""
        ready = self.ready
        if not ready:
            return 0.0
        arrived = self.arrivals.arrived_by(ready[0].seq)
        return 0.0 if arrived is None else max(0.0, (now - arrived) / 1000.0)

    def dead_letter_census(self) -> Census:
        """The waiting dead letters (census.py), taken again only when
        messages came, went or came back since the last time."""
        key = (self.next_seq, self.delivered, len(self.ready), self.ready_bytes)
        cached = self._census
        if cached is not None and cached[0] == key:
            return cached[1]
        census = take_census(self.ready)
        census.waiting.update(self.pager.dead_letters)  # the paged tail's
        self._census = (key, census)
        return census

    def mark_arrivals(self, now: float) -> None:
        """The broker's tick: messages numbered below next_seq had arrived
        by `now`; marks below the head bound nothing any more.  A queue
        nothing arrived in since its last tick costs one comparison (a
        broker may have 100,000 queues)."""
        if self.next_seq == self._marked_seq:
            return
        self._marked_seq = self.next_seq
        ready = self.ready
        head = ready[0].seq if ready else self.next_seq
        arrivals = self.arrivals
        arrivals.forget_below(head)
        if self.next_seq > head:
            arrivals.mark(self.next_seq, now)

    @property
    def needs_sweep(self) -> bool:
        """The reaper has something to look at here."""
        return (not self.plain or self.limits.saw_message_ttl or self.redelivery.held_count > 0
                or self.redelivery.delayed_count > 0)

    @property
    def auto_delete_due(self) -> bool:
        """An auto-delete queue goes when its last consumer does (RabbitMQ)."""
        return self.auto_delete and self.had_consumers and not self.consumers

    # ---- taking messages in --------------------------------------------------

    def enqueue(self, message: Message) -> Offer:
        """Take a routed message; returns TAKEN or REFUSED (overflow)."""
        if self.plain and message.ttl is None and message.scheduled is None:
            # The hot path: `_enqueue_checked` with no rule to check, and
            # its Deliver carried out inline (test_queue_parts.py checks
            # that both fare alike).  This runs once per publish.
            entry = Entry(self.next_seq, message)
            self.next_seq += 1
            self.published += 1
            if self.store is not None:
                self._persist(entry, message)
            consumers = self.consumers
            if consumers and not self.ready:
                consumer = consumers.next_with_room()
                if consumer is not None:
                    self.unacked += 1
                    self.delivered += 1
                    # Decided; now carried out (_hand_over, inlined).
                    if entry.segment is not None:
                        self.store.delivered(self.vhost, self.name, entry)
                    consumer.take(self, entry)
                    return TAKEN
            # Messages already waiting mean no consumer has room: whatever
            # frees room (ack, qos, flow, a flushed socket) dispatches.
            self._append(entry, len(message.body))
            if consumers and not self.withholds_credit:
                self._grew()
            return TAKEN
        return self._enqueue_checked(message)

    def _enqueue_checked(self, message: Message) -> Offer:
        """`enqueue` under the rules: length limits, TTL, drop-head."""
        limits = self.limits
        if limits.has_length_limit:
            verdict = limits.admit(self.message_count + self.redelivery.held_count,
                                   self.ready_bytes, len(message.body))
            if verdict is not ACCEPT:
                self.stats["rejected_publishes"] += 1
                if verdict == REJECT_DLX:
                    self.carry_out((DeadLetter([message], MAXLEN),))
                return REFUSED
        now = self.clock()
        entry = Entry(self.next_seq, message)
        entry.deadline = limits.deadline(message, now)
        if message.annotations is not None and self.redelivery.quorum_4x:
            self.redelivery.arrived(entry)
        if self.store is not None:
            self._persist(entry, message)  # first: a page file records its segment
        self.next_seq += 1
        self.published += 1
        if message.scheduled is not None and message.scheduled > now:
            self._schedule(entry, message.scheduled)
            return TAKEN
        effects = []
        consumer = None
        if self.consumers and not self.ready:
            # A consumer waiting for it gets it even with a TTL of 0
            # (RabbitMQ's attempt_delivery comes before any expiry check).
            consumer = self.consumers.next_with_room()
        if consumer is not None:
            self.unacked += 1
            self.delivered += 1
            effects.append(Deliver(consumer, [entry]))
        else:
            self._append(entry, len(message.body))
            if self.consumers and not self.withholds_credit:
                self._grew()
        if limits.sheds_head:
            effects.extend(self._drop_head())
        if effects:
            self.carry_out(effects)
        if self.ready and self.ready[0].deadline is not None:
            self.expire(now)
        return TAKEN

    def _schedule(self, entry: Entry, due: float) -> None:
        """Artemis's scheduled delivery: held until `due` (its time stored
        with it, as Artemis's scheduled-delivery record), then ready."""
        if entry.segment is not None:
            self.store.returned(self.vhost, self.name, entry, due, always=True)
        self.carry_out((self.redelivery.schedule(entry, due),))

    def enqueue_run(self, messages: list, layouts: list | None = None) -> None:
        """Messages published back to back with the same exchange, routing
        key and properties (so no per-message TTL) into a plain queue,
        which never refuses one: `enqueue` for each, with the deliveries to
        one consumer handed over together.  (`layouts`, where each header's
        properties lie, is a stream's: a queue delivers headers as they
        came.)"""
        seq = self.next_seq
        count = len(messages)
        entries = list(map(Entry, range(seq, seq + count), messages))
        self.next_seq = seq + count
        self.published += count
        if self.store is not None:
            self._persist_run(entries)
        if self.consumers and not self.ready:
            entries = self._hand_out(entries)
            if not entries:
                return
        sizes = [len(entry.message.body) for entry in entries]
        total = sum(sizes)
        if self.pager.fits(len(self.ready), self.ready_bytes, len(entries), total,
                           entries[0].segment is not None):
            self.ready.extend(entries)
            self.ready_bytes += total
        else:
            for entry, size in zip(entries, sizes):
                self._append(entry, size)
        if self.consumers and not self.withholds_credit:
            self._grew()

    def _hand_out(self, entries: list) -> list:
        """Give entries to consumers with room, in turn; returns the rest."""
        consumers = self.consumers
        sole = consumers.sole()
        if sole is not None:
            # Batch after batch while it has room: a consumer without a
            # prefetch limit has a ceiling per batch, not a full window,
            # and nothing else would wake it for what stayed behind (no
            # ack comes from a no-ack consumer).
            while entries:
                room = sole.room()
                if not room:
                    break
                taken = entries[:room]
                self.unacked += len(taken)
                self.delivered += len(taken)
                self._hand_over(sole, taken)
                entries = entries[room:]
            return entries
        for index, entry in enumerate(entries):
            consumer = consumers.next_with_room()
            if consumer is None:
                return entries[index:]
            self.unacked += 1
            self.delivered += 1
            self._hand_over(consumer, [entry])
        return []

    def _persist(self, entry: Entry, message: Message) -> None:
        """A persistent message on a durable queue goes to the store, which
        gives the entry its segment."""
        if message.persistent:
            message.stored_gen = self.store.enqueue(self.vhost, self.name, entry, message)

    def _persist_run(self, entries: list) -> None:
        """`_persist` for a run: messages that share a header object are
        persistent alike, read once."""
        persistent = []
        header = None
        keep = False
        for entry in entries:
            message = entry.message
            if message.header is not header:
                header = message.header
                keep = message.persistent
            if keep:
                persistent.append(entry)
        if persistent:
            self.store.enqueue_run(self.vhost, self.name, persistent)

    def _append(self, entry: Entry, size: int) -> None:
        """A ready entry joins the tail, in memory or paged."""
        if self.pages_next(entry.segment is not None, entry):
            self._page_out(entry)
        else:
            self.ready.append(entry)
        self.ready_bytes += size

    def _grew(self) -> None:
        """Appended to while it has consumers: past its high mark it
        withholds credit from its publishers (credit.py)."""
        credit = self.credit
        count = len(self.ready) + self.pager.count
        if ((count > credit.mark or self.ready_bytes > credit.mark_bytes)
                and credit.grew(count, self.ready_bytes)):
            self.withholds_credit = True

    def _drop_head(self) -> list:
        """Drop-head: the head goes while the queue is over its limit
        (dead letters held for a target count, as in rabbit_fifo)."""
        limits = self.limits
        dropped = []
        while self.message_count and limits.over(
                self.message_count + self.redelivery.held_count, self.ready_bytes):
            dropped.append(self._pop())
        if not dropped:
            return []
        return [Forget(dropped), DeadLetter(self.redelivery.dying(dropped), MAXLEN)]

    def _pop(self) -> Entry:
        entry = self.ready.popleft()
        self.ready_bytes -= len(entry.message.body)
        if not self.ready and self.pager.count:
            self._page_in()  # an empty head means nothing is paged (the fast path relies on it)
        return entry

    # ---- handing messages out ----------------------------------------------------

    def dispatch(self) -> None:
        """Hand ready messages to consumers that have room, in turn."""
        if not self.plain or self.limits.saw_message_ttl:
            now = self.clock()
            self.expire(now)
            self._dispatch(now)
        else:
            self._dispatch()
        credit = self.credit
        count = len(self.ready) + self.pager.count
        if (credit.withholding or credit.stalled or count < credit.base_count
                or self.ready_bytes < credit.base_bytes):  # else nothing for it to do
            self._granted(credit.drained(count, self.ready_bytes, self.delivered))

    def _dispatch(self, now: float | None = None) -> None:
        """The delivery loop: a single consumer takes batches, several take
        turns; with `now`, an entry that expired behind the head dies
        instead of being delivered (checked one at a time).  Each delivery
        is decided (counted), then carried out (`_hand_over`, as a Deliver
        is, without building one), then the next decided: whether a
        consumer has room depends on what its channel took."""
        sole = self.consumers.sole() if now is None else None
        if sole is not None:
            self._dispatch_batches(sole)
        else:
            self._dispatch_in_turn(now)
        if self.pager.count and self.pager.wants_refill(len(self.ready)):
            self._page_in()  # the next batch, before consumers run dry

    def _dispatch_in_turn(self, now: float | None) -> None:
        """One message at a time to each consumer with room, in turn."""
        ready = self.ready
        consumers = self.consumers
        pager = self.pager
        while consumers:
            if not ready:
                if not pager.count:
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
            self.unacked += 1
            self.delivered += 1
            self._hand_over(consumer, [entry])

    def _dispatch_batches(self, consumer) -> None:
        """A single consumer takes what it has room for in batches, each
        written at once and bounded by the connection's output room."""
        ready = self.ready
        popleft = ready.popleft
        pager = self.pager
        while True:
            room = consumer.room()
            if not room:
                return
            if not ready:
                if not pager.count:
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
            self.unacked += len(batch)
            self.delivered += len(batch)
            self._hand_over(consumer, batch)

    def take_one(self) -> Entry | None:
        """basic.get: the head message, counted as delivered."""
        if self.settings.expires is not None:
            self.touch()
        if not self.plain or self.limits.saw_message_ttl:
            self.expire(self.clock())
        if not self.message_count:
            return None
        entry = self._pop()
        self.unacked += 1
        self.delivered += 1
        if entry.segment is not None:
            self.store.delivered(self.vhost, self.name, entry)
        return entry

    # ---- messages coming back --------------------------------------------------

    def settle(self, entries) -> None:
        """Delivered messages acknowledged (or discarded) for good."""
        count = len(entries)
        self.unacked -= count
        self.acked += count
        if self.store is not None:
            self.store.remove(self.vhost, self.name, entries)  # a Forget, carried out

    def reject(self, entries: list[Entry], how: str = REJECTED_BACK) -> None:
        """Delivered messages rejected without requeue (basic.reject, or
        `how` NACKED: basic.nack): they die 'rejected'."""
        messages = self.redelivery.discarded(entries, how)
        self.settle(entries)
        self.carry_out((DeadLetter(messages, REJECTED_REASON),))

    def requeue(self, entries: list[Entry], how: str = REJECTED_BACK) -> None:
        """Delivered messages come back: `how` says whether rejected, nacked
        or recovered by the client, left by a closed channel or timed out.
        Where returns are counted, a message may die, wait out a redelivery
        delay, or come straight back (4.3: to the tail, for a plain return
        to a quorum queue without a delivery limit)."""
        if not entries:
            return
        self.unacked -= len(entries)
        if self.redelivery.counts:
            entries, tail, effects = self.redelivery.returned(entries, how, self.clock())
            self.carry_out(effects)
            if tail:
                self._requeue_tail(tail)
            if not entries:
                return
        self._put_back(entries)

    def _put_back(self, entries: list[Entry]) -> None:
        for entry in entries:
            entry.redelivered = True
        self._requeue(entries)

    def _requeue_tail(self, entries: list[Entry]) -> None:
        """4.3's quorum queue with no delivery limit appends a plain return
        as a new message (rabbit_fifo's #requeue command)."""
        for entry in entries:
            entry.redelivered = True
            if self.pages_next(entry.segment is not None, entry):
                self._page_out(entry)
            else:
                self.ready.append_requeued(entry)
            self.ready_bytes += len(entry.message.body)
        if self.limits.sheds_head:
            self.carry_out(self._drop_head())
        if self.consumers:
            self.dispatch()

    def _requeue(self, entries: list[Entry]) -> None:
        for entry in entries:
            self.ready_bytes += len(entry.message.body)
        self.ready.put_back(entries, self.redelivery.at_head)
        if self.limits.sheds_head:
            self.carry_out(self._drop_head())
        if self.consumers:
            self.dispatch()

    # ---- time: TTL, delayed redeliveries, the reaper, x-expires -----------------

    def expire(self, now: float) -> int:
        """Dead-letter expired messages at the head, a chunk at a time;
        arm a timer for the next deadline there."""
        ready = self.ready
        pager = self.pager
        count = 0
        while True:
            expired = []
            while len(expired) < EXPIRY_CHUNK:
                if not ready:
                    if not pager.count:
                        break
                    self._page_in()
                deadline = ready[0].deadline
                if deadline is None or now < deadline:
                    break
                entry = ready.popleft()
                self.ready_bytes -= len(entry.message.body)
                expired.append(entry)
            if expired:
                count += len(expired)
                self.carry_out(self._died_expired(expired))
            if len(expired) < EXPIRY_CHUNK:
                break
        if ready and not self.deleted:
            deadline = ready[0].deadline
            if deadline is not None:
                # An ArmTimer, carried out without building one: a TTL
                # queue asks this after every publish.
                self._arm(TTL, deadline)
        return count

    def _died_expired(self, entries: list[Entry]) -> tuple:
        self.stats["expired"] += len(entries)
        return (Forget(entries), DeadLetter(self.redelivery.dying(entries), EXPIRED))

    def sweep(self, now: float) -> int:
        """The reaper's pass: expired messages anywhere in the queue go, not
        only at the head (RabbitMQ waits for them to reach the head); due
        delayed messages come back; held dead letters are tried again."""
        redelivery = self.redelivery
        if redelivery.delayed_count:
            self.redeliver_due(now)
            expired = redelivery.take_expired(now)
            if expired:
                self.carry_out(self._died_expired(expired))
        count = self.expire(now)
        if redelivery.held_count:
            self.retry_dead_letters()
        ready = self.ready
        if not self.limits.saw_message_ttl or not ready:
            return count
        expired = [e for e in ready if e.deadline is not None and now >= e.deadline]
        if expired:
            ready.drop({id(e) for e in expired})
            self.ready_bytes -= sum(len(e.message.body) for e in expired)
            if not ready and self.pager.count:
                self._page_in()
            self.carry_out(self._died_expired(expired))
        return count + len(expired)

    def redeliver_due(self, now: float) -> int:
        """Delayed messages whose time has come go back to the queue."""
        due = self.redelivery.due(now)
        if due:
            self._requeue(due)  # flagged redelivered when held, unless scheduled
        next_due = self.redelivery.next_due
        if next_due is not None:
            self.carry_out((ArmTimer(REDELIVERY, next_due),))
        return len(due)

    def retry_dead_letters(self) -> None:
        """Held dead letters try their targets again (those still refused
        are held again)."""
        for reason, messages in self.redelivery.take_held().items():
            self.carry_out((DeadLetter(messages, reason),))

    def touch(self) -> None:
        """Declared, consumed from or got from: the queue is in use (x-expires)."""
        self.carry_out(self.limits.used(self.clock(), bool(self.consumers)))

    def _on_ttl_timer(self) -> None:
        if not self.deleted:
            self.expire(self.clock())

    def _on_redelivery_timer(self) -> None:
        if not self.deleted:
            self.redeliver_due(self.clock())

    def _on_expiry_timer(self) -> None:
        self._expiry_timer = None
        if not self.deleted:
            self.carry_out(self.limits.unused(self.clock(), bool(self.consumers)))

    # ---- consumers -------------------------------------------------------------

    def add_consumer(self, consumer, exclusive: bool) -> None:
        if not self.consumers:
            self.credit.consumers_came(self.message_count, self.ready_bytes)
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
            self.consumers_gone_at = self.clock()
            self._release_credit()  # no consumers: it fills as publishers send
            self.touch()
        elif self.ready and not consumer.unacked:
            # A single active consumer's successor starts now; if the one
            # that went still holds messages, once they are settled or back
            # (first in line), as in RabbitMQ.
            self.dispatch()

    def consumer_timed_out(self, consumer) -> None:
        """A 4.3 consumer timeout took `consumer`'s overdue deliveries
        back: it takes nothing until its client settles them (its
        `timed_out` tags); a single active one steps aside."""
        stepping_aside = getattr(self.consumers, "timed_out", None)
        if stepping_aside is not None:
            stepping_aside(consumer)

    def consumer_resumed(self, consumer) -> None:
        """Its client settled every delivery that timed out: it takes
        messages again (rabbit_fifo's maybe_untimeout/2), if it is still
        here."""
        if consumer not in self.consumers:
            return
        resumed = getattr(self.consumers, "resumed", None)
        if resumed is not None:
            resumed(consumer)
        if self.ready or self.pager.count:
            self.dispatch()

    @property
    def consumers_up(self) -> int:
        """The consumers its `consumers` figure counts (the management
        API, Prometheus): a 4.3 quorum queue leaves out those in a
        consumer timeout, except waiting single active ones
        (rabbit_fifo:query_consumer_count/1 counts the consumers of a
        plain status and every waiting one)."""
        consumers = self.consumers
        if not self.settings.is_quorum_4x:
            return len(consumers)
        waiting = consumers.waiting if isinstance(consumers, SingleActiveByPriority) else ()
        return sum(1 for consumer in consumers
                   if not consumer.timed_out or consumer in waiting)

    # ---- credit to publishers ----------------------------------------------------

    def await_credit(self, sender) -> bool:
        """A publisher published into it while it withholds credit: it
        waits for credit (`sender.credit_granted(queue)`), unless one of
        its own consumers reads this queue (`consumer.flow`), whose acks
        it would then never send."""
        for consumer in self.consumers:
            if getattr(consumer, "flow", None) is sender:
                return False
        self.credit.wait(sender)
        return True

    def forget_sender(self, sender) -> None:
        """A waiting publisher is gone."""
        self.credit.forget(sender)

    def credit_tick(self) -> None:
        """Once a second while publishers wait for it (credit.py's tick)."""
        self._granted(self.credit.tick(self.delivered))

    def _release_credit(self) -> None:
        self._granted(self.credit.release())

    def _granted(self, senders) -> None:
        """What the credit part decided: whether it still withholds credit,
        and the publishers it grants credit to now."""
        self.withholds_credit = self.credit.withholding
        if senders:
            self.carry_out((GrantCredit(senders),))

    # ---- the workbench's selection -------------------------------------------------

    def withdraw(self, seqs) -> list[Entry]:
        """The ready messages in memory whose seq is in `seqs`, taken out in
        delivery order; seqs no longer ready (consumed, expired, paged) are
        left out."""
        chosen = self.selection.pick(self.ready, seqs)
        if not chosen:
            return []
        self.ready.drop({id(entry) for entry in chosen})
        self.ready_bytes -= sum(len(entry.message.body) for entry in chosen)
        self.unacked += len(chosen)
        self.selection.withdrawn(chosen)
        if not self.ready and self.pager.count:
            self._page_in()
        return chosen

    def discard_withdrawn(self, entries: list[Entry]) -> None:
        """Withdrawn messages leave for good (the store forgets them)."""
        if entries:
            self.unacked -= len(entries)
            self.selection.settled(entries)
            self._forget(entries)

    def restore_withdrawn(self, entries: list[Entry]) -> None:
        """Withdrawn messages go back where they were, flags unchanged."""
        if not entries:
            return
        self.unacked -= len(entries)
        self.selection.settled(entries)
        if self.deleted:
            self._forget(entries)
            return
        self.ready_bytes += sum(len(entry.message.body) for entry in entries)
        self.ready.put_back(entries, False)
        if self.consumers:
            self.dispatch()

    # ---- paging ------------------------------------------------------------------

    def attach_paging(self, paging) -> None:
        """Page through the broker's `storage.paging.Paging` at its current
        limits (again when memory pressure changes them)."""
        self.pager.attach(paging)

    def pages_next(self, stored: bool = True, entry: Entry | None = None) -> bool:
        """A message joining the tail now is paged: the queue is past its
        threshold for such a message, or (to keep the order) something is
        paged already in its lane (any lane, without an `entry`)."""
        pager = self.pager
        if pager.count and (entry is None or pager.count_in(self.ready.lane_of(entry))):
            return True
        # pager.past_threshold, inlined: this runs for every message that waits.
        if stored:
            return len(self.ready) >= pager.limit or self.ready_bytes >= pager.bytes_limit
        return (len(self.ready) >= pager.transient_limit
                or self.ready_bytes >= pager.transient_bytes_limit)

    def _watch_lanes(self) -> None:
        if not self._watching:
            self._watching = True
            self.ready.watch(self._refill)

    def _page_out(self, entry: Entry) -> None:
        self._watch_lanes()
        self.pager.page_out(entry, self.ready.lane_of(entry))

    def _refill(self, lane: int) -> bool:
        """The ordering asks for a lane's paged messages (a priority queue,
        before it serves a lower priority from memory)."""
        if not self.pager.count_in(lane):
            return False
        self._page_in(lane)
        return True

    def _page_in(self, lane: int | None = None) -> None:
        """The next paged messages of a lane (without `lane`, the highest
        lane with any) join the in-memory head."""
        pager = self.pager
        entries = pager.page_in(pager.top_lane() if lane is None else lane, len(self.ready))
        if self.redelivery.at_head:
            for entry in entries:
                self.redelivery.restored(entry)
        self.ready.extend(entries)

    def page_out_tail(self) -> int:
        """Memory is short: a classic queue's in-memory tail past the
        (pressure) threshold goes to disk.  Only while nothing is paged
        yet (a lane is read in order) and only where the head is in seq
        order (quorum queues put returned messages at the head)."""
        pager = self.pager
        ready = self.ready
        if pager.count or self.is_quorum or not pager.attached:
            return 0
        count = pager.excess(len(ready))
        if not count:
            return 0
        if self.redelivery.delayed_count and (
                ready.lane_count > 1 or self.redelivery.holds_from(ready[pager.limit].seq)):
            return 0  # a delayed message could come back behind paged newer ones
        # The newest of the lowest priority first: each lane's part is a
        # tail of its level, paged oldest first.
        tail = [ready.pop() for _ in range(count)]
        for entry in reversed(tail):
            self._page_out(entry)
        return count

    # ---- recovery (boot.py) ------------------------------------------------------

    def page_stored(self, items: list) -> None:
        """Stored messages (storage.message_store.StoredEntry, in order)
        join the paged tail as they were stored."""
        ready = self.ready
        if ready.lane_count == 1:
            by_lane = {0: items}
        else:
            by_lane = {}
            for item in items:
                by_lane.setdefault(ready.lane_of_header(item.record()[6]), []).append(item)
        self._watch_lanes()
        for lane, lane_items in by_lane.items():
            self.ready_bytes += self.pager.page_stored(lane, lane_items)
        if any(item.deadline is not None for item in items):
            self.limits.saw_deadline()

    def restore(self, entry: Entry, due: float | None = None) -> None:
        """A stored entry back at the tail (in seq order), or waiting out
        its redelivery delay until `due`."""
        if entry.deadline is not None:
            self.limits.saw_deadline()
        self.redelivery.restored(entry)
        if due is not None:
            # A delayed redelivery (redelivered) or a scheduled delivery (not).
            self.carry_out((self.redelivery.schedule(entry, due),))
            return
        self.ready.append(entry)
        self.ready_bytes += len(entry.message.body)

    def restored_up_to(self, seq: int) -> None:
        """Every stored entry is back: new ones number on from `seq` + 1."""
        self.next_seq = max(self.next_seq, seq + 1)

    # ---- purge and delete ------------------------------------------------------

    def purge(self) -> int:
        """Ready and delayed messages go (those out for delivery stay); a
        4.3 quorum queue's at-least-once dead letters waiting for a target
        go too, and count (rabbit_fifo:apply_/3 for #purge: dlx_purge/1)."""
        delayed = self.redelivery.clear()
        count = self.message_count + len(delayed)
        if self.redelivery.quorum_4x and self.redelivery.held_count:
            count += self.redelivery.held_count
            self.redelivery.drop_held()
        self._forget(self.ready)
        self._forget(delayed)
        self._forget_paged()
        self.pager.drop()
        self.ready.clear()
        self.ready_bytes = 0
        self._release_credit()
        return count

    def _forget_paged(self) -> None:
        if not self.pager.count or self.store is None:
            return
        first_seq, refs = self.pager.paged_refs()
        if refs is None:
            self.store.drop_from(self.vhost, self.name, first_seq, self.pager.segments)
        else:
            self.store.remove(self.vhost, self.name, refs)

    def close(self) -> None:
        """Deleted: stop timers.  Its messages are not dead-lettered."""
        if self.store is not None:
            self.store.drop_below(self.vhost, self.name, self.next_seq,
                                  [*self.ready, *self.redelivery.delayed], self.pager.segments)
        self.pager.drop()
        self.deleted = True
        self._release_credit()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._expiry_timer = None
        for alarm in self._alarms.values():
            alarm.cancel()
        self.redelivery.drop_held()

    # ---- the shell: effects carried out ------------------------------------------

    def carry_out(self, effects) -> None:
        """Do what a decision asked for, in order (effects.py)."""
        for effect in effects:
            kind = type(effect)
            if kind is Deliver:
                self._hand_over(effect.consumer, effect.entries)
            elif kind is DeadLetter:
                held = self.dead_letter_sink(self, effect.messages, effect.reason)
                if held:
                    self.redelivery.hold_dead_letters(held)
            elif kind is Forget:
                self._forget(effect.entries)
            elif kind is CountReturn:
                self.store.returned(self.vhost, self.name, effect.entry, effect.due,
                                    self.is_quorum)
            elif kind is ArmTimer:
                self._arm(effect.timer, effect.due)
            elif kind is Unused:
                if self.on_unused is not None:
                    self.on_unused(self)  # deleted; its messages are not dead-lettered
            elif kind is GrantCredit:
                for sender in effect.senders:
                    sender.credit_granted(self)
            else:
                raise TypeError(f"not an effect: {effect!r}")

    def _hand_over(self, consumer, entries: list) -> None:
        """A Deliver: the store notes the stored entries as delivered, the
        consumer takes them (its channel writes them, one buffer for many)."""
        store = self.store
        if store is not None:
            for entry in entries:
                if entry.segment is not None:
                    store.delivered(self.vhost, self.name, entry)
        if len(entries) == 1:
            consumer.take(self, entries[0])
        else:
            consumer.take_many(self, entries)

    def _arm(self, timer: str, due: float) -> None:
        """An ArmTimer: the TTL and redelivery timers fire at the earliest
        time asked for; the x-expires one is armed once (its check finds a
        later use and arms it again)."""
        if timer != EXPIRES:
            self._alarms[timer].arm(due)
        elif self._expiry_timer is None:
            self._expiry_timer = self.timers.call_at(due, self._on_expiry_timer)

    def _forget(self, entries) -> None:
        """A Forget: entries left for good, the store drops them too."""
        if self.store is not None:
            self.store.remove(self.vhost, self.name, entries)
