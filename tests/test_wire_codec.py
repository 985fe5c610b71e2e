"""The wire codec against pamqp: same bytes out, same values in."""

from __future__ import annotations

import datetime
import decimal
from types import SimpleNamespace as Item

from hypothesis import given, settings, strategies as st
from pamqp import (
    body as pamqp_body,
    commands as spec,
    encode as pamqp_encode,
    frame as pamqp_frame,
    header as pamqp_header,
)

from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make
from amqp_server.wire.properties import (
    Properties,
    decode_properties,
    encode_properties,
    scan_properties,
)
from amqp_server.wire.table import FieldTable, Timestamp, decode_table, encode_table, infer_type

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
shortstr = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)

scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32, allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.none(),
    st.decimals(min_value=-10_000, max_value=10_000, places=2, allow_nan=False,
                allow_infinity=False),
    st.datetimes(min_value=datetime.datetime(1971, 1, 1), max_value=datetime.datetime(2100, 1, 1))
    .map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC)),
    st.binary(max_size=20).map(bytearray),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(names, children, max_size=4)),
    max_leaves=12)
tables = st.dictionaries(names, values, max_size=6)


@settings(max_examples=300)
@given(tables)
def test_table_bytes_survive_decode_and_reencode(table):
    """pamqp's encoding (with its own type choices) comes back byte-for-byte."""
    wire = pamqp_encode.field_table(table)
    decoded, end = decode_table(wire)
    assert end == len(wire)
    assert encode_table(decoded) == wire


@settings(max_examples=200)
@given(tables)
def test_decoded_values_match_python_values(table):
    decoded, _ = decode_table(pamqp_encode.field_table(table))

    def plain(value):
        if isinstance(value, datetime.datetime):
            return int(value.timestamp())
        if isinstance(value, bytearray):
            return bytes(value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, float):
            return value
        return value

    for key, value in table.items():
        got = decoded[key]
        expected = plain(value)
        if isinstance(value, float):
            assert got == value or abs(got - value) <= abs(value) * 1e-6
        elif isinstance(value, decimal.Decimal):
            assert got == value
        elif isinstance(value, (dict, list)):
            continue  # nested floats may be 32-bit on the wire
        else:
            assert plain(got) == expected


def test_table_records_rabbitmq_type_names():
    wire = (b"\x00\x00\x00\x17" + b"\x01aI\x00\x00\x00\x05" + b"\x01bs\x00\x07"
            + b"\x01cl\x00\x00\x00\x00\x00\x00\x00\x01")
    table, _ = decode_table(wire)
    assert table.types == {"a": "signedint", "b": "short", "c": "long"}
    assert encode_table(table) == wire


def test_inferred_types_follow_rabbitmq():
    assert infer_type(5) == "signedint"
    assert infer_type(2**40) == "long"
    assert infer_type(Timestamp(1)) == "timestamp"
    assert infer_type("x") == "longstr"
    assert infer_type(True) == "bool"


@st.composite
def methods(draw):
    cls = draw(st.sampled_from([
        spec.Queue.Declare, spec.Exchange.Declare, spec.Basic.Publish, spec.Basic.Consume,
        spec.Basic.Ack, spec.Basic.Nack, spec.Queue.Bind, spec.Exchange.Bind,
        spec.Basic.Qos, spec.Channel.Close, spec.Connection.Tune, spec.Basic.Deliver,
        spec.Basic.GetOk, spec.Queue.DeclareOk, spec.Basic.Return,
    ]))
    safe = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.:", max_size=40)
    kwargs = {}
    for name in cls.__slots__:
        kind = cls.amqp_type(name)
        if name == "ticket":
            kwargs[name] = 0
        elif kind == "bit":
            kwargs[name] = draw(st.booleans())
        elif kind == "shortstr":
            kwargs[name] = draw(safe)
        elif kind == "octet":
            kwargs[name] = draw(st.integers(0, 255))
        elif kind == "short":
            kwargs[name] = draw(st.integers(0, 65535))
        elif kind == "long":
            kwargs[name] = draw(st.integers(0, 2**32 - 1))
        elif kind == "longlong":
            kwargs[name] = draw(st.integers(0, 2**63 - 1))
        elif kind == "table":
            # pamqp writes keys sorted; a sorted dict compares byte for byte
            kwargs[name] = dict(sorted(draw(st.dictionaries(
                safe.filter(bool), st.text(max_size=5), max_size=3)).items()))
    return cls(**kwargs)


@settings(max_examples=300)
@given(methods())
def test_method_encoding_equals_pamqp(method):
    ours = make(type(method), **{name: getattr(method, name) for name in method.__slots__})
    theirs = pamqp_frame.marshal(method, 1)
    assert frames.method_frame(1, ours) == theirs
    decoded = decode_method(theirs[7:-1])
    for name in method.__slots__:
        assert getattr(decoded, name) == getattr(method, name) or (
            not getattr(decoded, name) and not getattr(method, name))


def test_hot_path_frames_equal_pamqp():
    props = spec.Basic.Properties(content_type="text/plain", headers={"k": "v"},
                                  delivery_mode=2, message_id="m1")
    header = pamqp_header.ContentHeader(0, 5, props)
    header_payload = pamqp_frame.marshal(header, 3)[7:-1]
    route = frames.shortstr("ex") + frames.shortstr("rk")
    content = (pamqp_frame.marshal(header, 3)
               + pamqp_frame.marshal(pamqp_body.ContentBody(b"hello"), 3))

    deliver = spec.Basic.Deliver(consumer_tag="ctag", delivery_tag=42, redelivered=True,
                                 exchange="ex", routing_key="rk")
    assert frames.deliver(3, frames.shortstr("ctag"), 42, True, route, header_payload,
                          b"hello", 131072) == pamqp_frame.marshal(deliver, 3) + content

    get_ok = spec.Basic.GetOk(delivery_tag=7, redelivered=False, exchange="ex",
                              routing_key="rk", message_count=9)
    assert frames.get_ok(3, 7, False, route, 9, header_payload, b"hello", 131072) == (
        pamqp_frame.marshal(get_ok, 3) + content)

    ret = spec.Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="ex",
                            routing_key="rk")
    assert frames.basic_return(3, 312, "NO_ROUTE", route, header_payload, b"hello",
                               131072) == pamqp_frame.marshal(ret, 3) + content

    assert frames.ack_frame(3, 99, True) == pamqp_frame.marshal(
        spec.Basic.Ack(delivery_tag=99, multiple=True), 3)
    assert frames.nack_frame(3, 99, False) == pamqp_frame.marshal(
        spec.Basic.Nack(delivery_tag=99, multiple=False, requeue=False), 3)


def test_deliver_many_equals_one_deliver_each():
    route = frames.shortstr("ex") + frames.shortstr("rk")
    other_route = frames.shortstr("") + frames.shortstr("q")
    header = frames.content_header(5, b"\x00\x00")
    typed = frames.content_header(5, b"\x80\x00\x0atext/plain")

    def entry(route, header, body, redelivered=False):
        return Item(redelivered=redelivered,
                    message=Item(route=route, header=header, body=body))

    entries = [entry(route, header, b"hello"), entry(route, header, b"world", True),
               entry(route, typed, b"typed"), entry(other_route, typed, b"again"),
               entry(other_route, frames.content_header(0, b"\x00\x00"), b""),
               entry(route, frames.content_header(9000, b"\x00\x00"), b"b" * 9000),
               entry(route, header, b"after")]
    expected = b"".join(
        frames.deliver(2, frames.shortstr("ctag"), tag, item.redelivered, item.message.route,
                       item.message.header, item.message.body, 4096)
        for tag, item in enumerate(entries, start=40))
    assert frames.deliver_many(2, frames.shortstr("ctag"), 40, entries, 4096) == expected


def test_bodies_split_at_frame_max():
    body = b"x" * 10_000
    data = frames.content_frames(1, frames.content_header(len(body), b"\x00\x00"), body, 4096)
    sizes = []
    pos = len(frames.frame(2, 1, frames.content_header(len(body), b"\x00\x00")))
    while pos < len(data):
        size = int.from_bytes(data[pos + 3:pos + 7], "big")
        assert size <= 4096 - 8
        sizes.append(size)
        pos += size + 8
    assert sum(sizes) == len(body)


properties = st.builds(
    spec.Basic.Properties,
    content_type=st.one_of(st.none(), shortstr.filter(bool)),
    content_encoding=st.one_of(st.none(), shortstr.filter(bool)),
    headers=st.one_of(st.none(), tables.filter(bool)),
    delivery_mode=st.one_of(st.none(), st.integers(1, 2)),
    priority=st.one_of(st.none(), st.integers(0, 9)),
    correlation_id=st.one_of(st.none(), shortstr.filter(bool)),
    reply_to=st.one_of(st.none(), shortstr.filter(bool)),
    expiration=st.one_of(st.none(), st.integers(0, 10**9).map(str)),
    message_id=st.one_of(st.none(), shortstr.filter(bool)),
    timestamp=st.one_of(st.none(), st.datetimes(
        min_value=datetime.datetime(1971, 1, 1), max_value=datetime.datetime(2100, 1, 1))
        .map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC))),
    message_type=st.one_of(st.none(), shortstr.filter(bool)),
    user_id=st.one_of(st.none(), shortstr.filter(bool)),
    app_id=st.one_of(st.none(), shortstr.filter(bool)),
)


@settings(max_examples=300)
@given(properties)
def test_all_basic_properties_round_trip(props):
    raw = props.marshal()
    decoded = decode_properties(raw)
    assert encode_properties(decoded) == raw
    assert decoded.content_type == props.content_type
    assert decoded.delivery_mode == props.delivery_mode
    assert decoded.expiration == props.expiration
    assert decoded.type == props.message_type


def test_properties_decode_defaults():
    assert decode_properties(b"\x00\x00") == Properties()


def test_dead_letter_splice_equals_a_full_re_encode():
    """locate + splice_dead_letter (no decoding) give the bytes that decoding,
    replacing headers, dropping expiration and re-encoding would."""
    import itertools
    from dataclasses import replace

    from amqp_server.wire.properties import locate, splice_dead_letter

    new = FieldTable({"x-death": "rendered"})
    for combo in itertools.product([None, "ct"], [None, "gzip"], [None, FieldTable({"a": 1})],
                                   [None, 2], [None, 5], [None, "cid"], [None, "rt"],
                                   [None, "500"], [None, "mid"], [None, Timestamp(7)]):
        props = Properties(*combo[:3], *combo[3:8], message_id=combo[8], timestamp=combo[9])
        raw = b"\x00" * 12 + encode_properties(props)
        spliced = splice_dead_letter(raw, 12, locate(raw, 12), encode_table(new))
        assert spliced == b"\x00" * 12 + encode_properties(
            replace(props, headers=new, expiration=None)), combo


@given(st.one_of(st.binary(max_size=64), st.builds(
    lambda table, tail: b"\x20\x00" + table + tail,
    st.binary(max_size=40).map(lambda body: len(body).to_bytes(4, "big") + body),
    st.binary(max_size=8))))
def test_scan_properties_agrees_with_the_decoder(raw):
    """What scan_properties lets through, headers table included, the
    decoder reads; what it refuses, the decoder refuses."""
    header = b"\x00" * 12 + raw
    try:
        scan_properties(header, 12)
    except ValueError:
        accepted = False
    else:
        accepted = True
    try:
        decode_properties(raw)
    except ValueError:
        decoded = False
    else:
        decoded = True
    assert accepted == decoded


def test_property_flags_that_promise_more_than_is_there():
    for raw in (b"\x7f\x7f", b"\x80\x00", b"\x80\x00\x05abc", b"\x00\x40\x00",
                b"\x20\x00\x00\x00\x00\x03\x01aZ"):  # a table entry of unknown type
        try:
            scan_properties(b"\x00" * 12 + raw, 12)
        except ValueError:
            continue
        raise AssertionError(f"{raw!r} accepted")
    scan_properties(b"\x00" * 12 + b"\x90\x00\x04text\x02", 12)  # content_type, delivery_mode


@given(st.text(min_size=1, max_size=20), st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_one_long_entry_encodes_as_a_table_of_it_does(name, value):
    from amqp_server.wire.table import encode_entry, encode_table_pairs
    table = FieldTable({name: value})
    table.types[name] = "long"
    assert encode_entry(name, "long", value) == encode_table_pairs(table)
    assert encode_entry(name, "longstr", str(value)) == encode_table_pairs(FieldTable(
        {name: str(value)}))
