"""Every queue setting, one row each: its name as a queue argument, a policy
key and an `[address-settings]` key, how each is checked, its default, how
the layers merge, which queue types take it, whether a redeclaration
compares it, and whether rabbit_amqqueue:declare_args/0 checks it.

Every other view (the arguments a queue type takes, the policy and operator
policy keys, the equivalence and declare-order lists, QueueSettings and its
defaults) is derived from this table in registry.py and effective.py, so a
new setting is one new row.

Sources, RabbitMQ 3.13: rabbit_amqqueue:declare_args/0 (the argument checks
and their order), rabbit_policies.erl (policy keys, their checks, wording
and operator merges), the capabilities/0 of rabbit_classic_queue,
rabbit_quorum_queue and rabbit_stream_queue (which type takes which
argument, and which skips a policy holding which key),
rabbit_amqqueue_process:process_args_policy/1 and
rabbit_quorum_queue:ra_machine_config/1 (argument-or-policy merges).
ActiveMQ Artemis's address settings (seeds 000, 001, 003) and Qpid's
queue-declare properties (seed 004) are ours to name: the seed's name as the
policy and config key, with `x-` as the queue argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlx.delayed_retry import RETRY_DISABLED, RETRY_TYPES
from dlx.expiry import DISABLED
from dlx.limits import DROP_HEAD, OVERFLOW_MODES
from dlx.redelivery import UNLIMITED
from dlx.semantics import RABBITMQ_3_13, RABBITMQ_4_3

from .checks import (
    Check,
    ValueRule,
    boolean,
    check_bool,
    check_dead_letter_retention,
    check_dlx_routing_key,
    check_expires,
    check_expiry,
    check_initial_cluster_size,
    check_int_at_least,
    check_max_age,
    check_max_priority,
    check_named,
    check_non_neg_int,
    check_number_within,
    check_one_of,
    check_qpid_flag,
    check_queue_version,
    check_queue_version_4_3,
    check_string,
    int_at_least,
    int_one_of,
    int_within,
    integer,
    max_age,
    number_within,
    one_of,
    text,
)
from .stream_rules import (
    DEFAULT_FILTER_SIZE,
    DEFAULT_SEGMENT_SIZE,
    FILTER_SIZE_RANGE,
    MAX_SEGMENT_SIZE,
)

# How an argument and a policy value merge (the operator column says how an
# operator policy's value joins them).
ARGUMENT_WINS = "argument"      # rabbit_amqqueue_process res_arg: the argument, else the policy
SMALLER_WINS = "min"            # res_min: the smaller of the two (erlang:min)
ARGUMENT_ONLY = "argument only"  # no policy key: the argument or the default
FIRST_SET = "first"             # Artemis: the argument, else the policy, else an address setting
# rabbit_policies:merge_policy_value/3 for operator policies: the smaller
# value, or the operator's value instead of the user policy's.
OPERATOR_REPLACES = "operator"
# rabbit_stream_queue:policy_precedence/2: a stream takes its settings from
# its policy first, then from its arguments (and 4.3's
# rabbit_quorum_queue:policy_has_precedence/2, for delayed-retry-type).
POLICY_WINS = "policy"
# 4.3's rabbit_quorum_queue:resolve_delivery_limit/2 and rabbit_policies'
# delivery-limit merge: a negative value means no limit, so when either is
# negative the larger wins (the more conservative), else the smaller.
UNLIMITED_IF_NEGATIVE = "min, or max when either is negative"
# rabbit_quorum_queue:merge_policy_value/3 for delayed-retry-min: an
# operator raises the minimum delay.
LARGER_WINS = "max"

CLASSIC, QUORUM, STREAM = "classic", "quorum", "stream"
BOTH = frozenset({CLASSIC, QUORUM})
ALL_TYPES = frozenset({CLASSIC, QUORUM, STREAM})
# rabbit_stream_queue:capabilities() unsupported_policies: a stream skips
# a policy holding one of these keys.
STREAMS_SKIP = frozenset({STREAM})
NOT_CLASSIC_NOR_STREAM = frozenset({CLASSIC, STREAM})
RABBITMQ, ARTEMIS, QPID = "RabbitMQ", "ActiveMQ Artemis", "Qpid"
# The semantics (dlx/semantics.py) a row belongs to: most rows are the same
# in both; a setting that 4.3 checks or merges otherwise has one row for each.
BOTH_MODES = frozenset({RABBITMQ_3_13, RABBITMQ_4_3})
ONLY_3_13 = frozenset({RABBITMQ_3_13})
ONLY_4_3 = frozenset({RABBITMQ_4_3})
OURS = "amqp-server"  # settings no other broker has

AT_MOST_ONCE, AT_LEAST_ONCE = "at-most-once", "at-least-once"
# The queue types built here.
BUILT_QUEUE_TYPES = (CLASSIC, QUORUM, STREAM)
QUEUE_MODES = ("default", "lazy")
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")


@dataclass(frozen=True)
class Setting:
    # The setting's attribute of QueueSettings, None for an argument that
    # is only checked.  Two rows with one field are two names of one
    # setting (dead-letter-address is Artemis's name for the DLX); the
    # first row is the setting's own.
    field: str | None
    argument: str | None        # the queue argument
    key: str | None             # the policy definition key
    check: Check | None         # the argument's check (None: taken as it comes)
    rule: ValueRule | None      # a policy or address-settings value's type and test
    policy_error: str           # rabbit_policies' words after a bad value ("~tp is not ...")
    default: object             # QueueSettings' value when no layer sets one
    merge: str
    # Queue types whose capabilities list the argument: another type
    # refuses it; an argument no type lists is kept and never refused.
    queue_types: frozenset[str]
    origin: str = RABBITMQ
    # Queue types that skip a whole policy holding the key (capabilities'
    # unsupported_policies).
    skipped_by: frozenset[str] = frozenset()
    operator: str | None = None  # how an operator policy's value merges; None: not its key
    address: bool = False        # a key of [address-settings."pattern"] tables
    equivalence: bool = False    # compared when the queue is declared again
    declared: bool = False       # checked in declare_args/0's order (this table's)
    # policy_precedence = "policy" in the config makes the policy win.
    policy_may_win: bool = False
    target: str = "queue"        # or "exchange": alternate-exchange
    # How a stream merges it, when not as the other types do.
    stream_merge: str | None = None
    # The semantics that have this row (BOTH_MODES, ONLY_3_13, ONLY_4_3).
    modes: frozenset[str] = BOTH_MODES


def _artemis(field: str, key: str, check: Check, rule: ValueRule, policy_error: str,
             default: object) -> Setting:
    return Setting(field, f"x-{key}", key, check, rule, policy_error, default, FIRST_SET, BOTH,
                   ARTEMIS, address=True, equivalence=True)


def _elsewhere(argument: str, queue_types: frozenset[str]) -> Setting:
    """An argument of a queue type or feature not built here: checked only
    for the type that may carry it."""
    return Setting(None, argument, None, None, None, "", None, ARGUMENT_ONLY, queue_types)


SETTINGS: tuple[Setting, ...] = (
    # -- RabbitMQ, in declare_args/0 order ------------------------------------------
    Setting("expires", "x-expires", "expires", check_expires,
            int_at_least(1, "milliseconds"), "is not a valid queue expiry", None,
            SMALLER_WINS, BOTH, operator=SMALLER_WINS, address=True, equivalence=True,
            declared=True, skipped_by=STREAMS_SKIP),
    Setting("message_ttl", "x-message-ttl", "message-ttl", check_expiry,
            int_at_least(0, "milliseconds"), "is not a valid message TTL", None,
            SMALLER_WINS, BOTH, operator=SMALLER_WINS, address=True, equivalence=True,
            declared=True, skipped_by=STREAMS_SKIP),
    Setting("dead_letter_exchange", "x-dead-letter-exchange", "dead-letter-exchange",
            check_string, text("an exchange name (a string)"),
            "is not a valid dead letter exchange name", None, ARGUMENT_WINS, BOTH,
            address=True, equivalence=True, declared=True, policy_may_win=True,
            skipped_by=STREAMS_SKIP),
    Setting("dead_letter_routing_key", "x-dead-letter-routing-key", "dead-letter-routing-key",
            check_dlx_routing_key, text("a routing key (a string)"),
            "is not a valid dead letter routing key", None, ARGUMENT_WINS, BOTH,
            address=True, equivalence=True, declared=True, policy_may_win=True,
            skipped_by=STREAMS_SKIP),
    Setting("dead_letter_strategy", "x-dead-letter-strategy", "dead-letter-strategy",
            check_one_of((AT_MOST_ONCE, AT_LEAST_ONCE), "invalid_dlx_strategy"),
            one_of(AT_MOST_ONCE, AT_LEAST_ONCE), "is not a valid dead letter strategy",
            AT_MOST_ONCE, ARGUMENT_WINS, frozenset({QUORUM}), skipped_by=NOT_CLASSIC_NOR_STREAM,
            address=True, declared=True, policy_may_win=True),
    Setting("max_length", "x-max-length", "max-length", check_non_neg_int,
            int_at_least(0, "messages"), "is not a valid maximum length", None, SMALLER_WINS,
            BOTH, operator=SMALLER_WINS, address=True, equivalence=True, declared=True,
            skipped_by=STREAMS_SKIP),
    Setting("max_length_bytes", "x-max-length-bytes", "max-length-bytes", check_non_neg_int,
            int_at_least(0, "bytes"), "is not a valid maximum length in bytes", None,
            SMALLER_WINS, ALL_TYPES, operator=SMALLER_WINS, address=True, equivalence=True,
            declared=True, stream_merge=POLICY_WINS),
    # Quorum queues' in-memory limits.  3.13's rabbit_fifo keeps no message
    # bodies in memory and ignores them; here they cap the messages a
    # quorum queue keeps in memory (broker/queue/paging.py).  The policy
    # error names bytes for both: rabbit_policies' own wording.
    Setting("max_in_memory_length", "x-max-in-memory-length", "max-in-memory-length",
            check_non_neg_int, int_at_least(0, "messages"),
            "is not a valid maximum memory in bytes", None, SMALLER_WINS,
            frozenset({QUORUM}), skipped_by=NOT_CLASSIC_NOR_STREAM, operator=SMALLER_WINS,
            declared=True),
    Setting("max_in_memory_bytes", "x-max-in-memory-bytes", "max-in-memory-bytes",
            check_non_neg_int, int_at_least(0, "bytes"),
            "is not a valid maximum memory in bytes", None, SMALLER_WINS,
            frozenset({QUORUM}), skipped_by=NOT_CLASSIC_NOR_STREAM, operator=SMALLER_WINS,
            declared=True),
    # An argument only: RabbitMQ has no policy key for it.
    Setting("max_priority", "x-max-priority", None, check_max_priority, None, "", None,
            ARGUMENT_ONLY, frozenset({CLASSIC}), equivalence=True, declared=True),
    Setting("overflow", "x-overflow", "overflow", check_one_of(OVERFLOW_MODES, "invalid_overflow"),
            one_of(*OVERFLOW_MODES), "is not a valid overflow value", DROP_HEAD, ARGUMENT_WINS,
            BOTH, operator=OPERATOR_REPLACES, address=True, equivalence=True, declared=True,
            policy_may_win=True, skipped_by=STREAMS_SKIP),
    # Classic queues' mode.  Since 3.12 a classic queue keeps only its head
    # in memory whatever its mode (rabbit_variable_queue:set_queue_mode/2
    # does nothing); here "lazy" caps the messages it keeps in memory
    # (broker/queue/paging.py).  Quorum queues skip a policy holding it.
    Setting("queue_mode", "x-queue-mode", "queue-mode", check_named(QUEUE_MODES, "queue mode"),
            one_of(*QUEUE_MODES), "is not a valid queue-mode value", "default", ARGUMENT_WINS,
            frozenset({CLASSIC}), skipped_by=frozenset({QUORUM, STREAM}), equivalence=True,
            declared=True, modes=ONLY_3_13),
    # 4.3's declare_args/0 no longer checks x-queue-mode (CQv1 is gone);
    # rabbit_classic_queue still lists it, its policy key is still checked.
    Setting("queue_mode", "x-queue-mode", "queue-mode", None, one_of(*QUEUE_MODES),
            "is not a valid queue-mode value", "default", ARGUMENT_WINS, frozenset({CLASSIC}),
            skipped_by=frozenset({QUORUM, STREAM}), equivalence=True, modes=ONLY_4_3),
    # Classic queues' storage version: checked and kept; one storage
    # format here.  4.3 takes only 2 as an argument (its policy key, 1 too).
    Setting("queue_version", "x-queue-version", "queue-version", check_queue_version,
            int_one_of(1, 2), "is not a valid queue-version value", None, ARGUMENT_WINS,
            frozenset({CLASSIC}), operator=OPERATOR_REPLACES, equivalence=True,
            declared=True, modes=ONLY_3_13),
    Setting("queue_version", "x-queue-version", "queue-version", check_queue_version_4_3,
            int_one_of(1, 2), "is not a valid queue-version value", None, ARGUMENT_WINS,
            frozenset({CLASSIC}), operator=OPERATOR_REPLACES, equivalence=True,
            declared=True, modes=ONLY_4_3),
    Setting("single_active_consumer", "x-single-active-consumer", None, check_bool, None, "",
            False, ARGUMENT_ONLY, BOTH, equivalence=True, declared=True),
    # 4.3: a quorum queue's consumer timeout (its capabilities list the
    # argument, declare_args/0 checks it; classic queues and streams have
    # none), and how long it waits for a consumer on an unreachable node.
    Setting("consumer_timeout", "x-consumer-timeout", "consumer-timeout", check_non_neg_int,
            int_at_least(0, "milliseconds"), "is not a valid consumer timeout", None,
            SMALLER_WINS, frozenset({QUORUM}), address=True, declared=True, modes=ONLY_4_3),
    Setting("consumer_disconnected_timeout", "x-consumer-disconnected-timeout",
            "consumer-disconnected-timeout", check_non_neg_int, int_at_least(0, "milliseconds"),
            "is not a valid consumer disconnected timeout", 60_000, SMALLER_WINS,
            frozenset({QUORUM}), declared=True, modes=ONLY_4_3),
    Setting("queue_type", "x-queue-type", None, check_named(BUILT_QUEUE_TYPES, "queue type"),
            None, "", CLASSIC, ARGUMENT_ONLY, ALL_TYPES, equivalence=True, declared=True),
    # 3.13 takes x-delivery-limit unchecked and fails later; we refuse what
    # it could never use.
    Setting("delivery_limit", "x-delivery-limit", "delivery-limit", check_non_neg_int,
            int_at_least(0, "deliveries"), "is not a valid delivery limit", None,
            SMALLER_WINS, frozenset({QUORUM}), skipped_by=NOT_CLASSIC_NOR_STREAM,
            operator=SMALLER_WINS, address=True, declared=True, modes=ONLY_3_13),
    # 4.3: unchecked at declare, any whole number as a policy value, -1 (any
    # negative) for no limit; without one a quorum queue's limit is 20
    # (effective.py).  A value that is not an integer means 20 as well.
    Setting("delivery_limit", "x-delivery-limit", "delivery-limit", None, integer("deliveries"),
            "is not a valid delivery limit", None, UNLIMITED_IF_NEGATIVE, frozenset({QUORUM}),
            skipped_by=NOT_CLASSIC_NOR_STREAM, operator=UNLIMITED_IF_NEGATIVE, address=True,
            modes=ONLY_4_3),
    # 4.3's delayed retry (dlx/delayed_retry.py): unchecked as arguments
    # (a bad one turns it off), checked as policy keys; the policy's type
    # wins over the argument, the smaller min and max win, an operator
    # policy replaces the type, raises the min and lowers the max.  No queue
    # type skips a policy holding them.
    Setting("delayed_retry_type", "x-delayed-retry-type", "delayed-retry-type", None,
            one_of(*RETRY_TYPES),
            "is not a valid delayed retry type. Must be one of: all, failed, returned, disabled",
            RETRY_DISABLED, POLICY_WINS, frozenset({QUORUM}), operator=OPERATOR_REPLACES,
            modes=ONLY_4_3),
    Setting("delayed_retry_min", "x-delayed-retry-min", "delayed-retry-min", None,
            int_at_least(1, "milliseconds"),
            "is not a valid delayed retry minimum delay. Must be a positive integer", None,
            SMALLER_WINS, frozenset({QUORUM}), operator=LARGER_WINS, modes=ONLY_4_3),
    Setting("delayed_retry_max", "x-delayed-retry-max", "delayed-retry-max", None,
            int_at_least(1, "milliseconds"),
            "is not a valid delayed retry maximum delay. Must be a positive integer", None,
            SMALLER_WINS, frozenset({QUORUM}), operator=SMALLER_WINS, modes=ONLY_4_3),
    # -- streams (rabbit_stream_queue), in declare_args/0's order ------------------------
    # A stream never dead-letters, so it skips a policy holding a
    # classic or quorum key (capabilities' unsupported_policies, above).
    Setting("max_age", "x-max-age", "max-age", check_max_age, max_age(),
            "is not a valid max age", None, POLICY_WINS, frozenset({STREAM}),
            equivalence=True, declared=True),
    Setting("stream_max_segment_size_bytes", "x-stream-max-segment-size-bytes",
            "stream-max-segment-size-bytes", check_non_neg_int,
            int_within(0, MAX_SEGMENT_SIZE, "bytes"), "is not a valid segment size",
            DEFAULT_SEGMENT_SIZE, POLICY_WINS, frozenset({STREAM}), equivalence=True,
            declared=True),
    # 3.13's filtering: the size of a chunk's Bloom filter, checked when the
    # stream is declared (broker/stream/declaring.py, 3.13.7's words; its
    # capabilities do not list the argument, so nothing checks it before).
    # Filtering here is exact, per message: the size changes nothing.
    Setting("stream_filter_size_bytes", "x-stream-filter-size-bytes",
            "stream-filter-size-bytes", None, int_within(*FILTER_SIZE_RANGE, "bytes"),
            "is not a valid filter size. Valid range is 16-255", DEFAULT_FILTER_SIZE,
            POLICY_WINS, frozenset({STREAM}), declared=True),
    # Taken and kept: one node holds the only copy of a stream's log.
    Setting("initial_cluster_size", "x-initial-cluster-size", "initial-cluster-size",
            check_initial_cluster_size, int_at_least(0), "is not a valid cluster size", None,
            POLICY_WINS, frozenset({STREAM}), equivalence=True, declared=True),
    # -- RabbitMQ, checked by queue type only -------------------------------------------
    Setting(None, "x-queue-master-locator", None, None, None, "", None, ARGUMENT_ONLY,
            frozenset({CLASSIC}), equivalence=True),
    # rabbit_queue_location:queue_leader_locators/0, the deprecated two
    # included; one node, so any is local.
    Setting(None, "x-queue-leader-locator", None,
            check_one_of(LEADER_LOCATORS, "invalid_queue_locator_arg"), None, "", None,
            ARGUMENT_ONLY, frozenset({QUORUM, STREAM}), equivalence=True, declared=True),
    _elsewhere("x-quorum-initial-group-size", frozenset({QUORUM})),
    # 3.12+: x-consumer-timeout is taken unchecked (a value that is not an
    # integer turns the timeout off for the queue) and no queue type lists
    # it; the policy key is checked.
    Setting("consumer_timeout", "x-consumer-timeout", "consumer-timeout", None,
            int_at_least(0, "milliseconds"), "is not a valid consumer timeout", None,
            SMALLER_WINS, frozenset(), address=True, modes=ONLY_3_13),
    # -- ActiveMQ Artemis (seeds 000, 001, 003) ------------------------------------------
    Setting("dead_letter_exchange", "x-dead-letter-address", "dead-letter-address",
            check_string, text("an address (a string)"), "is not a valid dead letter address",
            None, ARGUMENT_WINS, BOTH, ARTEMIS, address=True, equivalence=True,
            policy_may_win=True),
    _artemis("redelivery_delay", "redelivery-delay", check_non_neg_int,
             int_at_least(0, "milliseconds"), "is not a valid redelivery delay", 0),
    _artemis("redelivery_delay_multiplier", "redelivery-delay-multiplier",
             check_number_within(0.0), number_within(0.0),
             "is not a valid redelivery delay multiplier", 1.0),
    _artemis("max_redelivery_delay", "max-redelivery-delay", check_non_neg_int,
             int_at_least(0, "milliseconds"), "is not a valid maximum redelivery delay", None),
    _artemis("redelivery_collision_avoidance_factor", "redelivery-collision-avoidance-factor",
             check_number_within(0.0, 1.0), number_within(0.0, 1.0),
             "is not a valid redelivery collision avoidance factor (0.0 to 1.0)", 0.0),
    _artemis("max_delivery_attempts", "max-delivery-attempts", check_int_at_least(-1),
             int_at_least(-1), "is not a valid number of delivery attempts", UNLIMITED),
    _artemis("auto_create_dead_letter_resources", "auto-create-dead-letter-resources",
             check_bool, boolean(), "is not a boolean", False),
    _artemis("dead_letter_queue_prefix", "dead-letter-queue-prefix", check_string, text(),
             "is not a valid queue prefix", "DLQ."),
    _artemis("dead_letter_queue_suffix", "dead-letter-queue-suffix", check_string, text(),
             "is not a valid queue suffix", ""),
    _artemis("expiry_address", "expiry-address", check_string, text("an address (a string)"),
             "is not a valid expiry address", None),
    _artemis("expiry_delay", "expiry-delay", check_int_at_least(-1),
             int_at_least(-1, "milliseconds"), "is not a valid expiry delay", DISABLED),
    _artemis("min_expiry_delay", "min-expiry-delay", check_int_at_least(-1),
             int_at_least(-1, "milliseconds"), "is not a valid minimum expiry delay", DISABLED),
    _artemis("max_expiry_delay", "max-expiry-delay", check_int_at_least(-1),
             int_at_least(-1, "milliseconds"), "is not a valid maximum expiry delay", DISABLED),
    _artemis("auto_create_expiry_resources", "auto-create-expiry-resources", check_bool,
             boolean(), "is not a boolean", False),
    _artemis("expiry_queue_prefix", "expiry-queue-prefix", check_string, text(),
             "is not a valid queue prefix", "EXP."),
    _artemis("expiry_queue_suffix", "expiry-queue-suffix", check_string, text(),
             "is not a valid queue suffix", ""),
    # Only for the DLQ./EXP. queues the broker auto-created, so no queue
    # argument: a policy or the address settings matching that queue
    # (dlx/addresses.py).
    Setting("auto_delete_queues", None, "auto-delete-queues", None, boolean(),
            "is not a boolean", True, FIRST_SET, frozenset(), ARTEMIS, address=True),
    Setting("auto_delete_queues_delay", None, "auto-delete-queues-delay", None,
            int_at_least(0, "milliseconds"), "is not a valid auto-delete delay", 0, FIRST_SET,
            frozenset(), ARTEMIS, address=True),
    Setting("auto_delete_queues_message_count", None, "auto-delete-queues-message-count", None,
            int_at_least(-1, "messages"), "is not a valid auto-delete message count", 0,
            FIRST_SET, frozenset(), ARTEMIS, address=True),
    # -- Qpid Broker-J's queue-declare properties (seed 004): arguments only -------------
    # 0 is Qpid's "no limit" (effective.py reads it as no count).
    Setting("qpid_maximum_delivery_count", "x-qpid-maximum-delivery-count", None,
            check_non_neg_int, None, "", None, ARGUMENT_ONLY, BOTH, QPID, equivalence=True),
    Setting("qpid_dlq_enabled", "x-qpid-dlq-enabled", None, check_qpid_flag, None, "", False,
            ARGUMENT_ONLY, BOTH, QPID, equivalence=True),
    # -- this broker's own ------------------------------------------------------------
    # How long (ms) a dead letter may wait in a dead letter queue before it
    # is archived (docs/dead-letter-queues.md): counted from its latest
    # x-death time.  Only a queue whose messages are not dead-lettered
    # onward takes it: the argument is refused on any other, a policy's
    # value does nothing there (effective.py).
    Setting("dead_letter_retention", "x-dead-letter-retention", "dead-letter-retention",
            check_dead_letter_retention, int_at_least(1, "milliseconds"),
            "is not a valid dead letter retention", None, SMALLER_WINS, BOTH, OURS,
            equivalence=True),
    # -- exchanges ----------------------------------------------------------------------
    Setting(None, None, "alternate-exchange", None, text("an exchange name (a string)"),
            "is not a valid alternate exchange name", None, ARGUMENT_WINS, frozenset(),
            target="exchange"),
)
