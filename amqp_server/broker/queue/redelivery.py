"""The queue's redelivery part: messages consumers give back.

A classic queue puts a returned message back where it was (by its per-queue
sequence number); a quorum queue puts it at the head and counts it, as
rabbit_fifo does.  Where a rule reads the count (quorum delivery limit,
Artemis max-delivery-attempts and redelivery delay, Qpid's maximum delivery
count; `dlx/redelivery.py` decides), a returned message may die, or wait in
`scheduled`, invisible to consumers, while every other message flows.
Dead letters no target took yet (quorum at-least-once) wait here too."""

from __future__ import annotations

import heapq

from dlx import limits
from dlx.redelivery import DEAD, LATER, after_return

from ..message import Entry, Message
from ..timers import now_ms



class RedeliveryPart:
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
        self.ready.put_back(entries, self.is_quorum)
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

    @property
    def waiting(self) -> list[Entry]:
        """Messages held back by a redelivery delay."""
        return [item[2] for item in self.scheduled]
