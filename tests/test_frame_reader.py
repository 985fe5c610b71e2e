"""The frame reader on its own: bytes in, events out, no socket and no
broker.  Each test feeds it bytes and reads what it reported to a handler
that writes the events down."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st
from pamqp import commands as spec

from amqp_server.errors import AMQPError
from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.reader import FrameReader, publish_fields, settle_payload

FRAME_MAX = 131072
MESSAGE_MAX = 1000


class Events:
    """A handler that writes down what the reader reports."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self.methods: dict[int, bytes] = {}  # the basic.publish payload of publish events

    def frames(self) -> list[tuple[int, int, bytes]]:
        """(frame type, channel, payload) of each frame the events stand for."""
        out = []
        for number, event in enumerate(self.seen):
            kind, channel = event[0], event[1] if len(event) > 1 else 0
            if kind in ("publish", "publish run"):
                headers, bodies = ([event[3]], [event[4]]) if kind == "publish" else event[3:5]
                for h, body in zip(headers, bodies):
                    out += [(1, channel, self.methods[number]), (2, channel, h)]
                    out += [(3, channel, body)] if body else []
            elif kind == "settle":
                _, _, method_id, tags, multiple, requeue = event
                out += [(1, channel, settle_payload(method_id, tag, multiple, requeue))
                        for tag in tags]
            elif kind != "protocol header":
                frame_type = {"method": 1, "content header": 2, "content body": 3,
                              "heartbeat": 8}[kind]
                out.append((frame_type, channel, event[2] if len(event) > 2 else b""))
        return out

    def on_protocol_header(self, raw):
        self.seen.append(("protocol header", raw))

    def on_method(self, channel, payload):
        self.seen.append(("method", channel, payload))

    def on_content_header(self, channel, payload):
        self.seen.append(("content header", channel, payload))

    def on_content_body(self, channel, payload):
        self.seen.append(("content body", channel, payload))

    def on_heartbeat(self):
        self.seen.append(("heartbeat",))

    def on_publish(self, channel, fields, header, layout, body):
        self.seen.append(("publish", channel, fields.routing_key, header, body))
        self.methods[len(self.seen) - 1] = fields.method

    def on_publish_run(self, channel, fields, headers, layouts, bodies):
        self.seen.append(("publish run", channel, fields.routing_key, headers, bodies))
        self.methods[len(self.seen) - 1] = fields.method

    def on_settle(self, channel, method_id, tags, multiple, requeue):
        self.seen.append(("settle", channel, method_id, tags, multiple, requeue))


def reader(frame_max: int = FRAME_MAX) -> tuple[FrameReader, Events]:
    """A reader past the protocol header."""
    events = Events()
    frame_reader = FrameReader(events, frame_max, MESSAGE_MAX)
    frame_reader.read(frames.PROTOCOL_HEADER)
    events.seen.clear()
    return frame_reader, events


def read(*chunks: bytes) -> list[tuple]:
    frame_reader, events = reader()
    for chunk in chunks:
        frame_reader.read(chunk)
    return events.seen


def refusal(data: bytes, frame_max: int = FRAME_MAX) -> tuple[int, str]:
    frame_reader, _ = reader(frame_max)
    with pytest.raises(AMQPError) as raised:
        frame_reader.read(data)
    return raised.value.code, raised.value.explanation


def method(channel: int, cls, **fields) -> bytes:
    return frames.method_frame(channel, make(cls, **fields))


def content(channel: int, body: bytes, properties: bytes = b"\x00\x00") -> bytes:
    data = frames.frame(2, channel, frames.content_header(len(body), properties))
    return data + frames.frame(3, channel, body) if body else data


def publish(channel: int, body: bytes, properties: bytes = b"\x00\x00", key: str = "q") -> bytes:
    return method(channel, spec.Basic.Publish, routing_key=key) + content(channel, body, properties)


def header(body: bytes, properties: bytes = b"\x00\x00") -> bytes:
    return frames.content_header(len(body), properties)


def ack(tag: int, channel: int = 1, multiple: bool = False) -> bytes:
    return method(channel, spec.Basic.Ack, delivery_tag=tag, multiple=multiple)


# ---- the protocol header and plain frames -----------------------------------------------

def test_the_protocol_header_is_reported_once_it_is_whole():
    events = Events()
    frame_reader = FrameReader(events, FRAME_MAX, MESSAGE_MAX)
    frame_reader.read(b"AMQP")
    assert events.seen == []
    frame_reader.read(b"\x00\x00\x09\x01")
    assert events.seen == [("protocol header", frames.PROTOCOL_HEADER)]


def test_a_wrong_protocol_header_is_reported_as_it_came():
    events = Events()
    FrameReader(events, FRAME_MAX, MESSAGE_MAX).read(b"AMQP\x01\x01\x00\x09")
    assert events.seen == [("protocol header", b"AMQP\x01\x01\x00\x09")]


def test_a_method_frame_is_reported_with_its_channel_and_payload():
    data = method(3, spec.Queue.Declare, queue="q")
    assert read(data) == [("method", 3, data[7:-1])]


def test_a_frame_cut_by_the_end_of_a_read_waits_for_the_next():
    data = method(1, spec.Queue.Declare, queue="q")
    frame_reader, events = reader()
    for byte in data[:-1]:
        frame_reader.read(bytes([byte]))
    assert events.seen == []
    frame_reader.read(data[-1:])
    assert events.seen == [("method", 1, data[7:-1])]


def test_a_heartbeat_on_channel_0_is_reported():
    assert read(frames.HEARTBEAT_FRAME) == [("heartbeat",)]


def test_content_frames_on_their_own_are_reported_one_by_one():
    data = content(1, b"body")
    assert read(data) == [("content header", 1, header(b"body")), ("content body", 1, b"body")]


# ---- publishes --------------------------------------------------------------------------

def test_a_publish_with_its_header_and_body_is_one_event():
    assert read(publish(1, b"body")) == [("publish", 1, "q", header(b"body"), b"body")]


def test_a_publish_without_a_body_is_one_event():
    assert read(publish(1, b"")) == [("publish", 1, "q", header(b""), b"")]


def test_publishes_that_repeat_the_method_and_properties_are_one_run():
    seen = read(publish(1, b"a") * 3)
    assert seen == [("publish run", 1, "q", [header(b"a")] * 3, [b"a"] * 3)]
    assert len({id(h) for h in seen[0][3]}) == 1  # one header object for all


def test_a_run_carries_on_across_body_sizes():
    bodies = [b"a", b"bb", b"a", b"ccc", b"bb"]
    seen = read(b"".join(publish(1, body) for body in bodies))
    assert seen == [("publish run", 1, "q", [header(b) for b in bodies], bodies)]


def test_publishes_with_their_own_properties_are_one_run():
    props = [encode_properties(Properties(message_id=f"m{n}")) for n in range(3)]
    seen = read(b"".join(publish(1, b"x", p) for p in props))
    assert seen == [("publish run", 1, "q", [header(b"x", p) for p in props], [b"x"] * 3)]


def test_another_routing_key_starts_another_event():
    assert [e[:3] for e in read(publish(1, b"x") * 2 + publish(1, b"x", key="k"))] == [
        ("publish run", 1, "q"), ("publish", 1, "k")]


def test_a_publish_whose_body_is_in_the_next_read_comes_frame_by_frame():
    publish_method = method(1, spec.Basic.Publish, routing_key="q")
    data = publish_method + content(1, b"body")
    assert read(data[:-3], data[-3:]) == [
        ("method", 1, publish_method[7:-1]), ("content header", 1, header(b"body")),
        ("content body", 1, b"body")]


def test_a_body_in_two_frames_comes_frame_by_frame():
    data = (method(1, spec.Basic.Publish, routing_key="q")
            + frames.frame(2, 1, frames.content_header(4, b"\x00\x00"))
            + frames.frame(3, 1, b"bo") + frames.frame(3, 1, b"dy"))
    assert [e[0] for e in read(data)] == ["method", "content header", "content body",
                                         "content body"]


def test_a_body_larger_than_message_max_comes_frame_by_frame():
    assert [e[0] for e in read(publish(1, b"x" * (MESSAGE_MAX + 1)))] == [
        "method", "content header", "content body"]


def test_a_run_stops_before_a_body_larger_than_message_max():
    data = publish(1, b"x") * 2 + publish(1, b"x" * (MESSAGE_MAX + 1))
    assert [e[0] for e in read(data)] == ["publish run", "method", "content header",
                                         "content body"]


def test_properties_that_overrun_their_header_come_frame_by_frame():
    """So that the channel refuses them, with 502 (see below)."""
    assert [e[0] for e in read(publish(1, b"x", b"\x80\x00\x05ab"))] == [
        "method", "content header", "content body"]


def test_a_publish_on_channel_0_is_a_method():
    assert [e[:2] for e in read(method(0, spec.Basic.Publish))] == [("method", 0)]


def test_a_publish_with_a_header_of_another_class_comes_frame_by_frame():
    data = method(1, spec.Basic.Publish) + frames.frame(2, 1, b"\x00\x32" + b"\x00" * 12)
    assert [e[0] for e in read(data)] == ["method", "content header"]


# ---- acks, rejects and nacks ------------------------------------------------------------

def test_single_acks_read_together_are_one_settle():
    assert read(ack(1) + ack(2) + ack(3)) == [("settle", 1, 80, [1, 2, 3], False, False)]


def test_a_change_of_flags_starts_another_settle():
    data = (method(1, spec.Basic.Reject, delivery_tag=1, requeue=True)
            + method(1, spec.Basic.Reject, delivery_tag=2, requeue=False))
    assert read(data) == [("settle", 1, 90, [1], False, True),
                          ("settle", 1, 90, [2], False, False)]


def test_another_channel_starts_another_settle():
    assert read(ack(1, channel=1) + ack(1, channel=2)) == [
        ("settle", 1, 80, [1], False, False), ("settle", 2, 80, [1], False, False)]


def test_a_multiple_ack_is_a_settle_of_its_own():
    assert read(ack(5, multiple=True) + ack(6)) == [
        ("settle", 1, 80, [5], True, False), ("settle", 1, 80, [6], False, False)]


def test_multiple_acks_read_back_to_back_are_one_settle():
    data = ack(5, multiple=True) + ack(6, multiple=True) + ack(9, multiple=True)
    assert read(data) == [("settle", 1, 80, [5, 6, 9], True, False)]


def test_a_multiple_nack_is_a_method():
    data = method(1, spec.Basic.Nack, delivery_tag=5, multiple=True, requeue=True)
    assert read(data) == [("method", 1, data[7:-1])]


def test_nacks_that_requeue_are_one_settle():
    data = b"".join(method(1, spec.Basic.Nack, delivery_tag=t, requeue=True) for t in (1, 2))
    assert read(data) == [("settle", 1, 120, [1, 2], False, True)]


@pytest.mark.parametrize("cls,fields", [
    (spec.Basic.Ack, {"multiple": True}), (spec.Basic.Ack, {}),
    (spec.Basic.Reject, {"requeue": True}), (spec.Basic.Reject, {"requeue": False}),
    (spec.Basic.Nack, {"requeue": True}), (spec.Basic.Nack, {"requeue": False}),
])
def test_a_settle_gives_back_the_frames_it_stands_for(cls, fields):
    data = method(1, cls, delivery_tag=7, **fields)
    (_, _, method_id, tags, multiple, requeue), = read(data)
    assert settle_payload(method_id, tags[0], multiple, requeue) == data[7:-1]


# ---- what cannot be read ----------------------------------------------------------------

def test_a_frame_larger_than_frame_max_is_refused_before_it_arrives():
    assert refusal(struct.pack(">BHI", 1, 1, FRAME_MAX + 1)) == (
        501, f"type 1, frame of {FRAME_MAX + 1} octets exceeds frame_max {FRAME_MAX}")


def test_frame_max_lowered_by_tune_ok_bounds_the_next_frame():
    frame_reader, _ = reader()
    frame_reader.frame_max = 4096
    with pytest.raises(AMQPError) as raised:
        frame_reader.read(frames.frame(3, 1, b"x" * 4097))
    assert raised.value.code == 501


def test_a_frame_without_its_frame_end_is_a_frame_error():
    assert refusal(method(1, spec.Basic.Qos)[:-1] + b"\x00") == (
        501, "type 1, invalid frame end marker 0")


def test_an_unknown_frame_type_is_a_frame_error():
    assert refusal(frames.frame(9, 0, b"")) == (501, "unknown frame type 9")


def test_a_method_frame_shorter_than_its_ids_is_a_frame_error():
    assert refusal(frames.frame(1, 1, b"\x00\x3c\x00")) == (
        501, "method frame shorter than its ids")


@pytest.mark.parametrize("frame_type", [2, 3])
def test_content_on_channel_0_is_an_unexpected_frame(frame_type):
    assert refusal(frames.frame(frame_type, 0, b"x" * 14)) == (
        505, "content frame on channel 0")


def test_a_heartbeat_off_channel_0_is_an_unexpected_frame():
    assert refusal(frames.frame(8, 1, b"")) == (505, "heartbeat frame on a non-zero channel")


def test_frames_before_a_bad_one_are_reported_first():
    frame_reader, events = reader()
    with pytest.raises(AMQPError):
        frame_reader.read(ack(1, channel=2) + frames.frame(9, 0, b""))
    assert events.seen == [("settle", 2, 80, [1], False, False)]


def test_a_failed_read_leaves_nothing_behind():
    """What followed an error in the same read was sent before the peer
    knew of it: the next read starts afresh."""
    frame_reader, events = reader()
    with pytest.raises(AMQPError):
        frame_reader.read(frames.frame(9, 0, b"") + ack(1)[:5])
    frame_reader.read(ack(2))
    assert events.seen == [("settle", 1, 80, [2], False, False)]


# ---- closing and closed -----------------------------------------------------------------

def test_while_closing_only_methods_on_channel_0_are_reported():
    frame_reader, events = reader()
    frame_reader.start_closing()
    close_ok = method(0, spec.Connection.CloseOk)
    frame_reader.read(publish(1, b"x") + frames.frame(9, 0, b"") + frames.frame(8, 1, b"")
                      + frames.frame(3, 0, b"x") + frames.frame(1, 0, b"\x00") + close_ok)
    assert events.seen == [("method", 0, close_ok[7:-1])]


def test_while_closing_a_frame_that_cannot_be_delimited_is_still_refused():
    frame_reader, _ = reader()
    frame_reader.start_closing()
    with pytest.raises(AMQPError) as raised:
        frame_reader.read(struct.pack(">BHI", 1, 0, FRAME_MAX + 1))
    assert raised.value.code == 501


def test_stop_ends_the_read_at_once():
    class Stopping(Events):
        def on_settle(self, *args):
            super().on_settle(*args)
            frame_reader.stop()

    events = Stopping()
    frame_reader = FrameReader(events, FRAME_MAX, MESSAGE_MAX)
    frame_reader.read(frames.PROTOCOL_HEADER + ack(1) + method(1, spec.Basic.Qos)
                      + frames.frame(9, 0, b""))
    frame_reader.read(method(1, spec.Basic.Qos))
    assert [e[0] for e in events.seen] == ["protocol header", "settle"]


# ---- any split of the bytes into reads --------------------------------------------------

def split_frames(data: bytes) -> list[tuple[int, int, bytes]]:
    """The frames of well-formed `data`, by the frame header alone."""
    out, pos = [], 0
    while pos < len(data):
        frame_type, channel, size = struct.unpack_from(">BHI", data, pos)
        out.append((frame_type, channel, data[pos + 7:pos + 7 + size]))
        pos += size + 8
    return out


streams = st.lists(st.one_of(
    st.builds(publish, st.just(1), st.sampled_from([b"", b"a", b"bb", b"c" * 300]),
              st.sampled_from([b"\x00\x00", encode_properties(Properties(message_id="m"))]),
              st.sampled_from(["q", "k"])),
    st.builds(publish, st.just(1), st.just(b"x" * (MESSAGE_MAX + 1))),
    st.builds(ack, st.integers(1, 9), st.sampled_from([1, 2]), st.booleans()),
    st.builds(lambda tag, requeue: method(1, spec.Basic.Reject, delivery_tag=tag,
                                          requeue=requeue), st.integers(1, 9), st.booleans()),
    st.builds(lambda tag: method(1, spec.Basic.Nack, delivery_tag=tag, multiple=True),
              st.integers(1, 9)),
    st.just(method(1, spec.Queue.Declare, queue="q")),
    st.just(content(1, b"stray")),
    st.just(frames.HEARTBEAT_FRAME),
), min_size=1, max_size=30).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(streams, st.lists(st.integers(1, 300), max_size=12))
def test_any_split_into_reads_reports_every_frame_once_in_order(data, cuts):
    frame_reader, events = reader()
    pos = 0
    for cut in cuts:
        frame_reader.read(data[pos:pos + cut])
        pos += cut
    frame_reader.read(data[pos:])
    assert events.frames() == split_frames(data)


@given(st.text(max_size=63), st.text(max_size=63), st.booleans(), st.booleans())
def test_a_publish_read_in_place_agrees_with_the_decoder(exchange, key, mandatory, immediate):
    payload = method(1, spec.Basic.Publish, exchange=exchange, routing_key=key,
                     mandatory=mandatory, immediate=immediate)[7:-1]
    decoded = decode_method(payload)
    fields = publish_fields(payload)
    assert (fields.exchange, fields.routing_key, fields.mandatory, fields.immediate) == (
        decoded.exchange, decoded.routing_key, decoded.mandatory, decoded.immediate)
    assert fields.routing_keys == (decoded.routing_key,) and fields.method == payload
