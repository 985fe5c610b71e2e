"""Republish plans, expiry, length and delivery limits, and queue-argument
validation, as pure functions."""

from __future__ import annotations

import pytest

from amqp_server.wire.table import FieldTable
from dlx import limits
from dlx.addresses import auto_created_queue_unused
from dlx.dead_letter import NO_DLX, Drop, Letter, Republish, dead_letter, split_cycles
from dlx.deaths import DeathHistory, record_death
from dlx.expiry import ExpirationError, deadline, is_expired, parse_expiration
from policies.effective import resolve
from policies.registry import ArgumentError, validate_queue_arguments


def letter(**kw):
    base = dict(exchange="in", routing_keys=("main", "cc1", "bcc1"), bcc=("bcc1",),
                headers=FieldTable({"CC": ["cc1"], "app": "v"}))
    base.update(kw)
    return Letter(**base)


def test_no_dlx_is_a_drop():
    assert dead_letter(letter(), "q", "rejected", None, None, 0) == Drop(NO_DLX)


def test_original_keys_route_and_record_without_bcc():
    plan = dead_letter(letter(), "q", "rejected", "dlx", None, 5)
    assert isinstance(plan, Republish)
    assert plan.exchange == "dlx"
    assert plan.routing_keys == ("main", "cc1", "bcc1")  # BCC still routes
    assert plan.history.deaths[0].routing_keys == ("main", "cc1")  # but is never shown
    assert plan.headers["CC"] == ["cc1"]
    assert "BCC" not in plan.headers


def test_routing_key_override_replaces_keys_and_removes_cc():
    plan = dead_letter(letter(), "q", "expired", "dlx", "over", 5)
    assert plan.routing_keys == ("over",)
    assert "CC" not in plan.headers
    assert plan.headers["app"] == "v"
    assert plan.history.deaths[0].routing_keys == ("main", "cc1")


def test_original_expiration_recorded_whatever_the_reason():
    plan = dead_letter(letter(expiration="250"), "q", "rejected", "dlx", None, 5)
    assert plan.history.deaths[0].original_expiration == "250"
    plan = dead_letter(letter(), "q", "rejected", "dlx", None, 5)
    assert plan.history.deaths[0].original_expiration is None


def test_split_cycles():
    history = record_death(DeathHistory(), "a", "expired", "x", ("k",), None, 0)
    assert split_cycles("expired", history, ["a", "b"]) == (["b"], ["a"])
    rejected = record_death(DeathHistory(), "a", "rejected", "x", ("k",), None, 0)
    assert split_cycles("rejected", rejected, ["a", "b"]) == (["a", "b"], [])


@pytest.mark.parametrize("text,expected", [("0", 0), ("1500", 1500), ("+7", 7)])
def test_parse_expiration(text, expected):
    assert parse_expiration(text) == expected


@pytest.mark.parametrize("text,term", [
    ("abc", "no_integer"),
    ("", "no_integer"),
    ("10s", '{leftover_string,"s"}'),
    ("-5", "{value_negative,-5}"),
    ("315360000001", "{value_too_large,315360000001}"),
])
def test_parse_expiration_errors(text, term):
    with pytest.raises(ExpirationError) as info:
        parse_expiration(text)
    assert str(info.value) == term


def test_deadline_uses_the_lower_ttl():
    assert deadline(1000, 500, None) == 1500
    assert deadline(1000, 500, 200) == 1200
    assert deadline(1000, None, None) is None
    assert is_expired(1000, 1000) and not is_expired(1000, 999) and not is_expired(None, 5)


def test_overflow_verdicts():
    v = limits.publish_verdict
    assert v(limits.DROP_HEAD, 5, 0, 1, 1, None) == limits.ACCEPT
    assert v(limits.REJECT_PUBLISH, 0, 0, 1, 1, None) == limits.ACCEPT
    assert v(limits.REJECT_PUBLISH, 1, 0, 1, 1, None) == limits.REJECT
    assert v(limits.REJECT_PUBLISH_DLX, 1, 0, 1, 1, None) == limits.REJECT_DLX
    assert v(limits.REJECT_PUBLISH, 0, 90, 11, None, 100) == limits.REJECT
    assert v(limits.REJECT_PUBLISH, 0, 90, 10, None, 100) == limits.ACCEPT
    assert v(limits.REJECT_PUBLISH, 0, 0, 0, 0, None) == limits.REJECT
    assert limits.over_limit(2, 0, 1, None) and not limits.over_limit(1, 0, 1, None)
    assert limits.over_limit(0, 11, None, 10)


def test_delivery_limit():
    assert not limits.past_delivery_limit(2, 2)
    assert limits.past_delivery_limit(3, 2)
    assert not limits.past_delivery_limit(100, None)


def _args(**kw):
    return FieldTable({k.replace("_", "-"): v for k, v in kw.items()})


@pytest.mark.parametrize("args,message", [
    (_args(x_message_ttl=-1), "invalid arg 'x-message-ttl' for Q: {value_negative,-1}"),
    (_args(x_message_ttl="5"),
     "invalid arg 'x-message-ttl' for Q: \"expected integer, got longstr\""),
    (_args(x_expires=0), "invalid arg 'x-expires' for Q: {value_zero,0}"),
    (_args(x_max_length=-2), "invalid arg 'x-max-length' for Q: {value_negative,-2}"),
    (_args(x_overflow="sideways"), "invalid arg 'x-overflow' for Q: invalid_overflow"),
    (_args(x_overflow=1), "invalid arg 'x-overflow' for Q: {unacceptable_type,signedint}"),
    (_args(x_dead_letter_routing_key="k"),
     "invalid arg 'x-dead-letter-routing-key' for Q: routing_key_but_no_dlx_defined"),
    (_args(x_dead_letter_exchange=5),
     "invalid arg 'x-dead-letter-exchange' for Q: {unacceptable_type,signedint}"),
    (_args(x_queue_type="lazy"),
     "invalid arg 'x-queue-type' for Q: \"unsupported queue type 'lazy'\""),
    (_args(x_delivery_limit=3),
     "invalid arg 'x-delivery-limit' for Q of queue type rabbit_classic_queue"),
    (_args(x_queue_type="quorum", x_max_priority=3),
     "invalid arg 'x-max-priority' for Q of queue type rabbit_quorum_queue"),
    (_args(x_queue_type="quorum", x_dead_letter_strategy="sometimes", x_dead_letter_exchange="d"),
     "invalid arg 'x-dead-letter-strategy' for Q: invalid_dlx_strategy"),
])
def test_argument_errors_use_rabbitmq_wording(args, message):
    with pytest.raises(ArgumentError) as info:
        validate_queue_arguments(args)
    assert info.value.message("Q") == message


def test_effective_settings():
    settings = resolve(_args(x_message_ttl=500, x_dead_letter_exchange="a"),
                       policy={"message-ttl": 100, "dead-letter-exchange": "b",
                               "max-length": 9}, operator_policy={"max-length": 3})
    assert settings.message_ttl == 100          # the smaller value wins
    assert settings.dead_letter_exchange == "a"  # the argument wins
    assert settings.max_length == 3              # operator policy caps
    quorum = resolve(_args(x_queue_type="quorum", x_overflow="reject-publish-dlx"))
    assert quorum.overflow == limits.DROP_HEAD   # unsupported on quorum: fallback
    aloq = resolve(_args(x_queue_type="quorum", x_dead_letter_exchange="d",
                         x_dead_letter_strategy="at-least-once"))
    assert not aloq.at_least_once                # needs reject-publish
    aloq = resolve(_args(x_queue_type="quorum", x_dead_letter_exchange="d",
                         x_dead_letter_strategy="at-least-once", x_overflow="reject-publish"))
    assert aloq.at_least_once


@pytest.mark.parametrize("policy, consumers, messages, gone_for, unused", [
    ({}, 0, 0, None, True),              # Artemis's defaults: at once, when empty
    ({}, 0, 1, 5.0, False),              # still holds a message
    ({}, 1, 0, None, False),             # consumed from
    ({"auto-delete-queues": False}, 0, 0, 5.0, False),
    ({"auto-delete-queues-message-count": -1}, 0, 7, 0.0, True),
    ({"auto-delete-queues-message-count": 3}, 0, 3, 0.0, True),
    ({"auto-delete-queues-delay": 100}, 0, 0, 99.0, False),
    ({"auto-delete-queues-delay": 100}, 0, 0, 100.0, True),
    ({"auto-delete-queues-delay": 100}, 0, 0, None, True),  # never had a consumer
])
def test_auto_created_queue_unused(policy, consumers, messages, gone_for, unused):
    settings = resolve(FieldTable(), policy)
    assert auto_created_queue_unused(settings, consumers, messages, gone_for) is unused
