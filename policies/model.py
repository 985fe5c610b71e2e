"""Policies: what one is, how it is validated, and which one applies.

RabbitMQ's rules (rabbit_policy.erl, rabbit_policies.erl 3.13):
- a policy matches an object when its `apply-to` covers the object's kind
  (and queue type), its pattern (a regex, searched, not anchored) matches the
  name, and every key of its definition is supported by the queue's type;
- of the matching policies exactly one applies: the highest priority.
  RabbitMQ leaves equal priorities unspecified; we pick the policy whose name
  sorts first, so the choice is stable across restarts;
- operator policies are matched the same way, separately, and can only lower
  numeric limits (see effective.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .registry import BY_KEY

APPLY_TO = ("queues", "classic_queues", "quorum_queues", "streams", "exchanges", "all")
# Operator policies may only carry numeric limits (rabbit_policies: operator_policy_validator).
OPERATOR_KEYS = ("expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit")


class PolicyError(ValueError):
    """A policy RabbitMQ would refuse; str() is its message."""


@dataclass(frozen=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    definition: dict = field(hash=False)
    priority: int = 0
    apply_to: str = "all"
    regex: re.Pattern = field(default=None, compare=False, hash=False, repr=False)

    def matches_queue(self, name: str, queue_type: str) -> bool:
        if self.apply_to not in ("all", "queues", f"{queue_type}_queues"):
            return False
        if any(queue_type in BY_KEY[key].unsupported_by for key in self.definition):
            return False
        return self.regex.search(name) is not None

    def matches_exchange(self, name: str) -> bool:
        return self.apply_to in ("all", "exchanges") and self.regex.search(name) is not None

    def as_json(self) -> dict:
        """The management API's shape of a policy."""
        return {"vhost": self.vhost, "name": self.name, "pattern": self.pattern,
                "apply-to": self.apply_to, "definition": dict(self.definition),
                "priority": self.priority}


def erlang_term(value) -> str:
    """A JSON value as RabbitMQ's ~tp prints it in validation errors."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return f'<<"{value}">>'
    if isinstance(value, list):
        return "[" + ",".join(erlang_term(v) for v in value) + "]"
    if isinstance(value, dict):
        return "#{" + ",".join(f"{erlang_term(k)} => {erlang_term(v)}"
                               for k, v in value.items()) + "}"
    return repr(value)


def validate_definition(definition, operator: bool = False) -> dict:
    if not isinstance(definition, dict):
        raise PolicyError(f"definition must be a dictionary: {erlang_term(definition)}")
    if not definition:
        raise PolicyError("no policy settings given")
    allowed = OPERATOR_KEYS if operator else tuple(BY_KEY)
    unknown = [key for key in definition if key not in allowed]
    if unknown:
        listed = ",".join(erlang_term(key) for key in unknown)
        raise PolicyError(f"[{listed}] are not recognised policy settings")
    for key, value in definition.items():
        setting = BY_KEY[key]
        if not setting.policy_valid(value):
            raise PolicyError(f"{erlang_term(value)} {setting.policy_error}")
    return dict(definition)


def make_policy(vhost: str, name: str, pattern: str, definition, priority=0,
                apply_to: str = "all", operator: bool = False) -> Policy:
    """A validated policy, or PolicyError with RabbitMQ's wording."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise PolicyError(f"{erlang_term(priority)} priority must be a number")
    if apply_to not in APPLY_TO:
        raise PolicyError(
            f"apply-to '{apply_to}' unrecognised; should be one of: 'queues', "
            "'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'")
    if not isinstance(pattern, str):
        raise PolicyError(f"{erlang_term(pattern)} is not a valid regular expression")
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise PolicyError(f"pattern {pattern!r} is not a valid regular expression: {exc}") \
            from None
    return Policy(vhost, name, pattern, validate_definition(definition, operator), priority,
                  apply_to, regex)


def _rank(policy: Policy) -> tuple:
    return (-policy.priority, policy.name)


def match_queue(policies, name: str, queue_type: str) -> Policy | None:
    found = [p for p in policies if p.matches_queue(name, queue_type)]
    return min(found, key=_rank) if found else None


def match_exchange(policies, name: str) -> Policy | None:
    found = [p for p in policies if p.matches_exchange(name)]
    return min(found, key=_rank) if found else None
