"""RabbitMQ 4.3's checks of queue and consume arguments and of policies,
each against the line of its source (v4.3.5) it follows, beside 3.13's."""

from __future__ import annotations

import pytest

from amqp_server.wire.table import FieldTable
from policies.model import PolicyError, make_policy
from policies.registry import ArgumentError, validate_consume_arguments, validate_queue_arguments

Q43 = "4.3"


def declare(semantics: str, **arguments) -> str:
    args = FieldTable({k.replace("_", "-"): v for k, v in arguments.items()})
    return validate_queue_arguments(args, semantics)


def refusal(semantics: str, **arguments) -> str:
    with pytest.raises(ArgumentError) as caught:
        declare(semantics, **arguments)
    return caught.value.message("queue 'q' in vhost '/'")


def test_4_3_refuses_classic_queue_storage_version_1():
    # rabbit_amqqueue.erl:1180-1185 check_queue_version: ok when Val == 2
    assert refusal(Q43, x_queue_version=1) == (
        "invalid arg 'x-queue-version' for queue 'q' in vhost '/': "
        "\"unsupported queue version '1'\"")
    assert declare(Q43, x_queue_version=2) == "classic"
    assert declare("3.13", x_queue_version=1) == "classic"


def test_4_3_no_longer_checks_x_queue_mode():
    # rabbit_amqqueue.erl:950-972 declare_args/0 has no x-queue-mode
    assert declare(Q43, x_queue_mode="anything") == "classic"
    assert "unsupported queue mode 'anything'" in refusal("3.13", x_queue_mode="anything")


def test_x_consumer_timeout_is_a_quorum_queues_argument_in_4_3():
    # rabbit_quorum_queue.erl:626 lists it; rabbit_classic_queue's
    # capabilities do not (rabbit_amqqueue.erl:936 check_arguments_key)
    assert declare(Q43, x_queue_type="quorum", x_consumer_timeout=5000) == "quorum"
    assert refusal(Q43, x_consumer_timeout=5000) == (
        "invalid arg 'x-consumer-timeout' for queue 'q' in vhost '/' of queue type "
        "rabbit_classic_queue")
    # declare_args/0: check_non_neg_int_arg
    assert refusal(Q43, x_queue_type="quorum", x_consumer_timeout=-1).endswith(
        "{value_negative,-1}")
    assert declare("3.13", x_consumer_timeout="whatever") == "classic"


def test_4_3_takes_its_new_quorum_arguments_unchecked_or_checked_as_it_does():
    # x-delayed-retry-* and x-delivery-limit: listed, not in declare_args/0
    assert declare(Q43, x_queue_type="quorum", x_delayed_retry_type="bogus",
                   x_delayed_retry_min="x", x_delivery_limit="y") == "quorum"
    # x-consumer-disconnected-timeout: check_non_neg_int_arg
    assert refusal(Q43, x_queue_type="quorum",
                   x_consumer_disconnected_timeout=-5).endswith("{value_negative,-5}")
    # on a classic queue they are another type's arguments
    assert refusal(Q43, x_delayed_retry_type="all").endswith(
        "of queue type rabbit_classic_queue")


def test_3_13_checks_x_delivery_limit():
    assert refusal("3.13", x_queue_type="quorum", x_delivery_limit=-1).endswith(
        "{value_negative,-1}")


def consume(semantics: str, queue_type: str, **arguments) -> int:
    args = FieldTable({k.replace("_", "-"): v for k, v in arguments.items()})
    return validate_consume_arguments(args, queue_type, semantics)


def test_4_3_consumer_arguments():
    # rabbit_amqqueue.erl:974-976 consume_args/0 and the types' consumer_arguments
    assert consume(Q43, "quorum", x_consumer_timeout=100, x_priority=2) == 2
    with pytest.raises(ArgumentError) as caught:
        consume(Q43, "classic", x_consumer_timeout=100)
    assert caught.value.message("queue 'q' in vhost '/'") == (
        "invalid arg 'x-consumer-timeout' for queue 'q' in vhost '/' of queue type "
        "rabbit_classic_queue")
    # mirroring and basic.credit are gone: unknown, ignored
    assert consume(Q43, "classic", x_credit=5, x_cancel_on_ha_failover="yes") == 0
    with pytest.raises(ArgumentError):
        consume("3.13", "classic", x_credit=5)


# ---- policies (rabbit_quorum_queue.erl:225-265) --------------------------------


def policy(definition: dict, semantics: str = Q43, operator: bool = False):
    return make_policy("/", "p", ".*", definition, operator=operator, semantics=semantics)


def test_delayed_retry_keys_are_4_3s():
    assert policy({"delayed-retry-type": "failed", "delayed-retry-min": 1000,
                   "delayed-retry-max": 60000})
    with pytest.raises(PolicyError, match="are not recognised policy settings"):
        policy({"delayed-retry-type": "all", "delayed-retry-min": 5}, semantics="3.13")


@pytest.mark.parametrize("definition,words", [
    ({"delayed-retry-type": "sometimes"},
     '<<"sometimes">> is not a valid delayed retry type. Must be one of: all, failed, '
     'returned, disabled'),
    ({"delayed-retry-type": "all", "delayed-retry-min": 0},
     "0 is not a valid delayed retry minimum delay. Must be a positive integer"),
    ({"delayed-retry-type": "all", "delayed-retry-min": 5, "delayed-retry-max": -1},
     "-1 is not a valid delayed retry maximum delay. Must be a positive integer"),
    # :230-241 validate_delayed_retry_constraints
    ({"delayed-retry-type": "all"},
     "delayed-retry-min is required when delayed-retry-type is all"),
    ({"delayed-retry-type": "failed", "delayed-retry-min": 500, "delayed-retry-max": 100},
     "delayed-retry-max (100) must not be smaller than delayed-retry-min (500)"),
    ({"consumer-disconnected-timeout": -1},
     "-1 is not a valid consumer disconnected timeout"),
])
def test_4_3_refuses_a_bad_delayed_retry_policy_in_its_words(definition, words):
    with pytest.raises(PolicyError) as caught:
        policy(definition)
    assert str(caught.value) == words


def test_disabled_needs_no_minimum():
    assert policy({"delayed-retry-type": "disabled"})


def test_operator_policies_take_the_delayed_retry_keys():
    # :207-212 operator_policy_validator registrations
    assert policy({"delayed-retry-type": "all", "delayed-retry-min": 10}, operator=True)
    with pytest.raises(PolicyError):
        policy({"delayed-retry-type": "all", "delayed-retry-min": 10}, semantics="3.13",
               operator=True)


def test_classic_mirroring_policy_keys_are_not_recognised_in_4_3():
    """4.0 removed mirroring: rabbit_policy:validate0/2 finds no validator
    for ha-* keys and answers in these words (this broker never built
    mirroring, so its 3.13 mode says the same)."""
    with pytest.raises(PolicyError) as caught:
        policy({"ha-mode": "all", "ha-sync-mode": "automatic"})
    assert str(caught.value) == (
        '[{<<"ha-mode">>,<<"all">>},{<<"ha-sync-mode">>,<<"automatic">>}] are not '
        "recognised policy settings")
