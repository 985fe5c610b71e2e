"""The settings table's views (which arguments a queue type takes, the
policy and operator policy keys, the lists RabbitMQ walks in order) and the
checks of queue.declare's and basic.consume's arguments.

The table itself is settings_table.py; nothing here names a setting twice.
Errors carry RabbitMQ's wording ("invalid arg 'x-message-ttl' for queue 'q'
in vhost '/': {value_negative,-1}"), because users search for those strings.
"""

from __future__ import annotations

from amqp_server.wire.table import FieldTable, typed_value

from .checks import Check, check_bool, check_int, check_no_credit, qpid_flag, text_of
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
    "STREAM_ONLY_ARGUMENTS",
    "ArgumentError", "Setting", "qpid_flag", "queue_type_of", "validate_consume_arguments",
    "validate_queue_arguments",
]

BY_ARGUMENT: dict[str, Setting] = {s.argument: s for s in SETTINGS if s.argument}
BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS if s.key}
# The policy keys a queue's effective settings read.
QUEUE_SETTINGS = tuple(s for s in SETTINGS if s.key and s.target == "queue")
# rabbit_policies' operator_policy_validator keys.
OPERATOR_KEYS = tuple(key for key, s in BY_KEY.items() if s.operator is not None)

# rabbit_amqqueue:declare_args/0's order: the first failing check is reported.
DECLARE_ORDER = tuple(s.argument for s in SETTINGS if s.declared and s.argument)
# rabbit_classic_queue:capabilities() queue_arguments and ours: the only
# arguments compared when a queue is declared again, in this order.
EQUIVALENCE_ARGUMENTS = tuple(s.argument for s in SETTINGS if s.equivalence and s.argument)
# A stream compares its own type's instead (rabbit_stream_queue:capabilities()
# queue_arguments, in its order; rabbit_amqqueue:assert_args_equivalence/2).
STREAM_EQUIVALENCE_ARGUMENTS = ("x-max-length-bytes", "x-queue-type", "x-max-age",
                                "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
                                "x-queue-leader-locator")

# RabbitMQ's module of each queue type (in "of queue type ..." errors) and
# the arguments its capabilities list; a known argument of another type is
# refused.
_MODULES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
            "stream": "rabbit_stream_queue"}
QUEUE_TYPES: dict[str, tuple[str, frozenset[str]]] = {
    queue_type: (_MODULES[queue_type],
                 frozenset(s.argument for s in SETTINGS
                           if s.argument and queue_type in s.queue_types))
    for queue_type in BUILT_QUEUE_TYPES}
# rabbit_stream_queue's own arguments: refused on the other types.
STREAM_ONLY_ARGUMENTS = frozenset(s.argument for s in SETTINGS
                                  if s.argument and s.queue_types == {STREAM})
ALL_QUEUE_ARGUMENTS = frozenset(s.argument for s in SETTINGS if s.argument and s.queue_types)

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


def _declare_order(name: str) -> int:
    return DECLARE_ORDER.index(name) if name in DECLARE_ORDER else len(DECLARE_ORDER)


def queue_type_of(arguments: FieldTable) -> str:
    value = arguments.get("x-queue-type")
    return text_of(value) if value is not None else "classic"


def _check(name: str, arguments: FieldTable) -> None:
    check = BY_ARGUMENT[name].check
    typed = typed_value(arguments, name)
    if check is not None and typed is not None:
        error = check(typed, arguments)
        if error:
            raise ArgumentError(name, error)


def validate_queue_arguments(arguments: FieldTable) -> str:
    """Check arguments the way rabbit_amqqueue:check_declare_arguments does;
    returns the queue type or raises ArgumentError."""
    if "x-queue-type" in arguments:
        _check("x-queue-type", arguments)
    queue_type = queue_type_of(arguments)
    module, accepted = QUEUE_TYPES[queue_type]
    for name in sorted(arguments, key=_declare_order):
        if name in accepted:
            _check(name, arguments)
    for name in arguments:
        if name in ALL_QUEUE_ARGUMENTS and name not in accepted:
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


def validate_consume_arguments(arguments: FieldTable | None, queue_type: str) -> int:
    """Check basic.consume's arguments as rabbit_amqqueue:check_consume_arguments
    does; returns the consumer's `x-priority` (0 without one) or raises
    ArgumentError."""
    if not arguments:
        return 0
    accepted = CONSUME_ARGUMENTS[queue_type]
    for name, check in CONSUME_CHECKS.items():
        typed = typed_value(arguments, name)
        if typed is not None and name in accepted and check is not None:
            error = check(typed, arguments)
            if error:
                raise ArgumentError(name, error)
    for name in arguments:
        if name in CONSUME_CHECKS and name not in accepted:
            raise ArgumentError(name, "", QUEUE_TYPES[queue_type][0])
    typed = typed_value(arguments, "x-priority")
    priority = typed[1] if typed is not None else 0
    return priority if isinstance(priority, int) else 0
