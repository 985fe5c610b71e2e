"""The channel's direct reply-to part (broker/direct_reply.py): consuming
the pseudo-queue, replies delivered, and declares of the pseudo-queue, each
as rabbit_channel does them (requests whose reply_to names it are checked
and renamed by the publish path, broker/publishing.py)."""

from __future__ import annotations

from pamqp import commands as spec

from ...broker.direct_reply import PREFIX, PSEUDO_QUEUE
from ...broker.vhost import server_generated_name
from ...errors import not_found, precondition_failed, resource_name
from ...wire import frames
from ...wire.frames import shortstr
from ...wire.methods import make


class ReplyingPart:
    # (consumer tag, its encoded form) or None
    reply_consumer: tuple[str, bytes] | None = None
    # The name requests carry, what a reply_to naming the pseudo-queue
    # becomes (broker/publishing.py); None while no reply consumer.
    reply_name: str | None = None

    def _consume_replies(self, method) -> None:
        if not method.no_ack:
            raise precondition_failed("reply consumer cannot acknowledge")
        if self.reply_consumer is not None:
            raise precondition_failed("reply consumer already set")
        tag = method.consumer_tag or server_generated_name("amq.ctag")
        self.reply_name = self.conn.broker.replies.register(self)
        self.reply_consumer = (tag, shortstr(tag))
        if not method.nowait:
            self.send(make(spec.Basic.ConsumeOk, consumer_tag=tag))

    def _cancel_replies(self, tag: str) -> bool:
        """basic.cancel of the reply consumer; False for any other tag."""
        if self.reply_consumer is None or self.reply_consumer[0] != tag:
            return False
        self._stop_replies()
        return True

    def _stop_replies(self) -> None:
        if self.reply_consumer is not None:
            self.conn.broker.replies.unregister(self.reply_name)
            self.reply_consumer = None
            self.reply_name = None

    def _declare_reply_queue(self, name: str, nowait: bool) -> None:
        """queue.declare of the pseudo-queue (always there) or of a reply
        name (there while its consumer is): 0 messages, 1 consumer."""
        if name != PSEUDO_QUEUE and not self.conn.broker.replies.knows(name):
            raise not_found(f"no {resource_name('queue', name, self.vhost.name)}")
        self.last_queue = name
        if not nowait:
            self.send(make(spec.Queue.DeclareOk, queue=name, message_count=0,
                           consumer_count=1))

    def deliver_reply(self, message) -> None:
        """A reply, as basic.deliver to the reply consumer: not tracked (no
        ack), and with the delivery tag the next delivery will also carry,
        as RabbitMQ's (its tag is not taken)."""
        if self.closing or self.reply_consumer is None:
            return
        self.conn.write(frames.deliver(
            self.number, self.reply_consumer[1], self.next_tag, False, message.route,
            message.header, message.body, self.conn.frame_max))

    @staticmethod
    def _names_a_reply_queue(name: str) -> bool:
        return name == PSEUDO_QUEUE or name.startswith(PREFIX)
