"""The queue's limits part: what makes messages leave without being
consumed.  Length limits with their overflow modes, per-queue and
per-message TTL (at the head, and anywhere by the reaper's sweep), and
x-expires, which deletes a queue nobody uses."""

from __future__ import annotations

import heapq

from dlx import limits
from dlx.expiry import clamp_ttl, effective_ttl

from ..message import Entry, Message
from ..timers import now_ms
from .outcome import ACCEPTED, REJECTED


class LimitsPart:
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
            self.ready.drop({id(e) for e in expired})
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
