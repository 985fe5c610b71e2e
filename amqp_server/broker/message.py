"""A published message as the broker holds it: wire bytes plus routing data.

`header` is the content header payload exactly as the publisher sent it
(class, weight, body size, property flags and values) and `route` the
encoded exchange and routing-key shortstrs exactly as they appeared in
basic.publish.  Both are copied into basic.deliver / basic.get-ok /
basic.return unchanged, so a message that is only routed and delivered is
never decoded or re-encoded.  `properties` decodes on first use, and at
publish only when the flags say there are headers (CC/BCC) or an expiration.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import NamedTuple

from dlx.dead_letter import Letter, Republish
from dlx.deaths import DeathHistory, death_headers, history_from_headers
from dlx.delays import scheduled_time
from dlx.expiry import parse_expiration

from ..wire.frames import CONTENT_HEADER_PREFIX, shortstr
from ..wire.properties import (
    Properties,
    decode_properties,
    delivery_mode,
    encode_properties,
    locate,
    splice_dead_letter,
    splice_headers,
)
from ..wire.table import (
    FieldTable,
    decode_table_body,
    encode_entry,
    encode_table_pairs,
    split_table,
)

HEADER_PREFIX = CONTENT_HEADER_PREFIX
_FLAG_HEADERS = 0x20      # high byte of the flags: bit 13
_FLAG_EXPIRATION = 0x01   # high byte of the flags: bit 8
# header[HEADER_PREFIX] & INSPECT_FLAGS: the message needs `inspect()`.
INSPECT_FLAGS = _FLAG_HEADERS | _FLAG_EXPIRATION
# header[HEADER_PREFIX] & REPLY_TO_FLAG: the publish names a reply queue.
REPLY_TO_FLAG = 0x02      # high byte of the flags: bit 9
# header[HEADER_PREFIX] & CHECK_FLAGS: something to check before routing.
CHECK_FLAGS = INSPECT_FLAGS | REPLY_TO_FLAG
# header[HEADER_PREFIX + 1] & USER_ID_FLAG: the publish claims a user.
USER_ID_FLAG = 0x10       # low byte of the flags: bit 4
ROUTING_HEADERS = ("CC", "BCC")
# The scheduled-delivery header's name as a field-table key (shortstr).
_SCHEDULED_KEY = b"\x13_AMQ_SCHED_DELIVERY"
_U32 = struct.Struct(">I")


class HeaderSplit(NamedTuple):
    """A content header's headers table cut in two (Message.split_headers)."""

    layout: tuple   # wire.properties.locate's, for the header it was cut from
    own: bytes      # the encoded entries not asked for
    picked: bytes   # the encoded entries asked for


class InvalidMessage(ValueError):
    """A publish RabbitMQ refuses with 406; str() is the reply text."""


# Message annotations (RabbitMQ's message container keeps the same): what
# the broker knows of a message beyond its bytes, kept with it in the store.
# The x-death in its header is the broker's own record of its deaths (4.x
# reads no other: a client's republished x-death is only a header).
ANN_DEATHS = "deaths"
# Failed deliveries a 4.3 quorum queue counted before the message was
# dead-lettered (rabbit_fifo:annotate_msg/2); a quorum queue it reaches
# counts on from there (maybe_set_msg_delivery_count/2).
ANN_DELIVERY_COUNT = "delivery_count"


class Message:
    __slots__ = ("exchange", "routing_key", "route", "header", "body", "_properties",
                 "routing_keys", "bcc", "ttl", "history", "origin", "stored_gen",
                 "scheduled", "annotations")

    def __init__(self, exchange: str, routing_key: str, route: bytes,
                 header: bytes, body: bytes, routing_keys: tuple[str, ...] | None = None) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.route = route
        self.header = header
        self.body = body
        self._properties: Properties | None = None
        self.routing_keys: tuple[str, ...] = routing_keys or (routing_key,)
        self.bcc: tuple[str, ...] = ()
        self.ttl: int | None = None  # per-message TTL (ms) from `expiration`
        self.history: DeathHistory | None = None  # parsed lazily from x-death
        self.origin: Message | None = None  # set on a per-delivery copy
        # The store flush that makes this message durable (None: not stored).
        self.stored_gen: int | None = None
        # Artemis's _AMQ_SCHED_DELIVERY (ms since the epoch): each queue
        # holds it from consumers until then.
        self.scheduled: int | None = None
        # ANN_DEATHS, ANN_DELIVERY_COUNT; None: none (most messages)
        self.annotations: dict | None = None

    @classmethod
    def to(cls, exchange: str, routing_key: str, header: bytes, body: bytes) -> Message:
        """A message the broker itself publishes (a dead letter, a move, a
        management publish), its route encoded here."""
        return cls(exchange, routing_key, shortstr(exchange) + shortstr(routing_key), header,
                   body)

    # ---- publish-time inspection ---------------------------------------

    def inspect(self, layout=None) -> None:
        """Read what routing and expiry need, only if the flags say it is
        there: CC/BCC routing keys (BCC is then removed, as RabbitMQ does)
        and the per-message TTL.  Raises InvalidMessage with RabbitMQ's text.

        The headers table (checked when the publish was read, by
        `scan_properties`, which may pass its `layout`) is decoded only when
        it may hold CC or BCC."""
        header = self.header
        flags = header[HEADER_PREFIX] if len(header) > HEADER_PREFIX else 0
        if not flags & INSPECT_FLAGS:
            return
        if layout is None:
            try:
                layout = locate(header, HEADER_PREFIX)
            except (ValueError, IndexError, struct.error) as exc:
                raise InvalidMessage(f"invalid message: {exc}") from exc
        if layout is None:  # continuation flags: decode it all
            self._inspect_decoded()
            return
        _, h_start, h_end, e_start, e_end = layout
        if e_end > e_start:
            expiration = header[e_start + 1:e_end].decode("utf-8", "surrogateescape")
            try:
                self.ttl = parse_expiration(expiration)
            except ValueError as exc:
                raise InvalidMessage(f"invalid expiration '{expiration}': {exc}") from exc
        # One search for both names ("BCC" holds "CC"), the exact ones only
        # where it finds something.
        if h_end > h_start and (header.find(b"CC", h_start, h_end) >= 0 and (
                header.find(b"\x02CC", h_start, h_end) >= 0
                or header.find(b"\x03BCC", h_start, h_end) >= 0)
                or header.find(_SCHEDULED_KEY, h_start, h_end) >= 0):
            self._inspect_decoded()

    def _inspect_decoded(self) -> None:
        try:
            props = self.properties
        except ValueError as exc:
            raise InvalidMessage(f"invalid message: {exc}") from exc
        if props.expiration is not None:
            try:
                self.ttl = parse_expiration(props.expiration)
            except ValueError as exc:
                raise InvalidMessage(
                    f"invalid expiration '{props.expiration}': {exc}") from exc
        headers = props.headers
        if headers:
            self.scheduled = scheduled_time(headers)
        if headers and ("CC" in headers or "BCC" in headers):
            extra = {}
            for name in ROUTING_HEADERS:
                if name not in headers:
                    continue
                kind = headers.type_of(name)
                if kind != "array":
                    raise InvalidMessage(
                        f'invalid message: {{unacceptable_type_in_header,"{name}",{kind}}}')
                value = headers[name]
                extra[name] = tuple(str(v) for i, v in enumerate(value)
                                    if _element_type(value, i) == "longstr")
            self.routing_keys = (self.routing_key, *extra.get("CC", ()), *extra.get("BCC", ()))
            if "BCC" in extra:
                self.bcc = extra["BCC"]
                stripped = FieldTable(headers)
                stripped.types.update(headers.types)
                del stripped["BCC"]
                self._set_properties(replace(props, headers=stripped))

    # ---- views ---------------------------------------------------------

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
        """delivery-mode 2, read in place without decoding the properties."""
        if self._properties is not None:
            return self._properties.delivery_mode == 2
        return delivery_mode(self.header, HEADER_PREFIX) == 2

    def death_history(self) -> DeathHistory:
        if self.history is None:
            self.history = history_from_headers(self.properties.headers)
        return self.history

    def letter(self) -> Letter:
        props = self.properties
        return Letter(self.exchange, self.routing_keys, props.headers, props.expiration,
                      self.bcc, self.death_history())

    # ---- derived messages ----------------------------------------------

    def found_as(self, previous: Message) -> None:
        """What checking `previous`, published with the same header, found
        and changed (TTL, CC/BCC, a header without BCC or with a reply name)."""
        self.ttl, self.routing_keys, self.bcc = previous.ttl, previous.routing_keys, previous.bcc
        self.header, self._properties = previous.header, previous._properties
        self.scheduled = previous.scheduled

    def set_header(self, header: bytes) -> None:
        """Another content header (its properties decoded again on use)."""
        self.header = header
        self._properties = None

    def _set_properties(self, props: Properties) -> None:
        self._properties = props
        self.header = self.header[:HEADER_PREFIX] + encode_properties(props)

    def dead_lettered(self, plan: Republish, new_headers: bytes) -> Message:
        """The message as republished to its dead-letter exchange, with
        `new_headers` (from `dead_letter_headers`) as its headers table and
        no expiration; every other property is kept byte for byte."""
        layout = locate(self.header, HEADER_PREFIX)
        if layout is None:
            props = replace(self.properties, headers=None, expiration=None)
            header = self.header[:HEADER_PREFIX] + encode_properties(props, new_headers)
        else:
            header = splice_dead_letter(self.header, HEADER_PREFIX, layout, new_headers)
        key = plan.routing_keys[0]
        copy = Message.to(plan.exchange, key, header, self.body)
        copy.routing_keys = plan.routing_keys
        copy.bcc = plan.bcc
        copy.history = plan.history
        copy.annotations = self._died_annotations()
        return copy

    def _died_annotations(self) -> dict:
        """A dead letter's annotations: this message's, its x-death now the
        broker's own record."""
        annotations = self.annotations
        if annotations is None:
            return _OWN_DEATHS
        if annotations.get(ANN_DEATHS):
            return annotations
        return {**annotations, ANN_DEATHS: True}

    @property
    def owns_deaths(self) -> bool:
        """Its x-death was written by this broker when it died here."""
        annotations = self.annotations
        return annotations is not None and bool(annotations.get(ANN_DEATHS))

    def annotated(self, key: str, value) -> Message:
        """A copy routed like this one with `key` set in its annotations
        (the original, which other queues may hold, stays as it was)."""
        copy = self._twin()
        copy._properties = copy.origin._properties
        copy.annotations = {**(copy.annotations or {}), key: value}
        copy.origin = None  # a message of its own: what dies is this one
        return copy

    def _twin(self) -> Message:
        """A copy of the original (this one, or the one this delivery copy
        was made from) routed like it, its `origin`."""
        base = self.origin or self
        copy = Message(base.exchange, base.routing_key, base.route, base.header, base.body)
        copy.routing_keys = base.routing_keys
        copy.bcc = base.bcc
        copy.ttl = base.ttl
        copy.scheduled = base.scheduled
        copy.history = base.history
        copy.annotations = base.annotations
        copy.origin = base
        return copy

    def sibling(self, header: bytes, body: bytes, dying: Message | None = None) -> Message:
        """Another dead letter routed like this one (one plan shared by
        messages that died the same way); `dying`: the message it is the
        dead letter of, whose annotations it keeps."""
        copy = Message(self.exchange, self.routing_key, self.route, header, body)
        copy.routing_keys = self.routing_keys
        copy.bcc = self.bcc
        copy.history = self.history
        copy.annotations = (dying._died_annotations() if dying is not None
                            else self.annotations)
        return copy

    def split_headers(self, names: frozenset[bytes], layout=None) -> HeaderSplit | None:
        """The headers table cut in two without decoding it: the encoded
        entries not named in `names` (encoded key names) and those named;
        None when the header uses continuation flags (decode it instead).
        `layout`: `locate`'s, if the caller has it.  Raises ValueError for
        a malformed header."""
        header = self.header
        if layout is None:
            layout = locate(header, HEADER_PREFIX)
        if layout is None:
            return None
        if not header[HEADER_PREFIX] & _FLAG_HEADERS:
            return HeaderSplit(layout, b"", b"")
        own, picked = split_table(header, layout[1] + 4, layout[2], names)
        return HeaderSplit(layout, own, picked)

    def header_entries(self, names: frozenset[bytes], split: HeaderSplit | None = None
                       ) -> FieldTable:
        """The entries of the headers table named in `names`, decoded
        alone (`split`: `split_headers(names)`, if the caller has it)."""
        if not self.header[HEADER_PREFIX] & _FLAG_HEADERS:
            return FieldTable()
        if split is None:
            split = self.split_headers(names)
        if split is None:  # continuation flags: decode it all
            headers = self.properties.headers or FieldTable()
            picked = FieldTable({k: v for k, v in headers.items() if k.encode() in names})
            picked.types.update({k: headers.type_of(k) for k in picked})
            return picked
        return decode_table_body(split.picked) if split.picked else FieldTable()

    def with_header(self, name: str, kind: str, value,
                    split: HeaderSplit | None = None) -> Message:
        """A copy routed like this one whose headers hold `name` as `value`
        of wire type `kind` (a delayed message's negated `x-delay`); the
        original, which queues may hold too, stays as it was.  The other
        headers and properties are kept byte for byte.  `split`:
        `split_headers` of `name` alone, if the caller has it."""
        header = self.header
        if split is None:
            split = self.split_headers(frozenset((name.encode("utf-8", "surrogateescape"),)))
        if split is None:  # continuation flags: decode and encode it all
            props = self.properties
            headers = FieldTable(props.headers or {})
            headers.types.update(getattr(props.headers, "types", {}) or {})
            headers[name] = value
            headers.types[name] = kind
            new_header = header[:HEADER_PREFIX] + encode_properties(replace(props,
                                                                            headers=headers))
        else:
            table = split.own + encode_entry(name, kind, value)
            new_header = splice_headers(header, HEADER_PREFIX, split.layout,
                                        _U32.pack(len(table)) + table)
        copy = Message(self.exchange, self.routing_key, self.route, new_header, self.body)
        copy.routing_keys = self.routing_keys
        copy.bcc = self.bcc
        copy.ttl = self.ttl
        copy.scheduled = self.scheduled
        copy.history = self.history
        copy.annotations = self.annotations
        return copy

    def with_delivery_count(self, count: int) -> Message:
        """A copy for one quorum-queue delivery, carrying `x-delivery-count`
        (a long, as 3.13 sets it); dead-lettering uses the original."""
        return self.with_counts(None, count)

    def with_counts(self, acquired: int | None, delivered: int | None) -> Message:
        """A copy for one delivery of a quorum queue, carrying
        `x-acquired-count` and `x-delivery-count` where given (longs, as
        mc_amqpl renders integer annotations; each replaces a header of
        the name, as an annotation does there); dead-lettering uses the
        original.  Without either, the original itself."""
        base = self.origin or self
        if acquired is None and delivered is None:
            return base
        headers = FieldTable(base.properties.headers or {})
        headers.types.update(getattr(base.properties.headers, "types", {}) or {})
        for name, value in (("x-acquired-count", acquired), ("x-delivery-count", delivered)):
            if value is not None:
                headers[name] = value
                headers.types[name] = "long"
        copy = self._twin()
        copy._set_properties(replace(base.properties, headers=headers))
        return copy


_OWN_DEATHS = {ANN_DEATHS: True}
_DEATH_PAIRS: dict[DeathHistory, bytes] = {}


def death_pairs(history: DeathHistory) -> bytes:
    """Encoded death headers; messages that died the same way (the common
    case in a flood) share one encoding."""
    pairs = _DEATH_PAIRS.get(history)
    if pairs is None:
        if len(_DEATH_PAIRS) >= 4096:
            _DEATH_PAIRS.clear()
        pairs = _DEATH_PAIRS[history] = encode_table_pairs(death_headers(history))
    return pairs


def _element_type(array, index: int) -> str:
    types = getattr(array, "types", None) or []
    return types[index] if index < len(types) else "longstr"


class Entry:
    """One message's place in one queue; the same message routed to several
    queues gets an entry in each, with its own redelivered flag."""

    __slots__ = ("seq", "message", "redelivered", "deadline", "returns", "segment", "failed")

    def __init__(self, seq: int, message: Message) -> None:
        self.seq = seq
        self.message = message
        self.redelivered = False
        self.deadline: float | None = None  # wall-clock ms, None = never expires
        self.returns = 0  # quorum queues: times it came back unsuccessfully
        self.segment: int | None = None  # message-store segment holding it, if stored
        # 4.3's quorum queues: failed deliveries (x-delivery-count, what the
        # delivery limit reads), None until one is counted or carried in;
        # `returns` is then its acquired count (x-acquired-count).
        self.failed: int | None = None
