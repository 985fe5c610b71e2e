"""A stream: a queue whose messages stay after they are consumed.

Every message routed to it is appended to its log (storage/stream_log.py)
and confirmed once on disk, like a persistent message; nothing is kept per
message in memory but the last few thousand read or appended, which
consumers following each other (or the publishers) take without reading
the file again.  Each consumer has its own reader, starting where its
`x-stream-offset` says (policies/stream_rules.py), and reads every message
from there on, whatever other consumers do.  Its prefetch is its credit:
a delivery takes one, an ack (or a nack or reject: rabbit_stream_queue:
settle/5 treats them alike) gives it back and removes nothing.  Each
delivery carries its offset in the `x-stream-offset` header.

Retention removes whole segments from the oldest by `max-length-bytes` and
`max-age` when a segment fills, when the stream opens and when its policy
changes (osiris evaluates retention when a segment rolls).

The queue keeps the surface channels, the virtual host and the management
API use (it is a `Queue`); what a stream does not do is refused with
RabbitMQ's words: basic.get and queue.purge (540).
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from dataclasses import replace
from itertools import repeat

from policies.effective import QueueSettings
from policies.stream_rules import (
    SegmentFacts,
    filter_spec,
    offset_spec,
    segments_to_remove,
    start_offset,
)

from ...errors import not_implemented, resource_name
from ...wire.frames import deliver_spliced, shortstr
from ...wire.properties import Layout, decode_properties, encode_properties, locate
from ...wire.table import FieldTable, typed_value
from ..message import HEADER_PREFIX, Entry, Message
from ..queue import REFUSED, TAKEN, Queue
from ..queue.outcome import Offer

log = logging.getLogger("amqp_server.stream")

# Messages read for one consumer at a time, at most.
READ_BATCH = 256
# The messages last read, as delivered, kept so that consumers reading the
# same part of the log read it once (bounded in count and body bytes).
RECENT_MESSAGES = 4096
RECENT_BYTES = 16 << 20
OFFSET_HEADER = "x-stream-offset"
FILTER_VALUE_HEADER = "x-stream-filter-value"
_FILTER_VALUE = FILTER_VALUE_HEADER.encode()


def filter_value(message: Message) -> str | None:
    """The message's `x-stream-filter-value` (3.13), read only when the
    name is in its content header at all (most messages: not decoded)."""
    if _FILTER_VALUE not in message.header:
        return None
    value = message.headers.get(FILTER_VALUE_HEADER)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


_ROUTES: dict[bytes, tuple[str, str]] = {}


def route_parts(route: bytes) -> tuple[str, str]:
    """The exchange and routing key of an encoded basic.deliver route
    (a stream's messages share a few routes: decoded once each)."""
    parts = _ROUTES.get(route)
    if parts is None:
        length = route[0]
        exchange = route[1:1 + length].decode("utf-8", "surrogateescape")
        end = 2 + length + route[1 + length]
        parts = (exchange, route[2 + length:end].decode("utf-8", "surrogateescape"))
        if len(_ROUTES) >= 1024:
            _ROUTES.clear()
        _ROUTES[route] = parts
    return parts


_OFFSET_PAIR = shortstr(OFFSET_HEADER) + b"l"  # a long, as RabbitMQ sets it
_OFFSET_NAME = shortstr(OFFSET_HEADER)
_PAIR_SIZE = len(_OFFSET_PAIR) + 8  # with its value
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_HEADERS_FLAG = 0x2000


def with_offset(header: bytes, offset: int) -> bytes:
    """The content header with `x-stream-offset` added to its headers
    table, spliced in place (this runs once per delivery): every other
    property kept byte for byte.  The bytes before and after the offset's
    value depend only on the header, which messages of one publisher
    often share: found once per header."""
    around = offset_parts(header)
    if around[1] is None:
        return _with_offset_decoded(header, offset)
    return around[0] + _I64.pack(offset) + around[1]


def offset_parts(header: bytes, layout: Layout | None = None) -> tuple:
    """(bytes before the offset's value, bytes after it) of the header as
    delivered, or (None, None) when it must be decoded; found once per
    distinct header.  `layout`, where the header's properties lie as
    scan_properties found them on arrival, spares the walk and the cache
    (messages that each have their own id and headers never share one)."""
    if layout is not None:
        return _around_offset(header, layout)
    around = _AROUND.get(header)
    if around is None:
        around = _around_offset(header)
        if len(_AROUND) >= 4096:
            _AROUND.clear()
        _AROUND[header] = around
    return around


_AROUND: dict[bytes, tuple] = {}


def _around_offset(header: bytes, layout: Layout | None = None) -> tuple:
    """(bytes before the offset's value, bytes after it), or (None, None)
    when the header must be decoded (continuation flags, or it has an
    x-stream-offset already)."""
    if layout is None:
        try:
            layout = locate(header, HEADER_PREFIX)
        except ValueError:
            layout = None
    if layout is None or _OFFSET_NAME in header:
        return (None, None)
    flags, h_start, h_end = layout[0], layout[1], layout[2]
    if flags & _HEADERS_FLAG:
        (length,) = _U32.unpack_from(header, h_start)
        return (b"".join((header[:h_start], _U32.pack(length + _PAIR_SIZE),
                          header[h_start + 4:h_end], _OFFSET_PAIR)), header[h_end:])
    return (b"".join((header[:HEADER_PREFIX], _U16.pack(flags | _HEADERS_FLAG),
                      header[HEADER_PREFIX + 2:h_start], _U32.pack(_PAIR_SIZE), _OFFSET_PAIR)),
            header[h_start:])


def _with_offset_decoded(header: bytes, offset: int) -> bytes:
    props = decode_properties(header[HEADER_PREFIX:])
    headers = FieldTable(props.headers or {})
    headers.types.update(getattr(props.headers, "types", None) or {})
    headers[OFFSET_HEADER] = offset
    headers.types[OFFSET_HEADER] = "long"
    return header[:HEADER_PREFIX] + encode_properties(replace(props, headers=headers))


class Delivered:
    """A stream message as its consumers get it: the content header as
    stored, which gets the offset only where the frames are written
    (wire/frames.py deliver_spliced); the rest of a Message's surface is
    built when something asks (a single delivery, management)."""

    __slots__ = ("value", "route", "around", "body", "_stored", "_message")

    def __init__(self, offset: int, route: bytes, header: bytes, body: bytes,
                 around: tuple | None = None) -> None:
        self.value = offset
        self.route = route
        self.around = around or offset_parts(header)  # `around`: offset_parts(header)
        self.body = body
        self._stored = header
        self._message: Message | None = None

    @property
    def header(self) -> bytes:
        return self.message.header

    @property
    def message(self) -> Message:
        """The same message as a Message, its header with the offset."""
        if self._message is None:
            exchange, key = route_parts(self.route)
            self._message = Message(exchange, key, self.route,
                                    with_offset(self._stored, self.value), self.body)
        return self._message

    def __getattr__(self, name: str):
        return getattr(self.message, name)


def _delivered(offset: int, route: bytes, header: bytes, body: bytes) -> Delivered:
    return Delivered(offset, route, header, body)


class StreamQueue(Queue):
    is_stream = True
    deliver_frames = staticmethod(deliver_spliced)  # the offset written into each frame

    def __init__(self, *args, **kwargs) -> None:
        self.log = None  # the stream's log, once the broker gives it a store
        self._store = None
        self.readers: dict = {}  # consumer -> storage.stream_log.Reader
        # offset -> what _keep keeps: the messages last read or appended
        self._recent: dict[int, list] = {}
        self._recent_order: deque[int] = deque()  # its offsets, oldest first
        self._recent_bytes = 0
        self.retained = 0  # messages retention removed
        super().__init__(*args, **kwargs)

    # ---- the log, opened when the virtual host (or boot) gives a store ------------

    @property
    def store(self):
        return self._store

    @store.setter
    def store(self, store) -> None:
        # Set by the virtual host at declaration and by the broker after
        # boot restored the definitions: either way the log opens here.
        self._store = store
        if store is None or self.log is not None or self.deleted:
            return
        self.log, problems = store.open_stream(self.vhost, self.name,
                                               self.settings.stream_max_segment_size_bytes)
        for problem in problems:
            log.warning("stream '%s' in vhost '%s': %s", self.name, self.vhost, problem)
        self.log.on_committed = self.dispatch
        self.retain()

    def apply_settings(self, settings: QueueSettings) -> None:
        """Declared, or a policy changed: retention and segment size follow."""
        self.settings = settings
        self.is_quorum = False
        if self.log is not None:
            self.log.segment_size = max(1, settings.stream_max_segment_size_bytes)
            self.retain()

    def retain(self) -> None:
        stream = self.log
        facts = [SegmentFacts(segment.size, segment.newest) for segment in stream.segments]
        count = segments_to_remove(facts, self.settings.max_length_bytes,
                                   self.settings.max_age_ms, self.clock())
        if count:
            self.retained += stream.remove_oldest(count)

    # ---- views ---------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        return self.log.message_count if self.log is not None else 0

    @property
    def needs_sweep(self) -> bool:
        return False

    @property
    def plain(self) -> bool:
        """No per-message rule: runs of publishes may come in together
        (publishing.py), unless it must refuse them (enqueue)."""
        return self.log is not None

    @property
    def auto_delete_due(self) -> bool:
        return False

    def consumer_offsets(self) -> dict:
        """Each consumer's next offset, by consumer tag."""
        return {consumer.tag: reader.offset for consumer, reader in self.readers.items()}

    # ---- taking messages in ------------------------------------------------------------

    def enqueue(self, message: Message) -> Offer:
        stream = self.log
        if stream is None:
            # A broker without a data directory has nowhere to keep it: a
            # publisher in confirm mode hears a nack, never a silent loss.
            # (A clustered leader ships the log with the store's flushes,
            # storage/message_store.py, and confirms once it is on every
            # in-sync copy.)
            self.stats["rejected_publishes"] += 1
            return REFUSED
        segments = stream.segments
        count = len(segments)
        value = filter_value(message)
        offset = stream.append(message.route, message.header, message.body, self.clock(),
                               value)
        # The store's next flush writes it: its confirm waits for that one.
        message.stored_gen = self._store.next_generation
        self.published += 1
        if self.readers:
            # Consumers at the tail take it from here once it is on disk,
            # without reading it back.
            active = segments[-1]
            self._keep(offset, [None, value, active.number, active.size, message.route,
                                message.header, message.body])
        if len(segments) != count:
            self.retain()  # a segment filled
        return TAKEN

    def enqueue_run(self, messages: list, layouts: list | None = None) -> None:
        """Messages published back to back (publishing.py, only while the
        stream is `plain`): `enqueue` for each, the clock read once.
        `layouts`: where each header's properties lie (scan_properties's),
        when every header is the one scanned."""
        stream = self.log
        segments = stream.segments
        count = len(segments)
        generation = self._store.next_generation
        values = [filter_value(message) if _FILTER_VALUE in message.header else None
                  for message in messages]
        rows = [(message.route, message.header, message.body, value)
                for message, value in zip(messages, values)]
        if not self.readers:
            stream.append_run(rows, self.clock())
        else:
            # _keep for each, the oldest let go once for the run.  Built
            # as delivered now: the consumers at the tail take them next.
            ends: list = []
            offset = stream.append_run(rows, self.clock(), ends)
            recent, order = self._recent, self._recent_order
            size = 0
            last_header = around = None
            for (route, header, body, value), layout, (number, end) in zip(
                    rows, layouts or repeat(None), ends):
                if header is not last_header:
                    last_header, around = header, offset_parts(header, layout)
                recent[offset] = [Entry(offset, Delivered(offset, route, header, body, around)),
                                  value, number, end]
                order.append(offset)
                size += len(body)
                offset += 1
            self._recent_bytes += size
            self._let_go()
        for message in messages:
            message.stored_gen = generation
        self.published += len(messages)
        if len(segments) != count:
            self.retain()  # a segment filled

    # ---- consumers ----------------------------------------------------------------------

    def add_consumer(self, consumer, exclusive: bool) -> None:
        stream = self.log
        if stream is None:
            return
        spec = offset_spec(typed_value(consumer.arguments or FieldTable(), OFFSET_HEADER),
                           self.clock())
        assert spec is not None  # checked with the consume arguments
        wanted = filter_spec(consumer.arguments)
        passes = wanted.passes if wanted is not None else None
        start = start_offset(spec, stream.first_offset, stream.next_offset)
        if start is None:  # a timestamp
            found = stream.first_at_or_after(spec.value)
            # After the newest message (a client's clock ahead of ours):
            # at the next, whatever the later messages' times, as osiris.
            not_before = spec.value if found < stream.next_offset else None
            self.readers[consumer] = stream.reader(found, not_before, passes)
        else:
            self.readers[consumer] = stream.reader(start, wanted=passes)
        self.consumers.add(consumer)
        self.had_consumers = True
        if exclusive:
            self.exclusive_consumer = consumer
        self.dispatch()

    def remove_consumer(self, consumer) -> None:
        reader = self.readers.pop(consumer, None)
        if reader is not None:
            reader.close()
        if self.consumers.discard(consumer) and self.exclusive_consumer is consumer:
            self.exclusive_consumer = None

    def dispatch(self) -> None:
        """Each consumer reads on while it has credit and there is more."""
        if self.deleted:
            return
        for consumer, reader in list(self.readers.items()):
            self._feed(consumer, reader)

    def _feed(self, consumer, reader) -> None:
        stream = self.log
        recent = self._recent
        while consumer in self.readers:
            room = consumer.room()
            if room <= 0:
                return
            want = min(room, READ_BATCH)
            if reader.offset >= stream.committed:
                return  # caught up: the next flush dispatches again
            if reader.not_before is None and reader.offset in recent:
                entries = self._from_recent(reader, want, stream.committed)
                if not entries:
                    continue  # all passed over by its filter: on from there
            else:
                stored = reader.read(want)
                if not stored:
                    if reader.more:  # passed over many: go on after other work
                        self.timers.call_at(self.clock(), self.dispatch)
                    return
                entries = [self._remember(item) for item in stored]
            self.unacked += len(entries)
            self.delivered += len(entries)
            if len(entries) == 1:
                consumer.take(self, entries[0])
            else:
                consumer.take_many(self, entries)

    def _remember(self, item) -> Entry:
        """A message read from the log, as delivered (its offset header
        added), kept for the other readers that follow."""
        entry = Entry(item.offset, _delivered(item.offset, item.route, item.header, item.body))
        if item.offset not in self._recent:
            self._keep(item.offset, [entry, item.filter_value, item.segment, item.end])
        return entry

    def _keep(self, offset: int, kept: list) -> None:
        """`kept`: [entry as delivered (None: not built yet), filter value,
        segment, end position(, route, header, body to build it)].  Every
        consumer gets the same entry: a stream's entries are never changed
        by a delivery or a settlement, only counted."""
        self._recent[offset] = kept
        self._recent_order.append(offset)
        self._recent_bytes += len(kept[6] if kept[0] is None else kept[0].message.body)
        self._let_go()

    def _let_go(self) -> None:
        """The oldest kept messages go while there are too many."""
        recent, order = self._recent, self._recent_order
        size = self._recent_bytes
        while len(recent) > RECENT_MESSAGES or size > RECENT_BYTES:
            oldest = recent.pop(order.popleft(), None)
            if oldest is not None:
                size -= len(oldest[6] if oldest[0] is None else oldest[0].message.body)
        self._recent_bytes = size

    def _from_recent(self, reader, want: int, committed: int) -> list:
        """What another reader just read (or a publisher just appended),
        taken without reading the file; the reader moves to where those
        messages end in it."""
        recent = self._recent
        passes = reader.wanted
        offset = reader.offset
        entries = []
        last = None
        while len(entries) < want and offset < committed:
            found = recent.get(offset)
            if found is None:
                break
            last = found
            if passes is None or passes(found[1]):
                entry = found[0]
                if entry is None:
                    entry = found[0] = Entry(offset, _delivered(offset, found[4], found[5],
                                                                found[6]))
                    del found[4:]
                entries.append(entry)
            offset += 1
        if last is not None:
            reader.move_to(offset, last[2], last[3])
        return entries

    # ---- settling: credit back, nothing removed -----------------------------------------

    def settle(self, entries) -> None:
        count = len(entries)
        self.unacked -= count
        self.acked += count
        self.dispatch()

    def requeue(self, entries, how: str = "reject") -> None:
        # 3.13: a nack or reject gives credit like an ack; the message
        # stays in the stream and is not delivered again to this consumer.
        self.unacked -= len(entries)
        self.dispatch()

    def reject(self, entries, how: str = "reject") -> None:
        self.unacked -= len(entries)
        self.dispatch()

    # ---- what a stream does not do --------------------------------------------------------

    def _what(self) -> str:
        return resource_name("queue", self.name, self.vhost)

    def take_one(self):
        raise not_implemented(f"basic.get not supported by stream queues {self._what()}")

    def purge(self) -> int:
        if self.deleted:
            return self.message_count  # queue.delete counts what went with it
        raise not_implemented(f"queue.purge not supported by stream queues {self._what()}")

    def expire(self, now: float) -> int:
        return 0

    def sweep(self, now: float) -> int:
        return 0

    def touch(self) -> None:
        pass

    def withdraw(self, seqs) -> list:
        return []

    def attach_paging(self, paging) -> None:
        pass

    def close(self) -> None:
        """Deleted: the readers close and the log's files go."""
        self.deleted = True
        for reader in self.readers.values():
            reader.close()
        self.readers.clear()
        self._recent.clear()
        self._recent_order.clear()
        if self.log is not None and self._store is not None:
            self._store.delete_stream(self.log)
