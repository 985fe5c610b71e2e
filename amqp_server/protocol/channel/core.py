"""One AMQP channel, composed of parts with one concern each, every part an
object that owns its state and says at its top what it owns and needs:

- output.py: what the channel writes, some of it held until on disk;
- deliveries.py: deliveries, their tags, and acks/rejects/recover on them;
- consuming.py: consumers, basic.qos and basic.get;
- publishing.py: a publish's frames assembled and handed to the vhost;
- confirms.py: returns and publisher confirms;
- transactions.py: tx.select/commit/rollback;
- declaring.py (and names.py): exchange.* and queue.*;
- replying.py: direct reply-to;
- ack_deadline.py: the consumer timeout.

The channel builds them, hands each the others it needs, and dispatches
methods to them; the parts call each other's public methods only.  It
talks to the broker model (virtual host, queues) and writes frames into
its connection's output buffer; it performs no I/O.  Errors are raised as
`AMQPError`; the connection turns a soft one into channel.close and a hard
one into connection.close.
"""

from __future__ import annotations

from pamqp import commands as spec

from dlx.redelivery import CLOSED, NACKED, RECOVERED, REJECTED
from dlx.semantics import is_4x

from ...errors import AMQPError, not_implemented
from ...storage.definition_log import NO_JOURNAL
from ...wire.methods import make
from ..consumer import Consumer
from ..flow import ChannelCredit
from .ack_deadline import AckDeadline
from .confirms import Confirms
from .consuming import Consuming
from .declaring import Declaring
from .deliveries import Deliveries, Taken
from .names import QueueNames
from .output import ChannelOutput
from .publishing import Publishing, out_of_place
from .replying import Replies
from .transactions import Transactions


class Channel:
    def __init__(self, connection, number: int) -> None:
        self.conn = connection
        self.flow = connection.flow
        self.number = number
        self.vhost = vhost = connection.vhost
        self.closing = False
        broker = connection.broker
        self.output = output = ChannelOutput(number, connection, broker.journal or NO_JOURNAL,
                                             self)
        self.confirms = confirms = Confirms(number, connection, output, self)
        self.deliveries = deliveries = Deliveries(
            number, connection, output, broker.config.persist_delivery_count_before_delivery,
            self._consumed_queues)
        self.replies = replies = Replies(number, connection, output, deliveries)
        self.transactions = transactions = Transactions(number, vhost, confirms, deliveries,
                                                        output)
        self.names = names = QueueNames(vhost, connection)
        self.consuming = consuming = Consuming(self, names, deliveries, replies, output)
        self.declaring = declaring = Declaring(vhost, connection, names, consuming, replies,
                                               output)
        self.publishing = publishing = Publishing(vhost, connection, confirms, transactions,
                                                  replies, ChannelCredit(self.flow, number))
        self.ack_deadline = AckDeadline(number, deliveries, connection.config,
                                        vhost.semantics if vhost is not None else "3.13",
                                        consuming)
        # The connection's calls, straight to the part that answers them.
        self.start_publish = publishing.start
        self.content_header = publishing.content_header
        self.content_body = publishing.content_body
        self.publish = publishing.publish
        self.publish_run = publishing.publish_run
        self.flush_confirms = confirms.flush
        self.overdue = self.ack_deadline.overdue
        self.redispatch = consuming.redispatch
        self.consumer_cancelled = consuming.consumer_cancelled
        self._handlers = {
            spec.Basic.Qos: consuming.qos,
            spec.Basic.Consume: consuming.consume,
            spec.Basic.Cancel: consuming.cancel,
            spec.Basic.Get: consuming.get,
            spec.Basic.Ack: self._basic_ack,
            spec.Basic.Reject: self._basic_reject,
            spec.Basic.Nack: self._basic_nack,
            spec.Basic.Recover: self._basic_recover,
            spec.Basic.RecoverAsync: self._basic_recover_async,
            spec.Exchange.Declare: declaring.exchange_declare,
            spec.Exchange.Delete: declaring.exchange_delete,
            spec.Exchange.Bind: declaring.exchange_bind,
            spec.Exchange.Unbind: declaring.exchange_unbind,
            spec.Queue.Declare: declaring.queue_declare,
            spec.Queue.Bind: declaring.queue_bind,
            spec.Queue.Unbind: declaring.queue_unbind,
            spec.Queue.Purge: declaring.queue_purge,
            spec.Queue.Delete: declaring.queue_delete,
            spec.Tx.Select: lambda method: transactions.select(),
            spec.Tx.Commit: lambda method: transactions.commit(),
            spec.Tx.Rollback: lambda method: transactions.rollback(),
            spec.Confirm.Select: lambda method: confirms.select(
                method.nowait, transactions.actions is not None),
            spec.Channel.Flow: self._channel_flow,
            spec.Channel.FlowOk: lambda method: None,
        }
        if vhost is not None and is_4x(vhost.semantics):
            # A client's answer to the broker's basic.cancel (RabbitMQ 4.3:
            # rabbit_channel:handle_method/3 for basic.cancel_ok).
            self._handlers[spec.Basic.CancelOk] = consuming.cancel_ok

    # ---- what the connection and management read -----------------------

    @property
    def unacked(self) -> dict[int, tuple]:
        return self.deliveries.unacked

    @property
    def global_prefetch(self) -> int:
        return self.deliveries.global_prefetch

    @property
    def consumers(self) -> dict[str, Consumer]:
        return self.consuming.consumers

    @property
    def consumer_prefetch(self) -> int:
        return self.consuming.prefetch

    @property
    def confirm(self) -> bool:
        return self.confirms.on

    @property
    def tx(self) -> list | None:
        return self.transactions.actions

    def takes_whole_publishes(self) -> bool:
        """May publishes read whole with their content go to `publish`? Not
        while content is assembled frame by frame or in a transaction."""
        return self.transactions.actions is None and not self.publishing.assembling()

    # ---- methods -------------------------------------------------------

    def content_due(self) -> int | None:
        """What the publish being assembled frame by frame waits for
        (Publishing.content_due)."""
        return self.publishing.content_due()

    def handle_method(self, method) -> None:
        if self.publishing.assembling():
            raise out_of_place(self.publishing.content_due())
        handler = self._handlers.get(type(method))
        if handler is None:
            # A method only the broker sends: rabbit_channel's last
            # handle_method clause, 503 COMMAND_INVALID (a connection error).
            raise AMQPError(503, "unimplemented method")
        handler(method)

    def _channel_flow(self, method) -> None:
        # RabbitMQ refuses active=false (540); we honour it as the spec asks:
        # deliveries pause until the client sends active=true again.
        self.flow.channel_flow(self.number, method.active)
        self.output.send(make(spec.Channel.FlowOk, active=method.active))
        if method.active:
            self.redispatch()

    def _basic_ack(self, method) -> None:
        self.ack(method.delivery_tag, method.multiple)

    def ack(self, tag: int, multiple: bool) -> None:
        self._acked(self.deliveries.take(tag, multiple))

    def ack_multiples(self, tags: list[int]) -> None:
        """Multiple basic.ack frames read back to back: when each names an
        outstanding tag above the one before, they settle what the last
        one alone would, in one step; otherwise one at a time (an unknown
        tag closes the channel after those before it settled)."""
        if len(tags) == 1 or self.deliveries.outstanding_ascending(tags):
            self.ack(tags[-1], True)
            return
        for tag in tags:
            self.ack(tag, True)

    def _basic_reject(self, method) -> None:
        self._rejected(self.deliveries.take(method.delivery_tag, False), method.requeue,
                       REJECTED)

    def _basic_nack(self, method) -> None:
        self._rejected(self.deliveries.take(method.delivery_tag, method.multiple),
                       method.requeue, NACKED)

    def settle_each(self, method_id: int, tags: list[int], requeue: bool) -> None:
        """Single basic.ack, basic.reject or basic.nack frames (`method_id`
        80, 90 or 120) read back to back: taken one by one, settled in one
        step.  An unknown tag settles those before it, then closes the
        channel, as one frame at a time would."""
        taken, error = self.deliveries.take_each(method_id, tags)
        if taken:
            if method_id == 80:
                self._acked(taken)
            else:
                self._rejected(taken, requeue, REJECTED if method_id == 90 else NACKED)
        if error is not None:
            raise error

    def _acked(self, taken: Taken) -> None:
        if self.transactions.actions is not None:
            self.transactions.ack(taken)
        else:
            self.deliveries.settle(taken)

    def _rejected(self, taken: Taken, requeue: bool, how: str) -> None:
        """`how`: REJECTED (basic.reject) or NACKED (basic.nack), which 4.3
        counts apart (dlx.redelivery.delivery_failed)."""
        if self.transactions.actions is not None:
            self.transactions.reject(taken, requeue, how)
        elif requeue:
            self.deliveries.requeue(taken, how)
        else:
            self.deliveries.discard(taken, how)

    def _basic_recover_async(self, method) -> None:
        if not method.requeue:
            raise not_implemented("requeue=false")
        self.deliveries.requeue(self.deliveries.take_all(), RECOVERED)

    def _basic_recover(self, method) -> None:
        self._basic_recover_async(method)
        self.output.send(make(spec.Basic.RecoverOk))

    # ---- callbacks -----------------------------------------------------

    def durable_progress(self) -> None:
        """The stores synced (they call the channel back): held replies and
        confirms waiting for them may go out."""
        self.output.release()
        self.confirms.durable_progress()

    def _consumed_queues(self):
        return self.consuming.queues()

    def release(self) -> None:
        """Channel closing: requeue what is unacknowledged, then cancel the
        consumers (as RabbitMQ, so that a single active consumer's successor
        gets the returned messages first: they are back before it starts)."""
        self.closing = True
        self.flow.channel_flow(self.number, True)
        self.confirms.close()
        self.output.close()
        self.consuming.close()
        self.publishing.reset()
        # First, so that no reply reaches the channel while its deliveries
        # go back (a requeue may dead-letter, and a dead letter may be one).
        self.replies.stop()
        taken = self.deliveries.take_all()
        taken.extend(self.transactions.abandon())
        self.deliveries.requeue(sorted(taken, key=lambda pair: pair[0]), CLOSED)
        self.consuming.detach_all()
