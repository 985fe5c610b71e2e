"""A published message as the broker holds it: wire bytes plus routing data.

`header` is the content header payload exactly as the publisher sent it
(class, weight, body size, property flags and values) and `route` the
encoded exchange and routing-key shortstrs exactly as they appeared in
basic.publish.  Both are copied into basic.deliver / basic.get-ok /
basic.return unchanged, so a message that is only routed and delivered is
never decoded or re-encoded.  `properties` decodes on first use.
"""

from __future__ import annotations

from ..wire.properties import Properties, decode_properties

# class id (2) + weight (2) + body size (8) precede the property flags.
HEADER_PREFIX = 12


class Message:
    __slots__ = ("exchange", "routing_key", "route", "header", "body", "_properties")

    def __init__(self, exchange: str, routing_key: str, route: bytes,
                 header: bytes, body: bytes) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.route = route
        self.header = header
        self.body = body
        self._properties: Properties | None = None

    @property
    def body_size(self) -> int:
        return len(self.body)

    @property
    def properties(self) -> Properties:
        props = self._properties
        if props is None:
            props = self._properties = decode_properties(self.header[HEADER_PREFIX:])
        return props

    @property
    def headers(self) -> dict:
        return self.properties.headers or {}

    @property
    def persistent(self) -> bool:
        return self.properties.delivery_mode == 2


class Entry:
    """One message's place in one queue; the same message routed to several
    queues gets an entry in each, with its own redelivered flag."""

    __slots__ = ("seq", "message", "redelivered", "delivery_count")

    def __init__(self, seq: int, message: Message) -> None:
        self.seq = seq
        self.message = message
        self.redelivered = False
        self.delivery_count = 0
