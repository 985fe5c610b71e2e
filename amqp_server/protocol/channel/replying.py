"""A channel's direct reply-to (broker/direct_reply.py): consuming the
pseudo-queue, replies delivered, and declares of the pseudo-queue, each as
rabbit_channel does them (requests whose reply_to names it are checked and
renamed by the publish path, broker/publishing.py).

Owns: the reply consumer (its tag, encoded once) and the name requests
carry while it is there.
Needs: the connection (`write`, `frame_max`, the broker's registry of reply
names), the channel's output (`send`) and its deliveries (`next_tag`: a
reply carries the tag the next delivery will also carry, as RabbitMQ's).

Interface: `consume`, `cancel`, `stop`, `check_declare`, `deliver_reply`
(called by the registry), `name`, `names_reply_queue`.
"""

from __future__ import annotations

from pamqp import commands as spec

from ...broker.direct_reply import PREFIX, PSEUDO_QUEUE
from ...broker.vhost import server_generated_name
from ...errors import not_found, precondition_failed, resource_name
from ...wire import frames
from ...wire.frames import shortstr
from ...wire.methods import make
from .deliveries import Deliveries
from .output import ChannelOutput


class Replies:
    __slots__ = ("number", "name", "_consumer", "_conn", "_output", "_deliveries")

    def __init__(self, number: int, connection, output: ChannelOutput,
                 deliveries: Deliveries) -> None:
        self.number = number
        # The name requests carry, what a reply_to naming the pseudo-queue
        # becomes (broker/publishing.py); None while no reply consumer.
        self.name: str | None = None
        self._consumer: tuple[str, bytes] | None = None  # (tag, its encoded form)
        self._conn = connection
        self._output = output
        self._deliveries = deliveries

    @staticmethod
    def names_reply_queue(name: str) -> bool:
        return name == PSEUDO_QUEUE or name.startswith(PREFIX)

    def consume(self, method) -> None:
        """basic.consume of the pseudo-queue."""
        if not method.no_ack:
            raise precondition_failed("reply consumer cannot acknowledge")
        if self._consumer is not None:
            raise precondition_failed("reply consumer already set")
        tag = method.consumer_tag or server_generated_name("amq.ctag")
        self.name = self._conn.broker.replies.register(self)
        self._consumer = (tag, shortstr(tag))
        if not method.nowait:
            self._output.send(make(spec.Basic.ConsumeOk, consumer_tag=tag))

    def cancel(self, tag: str) -> bool:
        """basic.cancel of the reply consumer; False for any other tag."""
        if self._consumer is None or self._consumer[0] != tag:
            return False
        self.stop()
        return True

    def stop(self) -> None:
        if self._consumer is not None:
            self._conn.broker.replies.unregister(self.name)
            self._consumer = None
            self.name = None

    def check_declare(self, name: str) -> None:
        """queue.declare of the pseudo-queue (always there) or of a reply
        name (there while its consumer is), else 404."""
        if name != PSEUDO_QUEUE and not self._conn.broker.replies.knows(name):
            raise not_found(f"no {resource_name('queue', name, self._conn.vhost.name)}")

    def deliver_reply(self, message) -> None:
        """A reply, as basic.deliver to the reply consumer: not tracked (no
        ack), and with the delivery tag the next delivery will also carry,
        as RabbitMQ's (its tag is not taken)."""
        if self._consumer is None:
            return
        self._output.write(frames.deliver(
            self.number, self._consumer[1], self._deliveries.next_tag, False, message.route,
            message.header, message.body, self._conn.frame_max))
