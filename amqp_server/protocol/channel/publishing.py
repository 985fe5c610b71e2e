"""The channel's publishing part: a publish's frames assembled, checked
(permissions, properties, user_id), routed and queued, one at a time or as
a run; mandatory returns."""

from __future__ import annotations

import struct

from ...broker.permissions import WRITE
from ...broker.message import (
    CHECK_FLAGS,
    HEADER_PREFIX,
    INSPECT_FLAGS,
    REPLY_TO_FLAG,
    USER_ID_FLAG,
    InvalidMessage,
    Message,
)
from ...broker.queue import REJECTED
from ...errors import (
    AMQPError,
    not_found,
    not_implemented,
    precondition_failed,
    resource_name,
    unexpected_frame,
    NO_ROUTE,
    SYNTAX_ERROR,
)
from ...wire import frames
from ...wire.properties import scan_properties, user_id

_BODY_SIZE = struct.Struct(">Q")
_HEADER_CLASS = struct.Struct(">H")


class PublishingPart:
    def start_publish(self, exchange: str, routing_key: str, route: bytes,
                      mandatory: bool, immediate: bool) -> None:
        if self._publish is not None:
            raise unexpected_frame(
                "expected content header for class 60, got non content header frame instead")
        if immediate:
            raise not_implemented("immediate=true")
        self._publish = (exchange, routing_key, route, mandatory)

    def content_header(self, payload: bytes) -> None:
        if self._publish is None or self._header is not None:
            raise unexpected_frame("expected method frame, got non method frame instead")
        if len(payload) < 14:
            raise AMQPError(501, "content header frame too short")
        (class_id,) = _HEADER_CLASS.unpack_from(payload, 0)
        if class_id != 60:
            raise AMQPError(505, f"content header for class {class_id}, expected 60")
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

    def content_body(self, payload: bytes) -> None:
        if self._header is None:
            raise unexpected_frame("expected method frame, got non method frame instead")
        left = self._body_left - len(payload)
        if left < 0:
            raise AMQPError(501, "content body exceeds the size its header declared")
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

    def _exchange_for_publish(self, name: str):
        self._allow(WRITE, "exchange", name)
        exchange = self.vhost.exchanges.get(name)
        if exchange is None:
            raise not_found(f"no {resource_name('exchange', name, self.vhost.name)}")
        if exchange.internal:  # the attribute first: this runs for every publish
            exchange.check_publishable()
        return exchange

    def _check_content(self, message: Message, layout=None) -> None:
        """What the properties must pass before routing, read only when the
        flags say they are there, in RabbitMQ's order: a reply_to naming
        direct reply-to needs a reply consumer, a `user_id` must name the
        logged-in user, then expiration and CC/BCC (406 when malformed)."""
        header = message.header
        names_replies = header[HEADER_PREFIX] & REPLY_TO_FLAG and self._asks_for_replies(header)
        if header[HEADER_PREFIX + 1] & USER_ID_FLAG:
            self._check_user_id(header)
        if header[HEADER_PREFIX] & INSPECT_FLAGS:
            try:
                message.inspect(layout)
            except InvalidMessage as exc:
                raise precondition_failed(str(exc)) from None
        if names_replies:
            self._name_replies(message)

    def _check_user_id(self, header: bytes) -> None:
        """Read in place, and once per header object: publishes that repeat
        their properties share one (connection._fused_publish)."""
        if header is not self._user_id_checked:
            self.conn.grant.check_user_id(user_id(header, HEADER_PREFIX))
            self._user_id_checked = header

    def publish(self, message: Message, mandatory: bool, layout=None) -> None:
        """`layout`: where scan_properties found its headers and expiration."""
        exchange = self._exchange_for_publish(message.exchange)
        header = message.header
        if header[HEADER_PREFIX] & CHECK_FLAGS or header[HEADER_PREFIX + 1] & USER_ID_FLAG:
            self._check_content(message, layout)
        self._enqueue(message, self._routed(exchange, message), mandatory)

    def _routed(self, exchange, message: Message):
        """`vhost.route`, and replies (direct reply-to) delivered on the way."""
        queues = self.vhost.route(exchange, message.routing_keys, message)
        if (not queues or len(message.routing_keys) > 1) and not exchange.name:
            self.conn.broker.replies.deliver(message)
        return queues

    def _enqueue(self, message: Message, queues, mandatory: bool) -> None:
        self.conn.broker.counters.publishes(1, bool(queues), mandatory, self.confirm)
        refused = False
        if queues:
            for queue in queues:
                if queue.enqueue(message) is REJECTED:
                    refused = True
        elif mandatory:
            self._return_unroutable(message)
        if self.confirm:
            self._confirm(message, refused)

    def _publish_in_tx(self, message: Message, mandatory: bool) -> None:
        """As RabbitMQ: a transactional publish is checked and routed when it
        arrives, and queued at commit to the queues it was routed to then, so
        an exchange deleted in between cannot fail the commit."""
        exchange = self._exchange_for_publish(message.exchange)
        self._check_content(message)
        queues = self._routed(exchange, message)
        self.tx.append(("publish", message, mandatory, [queue.name for queue in queues]))

    def publish_run(self, messages: list, mandatory: bool, layouts: list | None = None) -> None:
        """Messages published back to back to the same exchange with the
        same routing key (their properties may differ): routed once where
        nothing in them can route them apart, queued together where every
        queue they go to is plain.  The same outcome as `publish` for each:
        should one be refused, those before it are published first."""
        exchange = self._exchange_for_publish(messages[0].exchange)
        refusal = None
        checked = 0
        last_header = None
        for message in messages:
            header = message.header
            if header is not last_header and (header[HEADER_PREFIX] & CHECK_FLAGS
                                              or header[HEADER_PREFIX + 1] & USER_ID_FLAG):
                try:
                    self._check_content(message, layouts[checked] if layouts else None)
                except AMQPError as error:
                    refusal = error
                    break
            elif header is last_header:  # the same properties: the same findings
                message.found_as(messages[checked - 1])
            last_header = header
            checked += 1
        if checked:
            self._route_run(exchange, messages[:checked] if refusal else messages, mandatory)
        if refusal is not None:
            raise refusal

    def _route_run(self, exchange, messages: list, mandatory: bool) -> None:
        first = messages[0]
        keys = first.routing_keys
        if exchange.routes_by_content or any(
                m.routing_keys != keys or m.ttl is not None for m in messages):
            for message in messages:
                self._enqueue(message, self._routed(exchange, message), mandatory)
            return
        queues = self.vhost.route(exchange, keys, first)
        if (not queues or len(keys) > 1) and not exchange.name:
            for message in messages:
                self.conn.broker.replies.deliver(message)
        if not all(queue.plain for queue in queues):
            for message in messages:  # routed alike, queued one by one (limits, DLX)
                self._enqueue(message, queues, mandatory)
            return
        self.conn.broker.counters.publishes(len(messages), bool(queues), mandatory,
                                            self.confirm)
        for queue in queues:
            queue.enqueue_run(messages)
        if not queues and mandatory:
            for message in messages:
                self._return_unroutable(message)
        if self.confirm:
            for message in messages:
                self._confirm(message, False)

    def _return_unroutable(self, message: Message) -> None:
        self.conn.write(frames.basic_return(
            self.number, NO_ROUTE, "NO_ROUTE", message.route, message.header,
            message.body, self.conn.frame_max))
