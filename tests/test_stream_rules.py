"""A stream's rules as pure functions (policies/stream_rules.py): max-age,
the offset specs of x-stream-offset, and retention by whole segments."""

from __future__ import annotations

import pytest

from amqp_server.wire.table import FieldArray, FieldTable
from policies.stream_rules import (
    FIRST,
    LAST,
    NEXT,
    FilterSpec,
    OffsetSpec,
    SegmentFacts,
    check_stream_offset,
    filter_spec,
    max_age_ms,
    offset_spec,
    segments_to_remove,
    start_offset,
)

NOW = 1_700_000_000_000
HOUR = 3_600_000


@pytest.mark.parametrize("text, ms", [
    ("7D", 7 * 24 * HOUR), ("12h", 12 * HOUR), ("30m", 30 * 60_000), ("10s", 10_000),
    ("1M", 30 * 24 * HOUR), ("1Y", 365 * 24 * HOUR), (b"2h", 2 * HOUR),
])
def test_max_age_units_are_rabbitmqs(text, ms):
    assert max_age_ms(text) == ms


@pytest.mark.parametrize("text", ["0s", "10x", "h", "", "10", "-1h", "1.5h", "1d", 10, None])
def test_anything_else_is_not_a_max_age(text):
    assert max_age_ms(text) is None


@pytest.mark.parametrize("typed, spec", [
    (None, NEXT),
    (("longstr", b"first"), FIRST), (("longstr", b"last"), LAST), (("longstr", "next"), NEXT),
    (("long", 42), OffsetSpec("offset", 42)), (("signedint", -1), OffsetSpec("offset", -1)),
    (("timestamp", 1_700_000_000), OffsetSpec("timestamp", 1_700_000_000_000)),
    (("longstr", b"1h"), OffsetSpec("timestamp", NOW - HOUR)),
    # parse_offset_arg({_, <<"first">>}): the names whatever the field's
    # type (pika sends bytes as a byte array; 3.10.8 takes it).
    (("binary", b"first"), FIRST), (("binary", b"next"), NEXT),
])
def test_offset_specs(typed, spec):
    assert offset_spec(typed, NOW) == spec


@pytest.mark.parametrize("typed, term", [
    (("longstr", b"bogus"), '{invalid_stream_offset_arg,{longstr,<<"bogus">>}}'),
    (("bool", True), "{invalid_stream_offset_arg,{bool,true}}"),
    (("double", 1.5), "{invalid_stream_offset_arg,{double,1.5}}"),
    (("binary", b"1h"), '{invalid_stream_offset_arg,{binary,<<"1h">>}}'),
])
def test_what_is_not_an_offset_spec_is_refused_with_rabbitmqs_term(typed, term):
    assert offset_spec(typed, NOW) is None
    assert check_stream_offset(typed, {}) == term


@pytest.mark.parametrize("spec, expected", [
    (FIRST, 10), (LAST, 19), (NEXT, 20), (OffsetSpec("offset", 15), 15),
    # Past the end: its own offset, nothing below it (3.10.8 delivers
    # 7, 8, 9 to a consumer at 7 of a stream holding 0..4, then 5..9).
    (OffsetSpec("offset", 3), 10), (OffsetSpec("offset", 99), 99),
    (OffsetSpec("timestamp", NOW), None),
])
def test_where_a_reader_starts_in_a_log_of_offsets_10_to_19(spec, expected):
    assert start_offset(spec, 10, 20) == expected


def test_last_in_an_empty_log_is_the_next_offset():
    assert start_offset(LAST, 0, 0) == 0


def seg(size, newest):
    return SegmentFacts(size, newest)


def test_retention_by_size_removes_the_oldest_whole_segments():
    segments = [seg(100, NOW), seg(100, NOW), seg(100, NOW), seg(10, NOW)]
    assert segments_to_remove(segments, 250, None, NOW) == 1
    assert segments_to_remove(segments, 110, None, NOW) == 2  # 110 left: fits
    assert segments_to_remove(segments, 109, None, NOW) == 3
    assert segments_to_remove(segments, 1000, None, NOW) == 0


def test_retention_never_removes_the_segment_being_written():
    segments = [seg(100, NOW - 10 * HOUR), seg(500, NOW - 10 * HOUR)]
    assert segments_to_remove(segments, 0, HOUR, NOW) == 1
    assert segments_to_remove(segments[1:], 0, HOUR, NOW) == 0


def test_retention_keeps_the_newest_segment_holding_messages_before_empty_ones():
    # After a restart appends go to a new segment, empty until the first
    # publish: the one before it holds the newest messages and stays.
    old = seg(3100, NOW - 10 * HOUR)
    assert segments_to_remove([old, seg(0, None)], 1000, HOUR, NOW) == 0
    assert segments_to_remove([old, old, seg(0, None)], 1000, HOUR, NOW) == 1
    assert segments_to_remove([old, old, seg(10, NOW)], 1000, HOUR, NOW) == 2


def test_retention_by_age_reads_a_segments_newest_message():
    segments = [seg(1, NOW - 3 * HOUR), seg(1, NOW - 2 * HOUR), seg(1, NOW - 1000), seg(1, NOW)]
    assert segments_to_remove(segments, None, HOUR, NOW) == 2
    # The newest decides: a segment with one young message stays whole.
    assert segments_to_remove([seg(1, NOW - 10), seg(1, NOW)], None, HOUR, NOW) == 0


def test_age_and_size_together_remove_what_either_would():
    segments = [seg(100, NOW - 3 * HOUR), seg(100, NOW), seg(100, NOW), seg(1, NOW)]
    assert segments_to_remove(segments, 150, HOUR, NOW) == 2


def table(**values) -> FieldTable:
    found = FieldTable({key.replace("_", "-"): value for key, value in values.items()})
    return found


def test_a_filter_is_a_string_or_the_strings_of_an_array():
    assert filter_spec(table(x_stream_filter=b"emea")) == FilterSpec(frozenset({"emea"}))
    array = FieldArray([b"emea", 5, b"apac"])
    array.types = ["longstr", "signedint", "longstr"]
    assert filter_spec(table(x_stream_filter=array)) == FilterSpec(frozenset({"emea", "apac"}))
    assert filter_spec(table(x_stream_match_unfiltered=True)) is None
    assert filter_spec(None) is None


def test_a_filter_sent_as_a_byte_array_is_no_filter():
    # filter_spec/1 takes a longstr only: the consumer gets every message.
    arguments = table(x_stream_filter=b"emea")
    arguments.types["x-stream-filter"] = "binary"
    assert filter_spec(arguments) is None


def test_match_unfiltered_counts_with_a_filter_and_as_a_boolean():
    assert filter_spec(table(x_stream_filter=b"a", x_stream_match_unfiltered=True)) \
        == FilterSpec(frozenset({"a"}), True)
    assert filter_spec(table(x_stream_filter=b"a", x_stream_match_unfiltered=1)) \
        == FilterSpec(frozenset({"a"}), False)


def test_a_filter_passes_its_values_and_unfiltered_messages_when_asked():
    spec = FilterSpec(frozenset({"emea"}), match_unfiltered=False)
    assert [spec.passes(v) for v in ("emea", "amer", None)] == [True, False, False]
    spec = FilterSpec(frozenset({"emea"}), match_unfiltered=True)
    assert [spec.passes(v) for v in ("emea", "amer", None)] == [True, False, True]
