"""A channel's consumers: basic.qos, consume, cancel and get.

Owns: the channel's consumers by tag, the prefetch that consumers created
next get (basic.qos global=false), and the cancel notifications held while
a queue.delete of the channel's own is answered.
Needs: the virtual host and the connection (the user's grant, the client's
capabilities), the channel's queue names, deliveries (basic.get's answer,
the channel-wide prefetch limit), direct reply-to (the pseudo-queue is
consumed there), output (replies), and the channel, which consumers
deliver through.

Interface: `qos`, `consume`, `cancel`, `cancel_ok` (4.3), `get`,
`consumer_cancelled` (the queue cancelled one), `has`, `timed_out` (a 4.3
consumer timeout), `queues`, `redispatch`, `hold_cancels`, `held_cancels`,
`close`, `prefetch`.
"""

from __future__ import annotations

from pamqp import commands as spec

from policies.deprecated_features import GLOBAL_QOS, permitted
from policies.registry import ArgumentError, validate_consume_arguments

from ...broker.direct_reply import PSEUDO_QUEUE
from ...broker.permissions import READ
from ...broker.queue.dispatch import is_single_active
from ...broker.stream import check_stream_consume
from ...broker.vhost import server_generated_name
from ...errors import (
    access_refused,
    not_allowed,
    not_implemented,
    precondition_failed,
    resource_name,
)
from ...wire.methods import make
from ..consumer import Consumer
from .access import allow
from .deliveries import Deliveries
from .names import QueueNames
from .output import ChannelOutput
from .replying import Replies


class Consuming:
    __slots__ = ("consumers", "prefetch", "_channel", "_conn", "_vhost", "_names",
                 "_deliveries", "_replies", "_output", "_cancels_held", "_closing")

    def __init__(self, channel, names: QueueNames, deliveries: Deliveries, replies: Replies,
                 output: ChannelOutput) -> None:
        self.consumers: dict[str, Consumer] = {}
        self.prefetch = 0  # basic.qos global=false: for consumers created after it
        self._channel = channel
        self._conn = channel.conn
        self._vhost = channel.vhost
        self._names = names
        self._deliveries = deliveries
        self._replies = replies
        self._output = output
        self._cancels_held: list[str] | None = None
        self._closing = False

    def queues(self) -> set:
        return {consumer.queue for consumer in self.consumers.values()}

    def redispatch(self) -> None:
        for queue in self.queues():
            queue.dispatch()

    def qos(self, method) -> None:
        if method.prefetch_size:
            raise not_implemented(f"prefetch_size!=0 ({method.prefetch_size})")
        # RabbitMQ 4.3 denies the deprecated global qos (global_qos is
        # denied_by_default): basic.qos global=true is taken as global=false.
        if method.global_ and permitted(GLOBAL_QOS, self._vhost.semantics, self._vhost.permits):
            self._deliveries.global_prefetch = method.prefetch_count
        else:
            self.prefetch = method.prefetch_count
            # RabbitMQ's quirk (rabbit_channel, unlimit_prefetch): a later
            # per-consumer qos lifts the channel-wide limit.
            self._deliveries.global_prefetch = 0
        self._output.send(make(spec.Basic.QosOk))
        self.redispatch()

    def consume(self, method) -> None:
        tag = method.consumer_tag
        if tag in self.consumers:
            raise not_allowed(f"attempt to reuse consumer tag '{tag}'")
        if method.queue == PSEUDO_QUEUE:
            self._replies.consume(method)
            return
        vhost = self._vhost
        allow(self._conn.grant, READ, "queue", self._names.resolve(method.queue))
        queue = self._names.owned_queue(method.queue)
        if queue.is_quorum and self._deliveries.global_prefetch:
            raise not_implemented(
                f"{resource_name('queue', queue.name, vhost.name)} does not support "
                "global qos")
        if queue.is_quorum and is_single_active(queue.consumers):
            exclusive = False  # a quorum queue ignores it (rabbit_quorum_queue:consume)
        elif queue.settings.is_stream:
            exclusive = False  # so does a stream (rabbit_stream_queue:consume)
        else:
            exclusive = method.exclusive
        if exclusive and queue.consumers or queue.exclusive_consumer is not None:
            raise access_refused(
                f"{resource_name('queue', queue.name, vhost.name)} in exclusive use")
        try:
            priority = validate_consume_arguments(method.arguments, queue.settings.queue_type,
                                                  queue.settings.semantics)
        except ArgumentError as error:
            raise precondition_failed(error.message(
                resource_name("queue", queue.name, vhost.name))) from None
        if queue.settings.is_stream:
            check_stream_consume(queue, method, self.prefetch, self._deliveries.global_prefetch)
        if not tag:
            tag = server_generated_name("amq.ctag")
        consumer = Consumer(tag, self._channel, queue, method.no_ack, exclusive,
                            self.prefetch, method.arguments, priority)
        self.consumers[tag] = consumer
        if not method.nowait:
            self._output.send(make(spec.Basic.ConsumeOk, consumer_tag=tag))
        queue.add_consumer(consumer, exclusive)

    def cancel(self, method) -> None:
        consumer = self.consumers.pop(method.consumer_tag, None)
        if consumer is not None:
            self._detach(consumer)
        else:
            self._replies.cancel(method.consumer_tag)
        if not method.nowait:
            self._output.send(make(spec.Basic.CancelOk, consumer_tag=method.consumer_tag))

    def get(self, method) -> None:
        allow(self._conn.grant, READ, "queue", self._names.resolve(method.queue))
        queue = self._names.owned_queue(method.queue)
        entry = queue.take_one()
        if entry is None:
            self._conn.broker.counters.get_empty[queue.settings.queue_type] += 1
            self._output.send(make(spec.Basic.GetEmpty))
            return
        self._deliveries.deliver_got(queue, entry, method.no_ack)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        """The queue went away under `consumer` (queue.delete, expiry): the
        client hears basic.cancel if it asked to."""
        if self.consumers.get(consumer.tag) is not consumer:
            return
        del self.consumers[consumer.tag]
        if self._conn.capabilities.get("consumer_cancel_notify") and not self._closing:
            if self._cancels_held is not None:
                self._cancels_held.append(consumer.tag)
            else:
                self._output.send(make(spec.Basic.Cancel, consumer_tag=consumer.tag,
                                       nowait=True))

    def cancels_notified(self) -> bool:
        """The client takes basic.cancel from the broker."""
        return bool(self._conn.capabilities.get("consumer_cancel_notify")) and not self._closing

    def has(self, consumer: Consumer) -> bool:
        """`consumer` is one of the channel's (not cancelled)."""
        return self.consumers.get(consumer.tag) is consumer

    def timed_out(self, consumer: Consumer, tags: list[int]) -> None:
        """A 4.3 quorum queue takes `consumer`'s overdue deliveries (`tags`)
        back: it stays, in a timeout, until its client settles them, and
        the client hears basic.cancel (rabbit_channel:handle_queue_actions/2
        sends it and keeps the consumer)."""
        consumer.timed_out.update(tags)
        consumer.queue.consumer_timed_out(consumer)
        self._output.send(make(spec.Basic.Cancel, consumer_tag=consumer.tag, nowait=True))

    def cancel_ok(self, method) -> None:
        """4.3: a client's basic.cancel-ok, its answer to the broker's
        basic.cancel, ends that consumer without a reply
        (rabbit_channel:handle_method/3 for basic.cancel_ok: cancel_consumer
        with no ok message).  For a tag the channel does not have,
        RabbitMQ's channel hands its writer an undefined reply; here
        nothing happens."""
        consumer = self.consumers.pop(method.consumer_tag, None)
        if consumer is not None:
            self._detach(consumer)

    def stop_delivering(self) -> None:
        """The channel closes for a consumer timeout: nothing more is
        delivered to it meanwhile."""
        self._channel.closing = True

    def hold_cancels(self) -> None:
        """Cancels of consumers from now on wait for `held_cancels` (as
        RabbitMQ, a channel's own consumers of a queue it deletes hear of it
        after delete-ok: py-amqp raises a cancel that overtakes the reply)."""
        self._cancels_held = []

    def held_cancels(self) -> list[str]:
        """The consumer tags whose cancels were held; holding stops."""
        held, self._cancels_held = self._cancels_held or [], None
        return held

    def close(self) -> None:
        """The channel closes: no more cancel notifications."""
        self._closing = True

    def detach_all(self) -> None:
        """The channel closed: its consumers leave their queues."""
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            self._detach(consumer)

    def _detach(self, consumer: Consumer) -> None:
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.auto_delete_due:
            self._vhost.remove_queue(queue)
        elif queue.auto_created and not queue.consumers:
            self._vhost.auto_created.consumer_left(queue)
