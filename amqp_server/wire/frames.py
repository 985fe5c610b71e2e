"""Frame layout and the hand-written encoders of the hot path.

A delivery is the most frequent thing the broker writes, so basic.deliver,
basic.get-ok, basic.return, basic.ack and basic.nack are packed here with
`struct` directly instead of going through the generic method encoder; the
tests hold their bytes equal to pamqp's.  Content headers are passed through
as the payload the publisher sent (class, weight, body size and the encoded
properties), never decoded and re-encoded.
"""

from __future__ import annotations

import struct

from .methods import encode_method

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_HEADER_SIZE = 7  # type, channel, payload size
# Frame header plus frame-end octet: what a frame costs on top of its payload.
FRAME_OVERHEAD = 8
METHOD_IDS_SIZE = 4  # a method frame's payload starts with class and method ids
# A content header's payload: class id (2), weight (2) and body size (8)
# precede the property flags and values.
CONTENT_HEADER_PREFIX = 12

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

BASIC_CLASS = 60
_FRAME_PREFIX = struct.Struct(">BHI")
_METHOD_PREFIX = struct.Struct(">BHIHH")  # type, channel, size, class, method
_DELIVER_TAIL = struct.Struct(">QB")
_GET_OK_TAIL = struct.Struct(">QB")
_ACK = struct.Struct(">BHIHHQB")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SIZE = struct.Struct(">Q")
_I64 = struct.Struct(">q")


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_PREFIX.pack(frame_type, channel, len(payload)) + payload + FRAME_END_BYTE


def method_frame(channel: int, method: object) -> bytes:
    return frame(FRAME_METHOD, channel, encode_method(method))


def _shortstr(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogateescape")
    return _U8.pack(len(raw)) + raw


_END_AND_BODY_HEAD = struct.Struct(">BBHI")  # frame end, then body frame header


def deliver(channel: int, consumer_tag: bytes, delivery_tag: int, redelivered: bool,
            route: bytes, header: bytes, body: bytes, frame_max: int) -> bytes:
    """basic.deliver with its content, as one buffer.

    `consumer_tag` is a pre-encoded shortstr and `route` the exchange and
    routing-key shortstrs exactly as they arrived in basic.publish.
    """
    size = 13 + len(consumer_tag) + len(route)
    if 0 < len(body) <= frame_max - FRAME_OVERHEAD:
        # The common case, packed with as few pieces as possible.
        return b"".join((
            _METHOD_PREFIX.pack(FRAME_METHOD, channel, size, 60, 60),
            consumer_tag,
            _DELIVER_TAIL.pack(delivery_tag, 1 if redelivered else 0),
            route,
            _END_AND_BODY_HEAD.pack(FRAME_END, FRAME_HEADER, channel, len(header)),
            header,
            _END_AND_BODY_HEAD.pack(FRAME_END, FRAME_BODY, channel, len(body)),
            body,
            FRAME_END_BYTE,
        ))
    return b"".join((
        _METHOD_PREFIX.pack(FRAME_METHOD, channel, size, 60, 60),
        consumer_tag,
        _DELIVER_TAIL.pack(delivery_tag, 1 if redelivered else 0),
        route,
        FRAME_END_BYTE,
        *_content_parts(channel, header, body, frame_max),
    ))


def deliver_many(channel: int, consumer_tag: bytes, first_tag: int, entries,
                 frame_max: int) -> bytes:
    """basic.deliver for each queue entry (`.redelivered`, and `.message`
    with route, header and body), delivery tags counting up from
    `first_tag`, as one buffer: the same bytes as `deliver` for each.

    The frame bytes around each tag and body are built once per route and
    content header (a header states its body's size)."""
    parts = []
    add = parts.append
    # The method frame up to and including the tag and redelivered octet.
    pack_lead = struct.Struct(f">BHIHH{len(consumer_tag)}sQB").pack
    tag = first_tag
    last_route = last_header = None
    size = 0
    middle = b""
    middles: dict[bytes, bytes] = {}
    largest = frame_max - FRAME_OVERHEAD
    for entry in entries:
        message = entry.message
        route = message.route
        header = message.header
        if header is not last_header or route is not last_route:
            if route is not last_route:
                last_route = route
                size = 13 + len(consumer_tag) + len(route)
                middles = {}
            last_header = header
            middle = middles.get(header)
            if middle is None:
                body = message.body
                if not 0 < len(body) <= largest:
                    add(deliver(channel, consumer_tag, tag, entry.redelivered, route, header,
                                body, frame_max))
                    tag += 1
                    last_header = None
                    continue
                middle = middles[header] = b"".join((
                    route, _END_AND_BODY_HEAD.pack(FRAME_END, FRAME_HEADER, channel, len(header)),
                    header, _END_AND_BODY_HEAD.pack(FRAME_END, FRAME_BODY, channel, len(body))))
        add(pack_lead(FRAME_METHOD, channel, size, 60, 60, consumer_tag, tag, entry.redelivered))
        add(middle)
        add(message.body)
        add(FRAME_END_BYTE)
        tag += 1
    return b"".join(parts)


def deliver_spliced(channel: int, consumer_tag: bytes, first_tag: int, entries,
                    frame_max: int) -> bytes:
    """`deliver_many` for messages whose content headers differ only in one
    8-byte value (a stream's x-stream-offset): each entry's message has
    `route`, `body`, `value` and `around`, the header's bytes before and
    after the value (`around[1]` None: use its whole `header`).  The value
    is written straight into the frame; the header is never built."""
    parts = []
    add = parts.append
    pack_lead = struct.Struct(f">BHIHH{len(consumer_tag)}sQB").pack
    pack_value = _I64.pack
    tag = first_tag
    last_route = last_around = None
    size = 0
    before = after = b""
    largest = frame_max - FRAME_OVERHEAD
    for entry in entries:
        message = entry.message
        route = message.route
        around = message.around
        if around is not last_around or route is not last_route:
            body = message.body
            if around[1] is None or not 0 < len(body) <= largest:
                add(deliver(channel, consumer_tag, tag, entry.redelivered, route,
                            message.header, body, frame_max))
                tag += 1
                last_around = None
                continue
            last_route = route
            last_around = around
            size = 13 + len(consumer_tag) + len(route)
            header_size = len(around[0]) + 8 + len(around[1])
            before = b"".join((route, _END_AND_BODY_HEAD.pack(FRAME_END, FRAME_HEADER, channel,
                                                               header_size), around[0]))
            after = around[1] + _END_AND_BODY_HEAD.pack(FRAME_END, FRAME_BODY, channel,
                                                          len(body))
        add(pack_lead(FRAME_METHOD, channel, size, 60, 60, consumer_tag, tag, entry.redelivered))
        add(before)
        add(pack_value(message.value))
        add(after)
        add(message.body)
        add(FRAME_END_BYTE)
        tag += 1
    return b"".join(parts)


def get_ok(channel: int, delivery_tag: int, redelivered: bool, route: bytes,
           message_count: int, header: bytes, body: bytes, frame_max: int) -> bytes:
    size = 4 + 9 + len(route) + 4
    return b"".join((
        _METHOD_PREFIX.pack(FRAME_METHOD, channel, size, 60, 71),
        _GET_OK_TAIL.pack(delivery_tag, 1 if redelivered else 0),
        route,
        _U32.pack(message_count),
        FRAME_END_BYTE,
        *_content_parts(channel, header, body, frame_max),
    ))


def basic_return(channel: int, reply_code: int, reply_text: str, route: bytes,
                 header: bytes, body: bytes, frame_max: int) -> bytes:
    text = _shortstr(reply_text)
    size = 4 + 2 + len(text) + len(route)
    return b"".join((
        _METHOD_PREFIX.pack(FRAME_METHOD, channel, size, 60, 50),
        _U16.pack(reply_code),
        text,
        route,
        FRAME_END_BYTE,
        *_content_parts(channel, header, body, frame_max),
    ))


def ack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    return _ACK.pack(FRAME_METHOD, channel, 13, 60, 80, delivery_tag,
                     1 if multiple else 0) + FRAME_END_BYTE


def nack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    # Publisher nacks never ask to requeue (bit 1 stays clear).
    return _ACK.pack(FRAME_METHOD, channel, 13, 60, 120, delivery_tag,
                     1 if multiple else 0) + FRAME_END_BYTE


def content_frames(channel: int, header: bytes, body: bytes, frame_max: int) -> bytes:
    """Header frame plus body frames, split so none exceeds `frame_max`."""
    return b"".join(_content_parts(channel, header, body, frame_max))


def _content_parts(channel: int, header: bytes, body: bytes, frame_max: int) -> list:
    parts = [_FRAME_PREFIX.pack(FRAME_HEADER, channel, len(header)), header, FRAME_END_BYTE]
    size = len(body)
    if size:
        chunk = frame_max - FRAME_OVERHEAD
        if size <= chunk:
            parts.append(_FRAME_PREFIX.pack(FRAME_BODY, channel, size))
            parts.append(body)
            parts.append(FRAME_END_BYTE)
        else:
            view = memoryview(body)
            for start in range(0, size, chunk):
                piece = view[start : start + chunk]
                parts.append(_FRAME_PREFIX.pack(FRAME_BODY, channel, len(piece)))
                parts.append(piece)
                parts.append(FRAME_END_BYTE)
    return parts


def content_header(body_size: int, properties: bytes) -> bytes:
    """A content header payload for a message the broker composes itself."""
    return struct.pack(">HHQ", BASIC_CLASS, 0, body_size) + properties


def shortstr(value: str) -> bytes:
    """Encode once, reuse on every delivery (consumer tags, exchange names)."""
    return _shortstr(value)
