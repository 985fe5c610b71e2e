"""Artemis and Qpid rules as pure functions, with the seeds' own numbers:
delayed redelivery (seed 000/001), delivery attempts, expiry delays (seed
003), address-setting wildcards and merging, dead letter and expiry targets."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from amqp_server.wire.table import FieldTable
from dlx.addresses import (
    ACTUAL_EXPIRY,
    ORIG_ADDRESS,
    ORIG_QUEUE,
    copy_headers,
    death_target,
    original_address,
    per_address_queue,
)
from dlx.expiry import clamp_ttl
from dlx.redelivery import (
    DEAD,
    LATER,
    NOW,
    Redelivery,
    after_return,
    persists_count,
    redelivery_delay,
)
from policies.address_settings import parse, wildcard_match
from policies.effective import resolve
from policies.model import PolicyError, make_policy
from policies.registry import ArgumentError, validate_queue_arguments


class Scripted:
    """java.util.Random as the seed's worked example drew it: a sign, then a size."""

    def __init__(self, *draws: float) -> None:
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


PLUS, MINUS = 0.0, 0.9  # nextBoolean() true / false


def _args(**values) -> FieldTable:
    return FieldTable({k.replace("_", "-"): v for k, v in values.items()})


# ---- delayed redelivery ------------------------------------------------------

def test_multiplier_grows_the_delay_up_to_the_cap():
    # seed: redelivery-delay=5000, multiplier=2, max=15000, factor=0.0
    delays = [redelivery_delay(n, 5000, 2.0, 15000) for n in (1, 2, 3)]
    assert delays == [5000, 10000, 15000]


def test_collision_avoidance_reproduces_the_seed_example():
    # seed: delay=1000, multiplier=1, max=15000, factor=0.5; draws -1/.25, +1/.75, -1/.05
    rng = Scripted(MINUS, 0.25, PLUS, 0.75, MINUS, 0.05)
    delays = [redelivery_delay(n, 1000, 1.0, 15000, 0.5, rng) for n in (1, 2, 3)]
    assert delays == [875, 1375, 975]


def test_max_redelivery_delay_defaults_to_ten_times_the_delay():
    assert redelivery_delay(20, 100, 2.0) == 1000


def test_no_delay_without_redelivery_delay():
    assert redelivery_delay(5, 0, 3.0, 100) == 0


def test_cap_applies_after_the_jitter():
    rng = Scripted(PLUS, 1.0)
    assert redelivery_delay(1, 1000, 1.0, 1200, 0.5, rng) == 1200


def test_huge_exponents_saturate_at_the_cap():
    assert redelivery_delay(10_000, 1000, 10.0, 60_000) == 60_000


@given(st.integers(1, 60), st.integers(1, 10_000), st.floats(1.0, 4.0),
       st.integers(0, 100_000), st.floats(0.0, 1.0), st.floats(0.0, 0.999))
def test_delay_stays_within_cap_and_jitter_bounds(count, delay, multiplier, cap, factor, size):
    rng = Scripted(MINUS, size)
    value = redelivery_delay(count, delay, multiplier, cap, factor, rng)
    assert 0 <= value <= cap


# ---- delivery attempts -----------------------------------------------------------

def test_max_delivery_attempts_counts_deliveries():
    # Artemis: deliveryCount >= maxDeliveries sends it to the DLA
    policy = Redelivery(max_attempts=3)
    assert [after_return(n, policy)[0] for n in (1, 2, 3)] == [NOW, NOW, DEAD]


def test_unlimited_attempts():
    for limit in (-1, 0):
        assert after_return(1000, Redelivery(max_attempts=limit)) == (NOW, 0)


def test_delay_before_the_limit_dead_at_the_limit():
    policy = Redelivery(delay=50, multiplier=2.0, max_attempts=3)
    assert after_return(1, policy) == (LATER, 50)
    assert after_return(2, policy) == (LATER, 100)
    assert after_return(3, policy) == (DEAD, 0)


def test_quorum_delivery_limit_counts_returns_past_the_limit():
    policy = Redelivery(delivery_limit=2)
    assert [after_return(n, policy)[0] for n in (1, 2, 3)] == [NOW, NOW, DEAD]


def test_qpid_moves_only_on_a_clients_give_back():
    policy = Redelivery(max_attempts=2, attempts_need_client=True)
    assert after_return(2, policy, by_client=False) == (NOW, 0)
    assert after_return(3, policy, by_client=True) == (DEAD, 0)


def test_max_redelivery_records_bounds_count_records():
    assert persists_count(10, 10) and not persists_count(11, 10)
    assert persists_count(10_000, -1)
    assert not persists_count(1, 0)


# ---- expiry delays (seed 003) --------------------------------------------------

@pytest.mark.parametrize("ttl, expected", [(None, 10), (20, 20), (5, 5)])
def test_expiry_delay_only_sets_messages_without_expiration(ttl, expected):
    assert clamp_ttl(ttl, expiry_delay=10, min_delay=100, max_delay=1) == expected


@pytest.mark.parametrize("ttl, expected", [
    (None, 500),  # no expiration: max
    (900, 500),   # above max: max
    (50, 100),    # below min: min
    (300, 300),   # in range: unchanged
])
def test_min_and_max_expiry_delay(ttl, expected):
    assert clamp_ttl(ttl, min_delay=100, max_delay=500) == expected


def test_without_max_a_message_without_expiration_gets_min():
    assert clamp_ttl(None, min_delay=100) == 100


def test_without_min_or_max_nothing_changes():
    assert clamp_ttl(None) is None
    assert clamp_ttl(42) == 42


# ---- address settings ------------------------------------------------------------

@pytest.mark.parametrize("pattern, name, matches", [
    ("orders", "orders", True),
    ("orders", "orders.eu", False),
    ("orders.*", "orders.eu", True),
    ("orders.*", "orders.eu.new", False),
    ("orders.#", "orders", True),
    ("orders.#", "orders.eu.new", True),
    ("#", "anything.at.all", True),
    ("*.eu.#", "orders.eu", True),
    ("*.eu.#", "eu", False),
])
def test_artemis_wildcards(pattern, name, matches):
    assert wildcard_match(pattern, name) is matches


def test_more_specific_address_settings_win_key_by_key():
    settings = parse({
        "#": {"max-delivery-attempts": 5, "dead-letter-address": "DLA"},
        "orders.#": {"redelivery-delay": 100, "max-delivery-attempts": 3},
        "orders.eu": {"redelivery-delay": 7},
    })
    assert settings.match("orders.eu") == {
        "redelivery-delay": 7, "max-delivery-attempts": 3, "dead-letter-address": "DLA"}
    assert settings.match("stocks") == {"max-delivery-attempts": 5,
                                        "dead-letter-address": "DLA"}


@pytest.mark.parametrize("raw, text", [
    ({"q": {"redelivery-delay": -5}},
     "redelivery-delay must be a whole number of milliseconds, 0 or more, got -5"),
    ({"q": {"redelivery-collision-avoidance-factor": 1.5}}, "a number from 0.0 to 1.0, got 1.5"),
    ({"q": {"colour": "red"}}, 'unknown setting "colour"'),
    ({"q": 3}, "must be a table"),
])
def test_bad_address_settings_are_refused_with_the_key(raw, text):
    with pytest.raises(PolicyError) as info:
        parse(raw)
    assert text in str(info.value)


# ---- effective settings ----------------------------------------------------------

def test_layers_argument_then_policy_then_address_settings():
    address = {"redelivery-delay": 3, "max-redelivery-delay": 30, "expiry-address": "E"}
    settings = resolve(_args(x_redelivery_delay=1), policy={"redelivery-delay": 2,
                                                            "max-redelivery-delay": 20},
                       address_settings=address)
    assert settings.redelivery_delay == 1
    assert settings.max_redelivery_delay == 20
    assert settings.expiry_address == "E"


def test_address_settings_make_attempts_default_to_ten():
    assert resolve(_args()).max_delivery_attempts == -1
    assert resolve(_args(), address_settings={"redelivery-delay": 5}).max_delivery_attempts == 10
    assert resolve(_args(x_max_delivery_attempts=-1),
                   address_settings={"redelivery-delay": 5}).max_delivery_attempts == -1


def test_dead_letter_address_is_the_dead_letter_exchange():
    assert resolve(_args(x_dead_letter_address="dla")).dead_letter_exchange == "dla"
    assert resolve(_args(), policy={"dead-letter-address": "p"}).dead_letter_exchange == "p"
    # per layer, an argument under either name beats a policy under either name
    both = resolve(_args(x_dead_letter_address="arg"), policy={"dead-letter-exchange": "pol"})
    assert both.dead_letter_exchange == "arg"
    # a policy beats an address setting
    assert resolve(_args(), policy={"dead-letter-address": "pol"},
                   address_settings={"dead-letter-exchange": "cfg"}
                   ).dead_letter_exchange == "pol"


def test_qpid_arguments():
    settings = resolve(_args(x_qpid_maximum_delivery_count=3, x_qpid_dlq_enabled=True))
    assert settings.redelivery.max_attempts == 3
    assert settings.redelivery.attempts_need_client
    assert settings.qpid_dlq_enabled
    assert resolve(_args(x_qpid_dlq_enabled="true")).qpid_dlq_enabled


def test_policies_take_the_artemis_keys():
    policy = make_policy("/", "p", ".*", {"redelivery-delay": 10, "max-delivery-attempts": 4,
                                          "auto-create-dead-letter-resources": True})
    assert policy.definition["max-delivery-attempts"] == 4
    with pytest.raises(PolicyError) as info:
        make_policy("/", "p", ".*", {"redelivery-delay-multiplier": "fast"})
    assert str(info.value) == '<<"fast">> is not a valid redelivery delay multiplier'


@pytest.mark.parametrize("args, text", [
    (_args(x_redelivery_delay=-1), "invalid arg 'x-redelivery-delay' for Q: {value_negative,-1}"),
    (_args(x_max_delivery_attempts=-2),
     "invalid arg 'x-max-delivery-attempts' for Q: {value_too_small,-2}"),
    (_args(x_redelivery_collision_avoidance_factor=2.0),
     "invalid arg 'x-redelivery-collision-avoidance-factor' for Q: {value_out_of_range,2.0}"),
    (_args(x_expiry_address=5), "invalid arg 'x-expiry-address' for Q: {unacceptable_type,"),
    (_args(x_qpid_dlq_enabled=3), "invalid arg 'x-qpid-dlq-enabled' for Q: {unacceptable_type,"),
    (_args(x_qpid_maximum_delivery_count="x"),
     "invalid arg 'x-qpid-maximum-delivery-count' for Q: \"expected integer, got longstr\""),
])
def test_bad_artemis_and_qpid_arguments(args, text):
    with pytest.raises(ArgumentError) as info:
        validate_queue_arguments(args)
    assert info.value.message("Q").startswith(text)


# ---- where a death goes --------------------------------------------------------------

def test_expired_messages_go_to_the_expiry_address_with_artemis_headers():
    settings = resolve(_args(x_dead_letter_exchange="dlx", x_expiry_address="exp",
                             x_auto_create_expiry_resources=True))
    target = death_target("expired", "q", settings)
    assert (target.exchange, target.expiry, target.stamp) == ("exp", True, True)
    assert target.auto_queue == ("EXP.", "")
    rejected = death_target("rejected", "q", settings)
    assert (rejected.exchange, rejected.stamp, rejected.auto_queue) == ("dlx", False, None)


def test_auto_created_dead_letter_queue_name_and_headers():
    settings = resolve(_args(x_dead_letter_address="DLA",
                             x_auto_create_dead_letter_resources=True,
                             x_dead_letter_queue_prefix="", x_dead_letter_queue_suffix=".DLQ"))
    target = death_target("delivery_limit", "q", settings)
    assert per_address_queue(target.auto_queue, "orders") == "orders.DLQ"
    headers = copy_headers(original_address("", "orders"), "q", 1234)
    assert headers == {ORIG_ADDRESS: "orders", ORIG_QUEUE: "q", ACTUAL_EXPIRY: 1234}
    assert headers.types[ACTUAL_EXPIRY] == "long"


def test_qpid_dlq_is_the_default_target():
    settings = resolve(_args(x_qpid_dlq_enabled=True))
    assert death_target("delivery_limit", "tickers", settings).exchange == "tickers_DLE"
    explicit = resolve(_args(x_qpid_dlq_enabled=True, x_dead_letter_exchange="mine"))
    assert death_target("rejected", "tickers", explicit).exchange == "mine"
