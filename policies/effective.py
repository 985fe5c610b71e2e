"""A queue's effective settings from its arguments, its policy, the address
settings of the broker's config and its operator policy (DESIGN.md,
"Effective settings of a queue").

Per key, as rabbit_policies.erl merges them: for the dead-letter keys and
`overflow` an argument beats the policy; for numeric limits the smaller value
wins; an operator policy can only lower a numeric limit.  Address settings
fill in what neither the arguments nor the policy set; the Artemis settings
take the first layer that sets them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from amqp_server.wire.table import FieldTable

from dlx.expiry import DISABLED, clamps
from dlx.limits import DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX
from dlx.redelivery import ARTEMIS_MAX_DELIVERY_ATTEMPTS, UNLIMITED, Redelivery

from .registry import (
    ARGUMENT_WINS,
    QPID_DLQ_ENABLED,
    QPID_MAX_DELIVERY_COUNT,
    QUEUE_SETTINGS,
    SMALLER_WINS,
    qpid_flag,
    queue_type_of,
)

AT_MOST_ONCE = "at-most-once"
AT_LEAST_ONCE = "at-least-once"


@dataclass(frozen=True)
class QueueSettings:
    queue_type: str = "classic"
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    dead_letter_strategy: str = AT_MOST_ONCE
    overflow: str = DROP_HEAD
    message_ttl: int | None = None
    expires: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    delivery_limit: int | None = None
    # ms a delivery may stay unacknowledged; any type (x-consumer-timeout
    # is not checked), enforced only when an integer.
    consumer_timeout: object = None
    # ActiveMQ Artemis
    redelivery_delay: int = 0
    redelivery_delay_multiplier: float = 1.0
    max_redelivery_delay: int | None = None
    redelivery_collision_avoidance_factor: float = 0.0
    max_delivery_attempts: int = UNLIMITED
    auto_create_dead_letter_resources: bool = False
    dead_letter_queue_prefix: str = "DLQ."
    dead_letter_queue_suffix: str = ""
    expiry_address: str | None = None
    expiry_delay: int = DISABLED
    min_expiry_delay: int = DISABLED
    max_expiry_delay: int = DISABLED
    auto_create_expiry_resources: bool = False
    # for the queues those auto-create: deleted when unused (dlx/addresses.py)
    auto_delete_queues: bool = True
    auto_delete_queues_delay: int = 0
    auto_delete_queues_message_count: int = 0
    expiry_queue_prefix: str = "EXP."
    expiry_queue_suffix: str = ""
    # Qpid
    qpid_maximum_delivery_count: int | None = None
    qpid_dlq_enabled: bool = False

    @property
    def redelivery(self) -> Redelivery:
        """What a return does (dlx.redelivery); Qpid's count, when given,
        stands in for max-delivery-attempts."""
        qpid = self.qpid_maximum_delivery_count
        return Redelivery(
            self.redelivery_delay, float(self.redelivery_delay_multiplier),
            self.max_redelivery_delay, float(self.redelivery_collision_avoidance_factor),
            qpid if qpid is not None else self.max_delivery_attempts, qpid is not None,
            self.delivery_limit if self.is_quorum else None)

    @property
    def clamps_expiry(self) -> bool:
        return clamps(self.expiry_delay, self.min_expiry_delay, self.max_expiry_delay)

    @property
    def is_quorum(self) -> bool:
        return self.queue_type == "quorum"

    @property
    def at_least_once(self) -> bool:
        """3.13 uses at-least-once only with a DLX and reject-publish; any
        other combination falls back to at-most-once (rabbit_quorum_queue:dlh)."""
        return (self.is_quorum and self.dead_letter_strategy == AT_LEAST_ONCE
                and self.overflow == REJECT_PUBLISH and self.dead_letter_exchange is not None)

    @property
    def has_length_limit(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None


_KNOWN = {f.name for f in fields(QueueSettings)}
# Each setting with its other names (dead-letter-address for the DLX).
_NAMES = {s.key: [s] for s in QUEUE_SETTINGS if s.alias_of is None and s.field in _KNOWN}
for _alias in QUEUE_SETTINGS:
    if _alias.alias_of is not None:
        _NAMES[_alias.alias_of].append(_alias)
# Any of a setting's names, as an argument or as a key, -> the setting's names.
_BY_ARGUMENT = {s.argument: names for names in _NAMES.values() for s in names if s.argument}
_BY_KEY = {s.key: names for names in _NAMES.values() for s in names}


def _layer(names, lookup):
    """The value a layer gives under any of a setting's names."""
    for setting in names:
        value = lookup(setting)
        if value is not None:
            return _plain(value)
    return None


def _named(arguments, policy, operator_policy, address) -> list:
    """The settings that some layer names, in registry order: only those
    need merging (most queues name none or a few)."""
    wanted = {id(names) for names in map(_BY_ARGUMENT.get, arguments) if names}
    for layer in (policy, operator_policy, address):
        wanted.update(id(names) for names in map(_BY_KEY.get, layer) if names)
    return [names for names in _NAMES.values() if id(names) in wanted]


def resolve(arguments: FieldTable | None, policy: dict | None = None,
            operator_policy: dict | None = None, policy_wins: bool = False,
            address_settings: dict | None = None) -> QueueSettings:
    """`policy_wins` flips the argument-first keys for sites that want
    central control (config `policy_precedence = "policy"`);
    `address_settings` is the merged `[address-settings]` match for the queue."""
    arguments = arguments or FieldTable()
    policy = policy or {}
    operator_policy = operator_policy or {}
    address = address_settings or {}
    values: dict = {"queue_type": queue_type_of(arguments)}
    for names in _named(arguments, policy, operator_policy, address):
        setting = names[0]
        argument = _layer(names, lambda s: arguments.get(s.argument) if s.argument else None)
        from_policy = _layer(names, lambda s: policy.get(s.key))
        if setting.merge == SMALLER_WINS:
            value = _smaller(argument, from_policy)
        elif setting.merge == ARGUMENT_WINS and policy_wins:
            value = _first(from_policy, argument)
        else:
            value = _first(argument, from_policy)
        if value is None:
            value = _layer(names, lambda s: address.get(s.key))
        if setting.merge == SMALLER_WINS:
            value = _smaller(value, _plain(operator_policy.get(setting.key)))
        if value is not None:
            values[setting.field] = value
    if address and "max_delivery_attempts" not in values:
        values["max_delivery_attempts"] = ARTEMIS_MAX_DELIVERY_ATTEMPTS
    qpid_count = _plain(arguments.get(QPID_MAX_DELIVERY_COUNT))
    if qpid_count:  # 0 is Qpid's "no limit"
        values["qpid_maximum_delivery_count"] = qpid_count
    if QPID_DLQ_ENABLED in arguments:
        values["qpid_dlq_enabled"] = qpid_flag(_plain(arguments[QPID_DLQ_ENABLED]))
    if values.get("dead_letter_exchange") is None:
        # A routing key or strategy without an exchange does nothing (3.13 logs it).
        values.pop("dead_letter_routing_key", None)
    if values["queue_type"] == "quorum" and values.get("overflow") == REJECT_PUBLISH_DLX:
        values["overflow"] = DROP_HEAD  # quorum queues do not support it (3.13 warns)
    return QueueSettings(**values)


def _plain(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value


def _first(a, b):
    return a if a is not None else b


def _smaller(a, b):
    """erlang:min: a number sorts before any other term (an unchecked
    argument may be a string)."""
    if a is None:
        return b
    if b is None:
        return a
    if _is_number(a) and _is_number(b):
        return min(a, b)
    return a if _is_number(a) or not _is_number(b) else b


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
