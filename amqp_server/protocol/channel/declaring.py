"""The channel's declaring part: exchange.* and queue.* methods, with the
permission checks RabbitMQ makes before each."""

from __future__ import annotations

from pamqp import commands as spec

from ...broker.access_control import check_not_default
from ...broker.permissions import CONFIGURE, READ
from ...wire.methods import make


class DeclaringPart:
    def _exchange_declare(self, method) -> None:
        if not method.passive:
            self.conn.grant.check_exchange_declare(
                method.exchange, method.arguments, method.exchange in self.vhost.exchanges)
        self.vhost.declare_exchange(
            method.exchange, method.exchange_type, method.passive, method.durable,
            method.auto_delete, method.internal, method.arguments)
        if not method.nowait:
            self.send(make(spec.Exchange.DeclareOk))

    def _exchange_delete(self, method) -> None:
        self._allow(CONFIGURE, "exchange", method.exchange)
        self.vhost.delete_exchange(method.exchange, method.if_unused)
        if not method.nowait:
            self.send(make(spec.Exchange.DeleteOk))

    def _exchange_bind(self, method) -> None:
        self._allow_binding("exchange", method.destination, method.source)
        destination = self._e2e_destination(method.destination, method.source)
        self.vhost.bind(method.source, destination, method.routing_key, method.arguments)
        if not method.nowait:
            self.send(make(spec.Exchange.BindOk))

    def _exchange_unbind(self, method) -> None:
        check_not_default(method.destination, method.source)
        self._allow_binding("exchange", method.destination, method.source)
        source = self.vhost.exchanges.get(method.source)
        destination = self.vhost.exchanges.get(method.destination)
        if source is not None and destination is not None:
            self.vhost.unbind(method.source, destination, method.routing_key, method.arguments)
        if not method.nowait:
            self.send(make(spec.Exchange.UnbindOk))

    def _e2e_destination(self, destination: str, source: str):
        check_not_default(destination, source)
        self.vhost.exchange(source)
        return self.vhost.exchange(destination)

    def _allow_binding(self, kind: str, destination: str, source: str) -> None:
        self.conn.grant.check_binding(kind, destination, source)

    def _queue_declare(self, method) -> None:
        vhost = self.vhost
        name = method.queue.replace("\r", "").replace("\n", "")
        if self._names_a_reply_queue(name):
            self._declare_reply_queue(name, method.nowait)
            return
        if not method.passive:
            self.conn.grant.check_queue_declare(name, method.arguments, name in vhost.queues)
        queue = vhost.declare_queue(
            name, self.conn, method.passive,
            method.durable, method.exclusive, method.auto_delete, method.arguments)
        if queue.exclusive_owner is self.conn:
            self.conn.exclusive_queues.add(queue)
        self.last_queue = queue.name
        if not method.nowait:
            self.send(make(spec.Queue.DeclareOk, queue=queue.name,
                           message_count=queue.message_count,
                           consumer_count=queue.consumer_count))

    def _queue_bind(self, method) -> None:
        name = self._queue_name(method.queue)
        routing_key = method.routing_key or (name if method.queue == "" else "")
        check_not_default(method.exchange)
        self._allow_binding("queue", name, method.exchange)
        self.vhost.exchange(method.exchange)
        queue = self._owned_queue(name)
        self.vhost.bind(method.exchange, queue, routing_key, method.arguments)
        if not method.nowait:
            self.send(make(spec.Queue.BindOk))

    def _queue_unbind(self, method) -> None:
        name = self._queue_name(method.queue)
        routing_key = method.routing_key or (name if method.queue == "" else "")
        check_not_default(method.exchange)
        self._allow_binding("queue", name, method.exchange)
        queue = self.vhost.queues.get(name)
        if queue is not None and method.exchange in self.vhost.exchanges:
            self.vhost.check_exclusive_access(queue, self.conn)
            self.vhost.unbind(method.exchange, queue, routing_key, method.arguments)
        self.send(make(spec.Queue.UnbindOk))

    def _queue_purge(self, method) -> None:
        self._allow(READ, "queue", self._queue_name(method.queue))
        queue = self._owned_queue(method.queue)
        count = queue.purge()
        if not method.nowait:
            self.send(make(spec.Queue.PurgeOk, message_count=count))

    def _queue_delete(self, method) -> None:
        self._allow(CONFIGURE, "queue", self._queue_name(method.queue))
        queue = self.vhost.queues.get(self._queue_name(method.queue))
        count = 0
        # As RabbitMQ: this channel's own consumers of the queue hear of it
        # after delete-ok (py-amqp raises a cancel that overtakes the reply).
        self._cancels_held = held = []
        try:
            if queue is not None:
                self.vhost.check_exclusive_access(queue, self.conn)
                count = self.vhost.delete_queue(queue, method.if_unused, method.if_empty)
                self.conn.exclusive_queues.discard(queue)
        finally:
            self._cancels_held = None
        if not method.nowait:
            self.send(make(spec.Queue.DeleteOk, message_count=count))
        for tag in held:
            self.send(make(spec.Basic.Cancel, consumer_tag=tag, nowait=True))
