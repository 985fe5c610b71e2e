"""The channel's publishing part: a publish's frames assembled and handed
to the virtual host's one publish path (broker/publishing.py: checked,
routed, queued and counted there), one at a time or as a run; what the
publisher hears back: mandatory returns and confirms."""

from __future__ import annotations

import struct

from ...broker.message import HEADER_PREFIX, Message
from ...errors import (
    NO_ROUTE,
    SYNTAX_ERROR,
    AMQPError,
    not_implemented,
    precondition_failed,
    unexpected_frame,
)
from ...wire import frames
from ...wire.properties import scan_properties

_BODY_SIZE = struct.Struct(">Q")
_HEADER_CLASS = struct.Struct(">H")
BASIC_PUBLISH = (60, 40)


class PublishingPart:
    def start_publish(self, exchange: str, routing_key: str, route: bytes,
                      mandatory: bool, immediate: bool) -> None:
        if self._publish is not None:
            raise unexpected_frame(
                "expected content body, got non content body frame instead"
                if self._header is not None else
                "expected content header for class 60, got non content header frame instead")
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
            raise unexpected_frame("expected method frame, got non method frame instead")
        if len(payload) < 14:  # not a header frame at all (rabbit_command_assembler)
            raise AMQPError(501, "content header frame too short")
        try:
            if self._header is not None:
                raise unexpected_frame(
                    "expected content body, got non content body frame instead")
            self._header_frame(payload)
        except AMQPError as error:
            raise error.for_method(*BASIC_PUBLISH) from None

    def content_body(self, payload: bytes) -> None:
        if self._publish is None:
            raise unexpected_frame("expected method frame, got non method frame instead")
        try:
            if self._header is None:
                raise unexpected_frame("expected content header for class 60, "
                                       "got non content header frame instead")
            self._body_frame(payload)
        except AMQPError as error:
            raise error.for_method(*BASIC_PUBLISH) from None

    def _header_frame(self, payload: bytes) -> None:
        (class_id,) = _HEADER_CLASS.unpack_from(payload, 0)
        if class_id != 60:
            raise AMQPError(505, f"expected content header for class 60, "
                                 f"got one for class {class_id} instead")
        try:
            scan_properties(payload, HEADER_PREFIX)
        except ValueError as exc:
            raise AMQPError(SYNTAX_ERROR, f"malformed content header: {exc}") from None
        (size,) = _BODY_SIZE.unpack_from(payload, 4)
        limit = self.conn.config.max_message_size
        if size > limit:
            self._publish = None
            raise precondition_failed(
                f"message size {size} is larger than configured max size {limit}")
        if size == 0:
            self._complete(payload, b"")
        else:
            self._header = payload
            self._body_left = size

    def _body_frame(self, payload: bytes) -> None:
        left = self._body_left - len(payload)
        if left < 0:
            raise AMQPError(501, "content body frame exceeds remaining content size")
        if left == 0:
            if self._body:
                self._body.append(payload)
                payload = b"".join(self._body)
                self._body = []
            self._complete(self._header, payload)
        else:
            self._body.append(payload)
            self._body_left = left

    def _complete(self, header: bytes, body: bytes) -> None:
        exchange, routing_key, route, mandatory = self._publish
        self._publish = None
        self._header = None
        message = Message(exchange, routing_key, route, header, body)
        if self.tx is not None:
            self._publish_in_tx(message, mandatory)
        else:
            self.publish(message, mandatory)

    def _allow(self, kind: str, resource: str, name: str) -> None:
        """403 unless the user may `kind` (configure/write/read) the resource."""
        grant = self.conn.grant
        if not grant.unrestricted:
            grant.check(kind, resource, name)

    def publish(self, message: Message, mandatory: bool, layout=None) -> None:
        """`layout`: where scan_properties found its headers and expiration."""
        outcome = self.vhost.publish(message, self.conn.grant, mandatory, self.confirm,
                                     self.reply_name, layout)
        if mandatory or self.confirm:
            self._answer(message, outcome, mandatory)

    def publish_run(self, messages: list, mandatory: bool, layouts: list | None = None) -> None:
        """Messages published back to back to the same exchange with the
        same routing key, read together (connection._fused_publish): the
        same outcome as `publish` for each, answered in order."""
        self.vhost.publish_run(messages, self.conn.grant, mandatory, self.confirm,
                               self.reply_name, layouts,
                               self._answer if mandatory or self.confirm else None)

    def _publish_in_tx(self, message: Message, mandatory: bool) -> None:
        """Checked and routed when it arrives, queued at commit (transactions)."""
        routed = self.vhost.check_and_route(message, self.conn.grant, self.reply_name)
        self.tx.append(("publish", routed, mandatory))

    def _return_unroutable(self, message: Message) -> None:
        self.conn.write(frames.basic_return(
            self.number, NO_ROUTE, "NO_ROUTE", message.route, message.header,
            message.body, self.conn.frame_max))
