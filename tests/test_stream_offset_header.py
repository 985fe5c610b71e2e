"""The x-stream-offset header spliced into a delivery's content header in
place (broker/stream/queue.py) says what decoding, adding and encoding
would: the same properties, the offset a long, nothing else changed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from amqp_server.broker.message import HEADER_PREFIX, Entry, Message
from amqp_server.broker.stream.queue import (
    Delivered,
    _with_offset_decoded,
    offset_parts,
    with_offset,
)
from amqp_server.wire.frames import content_header, deliver_many, deliver_spliced, shortstr
from amqp_server.wire.properties import (
    Properties,
    decode_properties,
    encode_properties,
    scan_properties,
)
from amqp_server.wire.table import FieldTable


def header(**props) -> bytes:
    return content_header(5, encode_properties(Properties(**props)))


CASES = [
    header(),
    header(content_type="text/plain"),
    header(content_type="a", content_encoding="gzip", delivery_mode=2, priority=3,
           correlation_id="c", reply_to="r", expiration="100", message_id="m"),
    header(headers=FieldTable({"i": 7})),
    header(content_type="json", headers=FieldTable({"x-death": [], "k": b"v"}), delivery_mode=2,
           timestamp=1_700_000_000, app_id="app"),
    header(headers=FieldTable({"x-stream-offset": 99, "other": 1})),  # read from a stream before
]


@pytest.mark.parametrize("raw", CASES)
def test_the_spliced_header_decodes_as_the_rebuilt_one(raw):
    fast = with_offset(raw, 12345)
    slow = _with_offset_decoded(raw, 12345)
    decoded = decode_properties(fast[HEADER_PREFIX:])
    assert decoded == decode_properties(slow[HEADER_PREFIX:])
    assert decoded.headers["x-stream-offset"] == 12345
    assert decoded.headers.type_of("x-stream-offset") == "long"
    assert fast[:HEADER_PREFIX] == raw[:HEADER_PREFIX]  # class, weight, body size
    before = decode_properties(raw[HEADER_PREFIX:])
    assert replace(decoded, headers=None) == replace(before, headers=None)


def test_frames_with_the_offset_written_in_are_the_frames_of_the_spliced_headers():
    # deliver_spliced (the stream's delivery frames) against deliver_many
    # given each header with its offset: the same bytes, for every kind of
    # header, a body larger than a frame and an empty one among them.
    route = shortstr("") + shortstr("s")
    stored = [(raw, b"hello") for raw in CASES]
    stored += [(content_header(300, encode_properties(Properties())), b"x" * 300),
               (content_header(0, encode_properties(Properties())), b"")]
    entries = [Entry(offset, Delivered(offset, route, raw, body))
               for offset, (raw, body) in enumerate(stored * 2, start=2**40)]
    expected = deliver_many(3, shortstr("ctag"), 7, [
        Entry(entry.seq, Message("", "s", route, with_offset(raw, entry.seq), body))
        for entry, (raw, body) in zip(entries, stored * 2, strict=True)], 256)
    assert deliver_spliced(3, shortstr("ctag"), 7, entries, 256) == expected


@pytest.mark.parametrize("raw", CASES)
def test_the_layout_found_on_arrival_splices_as_the_walk_does(raw):
    # A publish run hands the stream scan_properties's layout of each
    # header (publishing.py): the splice from it is the one found by
    # walking the header.
    layout = scan_properties(raw, HEADER_PREFIX)
    assert offset_parts(raw, layout) == offset_parts(raw)
