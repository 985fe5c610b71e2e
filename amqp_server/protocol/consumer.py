"""A consumer: one basic.consume on one channel, with its prefetch window."""

from __future__ import annotations

from ..wire.frames import shortstr


class Consumer:
    __slots__ = ("tag", "tag_bytes", "channel", "queue", "no_ack", "exclusive",
                 "prefetch", "unacked", "arguments")

    def __init__(self, tag: str, channel, queue, no_ack: bool, exclusive: bool,
                 prefetch: int, arguments) -> None:
        self.tag = tag
        self.tag_bytes = shortstr(tag)  # encoded once, written on every delivery
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        # basic.qos global=false applies to consumers created after it.
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments

    def can_take(self) -> bool:
        if self.prefetch and self.unacked >= self.prefetch and not self.no_ack:
            return False
        # Channel.can_deliver, inlined: this runs once per delivery.
        channel = self.channel
        return (channel.active and not channel.closing
                and (not channel.global_prefetch
                     or len(channel.unacked) < channel.global_prefetch)
                and channel.conn.can_write())

    def take(self, queue, entry) -> None:
        self.channel.deliver(self, queue, entry)

    def cancelled_by_broker(self) -> None:
        """The queue went away under this consumer (queue.delete, expiry)."""
        self.channel.consumer_cancelled(self)
