"""Policies: what one is, how it is validated, and which one applies.

RabbitMQ's rules (rabbit_policy.erl, rabbit_policies.erl 3.13):
- a policy matches an object when its `apply-to` covers the object's kind
  (and queue type), its pattern (a regex, searched, not anchored) matches the
  name, and every key of its definition is supported by the queue's type;
- of the matching policies exactly one applies: the highest priority.
  RabbitMQ leaves equal priorities unspecified; we pick the policy whose name
  sorts first, so the choice is stable across restarts;
- operator policies are matched the same way, separately; they lower
  numeric limits and replace `overflow` and `queue-version` (effective.py).

A refused policy says why twice: in RabbitMQ's words, which the HTTP API
answers because tools match on them, and in plain words for amqpctl.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dlx.delayed_retry import constraint_problem
from dlx.semantics import DEFAULT as DEFAULT_SEMANTICS, is_4x

from .effective import merged
from .plain_words import closest, did_you_mean, quoted, shown
from .registry import ANY_BY_KEY, OPERATOR_REPLACES, VIEWS

APPLY_TO = ("queues", "classic_queues", "quorum_queues", "streams", "exchanges", "all")
# The `apply-to` naming one queue type.
_APPLY_TO_TYPE = {"classic": "classic_queues", "quorum": "quorum_queues", "stream": "streams"}
_EXAMPLE = '{"max-length": 1000}'


class PolicyError(ValueError):
    """A policy RabbitMQ would refuse.  str() is RabbitMQ's message, which
    the HTTP API answers; `plain` says the same in plain words, for amqpctl
    and the config file."""

    def __init__(self, message: str, plain: str | None = None) -> None:
        super().__init__(message)
        self.plain = plain if plain is not None else message


@dataclass(frozen=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any] = field(hash=False)
    priority: int = 0
    apply_to: str = "all"
    regex: re.Pattern[str] | None = field(default=None, compare=False, hash=False, repr=False)

    def matches_queue(self, name: str, queue_type: str) -> bool:
        if self.apply_to not in ("all", "queues", _APPLY_TO_TYPE.get(queue_type)):
            return False
        if any(queue_type in ANY_BY_KEY[key].skipped_by for key in self.definition):
            return False
        return self._search(name)

    def matches_exchange(self, name: str) -> bool:
        return self.apply_to in ("all", "exchanges") and self._search(name)

    def _search(self, name: str) -> bool:
        regex = self.regex if self.regex is not None else re.compile(self.pattern)
        return regex.search(name) is not None

    def as_json(self) -> dict[str, Any]:
        """The management API's shape of a policy."""
        return {"vhost": self.vhost, "name": self.name, "pattern": self.pattern,
                "apply-to": self.apply_to, "definition": dict(self.definition),
                "priority": self.priority}


def erlang_term(value: object) -> str:
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


def value_problem(key: str, value: object, semantics: str = DEFAULT_SEMANTICS) -> str | None:
    """What is wrong with `value` for the setting `key`, in plain words
    ("message-ttl must be ..., got "soon""), or None when it is valid."""
    rule = VIEWS[semantics].by_key[key].rule
    if rule is None or rule.valid(value):
        return None
    hint = did_you_mean(value, rule.choices) if isinstance(value, str) else ""
    return f"{key} must be {rule.expects}, got {shown(value)}{hint}"


def unknown_keys_problem(unknown: Iterable[str], known: Iterable[str], what: str) -> str:
    """'unknown policy key "dead-leter-exchange"; did you mean ...?'"""
    unknown, known = list(unknown), list(known)
    guesses = [(key, closest(key, known)) for key in unknown]
    if len(unknown) == 1:
        return f'unknown {what} "{unknown[0]}"{did_you_mean(unknown[0], known)}'
    text = f"unknown {what}s {quoted(unknown)}"
    hints = [f'"{guess}" for "{key}"' for key, guess in guesses if guess is not None]
    return text + (f"; did you mean {', '.join(hints)}?" if hints else "")


def validate_definition(definition: object, operator: bool = False,
                        semantics: str = DEFAULT_SEMANTICS) -> dict[str, Any]:
    """rabbit_policy:validate0/2: each known key's value in key order (an
    Erlang map's), then what a validator checks of its keys together (4.3's
    delayed retry), then the keys no validator took; the keys and checks
    are `semantics`' (dlx/semantics.py)."""
    if not isinstance(definition, dict):
        raise PolicyError(f"definition must be a dictionary: {erlang_term(definition)}",
                          f"the definition must be a JSON object such as {_EXAMPLE}, "
                          f"got {shown(definition)}")
    if not definition:
        raise PolicyError("no policy settings given",
                          f"the definition sets nothing: give a policy key, such as {_EXAMPLE}")
    views = VIEWS[semantics]
    allowed = views.operator_keys if operator else tuple(views.by_key)
    ordered = sorted(definition.items(), key=lambda item: str(item[0]).encode())
    for key, value in ordered:
        if key in allowed:
            setting = views.by_key[key]
            problem = value_problem(key, value, semantics)
            if problem is not None:
                raise PolicyError(f"{erlang_term(value)} {setting.policy_error}", problem)
    together = constraint_problem(definition) if is_4x(semantics) else None
    if together is not None:
        # rabbit_quorum_queue:validate_delayed_retry_constraints/1
        raise PolicyError(together, together)
    unknown = [(key, value) for key, value in ordered if key not in allowed]
    if unknown:
        listed = ",".join(f"{{{erlang_term(key)},{erlang_term(value)}}}" for key, value in unknown)
        names = [str(key) for key, _ in unknown]
        if operator and all(name in views.by_key for name in names):
            plain = (f"an operator policy cannot set {quoted(names)}; it takes only "
                     f"{quoted(views.operator_keys)}")
        else:
            plain = unknown_keys_problem(names, allowed, "operator policy key" if operator
                                         else "policy key")
        raise PolicyError(f"[{listed}] are not recognised policy settings", plain)
    return dict(definition)


def make_policy(vhost: str, name: str, pattern: object, definition: object,
                priority: object = 0, apply_to: str = "all",
                operator: bool = False, semantics: str = DEFAULT_SEMANTICS) -> Policy:
    """A validated policy, or PolicyError with RabbitMQ's wording (and plain
    words); `semantics`: its vhost's."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise PolicyError(f"{erlang_term(priority)} priority must be a number",
                          f"the priority must be a whole number, got {shown(priority)}")
    if apply_to not in APPLY_TO:
        raise PolicyError(
            f"apply-to '{apply_to}' unrecognised; should be one of: 'queues', "
            "'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'",
            f"apply-to must be one of {quoted(APPLY_TO)}, got {shown(apply_to)}"
            f"{did_you_mean(apply_to, APPLY_TO)}")
    if not isinstance(pattern, str):
        raise PolicyError(f"{erlang_term(pattern)} is not a valid regular expression",
                          f"the pattern must be a regular expression (a string), "
                          f"got {shown(pattern)}")
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise PolicyError(f"pattern {pattern!r} is not a valid regular expression: {exc}") \
            from None
    return Policy(vhost, name, pattern, validate_definition(definition, operator, semantics),
                  priority, apply_to, regex)


def effective_definition(policy: Policy | None, operator: Policy | None) -> dict[str, Any]:
    """What a queue's policy and operator policy set together, as the
    management API shows it (rabbit_policy:effective_definition/1): each
    key of either, and for a key of both the operator's merge from the
    settings table (the smaller limit; the operator's overflow or
    queue-version)."""
    mine = policy.definition if policy is not None else {}
    capped = operator.definition if operator is not None else {}
    effective: dict[str, Any] = {}
    for key in sorted({*mine, *capped}, key=lambda key: key.encode()):
        rule = ANY_BY_KEY[key].operator
        if key not in capped:
            effective[key] = mine[key]
        elif key not in mine or rule == OPERATOR_REPLACES or rule is None:
            effective[key] = capped[key]
        else:
            effective[key] = merged(rule, mine[key], capped[key])
    return effective


def _rank(policy: Policy) -> tuple[int, str]:
    return (-policy.priority, policy.name)


def match_queue(policies: Iterable[Policy], name: str, queue_type: str) -> Policy | None:
    found = [p for p in policies if p.matches_queue(name, queue_type)]
    return min(found, key=_rank) if found else None


def match_exchange(policies: Iterable[Policy], name: str) -> Policy | None:
    found = [p for p in policies if p.matches_exchange(name)]
    return min(found, key=_rank) if found else None
