"""A length that runs past what holds it gets the reply code RabbitMQ gives
it (501 FRAME_ERROR for frames, 502 SYNTAX_ERROR for what is inside them),
never the internal-error catch-all (541).  Driven in memory: bytes into
the connection, connection.close out."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.wire import frames
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable

from .sansio import methods, open_connection


def closed_with(data: bytes) -> tuple[int, str]:
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(data)
    close = methods(conn.data_to_send())[-1]
    assert isinstance(close, spec.Connection.Close), close
    return close.reply_code, close.reply_text


def table(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def declare(arguments: bytes) -> bytes:
    """queue.declare of "q" with `arguments` as its encoded table."""
    return frames.frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x01q\x00" + arguments)


def publish_with_headers(headers: bytes) -> bytes:
    """A publish whose headers property is `headers`, an encoded table."""
    properties = struct.pack(">H", 1 << 13) + headers
    return (frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
            + frames.frame(2, 1, frames.content_header(1, properties))
            + frames.frame(3, 1, b"x"))


def test_a_frame_larger_than_frame_max_is_a_frame_error():
    assert closed_with(struct.pack(">BHI", 1, 1, 131073))[0] == 501


def test_a_frame_whose_size_misses_its_frame_end_is_a_frame_error():
    data = frames.method_frame(1, make(spec.Basic.Qos))
    one_more = struct.pack(">I", len(data) - frames.FRAME_OVERHEAD + 1)
    assert closed_with(data[:3] + one_more + data[7:] + b"\x00") == (
        501, "FRAME_ERROR - type 1, invalid frame end marker 0")


def test_a_short_string_past_its_method_frame_is_a_syntax_error():
    assert closed_with(frames.frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x05ab")) == (
        502, "SYNTAX_ERROR - short string exceeds frame")


def test_a_long_string_past_its_method_frame_is_a_syntax_error():
    update_secret = b"\x00\x0a\x00\x46" + struct.pack(">I", 100) + b"secret"
    assert closed_with(frames.frame(1, 0, update_secret)) == (
        502, "SYNTAX_ERROR - long string exceeds frame")


def test_a_number_cut_by_the_end_of_its_method_frame_is_a_syntax_error():
    assert closed_with(frames.frame(1, 1, b"\x00\x3c\x00\x0a\x00\x00")) == (
        502, "SYNTAX_ERROR - malformed Basic.Qos: prefetch_size exceeds frame")


@pytest.mark.parametrize("arguments", [
    struct.pack(">I", 100) + b"\x01aI\x00\x00\x00\x01",                 # the table itself
    table(b"\x05abc"),                                                  # a key
    table(b"\x01aS" + struct.pack(">I", 50) + b"text"),                 # a long string
    table(b"\x01aF" + table(b"\x01bI\x00\x00\x00\x01")[:-2]),           # a nested table
    table(b"\x01aF" + struct.pack(">I", 40) + b"\x01bI\x00\x00\x00\x01"),
    table(b"\x01aA" + struct.pack(">I", 40) + b"I\x00\x00\x00\x01"),    # an array
    table(b"\x01aA" + table(b"A" + struct.pack(">I", 40) + b"I\x00\x00\x00\x01")),
    table(b"\x01aF" + table(b"\x01bA" + struct.pack(">I", 30) + b"Bx")),
], ids=["table", "key", "longstr", "cut-nested-table", "nested-table", "array",
        "array-in-array", "array-in-table"])
def test_a_length_past_its_field_table_in_arguments_is_a_syntax_error(arguments):
    assert closed_with(declare(arguments))[0] == 502


@pytest.mark.parametrize("headers", [
    struct.pack(">I", 100) + b"\x01aI\x00\x00\x00\x01",
    table(b"\x01aF" + struct.pack(">I", 40) + b"\x01bI\x00\x00\x00\x01"),
    table(b"\x01aA" + struct.pack(">I", 40) + b"I\x00\x00\x00\x01"),
    table(b"\x02CCA" + struct.pack(">I", 0x80000007) + b"S\x00\x04\x00\x02dl"),
    table(b"\x01aF" + table(b"\x01bA" + struct.pack(">I", 30) + b"Bx")),
], ids=["table", "nested-table", "array", "fuzzer-cc-array", "array-in-table"])
def test_a_length_past_the_headers_table_of_a_publish_is_a_syntax_error(headers):
    assert closed_with(publish_with_headers(headers))[0] == 502


def test_a_property_past_its_content_header_is_a_syntax_error():
    data = (frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
            + frames.frame(2, 1, frames.content_header(1, b"\x80\x00\x09text"))
            + frames.frame(3, 1, b"x"))
    assert closed_with(data) == (
        502, "SYNTAX_ERROR - malformed content header: content header properties truncated")


def test_a_routing_key_past_its_publish_frame_is_a_syntax_error():
    assert closed_with(frames.frame(1, 1, b"\x00\x3c\x00\x28\x00\x00\x00\x09q")) == (
        502, "SYNTAX_ERROR - malformed basic.publish")


def test_a_content_header_too_short_for_its_fields_is_a_frame_error():
    data = frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
    assert closed_with(data + frames.frame(2, 1, b"\x00\x3c\x00\x00"))[0] == 501


def test_a_body_longer_than_its_header_declared_is_a_frame_error():
    data = (frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
            + frames.frame(2, 1, frames.content_header(3, b"\x00\x00"))
            + frames.frame(3, 1, b"four"))
    assert closed_with(data) == (
        501, "FRAME_ERROR - content body frame exceeds remaining content size")


def test_well_formed_nested_tables_and_arrays_are_taken():
    headers = FieldTable({"x-death": [FieldTable({"count": 1, "queues": ["a", "b"]})],
                          "deep": FieldTable({"a": FieldTable({"b": [[1, 2], []]})})})
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="q")))
    properties = encode_properties(Properties(headers=headers))
    conn.receive_data(frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
                      + frames.frame(2, 1, frames.content_header(1, properties))
                      + frames.frame(3, 1, b"x"))
    assert [type(m) for m in methods(conn.data_to_send())] == [spec.Queue.DeclareOk]
    assert conn.broker.vhosts["/"].queues["q"].message_count == 1
