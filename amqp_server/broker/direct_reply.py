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

from ..wire.frames import shortstr
from ..wire.properties import property_span
from .message import HEADER_PREFIX

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."
_PSEUDO_QUEUE = PSEUDO_QUEUE.encode()


def new_name() -> str:
    """Two base64 parts, as RabbitMQ's (there: the channel's node and
    process, and a guid); clients treat the name as opaque."""
    return PREFIX + ".".join(base64.b64encode(os.urandom(size)).decode() for size in (12, 16))


def asks_for_replies(header: bytes) -> bool:
    """Whether a request's reply_to names the pseudo-queue."""
    span = property_span(header, HEADER_PREFIX, "reply_to")
    return span is not None and header[span[0] + 1:span[1]] == _PSEUDO_QUEUE


def name_replies(message, name: str) -> None:
    """The request carries its publisher's reply name as its reply_to
    (found again: reading the headers may have re-encoded the header)."""
    header = message.header
    start, end = property_span(header, HEADER_PREFIX, "reply_to")
    message.set_header(header[:start] + shortstr(name) + header[end:])


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
