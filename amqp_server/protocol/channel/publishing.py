"""A channel's publishes: a publish's frames assembled and handed to the
virtual host's one publish path (broker/publishing.py: checked, routed,
queued and counted there), one at a time or as a run, or to the open
transaction.

Owns: the publish being assembled (its basic.publish fields, content
header, body frames so far and the bytes still due).
Needs: the virtual host and the connection (the user's grant, the message
size limit), the channel's confirms (confirm mode; what the publisher
hears), transactions (a publish in a transaction waits for commit),
direct reply-to (the name a reply_to of the pseudo-queue becomes) and the
channel's credit (protocol/flow.py: the connection waits for a queue that
withholds credit).

Interface: `start`, `content_header`, `content_body` (frame by frame),
`publish` and `publish_run` (publishes read whole: the connection's fast
path, which skips the assembly but meets the same publish path; the tests
in tests/test_publish_runs.py hold the two to the same observable
outcome), `assembling`, `content_due`, `reset`.

What a channel expects next of a publish's content (`content_due`), and the
error for a frame out of its place (`out_of_place`), are also what the
connection follows on a channel it has closed, until close-ok
(protocol/closing_channel.py): RabbitMQ's reader assembles content before
any channel sees it, closing or not (rabbit_command_assembler.erl).
"""

from __future__ import annotations

import struct

from ...broker.message import HEADER_PREFIX, Message
from ...errors import (
    SYNTAX_ERROR,
    AMQPError,
    not_implemented,
    precondition_failed,
    unexpected_frame,
)
from ...wire.properties import scan_properties
from ..flow import ChannelCredit
from .confirms import Confirms
from .replying import Replies
from .transactions import Transactions

_BODY_SIZE = struct.Struct(">Q")
_HEADER_CLASS = struct.Struct(">H")
BASIC_PUBLISH = (60, 40)
# `content_due` when a basic.publish waits for its content header (a body
# due is its octets left; nothing due, None: a method comes next).
HEADER_DUE = -1


def out_of_place(due: int | None) -> AMQPError:
    """The error for a frame that is not the one `due`, worded and named
    as rabbit_command_assembler's: content with no publish before it names
    no method, anything amid a publish's content names basic.publish."""
    if due is None:
        return unexpected_frame("expected method frame, got non method frame instead")
    if due == HEADER_DUE:
        return unexpected_frame("expected content header for class 60, got non content "
                                "header frame instead").for_method(*BASIC_PUBLISH)
    return unexpected_frame("expected content body, got non content body frame "
                            "instead").for_method(*BASIC_PUBLISH)


def body_size(header: bytes) -> int:
    """The body size a content header announces, once it is basic's (60)."""
    (class_id,) = _HEADER_CLASS.unpack_from(header, 0)
    if class_id != 60:
        raise AMQPError(505, f"expected content header for class 60, "
                             f"got one for class {class_id} instead")
    return _BODY_SIZE.unpack_from(header, 4)[0]


def body_left(due: int, body: bytes) -> int:
    """Octets of a body still due after this body frame."""
    left = due - len(body)
    if left < 0:
        raise AMQPError(501, "content body frame exceeds remaining content size")
    return left


class Publishing:
    __slots__ = ("_publish", "_header", "_body", "_body_left", "_vhost", "_conn",
                 "_confirms", "_transactions", "_replies", "_credit")

    def __init__(self, vhost, connection, confirms: Confirms, transactions: Transactions,
                 replies: Replies, credit: ChannelCredit) -> None:
        # content being assembled: (exchange, routing key, route bytes, mandatory)
        self._publish: tuple | None = None
        self._header: bytes | None = None
        self._body: list[bytes] = []
        self._body_left = 0
        self._vhost = vhost
        self._conn = connection
        self._confirms = confirms
        self._transactions = transactions
        self._replies = replies
        self._credit = credit  # waits for the queues that withhold credit

    def assembling(self) -> bool:
        """Is a publish's content being read frame by frame?"""
        return self._publish is not None

    def content_due(self) -> int | None:
        """What the publish being assembled waits for: None (no publish),
        HEADER_DUE, or the octets of its body still due."""
        if self._publish is None:
            return None
        return HEADER_DUE if self._header is None else self._body_left

    def reset(self) -> None:
        """The channel closed: the content being assembled is dropped."""
        self._publish = None
        self._header = None
        self._body = []

    def start(self, exchange: str, routing_key: str, route: bytes, mandatory: bool,
              immediate: bool) -> None:
        """basic.publish: its content frames follow."""
        if self._publish is not None:
            raise out_of_place(self.content_due())
        if immediate:
            raise not_implemented("immediate=true")
        self._publish = (exchange, routing_key, route, mandatory)

    # Every frame of a publish's content belongs to its basic.publish: an
    # error raised while the content is assembled or the message carried
    # out (a missing or internal exchange, a wrong user_id, a size limit, a
    # malformed frame) names class 60, method 40, as RabbitMQ's command
    # assembler and channel do.  Content with no publish in progress names
    # no method (0, 0).

    def content_header(self, payload: bytes) -> None:
        if self._publish is None:
            raise out_of_place(None)
        if len(payload) < 14:  # not a header frame at all (rabbit_command_assembler)
            raise AMQPError(501, "content header frame too short")
        try:
            if self._header is not None:
                raise out_of_place(self._body_left)
            self._header_frame(payload)
        except AMQPError as error:
            raise error.for_method(*BASIC_PUBLISH) from None

    def content_body(self, payload: bytes) -> None:
        if self._publish is None:
            raise out_of_place(None)
        try:
            if self._header is None:
                raise out_of_place(HEADER_DUE)
            self._body_frame(payload)
        except AMQPError as error:
            raise error.for_method(*BASIC_PUBLISH) from None

    def _header_frame(self, payload: bytes) -> None:
        size = body_size(payload)
        try:
            scan_properties(payload, HEADER_PREFIX)
        except ValueError as exc:
            raise AMQPError(SYNTAX_ERROR, f"malformed content header: {exc}") from None
        limit = self._conn.config.max_message_size
        if size > limit:
            # The channel closes; its body frames are still on their way,
            # and the connection follows them until close-ok (content_due).
            self._header = payload
            self._body_left = size
            raise precondition_failed(
                f"message size {size} is larger than configured max size {limit}")
        if size == 0:
            self._complete(payload, b"")
        else:
            self._header = payload
            self._body_left = size

    def _body_frame(self, payload: bytes) -> None:
        left = body_left(self._body_left, payload)
        if left == 0:
            if self._body:
                self._body.append(payload)
                payload = b"".join(self._body)
                self._body = []
            assert self._header is not None
            self._complete(self._header, payload)
        else:
            self._body.append(payload)
            self._body_left = left

    def _complete(self, header: bytes, body: bytes) -> None:
        assert self._publish is not None
        exchange, routing_key, route, mandatory = self._publish
        self._publish = None
        self._header = None
        message = Message(exchange, routing_key, route, header, body)
        if self._transactions.actions is not None:
            self._transactions.publish(message, mandatory, self._conn.grant, self._replies.name)
        else:
            self.publish(message, mandatory)

    def publish(self, message: Message, mandatory: bool, layout=None) -> None:
        """`layout`: where scan_properties found its headers and expiration."""
        confirms = self._confirms
        outcome = self._vhost.publish(message, self._conn.grant, mandatory, confirms.on,
                                      self._replies.name, layout, self._credit)
        if mandatory or confirms.on:
            confirms.answer(message, outcome, mandatory)

    def publish_run(self, messages: list, mandatory: bool, layouts: list | None = None) -> None:
        """Messages published back to back to the same exchange with the
        same routing key, read together (the connection's on_publish_run): the
        same outcome as `publish` for each, answered in order."""
        confirms = self._confirms
        answering = mandatory or confirms.on
        self._vhost.publish_run(messages, self._conn.grant, mandatory, confirms.on,
                                self._replies.name, layouts,
                                confirms.answer if answering else None,
                                confirms.answer_run if answering else None, self._credit)
