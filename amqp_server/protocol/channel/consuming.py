"""The channel's consuming part: basic.qos, consume, cancel and get, and
deliveries written to the connection."""

from __future__ import annotations

from operator import attrgetter

from pamqp import commands as spec

from policies.registry import ArgumentError, validate_consume_arguments

from ...broker.direct_reply import PSEUDO_QUEUE
from ...broker.permissions import READ
from ...broker.queue.dispatch import SingleActive
from ...broker.stream import check_stream_consume
from ...broker.vhost import server_generated_name
from ...errors import (
    access_refused,
    not_allowed,
    not_found,
    not_implemented,
    precondition_failed,
    resource_name,
)
from ...wire import frames
from ...wire.methods import make
from ..consumer import Consumer

_REDELIVERED = attrgetter("redelivered")


class ConsumingPart:
    def deliver(self, consumer: Consumer, queue, entry) -> None:
        tag = self.next_tag
        self.next_tag = tag + 1
        message = entry.message
        data = frames.deliver(
            self.number, consumer.tag_bytes, tag, entry.redelivered, message.route,
            message.header, message.body, self.conn.frame_max)
        if self.count_before_delivery:
            self._write_counted(queue, entry, data)
        else:
            self.conn.write(data)
        self.conn.broker.counters.delivered(queue, 1, consumer.no_ack, entry.redelivered)
        if consumer.no_ack:
            queue.settle((entry,))
        else:
            self.unacked[tag] = (queue, entry, consumer)
            consumer.unacked += 1

    def deliver_many(self, consumer: Consumer, queue, entries: list) -> None:
        """`deliver` for several entries at once, written as one buffer."""
        if self.count_before_delivery:
            for entry in entries:
                self.deliver(consumer, queue, entry)
            return
        tag = self.next_tag
        count = len(entries)
        self.next_tag = tag + count
        self.conn.write(frames.deliver_many(self.number, consumer.tag_bytes, tag, entries,
                                            self.conn.frame_max))
        self.conn.broker.counters.delivered(queue, count, consumer.no_ack,
                                            sum(map(_REDELIVERED, entries)))
        if consumer.no_ack:
            queue.settle(entries)
        else:
            self.unacked.update(zip(range(tag, tag + count),
                                    [(queue, entry, consumer) for entry in entries]))
            consumer.unacked += count

    def _write_counted(self, queue, entry, data: bytes) -> None:
        """Artemis's persist-delivery-count-before-delivery: the frames go
        out once the record counting this delivery is on disk, so a crash
        can never hide that the message was delivered."""
        store = self.conn.broker.store
        generation = store.count_delivery(queue.vhost, queue.name, entry) if (
            store is not None and entry.segment is not None) else 0
        if self._held or generation > (store.synced if store is not None else 0):
            self._held.append((generation, 0, data))
            store.wait(self)
        else:
            self.conn.write(data)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        if self.consumers.get(consumer.tag) is not consumer:
            return
        del self.consumers[consumer.tag]
        if self.conn.capabilities.get("consumer_cancel_notify") and not self.closing:
            if self._cancels_held is not None:
                self._cancels_held.append(consumer.tag)
            else:
                self.send(make(spec.Basic.Cancel, consumer_tag=consumer.tag, nowait=True))

    def redispatch(self) -> None:
        for queue in {c.queue for c in self.consumers.values()}:
            queue.dispatch()

    def _queue_name(self, name: str) -> str:
        if name == "":
            if not self.last_queue:
                raise not_found("no previously declared queue")
            return self.last_queue
        return name

    def _owned_queue(self, name: str):
        queue = self.vhost.queue(self._queue_name(name))
        self.vhost.check_exclusive_access(queue, self.conn)
        return queue

    def _basic_qos(self, method) -> None:
        if method.prefetch_size:
            raise not_implemented(f"prefetch_size!=0 ({method.prefetch_size})")
        if method.global_:
            self.global_prefetch = method.prefetch_count
        else:
            self.consumer_prefetch = method.prefetch_count
            # RabbitMQ's quirk (rabbit_channel, unlimit_prefetch): a later
            # per-consumer qos lifts the channel-wide limit.
            self.global_prefetch = 0
        self.send(make(spec.Basic.QosOk))
        self.redispatch()

    def _basic_consume(self, method) -> None:
        tag = method.consumer_tag
        if tag in self.consumers:
            raise not_allowed(f"attempt to reuse consumer tag '{tag}'")
        if method.queue == PSEUDO_QUEUE:
            self._consume_replies(method)
            return
        self._allow(READ, "queue", self._queue_name(method.queue))
        queue = self._owned_queue(method.queue)
        if queue.is_quorum and self.global_prefetch:
            raise not_implemented(
                f"{resource_name('queue', queue.name, self.vhost.name)} does not support "
                "global qos")
        if queue.is_quorum and isinstance(queue.consumers, SingleActive):
            exclusive = False  # a quorum queue ignores it (rabbit_quorum_queue:consume)
        else:
            exclusive = method.exclusive
        if exclusive and queue.consumers or queue.exclusive_consumer is not None:
            raise access_refused(
                f"{resource_name('queue', queue.name, self.vhost.name)} in exclusive use")
        try:
            priority = validate_consume_arguments(method.arguments, queue.settings.queue_type)
        except ArgumentError as error:
            raise precondition_failed(error.message(
                resource_name("queue", queue.name, self.vhost.name))) from None
        if queue.settings.is_stream:
            check_stream_consume(queue, method, self.consumer_prefetch, self.global_prefetch)
        if not tag:
            tag = server_generated_name("amq.ctag")
        consumer = Consumer(tag, self, queue, method.no_ack, exclusive,
                            self.consumer_prefetch, method.arguments, priority)
        self.consumers[tag] = consumer
        if not method.nowait:
            self.send(make(spec.Basic.ConsumeOk, consumer_tag=tag))
        queue.add_consumer(consumer, exclusive)

    def _basic_cancel(self, method) -> None:
        consumer = self.consumers.pop(method.consumer_tag, None)
        if consumer is not None:
            self._detach(consumer)
        else:
            self._cancel_replies(method.consumer_tag)
        if not method.nowait:
            self.send(make(spec.Basic.CancelOk, consumer_tag=method.consumer_tag))

    def _detach(self, consumer: Consumer) -> None:
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.auto_delete_due:
            self.vhost.remove_queue(queue)
        elif queue.auto_created and not queue.consumers:
            self.vhost.auto_created.consumer_left(queue)

    def _basic_get(self, method) -> None:
        self._allow(READ, "queue", self._queue_name(method.queue))
        queue = self._owned_queue(method.queue)
        entry = queue.take_one()
        counters = self.conn.broker.counters
        if entry is None:
            counters.get_empty[queue.settings.queue_type] += 1
            self.send(make(spec.Basic.GetEmpty))
            return
        counters.got(queue, method.no_ack, entry.redelivered)
        tag = self.next_tag
        self.next_tag = tag + 1
        if method.no_ack:
            queue.settle((entry,))
        else:
            self.unacked[tag] = (queue, entry, None)
        message = entry.message
        data = frames.get_ok(
            self.number, tag, entry.redelivered, message.route, queue.message_count,
            message.header, message.body, self.conn.frame_max)
        if self.count_before_delivery:
            self._write_counted(queue, entry, data)
        else:
            self.conn.write(data)
