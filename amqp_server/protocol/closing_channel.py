"""A channel the broker has closed, until the client's channel.close-ok.

The spec lets the broker discard what arrives on a channel it has closed
until close-ok comes back.  RabbitMQ 3.10's channel in its `closing` state
(rabbit_channel.erl, handle_method) drops every command but two:
channel.close, which it answers with close-ok (both ends closed the channel
at once) and goes on waiting, and channel.close-ok, which frees the number;
channel.open is 504, as on any number in use.  Its reader assembles frames
into commands before the channel sees them (rabbit_command_assembler.erl),
closing or not, so content out of its place is the connection error it is
on an open channel: content with no basic.publish before it, a method
where a publish's content is due, a content header of another class.  A
channel closed amid a publish's content (a message over the size limit is
refused at its header) is followed from there: its body frames are due.

Owns: which frame is due next on the channel (Publishing.content_due's
values: a method, a publish's content header, or body octets).
Needs: nothing; the connection hands it every frame on the channel and
sends what the channel says (close-ok), raising what it raises.
"""

from __future__ import annotations

from ..errors import AMQPError
from ..wire.frames import BASIC_CLASS, CONTENT_HEADER_PREFIX
from .channel.publishing import BASIC_PUBLISH, HEADER_DUE, body_left, body_size, out_of_place

_PUBLISH_IDS = (BASIC_CLASS << 16 | 40).to_bytes(4, "big")
_HEADER_MIN = CONTENT_HEADER_PREFIX + 2  # class, weight, body size, a flag word


class ClosingChannel:
    __slots__ = ("_due",)

    def __init__(self, due: int | None = None) -> None:
        self._due = due

    def method(self, payload: bytes) -> None:
        """A method frame (payload from its class and method ids): dropped
        by the caller, unless content is due; a basic.publish makes its
        content due."""
        if self._due is not None:
            raise out_of_place(self._due)
        if payload.startswith(_PUBLISH_IDS):
            self._due = HEADER_DUE

    def content_header(self, payload: bytes) -> None:
        if self._due != HEADER_DUE:
            raise out_of_place(self._due)
        if len(payload) < _HEADER_MIN:
            raise AMQPError(501, "content header frame too short")
        try:
            self._due = body_size(payload) or None
        except AMQPError as error:
            raise error.for_method(*BASIC_PUBLISH) from None

    def content_body(self, payload: bytes) -> None:
        due = self._due
        if due is None or due == HEADER_DUE:
            raise out_of_place(due)
        try:
            self._due = body_left(due, payload) or None
        except AMQPError as error:
            raise error.for_method(*BASIC_PUBLISH) from None
