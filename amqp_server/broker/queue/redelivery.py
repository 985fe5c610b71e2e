"""The queue's redelivery part: messages consumers give back, and dead
letters no target took yet.

A classic queue puts a returned message back where it was (by its per-queue
sequence number); a quorum queue puts it at the head and counts it, as
rabbit_fifo does.  Where a rule reads the count (quorum delivery limit,
Artemis max-delivery-attempts and redelivery delay, Qpid's maximum delivery
count; `dlx/redelivery.py` decides), a returned message may die, or wait
here, invisible to consumers, while every other message flows.  Dead
letters no target accepted yet (quorum at-least-once) wait here too, and
count toward the queue's length limit.

Interface (the queue calls it; `now` is the queue's clock, wall-clock ms):

    apply(settings)                 adopt new effective settings
    counts                          returns are counted (some rule reads the count)
    at_head                         returned messages go to the head (quorum)
    returned(entries, how, now) -> (back, to_tail, effects)
                                    count returns (`how`: dlx.redelivery's
                                    REJECTED, NACKED, ...): what comes back now
                                    (at the head or, 4.3, the tail), and the
                                    effects for those that died or wait
    restored(entry)                 a stored entry comes back with its count
    arrived(entry)                  a 4.3 quorum queue takes a message whose
                                    failed deliveries came with it
    dying(entries) -> messages      what dead-lettering takes (4.3: with the
                                    count carried in their annotations)
    hold(entry, due) -> effect      keep a returned entry from consumers until `due`
    schedule(entry, due) -> effect  the same, redelivered flag untouched (scheduled delivery)
    due(now)                        the held entries whose time has come (taken)
    next_due                        when the next one is due (None: none)
    due_times()                     (earliest, latest) due, None when none waits
    take_expired(now)               held entries whose TTL passed (taken)
    delayed, delayed_count          the entries held, how many
    holds_from(seq)                 some held entry has a seq of at least `seq`
    clear()                         every held entry goes (purge); returns them
    hold_dead_letters(held)         (message, reason) no target took
    held, held_count                those held: (message, reason), how many
    take_held()                     those held, by reason (taken for a retry)
    drop_held()                     the queue is deleted

It owns the delayed entries (a heap by due time), the held dead letters,
and the random source for Artemis's collision-avoidance jitter."""

from __future__ import annotations

import heapq
import itertools

from dlx.redelivery import (
    BY_CLIENT,
    DEAD,
    LATER,
    TAIL,
    after_quorum_return,
    after_return,
    delivery_failed,
)

from ..message import ANN_DELIVERY_COUNT, Entry, Message
from .effects import REDELIVERY, ArmTimer, CountReturn, DeadLetter, Forget

DELIVERY_LIMIT = "delivery_limit"


class Redelivery:
    def __init__(self, rng) -> None:
        self.rng = rng
        self.rules = None  # dlx.redelivery.Redelivery
        self.counts = False
        self.at_head = False
        # A quorum queue under 4.3's rules (rabbit_fifo v8): failed
        # deliveries and acquisitions counted apart, and shown as headers.
        self.quorum_4x = False
        # A heap of (due ms, tie, entry).
        self._scheduled: list[tuple[float, int, Entry]] = []
        self._ties = itertools.count()
        self._held: list[tuple[Message, str]] = []

    def apply(self, settings) -> None:
        self.rules = settings.redelivery
        self.at_head = settings.is_quorum
        self.quorum_4x = settings.is_quorum_4x
        # Returns are counted only where some rule reads the count.
        self.counts = settings.is_quorum or self.rules.active

    # ---- returns ---------------------------------------------------------

    def returned(self, entries: list[Entry], how: str, now: float):
        """(entries that come back now, those that go to the tail, effects):
        the rest died or wait."""
        back, tail, dead, effects = [], [], [], []
        decide = self._fate_4x if self.quorum_4x else self._fate
        failed = delivery_failed(how, self.rules.semantics)
        for entry in entries:
            fate, delay = decide(entry, how, failed)
            if fate == DEAD:
                dead.append(entry)
                continue
            due = None
            if fate == LATER:
                due = now + delay
                effects.append(self.hold(entry, due))
            elif fate == TAIL:
                tail.append(entry)
            else:
                back.append(entry)
            if entry.segment is not None:
                effects.append(CountReturn(entry, due))
        if dead:
            effects.append(Forget(dead))
            effects.append(DeadLetter(self.dying(dead), DELIVERY_LIMIT))
        return back, tail, effects

    def _fate(self, entry: Entry, how: str, failed: bool) -> tuple[str, int]:
        """3.13 (and Artemis's and Qpid's rules): every return counts; a
        quorum delivery shows the count (x-delivery-count)."""
        entry.returns += 1
        fate, delay = after_return(entry.returns, self.rules, how in BY_CLIENT, self.rng)
        if fate != DEAD and self.at_head:
            entry.message = entry.message.with_delivery_count(entry.returns)
        return fate, delay

    def _fate_4x(self, entry: Entry, how: str, failed: bool) -> tuple[str, int]:
        """rabbit_fifo v8 (4.3): every return is an acquisition counted
        (x-acquired-count), only a failed delivery counts towards the limit
        (x-delivery-count); dlx.redelivery.after_quorum_return decides."""
        entry.returns += 1
        if failed:
            entry.failed = (entry.failed or 0) + 1
        fate, delay = after_quorum_return(entry.failed, entry.returns, how, self.rules,
                                          self.rng)
        if fate != DEAD:
            entry.message = entry.message.with_counts(entry.returns, entry.failed)
        return fate, delay

    def discarded(self, entries: list[Entry], how: str) -> list[Message]:
        """Rejected without requeue: what dead-lettering takes.  4.3 counts
        basic.reject's as a failed delivery (rabbit_fifo:discard/7 with
        DelFailed true), not basic.nack's (modify(false, true))."""
        if self.quorum_4x and delivery_failed(how, self.rules.semantics):
            for entry in entries:
                entry.failed = (entry.failed or 0) + 1
        return self.dying(entries)

    def dying(self, entries: list[Entry]) -> list[Message]:
        """The messages of entries that die: a 4.3 quorum queue hands its
        count of failed deliveries on with them (rabbit_fifo:annotate_msg/2),
        so a quorum queue they reach counts on from it."""
        if not self.quorum_4x:
            return [entry.message for entry in entries]
        return [entry.message.annotated(ANN_DELIVERY_COUNT, entry.failed)
                if entry.failed is not None else entry.message.origin or entry.message
                for entry in entries]

    def arrived(self, entry: Entry) -> None:
        """A message enters a 4.3 quorum queue: failed deliveries counted by
        the queue it died in come with it (maybe_set_msg_delivery_count/2),
        and its first delivery shows them (rabbit_fifo_client:
        add_delivery_count_header/2: acquired as many, redelivered if any)."""
        annotations = entry.message.annotations
        count = annotations.get(ANN_DELIVERY_COUNT) if annotations else None
        if isinstance(count, int) and not isinstance(count, bool):
            entry.failed = count
            entry.redelivered = count > 0
            entry.message = entry.message.with_counts(count, count)

    def restored(self, entry: Entry) -> None:
        """A stored entry back after a restart or from the page file: a
        quorum delivery carries its count (x-delivery-count; 4.3: and
        x-acquired-count)."""
        if self.quorum_4x:
            if entry.returns:
                entry.message = entry.message.with_counts(entry.returns, entry.failed)
            elif entry.failed is not None:
                entry.message = entry.message.with_counts(entry.failed, entry.failed)
            else:
                self.arrived(entry)
        elif entry.returns and self.at_head:
            entry.message = entry.message.with_delivery_count(entry.returns)

    # ---- delayed redeliveries ----------------------------------------------

    def hold(self, entry: Entry, due: float) -> ArmTimer:
        entry.redelivered = True
        return self.schedule(entry, due)

    def schedule(self, entry: Entry, due: float) -> ArmTimer:
        """Keep `entry` from consumers until `due`, its redelivered flag
        as it is (Artemis's scheduled delivery: never delivered yet)."""
        heapq.heappush(self._scheduled, (due, next(self._ties), entry))
        return ArmTimer(REDELIVERY, due)

    def due(self, now: float) -> list[Entry]:
        scheduled = self._scheduled
        due = []
        while scheduled and scheduled[0][0] <= now:
            due.append(heapq.heappop(scheduled)[2])
        return due

    @property
    def next_due(self) -> float | None:
        return self._scheduled[0][0] if self._scheduled else None

    def due_times(self) -> tuple[float, float] | None:
        """(the earliest, the latest) time a held entry is due, None when
        none waits."""
        if not self._scheduled:
            return None
        return self._scheduled[0][0], max(item[0] for item in self._scheduled)

    def take_expired(self, now: float) -> list[Entry]:
        expired = [item[2] for item in self._scheduled
                   if item[2].deadline is not None and now >= item[2].deadline]
        if expired:
            gone = {id(entry) for entry in expired}
            self._scheduled = [item for item in self._scheduled if id(item[2]) not in gone]
            heapq.heapify(self._scheduled)
        return expired

    @property
    def delayed(self) -> list[Entry]:
        return [item[2] for item in self._scheduled]

    @property
    def delayed_count(self) -> int:
        return len(self._scheduled)

    def holds_from(self, seq: int) -> bool:
        return any(item[2].seq >= seq for item in self._scheduled)

    def clear(self) -> list[Entry]:
        delayed = self.delayed
        self._scheduled.clear()
        return delayed

    # ---- held dead letters (quorum at-least-once) ----------------------------

    def hold_dead_letters(self, held: list[tuple[Message, str]]) -> None:
        self._held.extend(held)

    @property
    def held(self) -> list[tuple[Message, str]]:
        return list(self._held)

    @property
    def held_count(self) -> int:
        return len(self._held)

    def take_held(self) -> dict[str, list[Message]]:
        held, self._held = self._held, []
        by_reason: dict[str, list[Message]] = {}
        for message, reason in held:
            by_reason.setdefault(reason, []).append(message)
        return by_reason

    def drop_held(self) -> None:
        self._held.clear()
