"""A channel's deliveries: the frames that carry messages to its consumers
(and basic.get's answers), the delivery tags they take, and what becomes of
them when the client acks, rejects, nacks or recovers them.

Owns: the next delivery tag, the deliveries not yet acknowledged (tag ->
(queue, entry, consumer or None for basic.get), in tag order) and the
channel-wide prefetch limit (basic.qos global) that counts them.
Needs: the connection (`frame_max`, the broker's counters and store), the
channel's output (`write`, `write_when_on_disk`), whether deliveries are
counted on disk before they go out (Artemis's
persist-delivery-count-before-delivery), and `consumed_queues`, the queues
the channel's consumers read (a channel-wide limit lifted by a settlement
may let any of them deliver).

Interface: `deliver`, `deliver_many`, `deliver_got`, `take`, `take_each`,
`take_all`, `outstanding_ascending`, `settle`, `requeue`, `discard`,
`restore`, `time_out`; consumers read `unacked` and `global_prefetch` for
their room (protocol/consumer.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import takewhile
from operator import attrgetter, itemgetter

from dlx.redelivery import REJECTED, TIMED_OUT

from ...errors import AMQPError, precondition_failed
from ...wire import frames
from ..consumer import Consumer
from .output import ChannelOutput

_REDELIVERED = attrgetter("redelivered")
# Parts of the (tag, (queue, entry, consumer)) pairs taken from `unacked`.
_RECORD = itemgetter(1)
_ENTRY = itemgetter(1)
_CONSUMER = itemgetter(2)

Taken = list[tuple[int, tuple]]


class Deliveries:
    __slots__ = ("number", "next_tag", "unacked", "global_prefetch", "_conn", "_counters",
                 "_output", "_count_first", "_consumed_queues", "_oldest")

    def __init__(self, number: int, connection, output: ChannelOutput, count_first: bool,
                 consumed_queues: Callable[[], Iterable]) -> None:
        self.number = number
        self.next_tag = 1
        self.unacked: dict[int, tuple] = {}
        self._oldest = 1  # no tag below it is outstanding
        self.global_prefetch = 0
        self._conn = connection
        self._counters = connection.broker.counters
        self._output = output
        self._count_first = count_first
        self._consumed_queues = consumed_queues

    # ---- handing messages out ------------------------------------------

    def deliver(self, consumer: Consumer, queue, entry) -> None:
        tag = self.next_tag
        self.next_tag = tag + 1
        message = entry.message
        data = frames.deliver(
            self.number, consumer.tag_bytes, tag, entry.redelivered, message.route,
            message.header, message.body, self._conn.frame_max)
        if self._count_first:
            self._write_counted(queue, entry, data)
        else:
            self._output.write(data)
        self._counters.delivered(queue, 1, consumer.no_ack, entry.redelivered)
        if consumer.no_ack:
            queue.settle((entry,))
        else:
            self.unacked[tag] = (queue, entry, consumer)
            consumer.unacked += 1

    def deliver_many(self, consumer: Consumer, queue, entries: list) -> None:
        """`deliver` for several entries at once, written as one buffer."""
        if self._count_first:
            for entry in entries:
                self.deliver(consumer, queue, entry)
            return
        tag = self.next_tag
        count = len(entries)
        self.next_tag = tag + count
        # A queue may build its deliveries' frames its own way (streams).
        build = getattr(queue, "deliver_frames", frames.deliver_many)
        self._output.write(build(self.number, consumer.tag_bytes, tag, entries,
                                 self._conn.frame_max))
        self._counters.delivered(queue, count, consumer.no_ack,
                                 sum(map(_REDELIVERED, entries)))
        if consumer.no_ack:
            queue.settle(entries)
        else:
            self.unacked.update(zip(range(tag, tag + count),
                                    [(queue, entry, consumer) for entry in entries]))
            consumer.unacked += count

    def deliver_got(self, queue, entry, no_ack: bool) -> None:
        """basic.get-ok for an entry taken from `queue`."""
        self._counters.got(queue, no_ack, entry.redelivered)
        tag = self.next_tag
        self.next_tag = tag + 1
        if no_ack:
            queue.settle((entry,))
        else:
            self.unacked[tag] = (queue, entry, None)
        message = entry.message
        data = frames.get_ok(
            self.number, tag, entry.redelivered, message.route, queue.message_count,
            message.header, message.body, self._conn.frame_max)
        if self._count_first:
            self._write_counted(queue, entry, data)
        else:
            self._output.write(data)

    def _write_counted(self, queue, entry, data: bytes) -> None:
        """Artemis's persist-delivery-count-before-delivery: the frames go
        out once the record counting this delivery is on disk, so a crash
        can never hide that the message was delivered."""
        store = self._conn.broker.store
        generation = store.count_delivery(queue.vhost, queue.name, entry) if (
            store is not None and entry.segment is not None) else 0
        self._output.write_when_on_disk(generation, 0, data)

    # ---- taking deliveries back by tag -----------------------------------

    def take(self, tag: int, multiple: bool) -> Taken:
        """The deliveries an ack, reject or nack names (406 for a tag not
        outstanding), no longer outstanding."""
        unacked = self.unacked
        if multiple:
            if tag == 0:
                return self.take_all()
            if tag not in unacked:
                raise precondition_failed(f"unknown delivery tag {tag}")
            # A dict settled from its front keeps holes there until it is
            # resized, and a walk from the front passes over every one (a
            # multiple ack per delivery walked hundreds): the tags up to
            # `tag` are taken by number instead, from the oldest one that
            # may be outstanding (which only moves up, so finding it costs
            # one step per tag ever delivered).
            first = self._oldest
            while first not in unacked:
                first += 1
            self._oldest = tag + 1
            span = tag - first + 1
            if span <= 2 * len(unacked):
                pop = unacked.pop
                taken = [(current, record) for current in range(first, tag + 1)
                         if (record := pop(current, None)) is not None]
            else:  # far apart: a walk of what is outstanding is shorter
                taken = list(takewhile(lambda item: item[0] <= tag, unacked.items()))
                for current, _ in taken:
                    del unacked[current]
            return taken
        record = unacked.pop(tag, None)
        if record is None:
            raise precondition_failed(f"unknown delivery tag {tag}")
        return [(tag, record)]

    def outstanding_ascending(self, tags: list[int]) -> bool:
        """Is each tag outstanding and above the one before?  (Then
        multiple acks of them take what one of the last takes.)"""
        unacked = self.unacked
        previous = 0
        for tag in tags:
            if tag <= previous or tag not in unacked:
                return False
            previous = tag
        return True

    def take_each(self, method_id: int, tags: list[int]) -> tuple[Taken, AMQPError | None]:
        """Single basic.ack, basic.reject or basic.nack frames (`method_id`
        80, 90 or 120) read back to back, taken one by one: those before an
        unknown tag, and the error that tag gets."""
        unacked = self.unacked
        taken: Taken = []
        for tag in tags:
            record = unacked.pop(tag, None)
            if record is None:
                return taken, precondition_failed(f"unknown delivery tag {tag}").for_method(
                    60, method_id)
            taken.append((tag, record))
        return taken, None

    def take_all(self) -> Taken:
        taken = list(self.unacked.items())
        self.unacked.clear()
        self._oldest = self.next_tag
        return taken

    def restore(self, taken: Taken) -> None:
        """Deliveries taken by acks or rejects that a tx.rollback undid:
        outstanding again, in tag order (RabbitMQ)."""
        merged = dict(self.unacked)
        merged.update(taken)
        self.unacked = dict(sorted(merged.items()))
        if taken:
            self._oldest = min(self._oldest, min(tag for tag, _ in taken))

    # ---- what becomes of them ----------------------------------------

    def settle(self, taken: Taken) -> None:
        """Acknowledged: their queues forget them."""
        records = list(map(_RECORD, taken))
        queue, _, consumer = records[0] if records else (None, None, None)
        # A consumer with no delivery a timeout took back has none of
        # them among these.
        if (consumer is not None and queue is not TIMED_OUT_QUEUE and not consumer.timed_out
                and list(map(_CONSUMER, records)).count(consumer) == len(records)):
            # All from one consumer (so one queue), as a multiple ack
            # usually is: settled in one step.
            consumer.unacked -= len(records)
            self._counters.acknowledged[queue.settings.queue_type] += len(records)
            queue.settle(list(map(_ENTRY, records)))
            self._after_release({queue})
            return
        by_queue: dict = {}
        for tag, (queue, entry, consumer) in taken:
            if queue is TIMED_OUT_QUEUE:
                _settled_timed_out(tag, consumer)
            elif consumer is not None:
                consumer.unacked -= 1
            entries = by_queue.get(queue)
            if entries is None:
                by_queue[queue] = [entry]
            else:
                entries.append(entry)
        acknowledged = self._counters.acknowledged
        for queue, entries in by_queue.items():
            acknowledged[queue.settings.queue_type] += len(entries)
            queue.settle(entries)
        self._after_release(set(by_queue))

    def requeue(self, taken: Taken, how: str = REJECTED) -> None:
        """Rejected or nacked with requeue, recovered, or left at the
        channel's close (`how`, dlx.redelivery's, says which: 4.3 counts them
        apart): back in their queues."""
        by_queue = self._released(taken)
        for queue, entries in by_queue.items():
            if queue.deleted:
                queue.settle(entries)  # nowhere to go back to
            else:
                queue.requeue(entries, how)
        self._after_release(set(by_queue))

    def discard(self, taken: Taken, how: str = REJECTED) -> None:
        """Rejected or nacked without requeue: the messages die with reason
        'rejected'."""
        by_queue = self._released(taken)
        for queue, entries in by_queue.items():
            if queue.deleted:
                queue.settle(entries)
            else:
                queue.reject(entries, how)
        self._after_release(set(by_queue))

    def time_out(self, tags: list[int]) -> None:
        """A 4.3 quorum queue's consumer timeout: these deliveries go back to
        their queues (not counted as failed deliveries), but their tags stay
        outstanding, as in RabbitMQ's channel, so a late ack or reject of
        one is taken: it settles nothing, and once its consumer's are all
        settled, the consumer takes messages again."""
        unacked = self.unacked
        taken = [(tag, unacked[tag]) for tag in tags]
        for tag, (_, entry, consumer) in taken:
            unacked[tag] = (TIMED_OUT_QUEUE, entry, consumer)
        self.requeue(taken, TIMED_OUT)

    def _after_release(self, touched: set) -> None:
        if self.global_prefetch:
            touched.update(self._consumed_queues())
        for queue in touched:
            if queue.ready and queue.consumers:
                queue.dispatch()

    @staticmethod
    def _released(taken: Taken) -> dict:
        """The taken entries by queue, their consumers' unacked counts
        given back (not again for one a consumer timeout gave back)."""
        by_queue: dict = {}
        for tag, (queue, entry, consumer) in taken:
            if queue is TIMED_OUT_QUEUE:
                _settled_timed_out(tag, consumer)
            elif consumer is not None:
                consumer.unacked -= 1
            by_queue.setdefault(queue, []).append(entry)
        return by_queue


def _settled_timed_out(tag: int, consumer) -> None:
    """A delivery a consumer timeout took back is settled, any way: once
    none of its consumer's is left, the consumer takes messages again
    (rabbit_fifo's maybe_untimeout/2, on settle, return and discard)."""
    if consumer is None or tag not in consumer.timed_out:
        return  # a basic.get's, or one that closed its channel
    timed_out = consumer.timed_out
    timed_out.remove(tag)
    if not timed_out:
        consumer.queue.consumer_resumed(consumer)


class _TimedOut:
    """Where a delivery a consumer timeout gave back now points: settling
    it, any way, does nothing (its message is back in its queue)."""

    deleted = False
    ready = consumers = ()
    settings = type("Settings", (), {"queue_type": "quorum"})()

    def settle(self, entries) -> None:
        pass

    def requeue(self, entries, how=None) -> None:
        pass

    def reject(self, entries, how=None) -> None:
        pass


TIMED_OUT_QUEUE = _TimedOut()
