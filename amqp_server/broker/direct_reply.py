"""Direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`): RPC replies
without a reply queue.

A channel consumes the pseudo-queue `amq.rabbitmq.reply-to` (no-ack only)
and gets a name of its own, `amq.rabbitmq.reply-to.<token>`; a request it
publishes with that pseudo-queue as `reply_to` carries the name instead.  A
reply published through the default exchange with the name as routing key
goes straight to that channel; no queue holds it, so a name nobody answers
to any more drops it, and a mandatory reply is always returned too.
"""

from __future__ import annotations

import base64
import os

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."


def new_name() -> str:
    """Two base64 parts, as RabbitMQ's (there: the channel's node and
    process, and a guid); clients treat the name as opaque."""
    return PREFIX + ".".join(base64.b64encode(os.urandom(size)).decode() for size in (12, 16))


class DirectReplies:
    """The broker's reply consumers by the name their requests carry."""

    def __init__(self) -> None:
        self._channels: dict = {}

    def register(self, channel) -> str:
        name = new_name()
        self._channels[name] = channel
        return name

    def unregister(self, name: str) -> None:
        self._channels.pop(name, None)

    def knows(self, name: str) -> bool:
        return name in self._channels

    def deliver(self, message) -> None:
        """A message routed through the default exchange: each distinct
        routing key that names a reply consumer gets it (RabbitMQ delivers
        replies when routing, before queues and transactions see them)."""
        for key in set(message.routing_keys):
            if key.startswith(PREFIX):
                channel = self._channels.get(key)
                if channel is not None:
                    channel.deliver_reply(message)
