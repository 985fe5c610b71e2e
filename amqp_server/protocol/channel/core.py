"""One AMQP channel, built from parts with one concern each: publishing,
confirms, consuming, settling, declaring and transactions.

The channel talks to the broker model (virtual host, queues) directly and
writes frames into its connection's output buffer; it performs no I/O.
Errors are raised as `AMQPError`; the connection turns a soft one into
channel.close and a hard one into connection.close.
"""

from __future__ import annotations

from collections import deque

from pamqp import commands as spec

from ...storage.definition_log import NO_JOURNAL
from ...errors import AMQPError, unexpected_frame
from ...wire import frames
from ...wire.methods import make
from ..consumer import Consumer

from .ack_deadline import AckDeadlinePart
from .confirms import ConfirmsPart
from .consuming import ConsumingPart
from .declaring import DeclaringPart
from .publishing import PublishingPart
from .replying import ReplyingPart
from .settling import SettlingPart
from .transactions import TransactionsPart


class Channel(PublishingPart, ConfirmsPart, ConsumingPart, SettlingPart, DeclaringPart,
              TransactionsPart, AckDeadlinePart, ReplyingPart):
    def __init__(self, connection, number: int) -> None:
        self.conn = connection
        self.flow = connection.flow
        self.number = number
        self.vhost = connection.vhost
        self.closing = False
        self.active = True  # channel.flow
        self.consumers: dict[str, Consumer] = {}
        # delivery tag -> (queue, entry, consumer or None for basic.get)
        self.unacked: dict[int, tuple] = {}
        self.next_tag = 1
        self._ack_marks: deque[tuple[int, float]] = deque()  # (next tag, ms): ack_deadline
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
        self._cancels_held: list[str] | None = None  # during queue.delete (declaring)
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

    def send(self, method) -> None:
        frame = frames.method_frame(self.number, method)
        journal = self._journal
        if self._held or (journal.replicating and journal.written > journal.synced):
            # A clustered leader: what a reply promises (a durable queue
            # declared, a binding made) is on every in-sync copy before the
            # reply goes; later replies wait behind it, in order.
            self._held.append((0, journal.written, frame))
            self._wait_for_disk(0, journal.written)
            return
        self.conn.write(frame)

    def can_deliver(self) -> bool:
        return (self.active and not self.closing
                and (not self.global_prefetch or len(self.unacked) < self.global_prefetch)
                and self.flow.can_write())

    def handle_method(self, method) -> None:
        if self._publish is not None:
            raise unexpected_frame(
                "expected content header for class 60, got non content header frame instead")
        handler = self._handlers.get(type(method))
        if handler is None:
            raise AMQPError(540, f"unimplemented method {method.name}")
        handler(method)

    def _channel_flow(self, method) -> None:
        # RabbitMQ refuses active=false (540); we honour it as the spec asks:
        # deliveries pause until the client sends active=true again.
        self.active = method.active
        self.send(make(spec.Channel.FlowOk, active=method.active))
        if self.active:
            self.redispatch()

    def release(self) -> None:
        """Channel closing: requeue what is unacknowledged, then cancel the
        consumers (as RabbitMQ, so that a single active consumer's successor
        gets the returned messages first: they are back before it starts)."""
        self.closing = True
        self._publish = None
        self._header = None
        self._body = []
        taken = list(self.unacked.items())
        self.unacked.clear()
        if self.tx:
            taken.extend(pair for action in self.tx if action[0] != "publish"
                         for pair in action[1])
            self.tx = None
        self._requeue(sorted(taken, key=lambda pair: pair[0]), by_client=False)
        self._stop_replies()
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            self._detach(consumer)
