"""One AMQP channel: content assembly, publishing, consumers, acks, confirms
and transactions.

The channel talks to the broker model (virtual host, queues) directly and
writes frames into its connection's output buffer; it performs no I/O.
Errors are raised as `AMQPError`; the connection turns a soft one into
channel.close and a hard one into connection.close.
"""

from __future__ import annotations

import struct
from collections import deque
from itertools import islice
from operator import itemgetter

from pamqp import commands as spec

from ..broker.access_control import check_not_default
from ..broker.permissions import CONFIGURE, READ, WRITE
from ..broker.message import (
    HEADER_PREFIX,
    INSPECT_FLAGS,
    USER_ID_FLAG,
    InvalidMessage,
    Message,
)
from ..broker.queue import REJECTED
from ..broker.vhost import server_generated_name
from ..storage.definition_log import NO_JOURNAL
from ..errors import (
    AMQPError,
    access_refused,
    not_allowed,
    not_found,
    not_implemented,
    precondition_failed,
    resource_name,
    unexpected_frame,
    NO_ROUTE,
    SYNTAX_ERROR,
)
from ..wire import frames
from ..wire.methods import make
from ..wire.properties import scan_properties, user_id
from .consumer import Consumer

_BODY_SIZE = struct.Struct(">Q")
_HEADER_CLASS = struct.Struct(">H")
# Parts of the (tag, (queue, entry, consumer)) pairs that `unacked` holds.
_RECORD = itemgetter(1)
_ENTRY = itemgetter(1)
_CONSUMER = itemgetter(2)


class Channel:
    def __init__(self, connection, number: int) -> None:
        self.conn = connection
        self.number = number
        self.vhost = connection.vhost
        self.closing = False
        self.active = True  # channel.flow
        self.consumers: dict[str, Consumer] = {}
        # delivery tag -> (queue, entry, consumer or None for basic.get)
        self.unacked: dict[int, tuple] = {}
        self.next_tag = 1
        self.consumer_prefetch = 0
        self.global_prefetch = 0
        self.confirm = False
        self.publish_seq = 0
        self.confirmed_upto = 0
        self._confirm_pending = False
        self._nacks: list[int] = []  # publish seqs a full queue refused
        # (publish seq, store generation): confirms that wait for an fsync
        # (publish seq, store generation, definition log generation):
        # confirms that wait for an fsync of the message and of the
        # definitions (its queue's declaration) changed before it.
        self._durable_waits: deque[tuple[int, int, int]] = deque()
        # persist-delivery-count-before-delivery: (store generation, frames)
        # of deliveries held until their count record is on disk, in order.
        self._held: deque[tuple[int, int, bytes]] = deque()
        self._journal = connection.broker.journal or NO_JOURNAL
        self.count_before_delivery = (connection.broker.config
                                      .persist_delivery_count_before_delivery)
        self.tx: list | None = None
        self.last_queue = ""
        self._user_id_checked = None  # the last header whose user_id passed
        # content being assembled: (exchange, routing key, route bytes, mandatory)
        self._publish: tuple | None = None
        self._header: bytes | None = None
        self._body: list[bytes] = []
        self._body_left = 0
        self._handlers = {
            spec.Basic.Qos: self._basic_qos,
            spec.Basic.Consume: self._basic_consume,
            spec.Basic.Cancel: self._basic_cancel,
            spec.Basic.Get: self._basic_get,
            spec.Basic.Ack: self._basic_ack,
            spec.Basic.Reject: self._basic_reject,
            spec.Basic.Nack: self._basic_nack,
            spec.Basic.Recover: self._basic_recover,
            spec.Basic.RecoverAsync: self._basic_recover_async,
            spec.Exchange.Declare: self._exchange_declare,
            spec.Exchange.Delete: self._exchange_delete,
            spec.Exchange.Bind: self._exchange_bind,
            spec.Exchange.Unbind: self._exchange_unbind,
            spec.Queue.Declare: self._queue_declare,
            spec.Queue.Bind: self._queue_bind,
            spec.Queue.Unbind: self._queue_unbind,
            spec.Queue.Purge: self._queue_purge,
            spec.Queue.Delete: self._queue_delete,
            spec.Tx.Select: self._tx_select,
            spec.Tx.Commit: self._tx_commit,
            spec.Tx.Rollback: self._tx_rollback,
            spec.Confirm.Select: self._confirm_select,
            spec.Channel.Flow: self._channel_flow,
            spec.Channel.FlowOk: lambda method: None,
        }

    # ---- output --------------------------------------------------------

    def send(self, method) -> None:
        self.conn.write(frames.method_frame(self.number, method))

    def can_deliver(self) -> bool:
        return (self.active and not self.closing
                and (not self.global_prefetch or len(self.unacked) < self.global_prefetch)
                and self.conn.can_write())

    def flush_confirms(self) -> None:
        """Confirm every publish handled so far whose persistent copies are
        on disk: one basic.ack for each run of accepted publishes, a
        basic.nack for each refused one."""
        self._confirm_pending = False
        if self.closing:
            return
        upto = self.publish_seq
        waits = self._durable_waits
        if waits:
            while waits and self._on_disk(waits[0][1], waits[0][2]):
                waits.popleft()
            if waits:
                upto = waits[0][0] - 1
                self._wait_for_disk(waits[0][1], waits[0][2])
        if upto <= self.confirmed_upto:
            return
        nacks = self._nacks
        while nacks and nacks[0] <= upto:
            seq = nacks.pop(0)
            if seq - 1 > self.confirmed_upto:
                self._write_ack(seq - 1)
            self.conn.write(frames.nack_frame(self.number, seq, False))
            self.confirmed_upto = seq
        if upto > self.confirmed_upto:
            self._write_ack(upto)

    def _on_disk(self, generation: int, definitions: int) -> bool:
        return (generation <= self.conn.broker.store.synced
                and definitions <= self._journal.synced)

    def _wait_for_disk(self, generation: int, definitions: int) -> None:
        if generation > self.conn.broker.store.synced:
            self.conn.broker.store.wait(self)
        if definitions > self._journal.synced:
            self._journal.wait(self)

    def durable_progress(self) -> None:
        """The store flushed: confirms and deliveries waiting for it may go out."""
        if self._held:
            self._release_held()
        if not self._confirm_pending and not self.closing:
            self._confirm_pending = True
            self.conn.confirms_due(self)

    def _write_ack(self, upto: int) -> None:
        multiple = upto - self.confirmed_upto > 1
        self.confirmed_upto = upto
        self.conn.write(frames.ack_frame(self.number, upto, multiple))

    # ---- method dispatch -----------------------------------------------

    def handle_method(self, method) -> None:
        if self._publish is not None:
            raise unexpected_frame(
                "expected content header for class 60, got non content header frame instead")
        handler = self._handlers.get(type(method))
        if handler is None:
            raise AMQPError(540, f"unimplemented method {method.name}")
        handler(method)

    # ---- publishing ----------------------------------------------------

    def start_publish(self, exchange: str, routing_key: str, route: bytes,
                      mandatory: bool, immediate: bool) -> None:
        if self._publish is not None:
            raise unexpected_frame(
                "expected content header for class 60, got non content header frame instead")
        if immediate:
            raise not_implemented("immediate=true")
        self._publish = (exchange, routing_key, route, mandatory)

    def content_header(self, payload: bytes) -> None:
        if self._publish is None or self._header is not None:
            raise unexpected_frame("expected method frame, got non method frame instead")
        if len(payload) < 14:
            raise AMQPError(501, "content header frame too short")
        (class_id,) = _HEADER_CLASS.unpack_from(payload, 0)
        if class_id != 60:
            raise AMQPError(505, f"content header for class {class_id}, expected 60")
        try:
            scan_properties(payload, HEADER_PREFIX)
        except ValueError as exc:
            raise AMQPError(SYNTAX_ERROR, f"malformed content header: {exc}") from None
        (size,) = _BODY_SIZE.unpack_from(payload, 4)
        limit = self.conn.config.max_message_size
        if size > limit:
            self._publish = None
            raise precondition_failed(
                f"message size {size} is larger than configured max size {limit}")
        if size == 0:
            self._complete(payload, b"")
        else:
            self._header = payload
            self._body_left = size

    def content_body(self, payload: bytes) -> None:
        if self._header is None:
            raise unexpected_frame("expected method frame, got non method frame instead")
        left = self._body_left - len(payload)
        if left < 0:
            raise AMQPError(501, "content body exceeds the size its header declared")
        if left == 0:
            if self._body:
                self._body.append(payload)
                payload = b"".join(self._body)
                self._body = []
            self._complete(self._header, payload)
        else:
            self._body.append(payload)
            self._body_left = left

    def _complete(self, header: bytes, body: bytes) -> None:
        exchange, routing_key, route, mandatory = self._publish
        self._publish = None
        self._header = None
        message = Message(exchange, routing_key, route, header, body)
        if self.tx is not None:
            self._publish_in_tx(message, mandatory)
        else:
            self.publish(message, mandatory)

    def _allow(self, kind: str, resource: str, name: str) -> None:
        """403 unless the user may `kind` (configure/write/read) the resource."""
        grant = self.conn.grant
        if not grant.unrestricted:
            grant.check(kind, resource, name)

    def _exchange_for_publish(self, name: str):
        self._allow(WRITE, "exchange", name)
        exchange = self.vhost.exchanges.get(name)
        if exchange is None:
            raise not_found(f"no {resource_name('exchange', name, self.vhost.name)}")
        if exchange.internal:  # the attribute first: this runs for every publish
            exchange.check_publishable()
        return exchange

    def _check_content(self, message: Message, layout=None) -> None:
        """What the properties must pass before routing, read only when the
        flags say they are there, in RabbitMQ's order: a `user_id` that must
        name the logged-in user, then expiration and CC/BCC (406 when
        malformed)."""
        header = message.header
        if header[HEADER_PREFIX + 1] & USER_ID_FLAG:
            self._check_user_id(header)
        if header[HEADER_PREFIX] & INSPECT_FLAGS:
            try:
                message.inspect(layout)
            except InvalidMessage as exc:
                raise precondition_failed(str(exc)) from None

    def _check_user_id(self, header: bytes) -> None:
        """Read in place, and once per header object: publishes that repeat
        their properties share one (connection._fused_publish)."""
        if header is not self._user_id_checked:
            self.conn.grant.check_user_id(user_id(header, HEADER_PREFIX))
            self._user_id_checked = header

    def publish(self, message: Message, mandatory: bool, layout=None) -> None:
        """`layout`: where scan_properties found its headers and expiration."""
        exchange = self._exchange_for_publish(message.exchange)
        header = message.header
        if header[HEADER_PREFIX] & INSPECT_FLAGS or header[HEADER_PREFIX + 1] & USER_ID_FLAG:
            self._check_content(message, layout)
        self._enqueue(message, self.vhost.route(exchange, message.routing_keys, message),
                      mandatory)

    def _enqueue(self, message: Message, queues, mandatory: bool) -> None:
        refused = False
        if queues:
            for queue in queues:
                if queue.enqueue(message) is REJECTED:
                    refused = True
        elif mandatory:
            self._return_unroutable(message)
        if self.confirm:
            self._confirm(message, refused)

    def _publish_in_tx(self, message: Message, mandatory: bool) -> None:
        """As RabbitMQ: a transactional publish is checked and routed when it
        arrives, and queued at commit to the queues it was routed to then, so
        an exchange deleted in between cannot fail the commit."""
        exchange = self._exchange_for_publish(message.exchange)
        self._check_content(message)
        queues = self.vhost.route(exchange, message.routing_keys, message)
        self.tx.append(("publish", message, mandatory, [queue.name for queue in queues]))

    def publish_run(self, messages: list, mandatory: bool, layouts: list | None = None) -> None:
        """Messages published back to back to the same exchange with the
        same routing key (their properties may differ): routed once where
        nothing in them can route them apart, queued together where every
        queue they go to is plain.  The same outcome as `publish` for each:
        should one be refused, those before it are published first."""
        exchange = self._exchange_for_publish(messages[0].exchange)
        refusal = None
        checked = 0
        last_header = None
        for message in messages:
            header = message.header
            if header is not last_header and (header[HEADER_PREFIX] & INSPECT_FLAGS
                                              or header[HEADER_PREFIX + 1] & USER_ID_FLAG):
                try:
                    self._check_content(message, layouts[checked] if layouts else None)
                except AMQPError as error:
                    refusal = error
                    break
            elif header is last_header:  # the same properties: the same findings
                previous = messages[checked - 1]
                message.ttl, message.routing_keys = previous.ttl, previous.routing_keys
                message.bcc = previous.bcc
            last_header = header
            checked += 1
        if checked:
            self._route_run(exchange, messages[:checked] if refusal else messages, mandatory)
        if refusal is not None:
            raise refusal

    def _route_run(self, exchange, messages: list, mandatory: bool) -> None:
        first = messages[0]
        keys = first.routing_keys
        route = self.vhost.route
        if exchange.routes_by_content or any(
                m.routing_keys != keys or m.ttl is not None for m in messages):
            for message in messages:
                self._enqueue(message, route(exchange, message.routing_keys, message),
                              mandatory)
            return
        queues = route(exchange, keys, first)
        if not all(queue.plain for queue in queues):
            for message in messages:  # routed alike, queued one by one (limits, DLX)
                self._enqueue(message, queues, mandatory)
            return
        for queue in queues:
            queue.enqueue_run(messages)
        if not queues and mandatory:
            for message in messages:
                self._return_unroutable(message)
        if self.confirm:
            for message in messages:
                self._confirm(message, False)

    def _return_unroutable(self, message: Message) -> None:
        self.conn.write(frames.basic_return(
            self.number, NO_ROUTE, "NO_ROUTE", message.route, message.header,
            message.body, self.conn.frame_max))

    def _confirm(self, message: Message, refused: bool) -> None:
        self.publish_seq += 1
        if refused:
            self._nacks.append(self.publish_seq)
        elif message.stored_gen is not None:
            self._durable_waits.append((self.publish_seq, message.stored_gen,
                                        self._journal.pending()))
        if not self._confirm_pending:
            self._confirm_pending = True
            self.conn.confirms_due(self)

    # ---- delivering ----------------------------------------------------

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

    def _release_held(self) -> None:
        held = self._held
        if self.closing:
            held.clear()  # the channel's unacked messages were requeued
            return
        while held and self._on_disk(held[0][0], held[0][1]):
            self.conn.write(held.popleft()[2])
        if held:
            self._wait_for_disk(held[0][0], held[0][1])

    def consumer_cancelled(self, consumer: Consumer) -> None:
        if self.consumers.get(consumer.tag) is not consumer:
            return
        del self.consumers[consumer.tag]
        if self.conn.capabilities.get("consumer_cancel_notify") and not self.closing:
            self.send(make(spec.Basic.Cancel, consumer_tag=consumer.tag, nowait=True))

    def redispatch(self) -> None:
        for queue in {c.queue for c in self.consumers.values()}:
            queue.dispatch()

    # ---- basic.* -------------------------------------------------------

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
        self.send(make(spec.Basic.QosOk))
        self.redispatch()

    def _basic_consume(self, method) -> None:
        tag = method.consumer_tag
        if tag in self.consumers:
            raise not_allowed(f"attempt to reuse consumer tag '{tag}'")
        self._allow(READ, "queue", self._queue_name(method.queue))
        queue = self._owned_queue(method.queue)
        if method.exclusive and queue.consumers or queue.exclusive_consumer is not None:
            raise access_refused(
                f"{resource_name('queue', queue.name, self.vhost.name)} in exclusive use")
        if not tag:
            tag = server_generated_name("amq.ctag")
        consumer = Consumer(tag, self, queue, method.no_ack, method.exclusive,
                            self.consumer_prefetch, method.arguments)
        self.consumers[tag] = consumer
        if not method.nowait:
            self.send(make(spec.Basic.ConsumeOk, consumer_tag=tag))
        queue.add_consumer(consumer, method.exclusive)

    def _basic_cancel(self, method) -> None:
        consumer = self.consumers.pop(method.consumer_tag, None)
        if consumer is not None:
            self._detach(consumer)
        if not method.nowait:
            self.send(make(spec.Basic.CancelOk, consumer_tag=method.consumer_tag))

    def _detach(self, consumer: Consumer) -> None:
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.auto_delete_due:
            self.vhost.remove_queue(queue)

    def _basic_get(self, method) -> None:
        self._allow(READ, "queue", self._queue_name(method.queue))
        queue = self._owned_queue(method.queue)
        entry = queue.take_one()
        if entry is None:
            self.send(make(spec.Basic.GetEmpty))
            return
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
        for queue, entries in by_queue.items():
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
        by_queue: dict = {}
        for _, (queue, entry, consumer) in taken:
            if consumer is not None:
                consumer.unacked -= 1
            by_queue.setdefault(queue, []).append(entry)
        for queue, entries in by_queue.items():
            if queue.deleted:
                queue.settle(entries)  # nowhere to go back to
            else:
                queue.requeue(entries, by_client)
        self._after_release(set(by_queue))

    def _discard(self, taken: list[tuple[int, tuple]]) -> None:
        """Rejected without requeue: the messages die with reason 'rejected'."""
        by_queue: dict = {}
        for _, (queue, entry, consumer) in taken:
            if consumer is not None:
                consumer.unacked -= 1
            by_queue.setdefault(queue, []).append(entry)
        for queue, entries in by_queue.items():
            if queue.deleted:
                queue.settle(entries)
            else:
                queue.reject(entries)
        self._after_release(set(by_queue))

    def _basic_recover_async(self, method) -> None:
        if not method.requeue:
            raise not_implemented("requeue=false")
        taken = list(self.unacked.items())
        self.unacked.clear()
        self._requeue(taken)

    def _basic_recover(self, method) -> None:
        self._basic_recover_async(method)
        self.send(make(spec.Basic.RecoverOk))

    # ---- exchange.* ----------------------------------------------------

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

    # ---- queue.* -------------------------------------------------------

    def _queue_declare(self, method) -> None:
        vhost = self.vhost
        name = method.queue.replace("\r", "").replace("\n", "")
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
        if queue is not None:
            self.vhost.check_exclusive_access(queue, self.conn)
            count = self.vhost.delete_queue(queue, method.if_unused, method.if_empty)
            self.conn.exclusive_queues.discard(queue)
        if not method.nowait:
            self.send(make(spec.Queue.DeleteOk, message_count=count))

    # ---- tx.* and confirm.* --------------------------------------------

    def _tx_select(self, method) -> None:
        if self.confirm:
            raise precondition_failed("cannot switch from confirm to tx mode")
        if self.tx is None:
            self.tx = []
        self.send(make(spec.Tx.SelectOk))

    def _tx_commit(self, method) -> None:
        if self.tx is None:
            raise precondition_failed("channel is not transactional")
        actions = self.tx
        generation = 0  # the store flush that makes the persistent ones durable
        done = 0
        try:
            for action in actions:
                if action[0] == "publish":
                    _, message, mandatory, names = action
                    queues = self.vhost.queues
                    self._enqueue(message, [queues[name] for name in names if name in queues],
                                  mandatory)
                    generation = max(generation, message.stored_gen or 0)
                elif action[0] == "ack":
                    self._settle(action[1])
                elif action[2]:
                    self._requeue(action[1])
                else:
                    self._discard(action[1])
                done += 1
        finally:
            # Should anything fail part-way, the acks and rejects not yet
            # applied stay in the transaction, and closing the channel puts
            # their messages back in their queues: none is lost.
            del actions[:done]
        commit_ok = frames.method_frame(self.number, make(spec.Tx.CommitOk))
        if generation:
            definitions = self._journal.pending()
            if self._held or not self._on_disk(generation, definitions):
                # As RabbitMQ: commit-ok once the persistent messages (and
                # their queues' declarations) are on disk.
                self._held.append((generation, definitions, commit_ok))
                self._wait_for_disk(generation, definitions)
                return
        self.conn.write(commit_ok)

    def _tx_rollback(self, method) -> None:
        if self.tx is None:
            raise precondition_failed("channel is not transactional")
        actions, self.tx = self.tx, []
        # Acks and rejects made inside the transaction are undone: those
        # deliveries are outstanding again (RabbitMQ).
        restored = [pair for action in actions if action[0] != "publish"
                    for pair in action[1]]
        if restored:
            merged = dict(self.unacked)
            merged.update(restored)
            self.unacked = dict(sorted(merged.items()))
        self.send(make(spec.Tx.RollbackOk))

    def _confirm_select(self, method) -> None:
        if self.tx is not None:
            raise precondition_failed("cannot switch from tx to confirm mode")
        self.confirm = True
        if not method.nowait:
            self.send(make(spec.Confirm.SelectOk))

    # ---- channel.* -----------------------------------------------------

    def _channel_flow(self, method) -> None:
        # RabbitMQ refuses active=false (540); we honour it as the spec asks:
        # deliveries pause until the client sends active=true again.
        self.active = method.active
        self.send(make(spec.Channel.FlowOk, active=method.active))
        if self.active:
            self.redispatch()

    # ---- teardown ------------------------------------------------------

    def release(self) -> None:
        """Channel closing: cancel consumers, requeue what is unacknowledged."""
        self.closing = True
        self._publish = None
        self._header = None
        self._body = []
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            self._detach(consumer)
        taken = list(self.unacked.items())
        self.unacked.clear()
        if self.tx:
            taken.extend(pair for action in self.tx if action[0] != "publish"
                         for pair in action[1])
            self.tx = None
        self._requeue(sorted(taken, key=lambda pair: pair[0]), by_client=False)
