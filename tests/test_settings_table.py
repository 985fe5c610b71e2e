"""The settings table (policies/settings_table.py): every row complete, every
name used once, and the views derived from it equal to the five lists the
table replaced (their last values are copied here as they stood)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from amqp_server.broker import vhost
from policies import registry
from policies.address_settings import ALLOWED
from policies.effective import DEFAULTS, QueueSettings, resolve
from policies.registry import OPERATOR_KEYS
from policies.settings_table import (
    ALL_TYPES,
    ARGUMENT_ONLY,
    ARGUMENT_WINS,
    BOTH_MODES,
    FIRST_SET,
    LARGER_WINS,
    ONLY_3_13,
    ONLY_4_3,
    OPERATOR_REPLACES,
    POLICY_WINS,
    SETTINGS,
    SMALLER_WINS,
    UNLIMITED_IF_NEGATIVE,
)

ROWS = {row.argument or row.key: row for row in SETTINGS if "3.13" in row.modes}


@pytest.mark.parametrize("row", SETTINGS, ids=lambda row: row.argument or row.key)
def test_every_row_is_complete(row):
    assert row.argument or row.key, "a row names the setting somewhere"
    assert row.merge in (ARGUMENT_WINS, SMALLER_WINS, ARGUMENT_ONLY, FIRST_SET, POLICY_WINS,
                         UNLIMITED_IF_NEGATIVE)
    assert row.stream_merge in (None, POLICY_WINS)
    assert row.operator in (None, SMALLER_WINS, OPERATOR_REPLACES, LARGER_WINS,
                            UNLIMITED_IF_NEGATIVE)
    assert row.modes in (BOTH_MODES, ONLY_3_13, ONLY_4_3)
    assert row.queue_types <= ALL_TYPES and row.skipped_by <= ALL_TYPES
    if row.key is not None:
        # a policy key has a type, a test and RabbitMQ's words for a bad value
        assert row.rule is not None and row.rule.expects and row.policy_error
    else:
        assert row.rule is None and not row.policy_error and row.merge == ARGUMENT_ONLY
        assert row.operator is None and not row.address and not row.skipped_by
    if row.argument is None:
        assert not (row.equivalence or row.declared or row.queue_types or row.check)
    if row.check is None and row.argument is not None:
        # taken unchecked: an argument of a type not built here, or one
        # RabbitMQ itself does not check (x-consumer-timeout, the locators;
        # in 4.3, x-queue-mode, x-delivery-limit and delayed retry's)
        assert row.field is None or row.argument in (
            "x-consumer-timeout", "x-stream-filter-size-bytes") or (
            row.modes == ONLY_4_3 and row.argument in (
                "x-queue-mode", "x-delivery-limit", "x-delayed-retry-type",
                "x-delayed-retry-min", "x-delayed-retry-max"))
    if row.field is not None:
        assert row.target == "queue"
    if row.policy_may_win:
        assert row.merge == ARGUMENT_WINS


@pytest.mark.parametrize("semantics", ["3.13", "4.3"])
def test_names_are_unique_in_each_layer(semantics):
    rows = [row for row in SETTINGS if semantics in row.modes]
    arguments = [row.argument for row in rows if row.argument]
    keys = [row.key for row in rows if row.key]
    config_keys = [row.key for row in rows if row.address]
    assert len(arguments) == len(set(arguments))
    assert len(keys) == len(set(keys))
    assert len(config_keys) == len(set(config_keys))
    # One field, one setting; only dead-letter-address is a second name.
    named = [row.field for row in rows if row.field]
    assert sorted(f for f in set(named) if named.count(f) > 1) == ["dead_letter_exchange"]


def test_a_setting_4_3_changed_has_one_row_in_each_semantics():
    """A row of one semantics only is a setting 4.3 checks, merges or takes
    otherwise, or one it added; the other rows are the same in both."""
    only_3_13 = {row.argument or row.key for row in SETTINGS if row.modes == ONLY_3_13}
    only_4_3 = {row.argument or row.key for row in SETTINGS if row.modes == ONLY_4_3}
    assert only_3_13 == {"x-queue-mode", "x-queue-version", "x-delivery-limit",
                         "x-consumer-timeout"}
    assert only_4_3 - only_3_13 == {"x-consumer-disconnected-timeout", "x-delayed-retry-type",
                                    "x-delayed-retry-min", "x-delayed-retry-max"}
    # A policy key is its argument without `x-`, as RabbitMQ spells them.
    assert all(row.argument == f"x-{row.key}" for row in SETTINGS if row.argument and row.key)


def test_queue_settings_has_a_field_and_a_default_per_setting():
    # `semantics` is the one field no setting gives: the queue's vhost's.
    assert {f.name for f in fields(QueueSettings)} == set(DEFAULTS) | {"semantics"}
    assert {row.field for row in SETTINGS if row.field} == set(DEFAULTS)
    plain = resolve(None)
    assert all(getattr(plain, name) == default for name, default in DEFAULTS.items())


# ---- the five lists the table replaced, as they stood --------------------------

OLD_SETTINGS = (  # (key, argument, merge, policy_error, target, unsupported_by, alias_of)
    ("dead-letter-exchange", "x-dead-letter-exchange", "argument",
     "is not a valid dead letter exchange name", "queue", set(), None),
    ("dead-letter-routing-key", "x-dead-letter-routing-key", "argument",
     "is not a valid dead letter routing key", "queue", set(), None),
    ("dead-letter-strategy", "x-dead-letter-strategy", "argument",
     "is not a valid dead letter strategy", "queue", {"classic"}, None),
    ("overflow", "x-overflow", "argument", "is not a valid overflow value", "queue", set(), None),
    ("message-ttl", "x-message-ttl", "min", "is not a valid message TTL", "queue", set(), None),
    ("expires", "x-expires", "min", "is not a valid queue expiry", "queue", set(), None),
    ("max-length", "x-max-length", "min", "is not a valid maximum length", "queue", set(), None),
    ("max-length-bytes", "x-max-length-bytes", "min", "is not a valid maximum length in bytes",
     "queue", set(), None),
    ("delivery-limit", "x-delivery-limit", "min", "is not a valid delivery limit", "queue",
     {"classic"}, None),
    ("consumer-timeout", "x-consumer-timeout", "min", "is not a valid consumer timeout",
     "queue", set(), None),
    ("alternate-exchange", None, "argument", "is not a valid alternate exchange name",
     "exchange", set(), None),
    ("dead-letter-address", "x-dead-letter-address", "argument",
     "is not a valid dead letter address", "queue", set(), "dead-letter-exchange"),
    ("redelivery-delay", "x-redelivery-delay", "first", "is not a valid redelivery delay",
     "queue", set(), None),
    ("redelivery-delay-multiplier", "x-redelivery-delay-multiplier", "first",
     "is not a valid redelivery delay multiplier", "queue", set(), None),
    ("max-redelivery-delay", "x-max-redelivery-delay", "first",
     "is not a valid maximum redelivery delay", "queue", set(), None),
    ("redelivery-collision-avoidance-factor", "x-redelivery-collision-avoidance-factor",
     "first", "is not a valid redelivery collision avoidance factor (0.0 to 1.0)", "queue",
     set(), None),
    ("max-delivery-attempts", "x-max-delivery-attempts", "first",
     "is not a valid number of delivery attempts", "queue", set(), None),
    ("auto-create-dead-letter-resources", "x-auto-create-dead-letter-resources", "first",
     "is not a boolean", "queue", set(), None),
    ("dead-letter-queue-prefix", "x-dead-letter-queue-prefix", "first",
     "is not a valid queue prefix", "queue", set(), None),
    ("dead-letter-queue-suffix", "x-dead-letter-queue-suffix", "first",
     "is not a valid queue suffix", "queue", set(), None),
    ("expiry-address", "x-expiry-address", "first", "is not a valid expiry address", "queue",
     set(), None),
    ("expiry-delay", "x-expiry-delay", "first", "is not a valid expiry delay", "queue", set(),
     None),
    ("min-expiry-delay", "x-min-expiry-delay", "first", "is not a valid minimum expiry delay",
     "queue", set(), None),
    ("max-expiry-delay", "x-max-expiry-delay", "first", "is not a valid maximum expiry delay",
     "queue", set(), None),
    ("auto-create-expiry-resources", "x-auto-create-expiry-resources", "first",
     "is not a boolean", "queue", set(), None),
    ("expiry-queue-prefix", "x-expiry-queue-prefix", "first", "is not a valid queue prefix",
     "queue", set(), None),
    ("expiry-queue-suffix", "x-expiry-queue-suffix", "first", "is not a valid queue suffix",
     "queue", set(), None),
    ("auto-delete-queues", None, "first", "is not a boolean", "queue", set(), None),
    ("auto-delete-queues-delay", None, "first", "is not a valid auto-delete delay", "queue",
     set(), None),
    ("auto-delete-queues-message-count", None, "first",
     "is not a valid auto-delete message count", "queue", set(), None),
)
# The policy keys RabbitMQ 3.13 has that the old list refused.
NEW_KEYS = {"queue-mode", "queue-version", "max-in-memory-length", "max-in-memory-bytes",
            "max-age", "stream-max-segment-size-bytes", "initial-cluster-size",
            "stream-filter-size-bytes"}
# rabbit_stream_queue:capabilities() unsupported_policies that are keys here.
STREAM_SKIPS = {"expires", "message-ttl", "dead-letter-exchange", "dead-letter-routing-key",
                "max-length", "max-in-memory-length", "max-in-memory-bytes", "overflow",
                "queue-mode", "delivery-limit", "dead-letter-strategy"}
# This broker's own settings since, arguments and policy keys of both queue
# types (dead letter retention: docs/dead-letter-queues.md).
OURS = {"x-dead-letter-retention"}
OUR_KEYS = {"dead-letter-retention"}
OLD_OTHER_ARGUMENTS = ("x-qpid-maximum-delivery-count", "x-qpid-dlq-enabled", "x-queue-type",
                       "x-max-priority", "x-single-active-consumer", "x-queue-mode",
                       "x-queue-version", "x-max-in-memory-length", "x-max-in-memory-bytes")
ARTEMIS = {"x-dead-letter-address", "x-redelivery-delay", "x-redelivery-delay-multiplier",
           "x-max-redelivery-delay", "x-redelivery-collision-avoidance-factor",
           "x-max-delivery-attempts", "x-auto-create-dead-letter-resources",
           "x-dead-letter-queue-prefix", "x-dead-letter-queue-suffix", "x-expiry-address",
           "x-expiry-delay", "x-min-expiry-delay", "x-max-expiry-delay",
           "x-auto-create-expiry-resources", "x-expiry-queue-prefix", "x-expiry-queue-suffix"}
QPID = {"x-qpid-maximum-delivery-count", "x-qpid-dlq-enabled"}
OLD_QUEUE_TYPES = {
    "classic": ("rabbit_classic_queue", {
        "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
        "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
        "x-queue-version", "x-single-active-consumer", "x-queue-type",
        "x-queue-master-locator"} | ARTEMIS | QPID | OURS),
    "quorum": ("rabbit_quorum_queue", {
        "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
        "x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
        "x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer", "x-queue-type",
        "x-quorum-initial-group-size", "x-delivery-limit", "x-message-ttl",
        "x-queue-leader-locator"} | ARTEMIS | QPID | OURS),
}
STREAM_ARGUMENTS = {"x-max-length-bytes", "x-queue-type", "x-max-age",
                    "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
                    "x-queue-leader-locator", "x-stream-filter-size-bytes"}
OLD_STREAM_ONLY = {"x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
                   "x-stream-filter-size-bytes"}
OLD_DECLARE_ORDER = (
    "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-dead-letter-strategy", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
    "x-max-in-memory-bytes", "x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version",
    "x-single-active-consumer", "x-queue-type", "x-delivery-limit",
    # streams, in declare_args/0's order
    "x-max-age", "x-stream-max-segment-size-bytes", "x-stream-filter-size-bytes",
    "x-initial-cluster-size", "x-queue-leader-locator",
)
OLD_EQUIVALENCE_RABBITMQ = (  # broker/vhost.py, in RabbitMQ's order; then ours
    "x-expires", "x-message-ttl", "x-dead-letter-exchange",
    "x-dead-letter-routing-key", "x-max-length", "x-max-length-bytes",
    "x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version",
    "x-single-active-consumer", "x-queue-type",
    "x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size",  # streams
    "x-queue-master-locator", "x-queue-leader-locator",
)


def test_the_policy_keys_are_the_old_ones_and_3_13s():
    assert set(registry.BY_KEY) == {row[0] for row in OLD_SETTINGS} | NEW_KEYS | OUR_KEYS
    for key, argument, merge, error, target, unsupported, alias in OLD_SETTINGS:
        row = registry.BY_KEY[key]
        assert (row.argument, row.merge, row.policy_error, row.target,
                set(row.skipped_by) - {"stream"}) \
            == (argument, merge, error, target, unsupported), key
        if alias is not None:
            assert row.field == registry.BY_KEY[alias].field


def test_streams_skip_the_policies_rabbitmq_streams_skip():
    assert {key for key, row in registry.BY_KEY.items() if "stream" in row.skipped_by} \
        == STREAM_SKIPS


def test_the_other_arguments_keep_their_checks():
    for argument in OLD_OTHER_ARGUMENTS:
        assert registry.BY_ARGUMENT[argument].check is not None, argument


def test_queue_types_stream_arguments_and_declare_order_are_unchanged():
    assert {name: (module, set(arguments))
            for name, (module, arguments) in registry.QUEUE_TYPES.items()} \
        == {**OLD_QUEUE_TYPES, "stream": ("rabbit_stream_queue", STREAM_ARGUMENTS)}
    assert registry.STREAM_ONLY_ARGUMENTS == OLD_STREAM_ONLY
    assert registry.ALL_QUEUE_ARGUMENTS == (set().union(
        *(arguments for _, arguments in OLD_QUEUE_TYPES.values())) | OLD_STREAM_ONLY)
    assert registry.DECLARE_ORDER == OLD_DECLARE_ORDER
    assert registry.ARTEMIS_ARGUMENTS == ARTEMIS


def test_the_equivalence_list_is_the_old_one_and_vhost_uses_it():
    ours = registry.EQUIVALENCE_ARGUMENTS
    assert ours[:len(OLD_EQUIVALENCE_RABBITMQ)] == OLD_EQUIVALENCE_RABBITMQ
    assert set(ours[len(OLD_EQUIVALENCE_RABBITMQ):]) == ARTEMIS | QPID | OURS
    assert vhost.QUEUE_EQUIVALENCE_ARGS is ours


def test_operator_and_address_settings_keys():
    # rabbit_policies 3.13's operator_policy_validator keys
    assert set(OPERATOR_KEYS) == {"expires", "message-ttl", "max-length", "max-length-bytes",
                                  "max-in-memory-length", "max-in-memory-bytes",
                                  "delivery-limit", "queue-version", "overflow"}
    # every queue policy key of before; RabbitMQ's 3.13 additions stay policy-only
    assert set(ALLOWED) == {key for key, *_, target, _u, _a in OLD_SETTINGS if target == "queue"}
