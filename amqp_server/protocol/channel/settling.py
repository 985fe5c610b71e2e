"""The channel's settling part: acks, rejects, nacks and recover on the
deliveries it holds unacknowledged."""

from __future__ import annotations

from itertools import islice
from operator import itemgetter

from pamqp import commands as spec

from ...errors import not_implemented, precondition_failed
from ...wire.methods import make

# Parts of the (tag, (queue, entry, consumer)) pairs that `unacked` holds.
_RECORD = itemgetter(1)
_ENTRY = itemgetter(1)
_CONSUMER = itemgetter(2)


class SettlingPart:
    def _take_unacked(self, tag: int, multiple: bool) -> list[tuple[int, tuple]]:
        unacked = self.unacked
        if multiple:
            if tag == 0:
                taken = list(unacked.items())
                unacked.clear()
                return taken
            if tag not in unacked:
                raise precondition_failed(f"unknown delivery tag {tag}")
            # Tags are kept in ascending order; without gaps (the usual
            # case) the ones up to `tag` are counted without a walk.
            first = next(iter(unacked))
            if next(reversed(unacked)) - first + 1 == len(unacked):
                count = tag - first + 1
            else:
                count = 0
                for current in unacked:
                    if current > tag:
                        break
                    count += 1
            taken = list(islice(unacked.items(), count))
            if count == len(unacked):
                unacked.clear()
            else:
                for current, _ in taken:
                    del unacked[current]
            return taken
        record = unacked.pop(tag, None)
        if record is None:
            raise precondition_failed(f"unknown delivery tag {tag}")
        return [(tag, record)]

    def _basic_ack(self, method) -> None:
        self.ack(method.delivery_tag, method.multiple)

    def ack(self, tag: int, multiple: bool) -> None:
        self._acked(self._take_unacked(tag, multiple))

    def _acked(self, taken: list[tuple[int, tuple]]) -> None:
        if self.tx is not None:
            self.tx.append(("ack", taken))
        else:
            self._settle(taken)

    def settle_each(self, method_id: int, tags: list[int], requeue: bool) -> None:
        """Single basic.ack, basic.reject or basic.nack frames (`method_id`
        80, 90 or 120) read back to back: taken one by one, settled in one
        step.  An unknown tag settles those before it, then closes the
        channel, as one frame at a time would."""
        taken: list = []
        try:
            for tag in tags:
                record = self.unacked.pop(tag, None)
                if record is None:
                    raise precondition_failed(f"unknown delivery tag {tag}").for_method(
                        60, method_id)
                taken.append((tag, record))
        finally:
            if taken:
                if method_id == 80:
                    self._acked(taken)
                else:
                    self._reject(taken, requeue)

    def _settle(self, taken: list[tuple[int, tuple]]) -> None:
        records = list(map(_RECORD, taken))
        queue, _, consumer = records[0] if records else (None, None, None)
        if consumer is not None and list(map(_CONSUMER, records)).count(consumer) == len(records):
            # All from one consumer (so one queue), as a multiple ack
            # usually is: settled in one step.
            consumer.unacked -= len(records)
            self.conn.broker.counters.acknowledged[queue.settings.queue_type] += len(records)
            queue.settle(list(map(_ENTRY, records)))
            self._after_release({queue})
            return
        by_queue: dict = {}
        for _, (queue, entry, consumer) in taken:
            if consumer is not None:
                consumer.unacked -= 1
            entries = by_queue.get(queue)
            if entries is None:
                by_queue[queue] = [entry]
            else:
                entries.append(entry)
        acknowledged = self.conn.broker.counters.acknowledged
        for queue, entries in by_queue.items():
            acknowledged[queue.settings.queue_type] += len(entries)
            queue.settle(entries)
        self._after_release(set(by_queue))

    def _after_release(self, touched: set) -> None:
        if self.global_prefetch:
            touched.update(c.queue for c in self.consumers.values())
        for queue in touched:
            if queue.ready and queue.consumers:
                queue.dispatch()

    def _basic_reject(self, method) -> None:
        self._reject(self._take_unacked(method.delivery_tag, False), method.requeue)

    def _basic_nack(self, method) -> None:
        self._reject(self._take_unacked(method.delivery_tag, method.multiple), method.requeue)

    def _reject(self, taken: list[tuple[int, tuple]], requeue: bool) -> None:
        if self.tx is not None:
            self.tx.append(("reject", taken, requeue))
            return
        if requeue:
            self._requeue(taken)
        else:
            self._discard(taken)

    def _requeue(self, taken: list[tuple[int, tuple]], by_client: bool = True) -> None:
        by_queue = self._released(taken)
        for queue, entries in by_queue.items():
            if queue.deleted:
                queue.settle(entries)  # nowhere to go back to
            else:
                queue.requeue(entries, by_client)
        self._after_release(set(by_queue))

    def _discard(self, taken: list[tuple[int, tuple]]) -> None:
        """Rejected without requeue: the messages die with reason 'rejected'."""
        by_queue = self._released(taken)
        for queue, entries in by_queue.items():
            if queue.deleted:
                queue.settle(entries)
            else:
                queue.reject(entries)
        self._after_release(set(by_queue))

    @staticmethod
    def _released(taken: list[tuple[int, tuple]]) -> dict:
        """The taken entries by queue, their consumers' unacked counts
        given back."""
        by_queue: dict = {}
        for _, (queue, entry, consumer) in taken:
            if consumer is not None:
                consumer.unacked -= 1
            by_queue.setdefault(queue, []).append(entry)
        return by_queue

    def _basic_recover_async(self, method) -> None:
        if not method.requeue:
            raise not_implemented("requeue=false")
        taken = list(self.unacked.items())
        self.unacked.clear()
        self._requeue(taken)

    def _basic_recover(self, method) -> None:
        self._basic_recover_async(method)
        self.send(make(spec.Basic.RecoverOk))
