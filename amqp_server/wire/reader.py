"""The one place the broker reads AMQP 0-9-1: bytes in, events out.

A `FrameReader` is fed what each socket read returned (`read`) and reports
what the bytes hold, in order, as calls on its handler (`FrameHandler`):
the protocol header, then one call per frame (a method, a content header,
a content body, a heartbeat), except for two shapes a busy connection
receives all the time, each reported as one event for several frames:

  - a publish: a basic.publish with its content header and its body in
    one frame (`on_publish`), and with the publishes right after it that
    repeat its method frame, as a client publishing in a loop sends them
    (`on_publish_run`), found in one pass;
  - a settle (`on_settle`): basic.ack, basic.reject or basic.nack frames of
    one delivery each, read back to back on one channel with the same flags
    (a client acknowledging each message), or multiple basic.ack frames
    read back to back on one channel (a client acknowledging each message
    with `multiple` set, as lavinmqperf does).

Events are calls rather than objects yielded, the way nats-server's parser
calls the code that acts on what it read: making an object and resuming a
generator for each would cost about a tenth of a publish read on its own.

The reader knows nothing of channels or the broker.  Whether a publish can
be taken whole is the handler's decision; when it cannot, the frames it
stands for are in the event (`PublishFields.method`, the headers and bodies;
`settle_payload`) to be handled one at a time.

Every length is held against what contains it before anything it covers is
read: a frame's size against `frame_max` from its 7-octet header, before the
frame is waited for; its frame-end octet; the short strings of a
basic.publish; a content header's properties and its headers table, nested
tables and arrays to any depth, against the frame that holds them.  Bytes
that fail are an `AMQPError` with the code RabbitMQ gives them
(rabbit_reader.erl): 501 FRAME_ERROR for a frame too large, without its
frame-end, of an unknown type or a method frame too short for its ids;
505 UNEXPECTED_FRAME for content on channel 0 or a heartbeat on another
channel.  What does not make a whole publish or a settle is reported frame
by frame, for the connection and the channel to refuse as they would one
frame at a time (502 SYNTAX_ERROR for arguments or properties that do not
decode).

Payloads are sliced out of the read, never copied piece by piece, and a
run of publishes repeating one method frame and one set of properties
costs one byte comparison per publish of everything before its body.  A
frame cut by the end of a read waits for the next one.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Protocol

from ..errors import FRAME_ERROR, UNEXPECTED_FRAME, AMQPError
from .frames import (
    BASIC_CLASS,
    CONTENT_HEADER_PREFIX,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    METHOD_IDS_SIZE,
    PROTOCOL_HEADER,
)
from .properties import Layout, scan_properties

_FRAME_HEADER = struct.Struct(">BHI")  # type, channel, payload size
_INDEX = struct.Struct(">I")  # class id << 16 | method id
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SETTLE_ARGUMENTS = struct.Struct(">QB")  # delivery tag, flag bits

_PUBLISH = BASIC_CLASS << 16 | 40
_ACK = BASIC_CLASS << 16 | 80
_REJECT = BASIC_CLASS << 16 | 90
_NACK = BASIC_CLASS << 16 | 120
_SETTLES = frozenset((_ACK, _REJECT, _NACK))

# A content header: class id, weight, body size, then at least one flag word.
_CONTENT_HEADER_MIN = CONTENT_HEADER_PREFIX + 2
_BODY_SIZE_AT = 4  # in a content header's payload
_CLASS_BASIC = _U16.pack(BASIC_CLASS)

# An ack, reject or nack frame: ids, delivery tag and flag bits make a
# 13-octet payload.  Where its parts sit, counted from the frame's start:
_SETTLE_SIZE = METHOD_IDS_SIZE + _SETTLE_ARGUMENTS.size
_SETTLE_FRAME = FRAME_HEADER_SIZE + _SETTLE_SIZE + 1
_SETTLE_LEAD = FRAME_HEADER_SIZE + METHOD_IDS_SIZE  # frame header and ids
_SETTLE_BITS_AT = _SETTLE_LEAD + 8
_SETTLE_END_AT = _SETTLE_BITS_AT + 1

# What the reader does with the frames it delimits.
_READING = 0
_CLOSING = 1  # only methods on channel 0
_STOPPED = 2  # nothing more


class PublishFields(NamedTuple):
    """The arguments of a basic.publish, read in place.  `route` is the
    exchange and routing-key short strings as they stand on the wire,
    `routing_keys` the one routing key as a tuple (what a message keeps),
    `method` the method frame's payload they were read from."""

    exchange: str
    routing_key: str
    route: bytes
    mandatory: bool
    immediate: bool
    routing_keys: tuple[str]
    method: bytes


_new_fields = tuple.__new__  # a NamedTuple's own __new__ is a Python call


def publish_fields(payload: bytes) -> PublishFields | None:
    """A basic.publish payload read by hand, or None when a short string
    runs past it (the generic decoder then says why)."""
    # class and method ids, ticket (2 octets), exchange and routing key
    # short strings, then the bits.
    end = len(payload)
    at = METHOD_IDS_SIZE + 2
    if at >= end:
        return None
    exchange_end = at + 1 + payload[at]
    if exchange_end >= end:
        return None
    key_end = exchange_end + 1 + payload[exchange_end]
    if key_end >= end:
        return None
    bits = payload[key_end]
    routing_key = payload[exchange_end + 1:key_end].decode("utf-8", "surrogateescape")
    return _new_fields(PublishFields, (
        payload[at + 1:exchange_end].decode("utf-8", "surrogateescape"), routing_key,
        payload[at:key_end], bool(bits & 1), bool(bits & 2), (routing_key,), payload))


def settle_payload(method_id: int, tag: int, multiple: bool, requeue: bool) -> bytes:
    """The method frame payload of one basic.ack (`method_id` 80),
    basic.reject (90) or basic.nack (120)."""
    if method_id == 90:
        bits = 1 if requeue else 0
    else:
        bits = (1 if multiple else 0) | (2 if requeue else 0)
    return _INDEX.pack(BASIC_CLASS << 16 | method_id) + _SETTLE_ARGUMENTS.pack(tag, bits)


class FrameHandler(Protocol):
    """What a `FrameReader` reports to, one call per event, in order."""

    def on_protocol_header(self, raw: bytes) -> None:
        """The 8 octets a connection starts with, whatever they are."""

    def on_method(self, channel: int, payload: bytes) -> None:
        """A method frame; `payload` starts with the class and method ids."""

    def on_content_header(self, channel: int, payload: bytes) -> None:
        """A content header frame (on a channel other than 0)."""

    def on_content_body(self, channel: int, payload: bytes) -> None:
        """A content body frame (on a channel other than 0)."""

    def on_heartbeat(self) -> None:
        """A heartbeat frame (on channel 0)."""

    def on_publish(self, channel: int, fields: PublishFields, header: bytes,
                   layout: Layout | None, body: bytes) -> None:
        """A basic.publish read whole: its method frame (`fields`), a content
        header of class 60 (payload `header`) whose properties passed
        `scan_properties` (`layout`, where it found the headers table and
        the expiration, or None when they were not looked at again, being
        those of the publish before), and `body` in one frame (no frame for
        an empty body), at most `message_max` octets."""

    def on_publish_run(self, channel: int, fields: PublishFields, headers: list[bytes],
                       layouts: list[Layout | None] | None, bodies: list[bytes]) -> None:
        """Publishes read whole, back to back, repeating one method frame:
        publish i as `on_publish` with `headers[i]` and `bodies[i]` (bodies
        of at least one octet); publishes with equal headers share one
        header object.  `layouts` as `layout` there, or None when none was
        looked at."""

    def on_settle(self, channel: int, method_id: int, tags: list[int], multiple: bool,
                  requeue: bool) -> None:
        """basic.ack (`method_id` 80), basic.reject (90) or basic.nack (120)
        frames read back to back with the same flags, one per delivery tag
        in `tags`, in order; or multiple basic.ack frames read back to
        back, one per tag in `tags` (a multiple basic.nack is reported as a
        method)."""


class FrameReader:
    """Frames of one connection, from the client's side of it.

    `frame_max` bounds every frame's payload (the connection lowers it to
    what connection.tune-ok negotiates); `message_max` is the largest body
    a publish read whole holds (larger ones come frame by frame, for the
    channel to refuse).  `read` returns once the data is used up; a
    handler's exception ends it, and what that read had left is dropped:
    the peer sent it before it knew of the error.
    """

    def __init__(self, handler: FrameHandler, frame_max: int, message_max: int) -> None:
        self.frame_max = frame_max
        self.message_max = message_max
        self._handler = handler
        self._mode = _READING
        self._awaiting_header = True
        self._buffer = b""
        # The last publish method and content header read whole: the next
        # publishes most likely repeat them (see `_publish`).
        self._last_method = b""
        self._last_fields: PublishFields | None = None
        self._last_header = b""
        self._last_properties = b""

    def start_closing(self) -> None:
        """The connection has sent connection.close: from now on only methods
        on channel 0 are reported and other frames are skipped unread, as
        RabbitMQ does while closing (rabbit_reader's handle_frame); frames
        that cannot be delimited are still errors."""
        if self._mode == _READING:
            self._mode = _CLOSING

    def stop(self) -> None:
        """The connection is closed, or its frames can no longer be told
        apart (a frame too large, a frame-end octet missing): nothing more
        is read, from this read either."""
        self._mode = _STOPPED
        self._buffer = b""

    @property
    def stopped(self) -> bool:
        return self._mode == _STOPPED

    def read(self, data: bytes) -> None:
        """Report the events `data` completes, with what earlier reads left."""
        if self._buffer:
            data = self._buffer + data
            self._buffer = b""
        handler = self._handler
        end_of_data = len(data)
        pos = 0
        if self._awaiting_header:
            if end_of_data < len(PROTOCOL_HEADER):
                self._buffer = data
                return
            self._awaiting_header = False
            pos = len(PROTOCOL_HEADER)
            handler.on_protocol_header(data[:pos])
        unpack_header = _FRAME_HEADER.unpack_from
        while end_of_data - pos >= FRAME_HEADER_SIZE:
            mode = self._mode
            if mode and mode == _STOPPED:  # (reading, 0, is tested first)
                return
            frame_type, channel, size = unpack_header(data, pos)
            if size > self.frame_max:
                self.stop()  # where the next frame starts is unknown now
                raise AMQPError(FRAME_ERROR, f"type {frame_type}, frame of {size} octets "
                                             f"exceeds frame_max {self.frame_max}")
            start = pos + FRAME_HEADER_SIZE
            end = start + size
            if end >= end_of_data:
                break
            if data[end] != FRAME_END:
                self.stop()
                raise AMQPError(FRAME_ERROR,
                                f"type {frame_type}, invalid frame end marker {data[end]}")
            pos = end + 1
            if mode:  # closing
                if frame_type == FRAME_METHOD and channel == 0 and size >= METHOD_IDS_SIZE:
                    handler.on_method(0, data[start:end])
                continue
            if frame_type == FRAME_METHOD:
                if size < METHOD_IDS_SIZE:
                    raise AMQPError(FRAME_ERROR, "method frame shorter than its ids")
                if channel:
                    (index,) = _INDEX.unpack_from(data, start)
                    if index == _PUBLISH:
                        method = data[start:end]
                        pos = self._publish(data, channel, method, pos, end_of_data)
                        continue
                    if index in _SETTLES and size == _SETTLE_SIZE:
                        tag, bits = _SETTLE_ARGUMENTS.unpack_from(data, start + METHOD_IDS_SIZE)
                        if index == _ACK:
                            if bits & 1:
                                tags = [tag]
                                if pos + _SETTLE_FRAME <= end_of_data:
                                    pos = _settles(data, start - FRAME_HEADER_SIZE, pos,
                                                   end_of_data, bits, tags)
                                handler.on_settle(channel, 80, tags, True, False)
                                continue
                            requeue = False
                        elif index == _REJECT:
                            requeue = bool(bits & 1)
                        elif bits & 1:  # a multiple nack: as any method
                            handler.on_method(channel, data[start:end])
                            continue
                        else:
                            requeue = bool(bits & 2)
                        tags = [tag]
                        if pos + _SETTLE_FRAME <= end_of_data:
                            pos = _settles(data, start - FRAME_HEADER_SIZE, pos, end_of_data,
                                           bits, tags)
                        handler.on_settle(channel, index & 0xFFFF, tags, False, requeue)
                        continue
                handler.on_method(channel, data[start:end])
            elif frame_type == FRAME_BODY:
                if channel == 0:
                    raise AMQPError(UNEXPECTED_FRAME, "content frame on channel 0")
                handler.on_content_body(channel, data[start:end])
            elif frame_type == FRAME_HEADER:
                if channel == 0:
                    raise AMQPError(UNEXPECTED_FRAME, "content frame on channel 0")
                handler.on_content_header(channel, data[start:end])
            elif frame_type == FRAME_HEARTBEAT:
                if channel != 0:
                    raise AMQPError(UNEXPECTED_FRAME, "heartbeat frame on a non-zero channel")
                handler.on_heartbeat()
            else:
                raise AMQPError(FRAME_ERROR, f"unknown frame type {frame_type}")
        if pos < end_of_data and self._mode != _STOPPED:
            self._buffer = data[pos:]

    def _publish(self, data: bytes, channel: int, method: bytes, pos: int,
                 end_of_data: int) -> int:
        """Report the publish whose method frame (payload `method`) ends at
        `pos`: with its content header and body when they are all in this
        read and fit a whole publish, and then with the publishes after it
        that repeat its method frame; as a method frame alone otherwise.
        Returns where the next frame starts."""
        frame_max = self.frame_max
        if pos + FRAME_HEADER_SIZE > end_of_data:
            self._handler.on_method(channel, method)
            return pos
        frame_type, number, size = _FRAME_HEADER.unpack_from(data, pos)
        header_at = pos + FRAME_HEADER_SIZE
        header_end = header_at + size
        if (frame_type != FRAME_HEADER or number != channel or size < _CONTENT_HEADER_MIN
                or size > frame_max or header_end >= end_of_data
                or data[header_end] != FRAME_END or not data.startswith(_CLASS_BASIC, header_at)):
            self._handler.on_method(channel, method)
            return pos
        (body_size,) = _U64.unpack_from(data, header_at + _BODY_SIZE_AT)
        next_pos = header_end + 1
        if body_size:
            if body_size > self.message_max or next_pos + FRAME_HEADER_SIZE > end_of_data:
                self._handler.on_method(channel, method)
                return pos
            frame_type, number, size = _FRAME_HEADER.unpack_from(data, next_pos)
            body_at = next_pos + FRAME_HEADER_SIZE
            body_end = body_at + size
            if (frame_type != FRAME_BODY or number != channel or size != body_size
                    or size > frame_max or body_end >= end_of_data
                    or data[body_end] != FRAME_END):
                self._handler.on_method(channel, method)
                return pos
            body = data[body_at:body_end]
            next_pos = body_end + 1
        else:
            body = b""
        if method == self._last_method:
            # Same exchange and routing key as the last publish: share its
            # strings, which also keeps queued messages small.
            fields = self._last_fields
        else:
            fields = publish_fields(method)
            if fields is None:
                self._handler.on_method(channel, method)
                return pos
            self._last_method = method
            self._last_fields = fields
        header = data[header_at:header_end]
        layout = None
        if header == self._last_header:
            # The same properties as the last publish: queued messages share
            # one header object (about 50 bytes each for a deep queue), and
            # it has been checked already.
            header = self._last_header
            repeating = True
        else:
            properties = header[CONTENT_HEADER_PREFIX:]
            repeating = properties == self._last_properties  # another body size
            if not repeating:
                try:
                    layout = scan_properties(header, CONTENT_HEADER_PREFIX)
                except ValueError:
                    # The channel says what is wrong.
                    self._handler.on_method(channel, method)
                    return pos
                self._last_properties = properties
            self._last_header = header
        # The next frame repeats this basic.publish: a run.
        if body_size and data.startswith(method, next_pos + FRAME_HEADER_SIZE):
            headers = [header]
            bodies = [body]
            largest = min(frame_max, self.message_max)
            start = pos - FRAME_HEADER_SIZE - 1 - len(method)
            if repeating:
                layouts = None
                next_pos = _repeats(data, start, pos, header, next_pos, end_of_data, largest,
                                    headers, bodies)
            else:
                layouts = [layout]
                next_pos = _followers(data, data[start:pos], header, layout, next_pos,
                                      end_of_data, channel, largest, headers, layouts, bodies)
                self._last_header = headers[-1]
                self._last_properties = headers[-1][CONTENT_HEADER_PREFIX:]
            if len(bodies) > 1:
                self._handler.on_publish_run(channel, fields, headers, layouts, bodies)
                return next_pos
        self._handler.on_publish(channel, fields, header, layout, body)
        return next_pos


def _settles(data: bytes, start: int, pos: int, end: int, bits: int, tags: list,
             frame_end: int = FRAME_END, frame_size: int = _SETTLE_FRAME,
             bits_at: int = _SETTLE_BITS_AT, end_at: int = _SETTLE_END_AT,
             tag_at: int = _SETTLE_LEAD, unpack_tag=_U64.unpack_from) -> int:
    """The ack, reject or nack frames from `pos` on that repeat the one at
    `start` (flag bits `bits`) but for their delivery tags: appends their
    tags and returns where the next frame starts.  (The constants are
    bound as defaults: this loop runs once per frame of a run.)"""
    lead = data[start:start + tag_at]  # frame header and method ids
    startswith = data.startswith
    while (pos + frame_size <= end and data[pos + bits_at] == bits
           and data[pos + end_at] == frame_end and startswith(lead, pos)):
        tags.append(unpack_tag(data, pos + tag_at)[0])
        pos += frame_size
    return pos


def _repeats(data: bytes, start: int, header_at: int, header: bytes, pos: int, end: int,
             largest: int, headers: list, bodies: list) -> int:
    """The publishes from `pos` on that repeat the one whose method frame
    starts at `start` and content header frame (payload `header`) at
    `header_at`, followed by one body frame: the same method frame and
    properties, with a body of any size up to `largest` in one frame.
    Appends their content header payloads (one object per body size) and
    bodies; returns where the next frame starts.

    Each body size met is checked once; after that, a publish is one byte
    comparison of everything up to its body."""
    body_at = header_at + FRAME_HEADER_SIZE + len(header) + 1
    size_at = header_at + FRAME_HEADER_SIZE + _BODY_SIZE_AT - start  # from a publish's start
    prefix_end = header_at + FRAME_HEADER_SIZE + CONTENT_HEADER_PREFIX
    method = data[start:header_at]
    lead = data[header_at:header_at + FRAME_HEADER_SIZE + _BODY_SIZE_AT]  # to the body size
    tail = data[prefix_end:body_at]  # property flags and values, frame end
    body_lead = data[body_at:body_at + 3]  # frame type and channel
    before_body = data[start:body_at + FRAME_HEADER_SIZE]
    (last_size,) = _U64.unpack_from(header, _BODY_SIZE_AT)
    known = {last_size: (header, before_body)}
    step = len(before_body) + last_size + 1
    startswith = data.startswith
    frame_end = FRAME_END
    while True:
        if (pos + step <= end and startswith(before_body, pos)
                and data[pos + step - 1] == frame_end):
            headers.append(header)
            bodies.append(data[pos + len(before_body):pos + step - 1])
            pos += step
            continue
        if pos + size_at + 8 > end:
            break
        (size,) = _U64.unpack_from(data, pos + size_at)
        if size == last_size:
            break  # not a repeat
        entry = known.get(size)
        if entry is None:
            header_at = pos + len(method)
            prefix_end = header_at + FRAME_HEADER_SIZE + CONTENT_HEADER_PREFIX
            body_at = prefix_end + len(tail)
            if (not 0 < size <= largest or body_at + FRAME_HEADER_SIZE > end
                    or not startswith(method, pos) or not startswith(lead, header_at)
                    or not startswith(tail, prefix_end)
                    or not startswith(body_lead, body_at)
                    or _U32.unpack_from(data, body_at + 3)[0] != size):
                break
            entry = known[size] = (data[header_at + FRAME_HEADER_SIZE:body_at - 1],
                                   data[pos:body_at + FRAME_HEADER_SIZE])
        header, before_body = entry
        last_size = size
        step = len(before_body) + size + 1
    return pos


def _followers(data: bytes, method: bytes, header: bytes, layout, pos: int, end: int,
               channel: int, largest: int, headers: list, layouts: list,
               bodies: list) -> int:
    """The publishes from `pos` on, after one with content header `header`
    (`layout`, from scan_properties), whose method frame is `method` (bytes,
    frame header to frame end), each with a content header of class 60
    whose properties pass `scan_properties` and one body frame of 1 to
    `largest` octets.  Appends their content header payloads, the layouts
    scan_properties found and their bodies; returns where the next frame
    starts.  Anything else ends the run, to be read (and refused if need
    be) one frame at a time."""
    seen: dict[bytes, tuple] = {header: (header, layout)}
    length = len(method)
    unpack = _FRAME_HEADER.unpack_from
    startswith = data.startswith
    while startswith(method, pos):
        at = pos + length
        if at + FRAME_HEADER_SIZE > end:
            break
        frame_type, number, size = unpack(data, at)
        header_at = at + FRAME_HEADER_SIZE
        header_end = header_at + size
        body_at = header_end + 1 + FRAME_HEADER_SIZE
        if (frame_type != FRAME_HEADER or number != channel or size < _CONTENT_HEADER_MIN
                or size > largest or body_at > end or data[header_end] != FRAME_END
                or not startswith(_CLASS_BASIC, header_at)):
            break
        (body_size,) = _U64.unpack_from(data, header_at + _BODY_SIZE_AT)
        frame_type, number, size = unpack(data, header_end + 1)
        body_end = body_at + size
        if (frame_type != FRAME_BODY or number != channel or size != body_size
                or not 0 < size <= largest or body_end >= end or data[body_end] != FRAME_END):
            break
        header = data[header_at:header_end]
        known = seen.get(header)
        if known is not None:
            header, layout = known  # messages alike share one header (and its checks)
        else:
            try:
                layout = scan_properties(header, CONTENT_HEADER_PREFIX)
            except ValueError:
                break
            seen[header] = (header, layout)
        headers.append(header)
        layouts.append(layout)
        bodies.append(data[body_at:body_end])
        pos = body_end + 1
    return pos
