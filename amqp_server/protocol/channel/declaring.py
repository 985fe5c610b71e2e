"""A channel's declarations: exchange.* and queue.* methods, with the
permission checks RabbitMQ makes before each.

Owns nothing of its own: what it changes lives in the virtual host.
Needs: the virtual host and the connection (the user's grant, its
exclusive queues), the channel's queue names (the last declared one),
consumers (their cancels wait for queue.delete-ok), direct reply-to (the
pseudo-queue's declares) and output (replies).

Interface: one method per exchange.* and queue.* method.
"""

from __future__ import annotations

from pamqp import commands as spec

from ...broker.access_control import check_not_default
from ...broker.permissions import CONFIGURE, READ
from ...wire.methods import make
from .access import allow
from .consuming import Consuming
from .names import QueueNames
from .output import ChannelOutput
from .replying import Replies


class Declaring:
    __slots__ = ("_vhost", "_conn", "_names", "_consuming", "_replies", "send")

    def __init__(self, vhost, connection, names: QueueNames, consuming: Consuming,
                 replies: Replies, output: ChannelOutput) -> None:
        self._vhost = vhost
        self._conn = connection
        self._names = names
        self._consuming = consuming
        self._replies = replies
        self.send = output.send

    def exchange_declare(self, method) -> None:
        if not method.passive:
            self._conn.grant.check_exchange_declare(
                method.exchange, method.arguments, method.exchange in self._vhost.exchanges)
        self._vhost.declare_exchange(
            method.exchange, method.exchange_type, method.passive, method.durable,
            method.auto_delete, method.internal, method.arguments)
        if not method.nowait:
            self.send(make(spec.Exchange.DeclareOk))

    def exchange_delete(self, method) -> None:
        allow(self._conn.grant, CONFIGURE, "exchange", method.exchange)
        self._vhost.delete_exchange(method.exchange, method.if_unused)
        if not method.nowait:
            self.send(make(spec.Exchange.DeleteOk))

    def exchange_bind(self, method) -> None:
        self._allow_binding("exchange", method.destination, method.source)
        destination = self._e2e_destination(method.destination, method.source)
        self._vhost.bind(method.source, destination, method.routing_key, method.arguments)
        if not method.nowait:
            self.send(make(spec.Exchange.BindOk))

    def exchange_unbind(self, method) -> None:
        check_not_default(method.destination, method.source)
        self._allow_binding("exchange", method.destination, method.source)
        source = self._vhost.exchanges.get(method.source)
        destination = self._vhost.exchanges.get(method.destination)
        if source is not None and destination is not None:
            self._vhost.unbind(method.source, destination, method.routing_key, method.arguments)
        if not method.nowait:
            self.send(make(spec.Exchange.UnbindOk))

    def _e2e_destination(self, destination: str, source: str):
        check_not_default(destination, source)
        self._vhost.exchange(source)
        return self._vhost.exchange(destination)

    def _allow_binding(self, kind: str, destination: str, source: str) -> None:
        self._conn.grant.check_binding(kind, destination, source)

    def queue_declare(self, method) -> None:
        vhost = self._vhost
        name = method.queue.replace("\r", "").replace("\n", "")
        if self._replies.names_reply_queue(name):
            # The pseudo-queue, or a reply name while its consumer is
            # there: 0 messages, 1 consumer.
            self._replies.check_declare(name)
            self._names.declared(name)
            if not method.nowait:
                self.send(make(spec.Queue.DeclareOk, queue=name, message_count=0,
                               consumer_count=1))
            return
        if not method.passive:
            self._conn.grant.check_queue_declare(name, method.arguments, name in vhost.queues)
        queue = vhost.declare_queue(
            name, self._conn, method.passive,
            method.durable, method.exclusive, method.auto_delete, method.arguments)
        if queue.exclusive_owner is self._conn:
            self._conn.exclusive_queues.add(queue)
        self._names.declared(queue.name)
        if not method.nowait:
            self.send(make(spec.Queue.DeclareOk, queue=queue.name,
                           message_count=queue.message_count,
                           consumer_count=queue.consumer_count))

    def queue_bind(self, method) -> None:
        name = self._names.resolve(method.queue)
        routing_key = method.routing_key or (name if method.queue == "" else "")
        check_not_default(method.exchange)
        self._allow_binding("queue", name, method.exchange)
        self._vhost.exchange(method.exchange)
        queue = self._names.owned_queue(name)
        self._vhost.bind(method.exchange, queue, routing_key, method.arguments)
        if not method.nowait:
            self.send(make(spec.Queue.BindOk))

    def queue_unbind(self, method) -> None:
        name = self._names.resolve(method.queue)
        routing_key = method.routing_key or (name if method.queue == "" else "")
        check_not_default(method.exchange)
        self._allow_binding("queue", name, method.exchange)
        queue = self._vhost.queues.get(name)
        if queue is not None and method.exchange in self._vhost.exchanges:
            self._vhost.check_exclusive_access(queue, self._conn)
            self._vhost.unbind(method.exchange, queue, routing_key, method.arguments)
        self.send(make(spec.Queue.UnbindOk))

    def queue_purge(self, method) -> None:
        allow(self._conn.grant, READ, "queue", self._names.resolve(method.queue))
        queue = self._names.owned_queue(method.queue)
        count = queue.purge()
        if not method.nowait:
            self.send(make(spec.Queue.PurgeOk, message_count=count))

    def queue_delete(self, method) -> None:
        allow(self._conn.grant, CONFIGURE, "queue", self._names.resolve(method.queue))
        queue = self._vhost.queues.get(self._names.resolve(method.queue))
        count = 0
        # As RabbitMQ: this channel's own consumers of the queue hear of it
        # after delete-ok (py-amqp raises a cancel that overtakes the reply).
        self._consuming.hold_cancels()
        try:
            if queue is not None:
                self._vhost.check_exclusive_access(queue, self._conn)
                count = self._vhost.delete_queue(queue, method.if_unused, method.if_empty)
                self._conn.exclusive_queues.discard(queue)
        finally:
            held = self._consuming.held_cancels()
        if not method.nowait:
            self.send(make(spec.Queue.DeleteOk, message_count=count))
        for tag in held:
            self.send(make(spec.Basic.Cancel, consumer_tag=tag, nowait=True))
