"""A consumer: one basic.consume on one channel, with its prefetch window.

What a queue's dispatch asks of it (broker/queue/dispatch.py): `can_take`,
`room`, `output_room`, `take`, `take_many`, `cancelled_by_broker`.  The
room for writing is its connection's flow control (protocol/flow.py).

`timed_out` holds the delivery tags a RabbitMQ 4.3 consumer timeout took
back from it and its client has not settled yet: while there are any, it
takes nothing (rabbit_fifo's `timeout` status; channel/ack_deadline.py)."""

from __future__ import annotations

from ..wire.frames import shortstr

# Deliveries handed over in one batch when neither prefetch nor a global
# limit bounds them; the connection's output limit still applies between
# batches.
ROOM_CEILING = 1000


class Consumer:
    __slots__ = ("tag", "tag_bytes", "channel", "deliveries", "flow", "queue", "no_ack",
                 "exclusive", "prefetch", "unacked", "arguments", "priority", "timed_out")

    def __init__(self, tag: str, channel, queue, no_ack: bool, exclusive: bool,
                 prefetch: int, arguments, priority: int = 0) -> None:
        self.tag = tag
        self.tag_bytes = shortstr(tag)  # encoded once, written on every delivery
        self.channel = channel
        self.deliveries = channel.deliveries  # the channel's part that delivers
        self.flow = channel.flow
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        # basic.qos global=false applies to consumers created after it.
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments
        self.priority = priority  # x-priority: served before lower ones while it has room
        self.timed_out: set[int] = set()

    def can_take(self) -> bool:
        if self.prefetch and self.unacked >= self.prefetch and not self.no_ack:
            return False
        if self.timed_out:
            return False
        # The channel's limits, read in place: this runs once per delivery.
        channel = self.channel
        deliveries = self.deliveries
        return (not channel.closing
                and (not deliveries.global_prefetch
                     or len(deliveries.unacked) < deliveries.global_prefetch)
                and self.flow.can_deliver(channel.number))

    def room(self) -> int:
        """How many messages this consumer may take now: its prefetch window
        (and the channel's), or ROOM_CEILING at a time without one."""
        if not self.can_take():
            return 0
        room = ROOM_CEILING
        if self.prefetch and not self.no_ack:
            room = self.prefetch - self.unacked
        deliveries = self.deliveries
        if deliveries.global_prefetch:
            room = min(room, deliveries.global_prefetch - len(deliveries.unacked))
        return room

    def output_room(self) -> int:
        """Bytes of deliveries the connection may still queue for the peer."""
        return self.flow.room()

    def take(self, queue, entry) -> None:
        self.deliveries.deliver(self, queue, entry)

    def take_many(self, queue, entries: list) -> None:
        self.deliveries.deliver_many(self, queue, entries)

    def cancelled_by_broker(self) -> None:
        """The queue went away under this consumer (queue.delete, expiry)."""
        self.channel.consumer_cancelled(self)
