"""The settings table's views (which arguments a queue type takes, the
policy and operator policy keys, the lists RabbitMQ walks in order) and the
checks of queue.declare's and basic.consume's arguments.

The table itself is settings_table.py; nothing here names a setting twice.
Errors carry RabbitMQ's wording ("invalid arg 'x-message-ttl' for queue 'q'
in vhost '/': {value_negative,-1}"), because users search for those strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from amqp_server.wire.table import FieldTable, typed_value
from dlx.semantics import DEFAULT as DEFAULT_SEMANTICS, MODES, RABBITMQ_4_3

from .checks import (
    Check,
    check_bool,
    check_int,
    check_no_credit,
    check_non_neg_int,
    qpid_flag,
    text_of,
)
from .settings_table import (
    ARGUMENT_ONLY,
    ARGUMENT_WINS,
    ARTEMIS,
    BUILT_QUEUE_TYPES,
    FIRST_SET,
    OPERATOR_REPLACES,
    QPID,
    QUEUE_MODES,
    SETTINGS,
    SMALLER_WINS,
    STREAM,
    Setting,
)
from .stream_rules import check_stream_offset

__all__ = [
    "ALL_QUEUE_ARGUMENTS", "ARGUMENT_ONLY", "ARGUMENT_WINS", "ARTEMIS_ARGUMENTS", "BY_ARGUMENT",
    "BY_KEY", "DECLARE_ORDER", "EQUIVALENCE_ARGUMENTS", "FIRST_SET", "OPERATOR_KEYS",
    "OPERATOR_REPLACES", "QPID_DLQ_ENABLED", "QPID_MAX_DELIVERY_COUNT", "QUEUE_MODES",
    "QUEUE_SETTINGS", "QUEUE_TYPES", "SETTINGS", "SMALLER_WINS", "STREAM_EQUIVALENCE_ARGUMENTS",
    "STREAM_ONLY_ARGUMENTS", "ANY_BY_KEY", "VIEWS",
    "ArgumentError", "Views", "Setting", "qpid_flag", "queue_type_of", "validate_consume_arguments",
    "validate_queue_arguments",
]

# RabbitMQ's module of each queue type (in "of queue type ..." errors).
_MODULES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
            "stream": "rabbit_stream_queue"}
# A stream compares its own type's arguments when declared again
# (rabbit_stream_queue:capabilities() queue_arguments, in its order;
# rabbit_amqqueue:assert_args_equivalence/2).
STREAM_EQUIVALENCE_ARGUMENTS = ("x-max-length-bytes", "x-queue-type", "x-max-age",
                                "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
                                "x-queue-leader-locator")


@dataclass(frozen=True)
class Views:
    """The table seen by one semantics (dlx/semantics.py): its rows only."""

    semantics: str
    by_argument: dict[str, Setting]
    by_key: dict[str, Setting]
    # The policy keys a queue's effective settings read.
    queue_settings: tuple[Setting, ...]
    # rabbit_policies' operator_policy_validator keys.
    operator_keys: tuple[str, ...]
    # rabbit_amqqueue:declare_args/0's order: the first failing check is reported.
    declare_order: tuple[str, ...]
    # rabbit_classic_queue:capabilities() queue_arguments and ours: the only
    # arguments compared when a queue is declared again, in this order.
    equivalence_arguments: tuple[str, ...]
    # Each queue type's RabbitMQ module and the arguments its capabilities
    # list; a known argument of another type is refused.
    queue_types: dict[str, tuple[str, frozenset[str]]]
    # rabbit_stream_queue's own arguments: refused on the other types.
    stream_only_arguments: frozenset[str]
    all_queue_arguments: frozenset[str]


def _views(semantics: str) -> Views:
    rows = tuple(s for s in SETTINGS if semantics in s.modes)
    return Views(
        semantics,
        {s.argument: s for s in rows if s.argument},
        {s.key: s for s in rows if s.key},
        tuple(s for s in rows if s.key and s.target == "queue"),
        tuple(s.key for s in rows if s.key and s.operator is not None),
        tuple(s.argument for s in rows if s.declared and s.argument),
        tuple(s.argument for s in rows if s.equivalence and s.argument),
        {queue_type: (_MODULES[queue_type],
                      frozenset(s.argument for s in rows
                                if s.argument and queue_type in s.queue_types))
         for queue_type in BUILT_QUEUE_TYPES},
        frozenset(s.argument for s in rows if s.argument and s.queue_types == {STREAM}),
        frozenset(s.argument for s in rows if s.argument and s.queue_types))


VIEWS: dict[str, Views] = {mode: _views(mode) for mode in MODES}
_DEFAULT = VIEWS[DEFAULT_SEMANTICS]
# The default semantics' views, by the names the rest of the code has
# always read (3.13's).
BY_ARGUMENT: dict[str, Setting] = _DEFAULT.by_argument
BY_KEY: dict[str, Setting] = _DEFAULT.by_key
QUEUE_SETTINGS = _DEFAULT.queue_settings
OPERATOR_KEYS = _DEFAULT.operator_keys
DECLARE_ORDER = _DEFAULT.declare_order
EQUIVALENCE_ARGUMENTS = _DEFAULT.equivalence_arguments
QUEUE_TYPES = _DEFAULT.queue_types
STREAM_ONLY_ARGUMENTS = _DEFAULT.stream_only_arguments
ALL_QUEUE_ARGUMENTS = _DEFAULT.all_queue_arguments
# Every policy key either semantics knows, for what is the same in both
# (which queue types skip a policy holding it).
ANY_BY_KEY: dict[str, Setting] = {**VIEWS[RABBITMQ_4_3].by_key, **BY_KEY}

ARTEMIS_ARGUMENTS = frozenset(s.argument for s in SETTINGS if s.argument and s.origin == ARTEMIS)
_QPID = {s.field: s.argument for s in SETTINGS if s.origin == QPID and s.argument}
QPID_MAX_DELIVERY_COUNT = _QPID["qpid_maximum_delivery_count"]
QPID_DLQ_ENABLED = _QPID["qpid_dlq_enabled"]


class ArgumentError(ValueError):
    """A queue argument RabbitMQ would refuse; `text` completes its message."""

    def __init__(self, argument: str, detail: str, queue_type: str | None = None) -> None:
        super().__init__(argument, detail, queue_type)
        self.argument = argument
        self.detail = detail
        self.queue_type = queue_type  # set when the type does not take the argument

    def message(self, what: str) -> str:
        if self.queue_type is not None:
            return f"invalid arg '{self.argument}' for {what} of queue type {self.queue_type}"
        return f"invalid arg '{self.argument}' for {what}: {self.detail}"


def queue_type_of(arguments: FieldTable) -> str:
    value = arguments.get("x-queue-type")
    return text_of(value) if value is not None else "classic"


def _check(views: Views, name: str, arguments: FieldTable) -> None:
    check = views.by_argument[name].check
    typed = typed_value(arguments, name)
    if check is not None and typed is not None:
        error = check(typed, arguments)
        if error:
            raise ArgumentError(name, error)


def validate_queue_arguments(arguments: FieldTable,
                             semantics: str = DEFAULT_SEMANTICS) -> str:
    """Check arguments the way rabbit_amqqueue:check_declare_arguments does
    (in `semantics`' version); returns the queue type or raises ArgumentError."""
    views = VIEWS[semantics]
    if "x-queue-type" in arguments:
        _check(views, "x-queue-type", arguments)
    queue_type = queue_type_of(arguments)
    module, accepted = views.queue_types[queue_type]
    order = views.declare_order
    for name in sorted(arguments, key=lambda name: order.index(name) if name in order
                       else len(order)):
        if name in accepted:
            _check(views, name, arguments)
    for name in arguments:
        if name in views.all_queue_arguments and name not in accepted:
            raise ArgumentError(name, "", module)
    return queue_type


# rabbit_amqqueue:consume_args/0 with x-credit added; which queue type
# takes which (capabilities consumer_arguments).
CONSUME_CHECKS: dict[str, Check | None] = {
    "x-priority": check_int,
    "x-cancel-on-ha-failover": check_bool,
    "x-stream-offset": check_stream_offset,
    "x-credit": check_no_credit,
}
CONSUME_ARGUMENTS = {
    "classic": frozenset({"x-priority", "x-cancel-on-ha-failover", "x-credit"}),
    "quorum": frozenset({"x-priority", "x-credit"}),
    "stream": frozenset({"x-stream-offset", "x-credit"}),
}
# 4.3's: x-consumer-timeout is a quorum queue's consumer argument; mirroring
# (x-cancel-on-ha-failover) and basic.credit (x-credit) are gone, so those
# are ignored as any unknown argument.
CONSUME_CHECKS_4_3: dict[str, Check | None] = {
    "x-priority": check_int,
    "x-consumer-timeout": check_non_neg_int,
    "x-stream-offset": check_stream_offset,
}
CONSUME_ARGUMENTS_4_3 = {
    "classic": frozenset({"x-priority"}),
    "quorum": frozenset({"x-priority", "x-consumer-timeout"}),
    "stream": frozenset({"x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered"}),
}
_CONSUMING = {DEFAULT_SEMANTICS: (CONSUME_CHECKS, CONSUME_ARGUMENTS, frozenset(CONSUME_CHECKS)),
              RABBITMQ_4_3: (CONSUME_CHECKS_4_3, CONSUME_ARGUMENTS_4_3,
                             frozenset().union(*CONSUME_ARGUMENTS_4_3.values()))}


def validate_consume_arguments(arguments: FieldTable | None, queue_type: str,
                               semantics: str = DEFAULT_SEMANTICS) -> int:
    """Check basic.consume's arguments as rabbit_amqqueue:check_consume_arguments
    does (in `semantics`' version); returns the consumer's `x-priority` (0
    without one) or raises ArgumentError."""
    if not arguments:
        return 0
    checks, by_type, known = _CONSUMING[semantics]
    accepted = by_type[queue_type]
    for name, check in checks.items():
        typed = typed_value(arguments, name)
        if typed is not None and name in accepted and check is not None:
            error = check(typed, arguments)
            if error:
                raise ArgumentError(name, error)
    for name in arguments:
        if name in known and name not in accepted:
            raise ArgumentError(name, "", QUEUE_TYPES[queue_type][0])
    typed = typed_value(arguments, "x-priority")
    priority = typed[1] if typed is not None else 0
    return priority if isinstance(priority, int) else 0
