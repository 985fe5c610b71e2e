"""A queue's effective settings from its arguments, its policy and its
operator policy (DESIGN.md, "Effective settings of a queue").

Per key, as rabbit_policies.erl merges them: for the dead-letter keys and
`overflow` an argument beats the policy; for numeric limits the smaller value
wins; an operator policy can only lower a numeric limit.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from amqp_server.wire.table import FieldTable

from dlx.limits import DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX

from .registry import ARGUMENT_WINS, QUEUE_SETTINGS, queue_type_of

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


_FIELD = {setting.key: setting.key.replace("-", "_") for setting in QUEUE_SETTINGS}
_KNOWN = {f.name for f in fields(QueueSettings)}


def resolve(arguments: FieldTable | None, policy: dict | None = None,
            operator_policy: dict | None = None, policy_wins: bool = False) -> QueueSettings:
    """`policy_wins` flips the argument-first keys for sites that want
    central control (config `policy_precedence = "policy"`)."""
    arguments = arguments or FieldTable()
    policy = policy or {}
    operator_policy = operator_policy or {}
    values: dict = {"queue_type": queue_type_of(arguments)}
    for setting in QUEUE_SETTINGS:
        name = _FIELD[setting.key]
        if name not in _KNOWN:
            continue
        argument = _plain(arguments.get(setting.argument)) if setting.argument else None
        from_policy = _plain(policy.get(setting.key))
        if setting.merge == ARGUMENT_WINS:
            first, second = (from_policy, argument) if policy_wins else (argument, from_policy)
            value = first if first is not None else second
        else:
            value = _smaller(argument, from_policy)
            value = _smaller(value, _plain(operator_policy.get(setting.key)))
        if value is not None:
            values[name] = value
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


def _smaller(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
