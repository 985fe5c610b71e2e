"""dlx/delays.py: `x-delay` as the delayed-message plugin reads it
(rabbit_delayed_message_utils:get_delay/1, 3.13 series), and Artemis's
`_AMQ_SCHED_DELIVERY`."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from dlx.delays import (
    MAX_DELAY_MS,
    NO_DELAY,
    Delay,
    DelayError,
    delivered_delay,
    due_at,
    read_delay,
    read_delay_leniently,
    scheduled_for,
)


def delay(value, kind=None):
    return read_delay({"x-delay": value}, {"x-delay": kind} if kind else None)


def test_no_header_routes_at_once():
    assert read_delay(None) is NO_DELAY
    assert read_delay({}) is NO_DELAY
    assert not read_delay({"other": 5}).delays


@pytest.mark.parametrize("kind", ["long", "signedint", "unsignedint", "short",
                                  "unsignedshort", "unsignedbyte"])
def test_integers_of_the_plugins_widths_delay(kind):
    assert delay(100, kind) == Delay(100)
    assert delay(100, kind).delays


@pytest.mark.parametrize("kind", ["byte", "bool", "decimal", "timestamp", "void"])
def test_types_the_plugin_does_not_read_route_at_once(kind):
    # 3.13's message container names a signed byte `byte`, which its list lacks.
    assert not delay(100, kind).delays


def test_negative_and_zero_delays_route_at_once():
    assert delay(-5000, "signedint") == Delay(-5000)
    assert not delay(-5000, "signedint").delays
    assert not delay(0, "long").delays


def test_the_erlang_timer_range_is_the_limit():
    assert delay(MAX_DELAY_MS, "long").delays
    assert not delay(MAX_DELAY_MS + 1, "long").delays
    assert not delay(2**40, "long").delays


def test_floats_are_truncated():
    assert delay(1500.9, "double") == Delay(1500)
    assert not delay(0.9, "float").delays  # trunc(0.9) = 0
    assert not delay(float("nan"), "double").delays
    assert not delay(float("inf"), "double").delays


def test_strings_are_read_as_base_ten_integers():
    assert delay("500", "longstr") == Delay(500)
    assert delay("+500", "longstr") == Delay(500)
    assert delay(b"250", "binary") == Delay(250)
    assert not delay("-500", "longstr").delays


@pytest.mark.parametrize("text", ["abc", "", "5s", "1.5", " 500", "500 ", "0x10", "1e3"])
def test_a_string_that_is_not_an_integer_is_an_error(text):
    with pytest.raises(DelayError):
        delay(text, "longstr")
    assert read_delay_leniently({"x-delay": text}, {"x-delay": "longstr"}) is NO_DELAY


def test_a_string_too_long_for_python_to_read_is_past_every_delay():
    # The plugin reads any integer (Erlang's are unbounded); int() refuses
    # over 4,300 digits, which once closed the connection with Python's words.
    assert not delay("9" * 5000, "longstr").delays
    assert not delay("-" + "9" * 5000, "longstr").delays
    assert delay("0" * 5000 + "300", "longstr") == Delay(300)
    assert scheduled_for({"_AMQ_SCHED_DELIVERY": "9" * 5000}, 1000.0) is None
    assert scheduled_for({"_AMQ_SCHED_DELIVERY": str(2**63)}, 1000.0) is None
    assert scheduled_for({"_AMQ_SCHED_DELIVERY": "0" * 5000 + "5000"}, 1000.0) == 5000.0


def test_types_are_inferred_without_a_type_table():
    assert read_delay({"x-delay": 300}) == Delay(300)
    assert read_delay({"x-delay": "300"}) == Delay(300)
    assert not read_delay({"x-delay": True}).delays


def test_due_time_is_the_publish_time_plus_the_delay():
    assert due_at(1000.0, Delay(250)) == 1250.0
    assert due_at(1000.0, Delay(-250)) is None
    assert due_at(1000.0, NO_DELAY) is None


def test_delivered_messages_carry_the_delay_negated():
    assert delivered_delay(Delay(5000)) == -5000


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_only_1_to_2_32_minus_1_delays(value):
    assert delay(value, "long").delays == (0 < value <= MAX_DELAY_MS)


@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_a_string_delays_as_its_integer_does(value):
    assert delay(str(value), "longstr") == delay(value, "long")


def test_scheduled_delivery_is_an_absolute_time_in_the_future():
    assert scheduled_for({"_AMQ_SCHED_DELIVERY": 5000}, 1000.0) == 5000.0
    assert scheduled_for({"_AMQ_SCHED_DELIVERY": "5000"}, 1000.0) == 5000.0
    assert scheduled_for({"_AMQ_SCHED_DELIVERY": 500}, 1000.0) is None  # past: at once
    assert scheduled_for({"_AMQ_SCHED_DELIVERY": "soon"}, 1000.0) is None
    assert scheduled_for({"_AMQ_SCHED_DELIVERY": True}, 1000.0) is None
    assert scheduled_for({}, 1000.0) is None
