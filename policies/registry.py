"""Every queue setting, declared once: its policy key, its queue argument,
how a value is checked, and how an argument and a policy value merge.

The checks return RabbitMQ's error term as RabbitMQ prints it ("invalid arg
'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"), because
users search for those strings.  Sources: rabbit_amqqueue:declare_args/0 and
the validators under it, rabbit_policies.erl for the merge rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from amqp_server.wire.table import FieldTable, typed_value
from dlx.expiry import expiry_error
from dlx.limits import OVERFLOW_MODES

INTEGER_TYPES = frozenset({"byte", "short", "signedint", "long", "unsignedbyte",
                           "unsignedshort", "unsignedint"})

ARGUMENT_WINS = "argument"  # rabbit_policies: queueArgHasPrecedence
SMALLER_WINS = "min"        # numeric limits: the lower of the two applies
FIRST_SET = "first"         # Artemis settings: argument, else policy, else address setting

Check = Callable[[tuple[str, object], FieldTable], "str | None"]


def check_int(typed: tuple[str, object], _args: FieldTable) -> str | None:
    kind, _ = typed
    if kind not in INTEGER_TYPES:
        # rabbit_misc:format/2 returns a string, printed with ~p: quoted.
        return f'"expected integer, got {kind}"'
    return None


def check_non_neg_int(typed, args) -> str | None:
    error = check_int(typed, args)
    if error is None and typed[1] < 0:
        return f"{{value_negative,{typed[1]}}}"
    return error


def check_max_priority(typed, args) -> str | None:
    """rabbit_amqqueue: a priority is an octet (at most 255)."""
    error = check_non_neg_int(typed, args)
    if error is None and typed[1] > 255:
        return f"{{max_value_exceeded,{typed[1]}}}"
    return error


def check_queue_mode(typed, args) -> str | None:
    kind, value = typed
    if kind != "longstr":
        return f"{{unacceptable_type,{kind}}}"
    if _text(value) not in QUEUE_MODES:
        return f'"unsupported queue mode \'{_text(value)}\'"'
    return None


def check_queue_version(typed, args) -> str | None:
    error = check_non_neg_int(typed, args)
    if error is None and typed[1] not in (1, 2):
        return f'"unsupported queue version \'{typed[1]}\'"'
    return error


def check_expiry(typed, args) -> str | None:
    return check_int(typed, args) or expiry_error(typed[1])


def check_expires(typed, args) -> str | None:
    error = check_int(typed, args)
    if error is None and typed[1] == 0:
        return "{value_zero,0}"
    return error or expiry_error(typed[1])


def _one_of(values: tuple[str, ...], bad: str) -> Check:
    def check(typed, _args) -> str | None:
        kind, value = typed
        if kind != "longstr":
            return f"{{unacceptable_type,{kind}}}"
        return None if _text(value) in values else bad
    return check


def check_string(typed, _args) -> str | None:
    kind, _ = typed
    return None if kind == "longstr" else f"{{unacceptable_type,{kind}}}"


def check_dlx_routing_key(typed, args) -> str | None:
    error = check_string(typed, args)
    if error is None and not ("x-dead-letter-exchange" in args or "x-dead-letter-address" in args):
        return "routing_key_but_no_dlx_defined"
    return error


def check_queue_type(typed, _args) -> str | None:
    kind, value = typed
    if kind != "longstr":
        return f"{{unacceptable_type,{kind}}}"
    if _text(value) not in QUEUE_TYPES:
        return f"\"unsupported queue type '{_text(value)}'\""
    return None


def check_bool(typed, _args) -> str | None:
    kind, _ = typed
    return None if kind == "bool" else f"{{unacceptable_type,{kind}}}"


def check_int_at_least(minimum: int) -> Check:
    def check(typed, args) -> str | None:
        error = check_int(typed, args)
        if error is None and typed[1] < minimum:
            return f"{{value_too_small,{typed[1]}}}"
        return error
    return check


NUMBER_TYPES = INTEGER_TYPES | {"float", "double", "decimal"}


def check_number_within(low: float, high: float | None = None) -> Check:
    def check(typed, _args) -> str | None:
        kind, value = typed
        if kind not in NUMBER_TYPES:
            return f'"expected number, got {kind}"'
        if float(value) < low or (high is not None and float(value) > high):
            return f"{{value_out_of_range,{value}}}"
        return None
    return check


def check_delivery_limit(typed, args) -> str | None:
    # 3.13 stores x-delivery-limit unchecked and fails later; we refuse
    # what it could never use.
    return check_non_neg_int(typed, args)


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)


def _is_text(value) -> bool:
    return isinstance(value, str)


def _is_int_at_least(minimum: int) -> Callable[[object], bool]:
    return lambda value: (isinstance(value, int) and not isinstance(value, bool)
                          and value >= minimum)


def _is_number_within(low: float, high: float | None = None) -> Callable[[object], bool]:
    return lambda value: (isinstance(value, (int, float)) and not isinstance(value, bool)
                          and value >= low and (high is None or value <= high))


def _is_bool(value) -> bool:
    return isinstance(value, bool)


def _in(*choices: str) -> Callable[[object], bool]:
    return lambda value: value in choices


@dataclass(frozen=True)
class Setting:
    key: str                 # policy definition key
    argument: str | None     # queue argument, None if policy-only
    check: Check | None      # the argument's validator
    merge: str
    # Policy values: a test and rabbit_policies' message ("~tp is not ...").
    policy_valid: Callable[[object], bool] = _is_text
    policy_error: str = ""
    # Which objects the key concerns; a queue type in `unsupported_by`
    # ignores a whole policy carrying the key (rabbit_queue_type capabilities).
    target: str = "queue"
    unsupported_by: frozenset = frozenset()
    # Another name of the setting `alias_of` (dead-letter-address is
    # Artemis's name for the dead-letter exchange).
    alias_of: str | None = None

    @property
    def field(self) -> str:
        """Its attribute in QueueSettings."""
        return (self.alias_of or self.key).replace("-", "_")


def _artemis(key: str, check: Check, valid: Callable[[object], bool], error: str,
             alias_of: str | None = None) -> Setting:
    """A setting from ActiveMQ Artemis's address settings: the seed's name as
    policy key and config key, with `x-` as queue argument."""
    return Setting(key, f"x-{key}", check, ARGUMENT_WINS if alias_of else FIRST_SET,
                   valid, error, alias_of=alias_of)


QUORUM_ONLY = frozenset({"classic"})  # unsupported by classic queues

SETTINGS: tuple[Setting, ...] = (
    Setting("dead-letter-exchange", "x-dead-letter-exchange", check_string, ARGUMENT_WINS,
            _is_text, "is not a valid dead letter exchange name"),
    Setting("dead-letter-routing-key", "x-dead-letter-routing-key", check_dlx_routing_key,
            ARGUMENT_WINS, _is_text, "is not a valid dead letter routing key"),
    Setting("dead-letter-strategy", "x-dead-letter-strategy",
            _one_of(("at-most-once", "at-least-once"), "invalid_dlx_strategy"), ARGUMENT_WINS,
            _in("at-most-once", "at-least-once"), "is not a valid dead letter strategy",
            unsupported_by=QUORUM_ONLY),
    Setting("overflow", "x-overflow", _one_of(OVERFLOW_MODES, "invalid_overflow"),
            ARGUMENT_WINS, _in(*OVERFLOW_MODES), "is not a valid overflow value"),
    Setting("message-ttl", "x-message-ttl", check_expiry, SMALLER_WINS,
            _is_int_at_least(0), "is not a valid message TTL"),
    Setting("expires", "x-expires", check_expires, SMALLER_WINS,
            _is_int_at_least(1), "is not a valid queue expiry"),
    Setting("max-length", "x-max-length", check_non_neg_int, SMALLER_WINS,
            _is_int_at_least(0), "is not a valid maximum length"),
    Setting("max-length-bytes", "x-max-length-bytes", check_non_neg_int, SMALLER_WINS,
            _is_int_at_least(0), "is not a valid maximum length in bytes"),
    Setting("delivery-limit", "x-delivery-limit", check_delivery_limit, SMALLER_WINS,
            _is_int_at_least(0), "is not a valid delivery limit", unsupported_by=QUORUM_ONLY),
    # 3.12+: x-consumer-timeout is taken unchecked (a value that is not an
    # integer turns the timeout off for the queue); the policy key is checked.
    Setting("consumer-timeout", "x-consumer-timeout", None, SMALLER_WINS,
            _is_int_at_least(0), "is not a valid consumer timeout"),
    Setting("alternate-exchange", None, None, ARGUMENT_WINS,
            _is_text, "is not a valid alternate exchange name", target="exchange"),
    # ActiveMQ Artemis (seeds 000, 001, 003).
    _artemis("dead-letter-address", check_string, _is_text,
             "is not a valid dead letter address", alias_of="dead-letter-exchange"),
    _artemis("redelivery-delay", check_non_neg_int, _is_int_at_least(0),
             "is not a valid redelivery delay"),
    _artemis("redelivery-delay-multiplier", check_number_within(0.0), _is_number_within(0.0),
             "is not a valid redelivery delay multiplier"),
    _artemis("max-redelivery-delay", check_non_neg_int, _is_int_at_least(0),
             "is not a valid maximum redelivery delay"),
    _artemis("redelivery-collision-avoidance-factor", check_number_within(0.0, 1.0),
             _is_number_within(0.0, 1.0),
             "is not a valid redelivery collision avoidance factor (0.0 to 1.0)"),
    _artemis("max-delivery-attempts", check_int_at_least(-1), _is_int_at_least(-1),
             "is not a valid number of delivery attempts"),
    _artemis("auto-create-dead-letter-resources", check_bool, _is_bool, "is not a boolean"),
    _artemis("dead-letter-queue-prefix", check_string, _is_text, "is not a valid queue prefix"),
    _artemis("dead-letter-queue-suffix", check_string, _is_text, "is not a valid queue suffix"),
    _artemis("expiry-address", check_string, _is_text, "is not a valid expiry address"),
    _artemis("expiry-delay", check_int_at_least(-1), _is_int_at_least(-1),
             "is not a valid expiry delay"),
    _artemis("min-expiry-delay", check_int_at_least(-1), _is_int_at_least(-1),
             "is not a valid minimum expiry delay"),
    _artemis("max-expiry-delay", check_int_at_least(-1), _is_int_at_least(-1),
             "is not a valid maximum expiry delay"),
    _artemis("auto-create-expiry-resources", check_bool, _is_bool, "is not a boolean"),
    _artemis("expiry-queue-prefix", check_string, _is_text, "is not a valid queue prefix"),
    _artemis("expiry-queue-suffix", check_string, _is_text, "is not a valid queue suffix"),
    # Only for the DLQ./EXP. queues the broker auto-created, so no queue
    # argument: a policy or the address settings matching that queue.
    Setting("auto-delete-queues", None, None, FIRST_SET, _is_bool, "is not a boolean"),
    Setting("auto-delete-queues-delay", None, None, FIRST_SET, _is_int_at_least(0),
            "is not a valid auto-delete delay"),
    Setting("auto-delete-queues-message-count", None, None, FIRST_SET,
            _is_int_at_least(-1), "is not a valid auto-delete message count"),
)
BY_ARGUMENT = {s.argument: s for s in SETTINGS if s.argument}
QUEUE_SETTINGS = tuple(s for s in SETTINGS if s.target == "queue")
BY_KEY = {s.key: s for s in SETTINGS}

ARTEMIS_ARGUMENTS = frozenset(s.argument for s in SETTINGS if s.argument
                              and (s.merge == FIRST_SET or s.alias_of))
# Qpid's queue-declare properties (seed 004): arguments only.
QPID_MAX_DELIVERY_COUNT = "x-qpid-maximum-delivery-count"
# Classic queue modes: "lazy" pages messages out as soon as they arrive.
QUEUE_MODES = ("default", "lazy")
QPID_DLQ_ENABLED = "x-qpid-dlq-enabled"


def check_qpid_flag(typed, _args) -> str | None:
    # Qpid's own clients send the flag as a string.
    kind, value = typed
    if kind == "bool" or (kind == "longstr" and _text(value).lower() in ("true", "false")):
        return None
    return f"{{unacceptable_type,{kind}}}"


def qpid_flag(value) -> bool:
    return value is True or (isinstance(value, (str, bytes)) and _text(value).lower() == "true")


# Arguments RabbitMQ validates that are not dead-letter settings.
OTHER_ARGUMENT_CHECKS: dict[str, Check] = {
    QPID_MAX_DELIVERY_COUNT: check_non_neg_int,
    QPID_DLQ_ENABLED: check_qpid_flag,
    "x-queue-type": check_queue_type,
    "x-max-priority": check_max_priority,
    "x-single-active-consumer": check_bool,
    "x-queue-mode": check_queue_mode,
    "x-queue-version": check_queue_version,
    "x-max-in-memory-length": check_non_neg_int,
    "x-max-in-memory-bytes": check_non_neg_int,
}

# rabbit_classic_queue / rabbit_quorum_queue capabilities(): the arguments
# each queue type accepts; a known argument of another type is refused.
QUEUE_TYPES = {
    "classic": ("rabbit_classic_queue", frozenset({
        "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
        "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
        "x-queue-version", "x-single-active-consumer", "x-queue-type",
        "x-queue-master-locator"}) | ARTEMIS_ARGUMENTS
        | {QPID_MAX_DELIVERY_COUNT, QPID_DLQ_ENABLED}),
    "quorum": ("rabbit_quorum_queue", frozenset({
        "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
        "x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
        "x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer", "x-queue-type",
        "x-quorum-initial-group-size", "x-delivery-limit", "x-message-ttl",
        "x-queue-leader-locator"}) | ARTEMIS_ARGUMENTS
        | {QPID_MAX_DELIVERY_COUNT, QPID_DLQ_ENABLED}),
}
# rabbit_stream_queue's own arguments: streams are not built, but their
# arguments on a classic or quorum queue are refused as RabbitMQ does.
STREAM_ONLY_ARGUMENTS = frozenset({"x-max-age", "x-stream-max-segment-size-bytes",
                                   "x-initial-cluster-size", "x-stream-filter-size-bytes"})
ALL_QUEUE_ARGUMENTS = frozenset().union(*(args for _, args in QUEUE_TYPES.values()),
                                        STREAM_ONLY_ARGUMENTS)


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


# rabbit_amqqueue:declare_args/0 order: the first failing check is reported.
DECLARE_ORDER = (
    "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-dead-letter-strategy", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
    "x-max-in-memory-bytes", "x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version",
    "x-single-active-consumer", "x-queue-type", "x-delivery-limit",
)


def _declare_order(name: str) -> int:
    return DECLARE_ORDER.index(name) if name in DECLARE_ORDER else len(DECLARE_ORDER)


def queue_type_of(arguments: FieldTable) -> str:
    value = arguments.get("x-queue-type")
    return _text(value) if value is not None else "classic"


def validate_queue_arguments(arguments: FieldTable) -> str:
    """Check arguments the way rabbit_amqqueue:check_declare_arguments does;
    returns the queue type or raises ArgumentError."""
    typed = typed_value(arguments, "x-queue-type")
    if typed is not None:
        error = check_queue_type(typed, arguments)
        if error:
            raise ArgumentError("x-queue-type", error)
    queue_type = queue_type_of(arguments)
    module, accepted = QUEUE_TYPES[queue_type]
    for name in sorted(arguments, key=_declare_order):
        if name in accepted:
            setting = BY_ARGUMENT.get(name)
            check = setting.check if setting else OTHER_ARGUMENT_CHECKS.get(name)
            if check is not None:
                error = check(typed_value(arguments, name), arguments)
                if error:
                    raise ArgumentError(name, error)
    for name in arguments:
        if name in ALL_QUEUE_ARGUMENTS and name not in accepted:
            raise ArgumentError(name, "", module)
    return queue_type


def check_no_credit(_typed, _args) -> str | None:
    # RabbitMQ's credit mode is driven by basic.credit, its own extension
    # method, which AMQP 0-9-1 clients cannot send: refused, not ignored.
    return '"credit flow (basic.credit) is not supported; use basic.qos"'


# rabbit_amqqueue:consume_args/0 with x-credit added; which queue type
# takes which (capabilities consumer_arguments).
CONSUME_CHECKS: dict[str, Check] = {
    "x-priority": check_int,
    "x-cancel-on-ha-failover": check_bool,
    "x-stream-offset": None,
    "x-credit": check_no_credit,
}
CONSUME_ARGUMENTS = {
    "classic": frozenset({"x-priority", "x-cancel-on-ha-failover", "x-credit"}),
    "quorum": frozenset({"x-priority", "x-credit"}),
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
    return typed[1] if typed is not None else 0
