"""How a setting's value is checked, in two kinds.

Argument checks take a queue argument as it came off the wire, `(type,
value)`, and return RabbitMQ's error term as RabbitMQ prints it ("invalid
arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"),
because users search for those strings.  Sources: rabbit_amqqueue's
declare_args/0 and the validators under it.

Value rules take a policy value or an `[address-settings]` value (JSON or
TOML, already decoded): a test, and the same rule in plain words for the
messages amqpctl and the config file give ("must be a whole number, 0 or
more").  RabbitMQ's own wording for a policy value is the table's
`policy_error` (policies/model.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from amqp_server.wire.table import FieldTable
from dlx.expiry import expiry_error

from .stream_rules import max_age_ms

# A queue argument as typed_value gives it: (AMQP field type, value).
Typed = tuple[str, Any]
Check = Callable[[Typed, FieldTable], "str | None"]

INTEGER_TYPES = frozenset({"byte", "short", "signedint", "long", "unsignedbyte",
                           "unsignedshort", "unsignedint"})
NUMBER_TYPES = INTEGER_TYPES | {"float", "double", "decimal"}


def text_of(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) \
        else str(value)


# ---- queue arguments: RabbitMQ's error terms ---------------------------------------

def check_int(typed: Typed, _args: FieldTable) -> str | None:
    kind, _ = typed
    if kind not in INTEGER_TYPES:
        # rabbit_misc:format/2 returns a string, printed with ~p: quoted.
        return f'"expected integer, got {kind}"'
    return None


def check_non_neg_int(typed: Typed, args: FieldTable) -> str | None:
    error = check_int(typed, args)
    if error is None and typed[1] < 0:
        return f"{{value_negative,{typed[1]}}}"
    return error


def check_max_priority(typed: Typed, args: FieldTable) -> str | None:
    """rabbit_amqqueue: a priority is an octet (at most 255)."""
    error = check_non_neg_int(typed, args)
    if error is None and typed[1] > 255:
        return f"{{max_value_exceeded,{typed[1]}}}"
    return error


def check_int_at_least(minimum: int) -> Check:
    def check(typed: Typed, args: FieldTable) -> str | None:
        error = check_int(typed, args)
        if error is None and typed[1] < minimum:
            return f"{{value_too_small,{typed[1]}}}"
        return error
    return check


def check_number_within(low: float, high: float | None = None) -> Check:
    def check(typed: Typed, _args: FieldTable) -> str | None:
        kind, value = typed
        if kind not in NUMBER_TYPES:
            return f'"expected number, got {kind}"'
        if float(value) < low or (high is not None and float(value) > high):
            return f"{{value_out_of_range,{value}}}"
        return None
    return check


def check_expiry(typed: Typed, args: FieldTable) -> str | None:
    return check_int(typed, args) or expiry_error(typed[1])


def check_expires(typed: Typed, args: FieldTable) -> str | None:
    error = check_int(typed, args)
    if error is None and typed[1] == 0:
        return "{value_zero,0}"
    return error or expiry_error(typed[1])


def check_string(typed: Typed, _args: FieldTable) -> str | None:
    kind, _ = typed
    return None if kind == "longstr" else f"{{unacceptable_type,{kind}}}"


def check_bool(typed: Typed, _args: FieldTable) -> str | None:
    kind, _ = typed
    return None if kind == "bool" else f"{{unacceptable_type,{kind}}}"


def check_one_of(values: tuple[str, ...], bad: str) -> Check:
    """A string among `values`; `bad` is RabbitMQ's term for any other."""
    def check(typed: Typed, _args: FieldTable) -> str | None:
        kind, value = typed
        if kind != "longstr":
            return f"{{unacceptable_type,{kind}}}"
        return None if text_of(value) in values else bad
    return check


# A queue with any of these sends its own dead letters on: a retry or work
# queue, not a dead letter queue (the last stop, where retention applies).
DEAD_LETTER_SOURCES = ("x-dead-letter-exchange", "x-dead-letter-address")


def check_dead_letter_retention(typed: Typed, args: FieldTable) -> str | None:
    """Milliseconds, 1 or more, on a dead letter queue only: one whose
    messages are not dead-lettered onward (no x-dead-letter-exchange or
    -address, no Qpid DLQ of its own).  The term names the argument that
    makes the queue a source, in the style of routing_key_but_no_dlx_defined."""
    error = check_int(typed, args)
    if error is None and typed[1] < 1:
        return f"{{value_too_small,{typed[1]}}}"
    if error is None:
        for name in DEAD_LETTER_SOURCES:
            if name in args:
                return f'{{not_a_dead_letter_queue,"{name}"}}'
        if qpid_flag(args.get("x-qpid-dlq-enabled")):
            return '{not_a_dead_letter_queue,"x-qpid-dlq-enabled"}'
    return error


def check_dlx_routing_key(typed: Typed, args: FieldTable) -> str | None:
    error = check_string(typed, args)
    if error is None and not ("x-dead-letter-exchange" in args or "x-dead-letter-address" in args):
        return "routing_key_but_no_dlx_defined"
    return error


def check_named(values: tuple[str, ...], what: str) -> Check:
    """rabbit_amqqueue's check_queue_type and check_queue_mode: the
    unsupported value is named in the term."""
    def check(typed: Typed, _args: FieldTable) -> str | None:
        kind, value = typed
        if kind != "longstr":
            return f"{{unacceptable_type,{kind}}}"
        if text_of(value) not in values:
            return f"\"unsupported {what} '{text_of(value)}'\""
        return None
    return check


def check_queue_version(typed: Typed, args: FieldTable) -> str | None:
    error = check_non_neg_int(typed, args)
    if error is None and typed[1] not in (1, 2):
        return f'"unsupported queue version \'{typed[1]}\'"'
    return error


def check_queue_version_4_3(typed: Typed, args: FieldTable) -> str | None:
    """4.3 removed classic queue storage version 1 (CQv1): only 2 is taken."""
    error = check_non_neg_int(typed, args)
    if error is None and typed[1] != 2:
        return f'"unsupported queue version \'{typed[1]}\'"'
    return error


def check_qpid_flag(typed: Typed, _args: FieldTable) -> str | None:
    # Qpid's own clients send the flag as a string.
    kind, value = typed
    if kind == "bool" or (kind == "longstr" and text_of(value).lower() in ("true", "false")):
        return None
    return f"{{unacceptable_type,{kind}}}"


def qpid_flag(value: object) -> bool:
    return value is True or (isinstance(value, (str, bytes)) and text_of(value).lower() == "true")


def check_initial_cluster_size(typed: Typed, args: FieldTable) -> str | None:
    """rabbit_amqqueue:check_initial_cluster_size_arg/2."""
    error = check_non_neg_int(typed, args)
    if error is None and typed[1] == 0:
        return "{value_zero,0}"
    return error


def check_max_age(typed: Typed, _args: FieldTable) -> str | None:
    """rabbit_amqqueue:check_max_age_arg/2: a string such as `7D`."""
    kind, value = typed
    if kind != "longstr":
        return f"{{unacceptable_type,{kind}}}"
    return None if max_age_ms(value) is not None else "invalid_max_age"


def check_no_credit(_typed: Typed, _args: FieldTable) -> str | None:
    # RabbitMQ's credit mode is driven by basic.credit, its own extension
    # method, which AMQP 0-9-1 clients cannot send: refused, not ignored.
    return '"credit flow (basic.credit) is not supported; use basic.qos"'


# ---- policy and address-settings values: a test and plain words -------------------

@dataclass(frozen=True)
class ValueRule:
    valid: Callable[[object], bool]
    expects: str                   # "a whole number, 0 or more": what `valid` takes
    choices: tuple[str, ...] = ()  # the words it takes, for a "did you mean"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def text(what: str = "a string") -> ValueRule:
    return ValueRule(lambda value: isinstance(value, str), what)


def int_at_least(minimum: int, unit: str = "") -> ValueRule:
    def valid(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    of = f" of {unit}" if unit else ""
    return ValueRule(valid, f"a whole number{of}, {minimum} or more")


def integer(unit: str = "") -> ValueRule:
    """Any whole number (4.3's delivery-limit: a negative one means none)."""
    of = f" of {unit}" if unit else ""
    return ValueRule(_is_int, f"a whole number{of} (-1 for none)")


def number_within(low: float, high: float | None = None) -> ValueRule:
    def valid(value: object) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and value >= low and (high is None or value <= high))
    return ValueRule(valid, f"a number from {low} to {high}" if high is not None
                     else f"a number, {low} or more")


def boolean() -> ValueRule:
    return ValueRule(lambda value: isinstance(value, bool), "true or false")


def one_of(*choices: str) -> ValueRule:
    words = ", ".join(f'"{choice}"' for choice in choices)
    return ValueRule(lambda value: isinstance(value, str) and value in choices,
                     f"one of {words}", choices)


def int_within(low: int, high: int, unit: str = "") -> ValueRule:
    def valid(value: object) -> bool:
        return _is_int(value) and low <= value <= high  # type: ignore[operator]
    of = f" of {unit}" if unit else ""
    return ValueRule(valid, f"a whole number{of} from {low} to {high}")


def max_age() -> ValueRule:
    return ValueRule(lambda value: max_age_ms(value) is not None,
                     'a duration: a whole number above 0 and a unit, Y, M, D, h, m or s '
                     '("7D", "12h")')


def int_one_of(*choices: int) -> ValueRule:
    return ValueRule(lambda value: _is_int(value) and value in choices,
                     " or ".join(str(choice) for choice in choices))
