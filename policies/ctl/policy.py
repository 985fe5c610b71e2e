"""amqpctl's policy verbs: set_policy, clear_policy, list_policies and their
operator-policy twins.

A definition is checked here, against the same table the broker checks it
with (policies/model.py), before it is sent: the API answers RabbitMQ's
words ("[{<<"dead-leter-exchange">>,<<"x">>}] are not recognised policy
settings"), which tools that speak to RabbitMQ match on and the differential
tests hold it to, while a person at the command line gets plain words and a
"did you mean" that only the structured check can give.  What only the
broker knows (the vhost, permissions) still comes back from the API.
"""

from __future__ import annotations

import argparse
import json
from urllib.parse import quote

from dlx.semantics import DEFAULT as DEFAULT_SEMANTICS, MODES, RABBITMQ_4_3

from ..model import PolicyError, make_policy
from ..registry import ANY_BY_KEY, BY_KEY, VIEWS
from .api import AddVerb, Api, vhost_path
from .output import EX_DATAERR, CtlError, say, table

COLUMNS = ["vhost", "name", "pattern", "apply-to", "definition", "priority"]
EXAMPLE = '{"max-length": 1000}'


def _kind(operator: bool) -> str:
    return "operator-policies" if operator else "policies"


def _path(args: argparse.Namespace, operator: bool) -> str:
    return f"/{_kind(operator)}/{vhost_path(args.vhost)}/{quote(args.name, safe='')}"


def vhost_semantics(api: Api, vhost: str) -> str:
    """Whose semantics `vhost` follows (its policies are checked by them);
    3.13's when the broker does not say (a vhost the user cannot see)."""
    for row in api.call("GET", "/vhosts"):
        if row.get("name") == vhost and row.get("rabbitmq_semantics") in MODES:
            return str(row["rabbitmq_semantics"])
    return DEFAULT_SEMANTICS


def checked_definition(args: argparse.Namespace, operator: bool,
                       semantics: str = DEFAULT_SEMANTICS) -> object:
    """The definition as JSON, refused in plain words where the broker
    would refuse it (by `semantics`, the vhost's)."""
    try:
        definition = json.loads(args.definition)
    except json.JSONDecodeError as exc:
        raise CtlError(f"the definition is not valid JSON ({exc.msg} at character "
                       f"{exc.pos + 1}): write it as {EXAMPLE}, in single quotes for "
                       "the shell", EX_DATAERR) from None
    try:
        make_policy(args.vhost, args.name, args.pattern, definition, args.priority,
                    args.apply_to, operator, semantics)
    except PolicyError as exc:
        hint = ""
        if "unknown" in exc.plain and "did you mean" not in exc.plain:
            hint = f" (amqpctl set_{'operator_' if operator else ''}policy --help lists them)"
        raise CtlError(f"{exc.plain}{hint}", EX_DATAERR) from None
    return definition


def set_policy(api: Api, args: argparse.Namespace, operator: bool = False) -> None:
    definition = checked_definition(args, operator, vhost_semantics(api, args.vhost))
    say(args, f'Setting policy "{args.name}" for pattern "{args.pattern}" to '
              f'"{args.definition}" with priority "{args.priority}" for vhost "{args.vhost}" ...')
    api.call("PUT", _path(args, operator),
             {"pattern": args.pattern, "definition": definition, "priority": args.priority,
              "apply-to": args.apply_to})


def clear_policy(api: Api, args: argparse.Namespace, operator: bool = False) -> None:
    say(args, f'Clearing policy "{args.name}" on vhost "{args.vhost}" ...')
    api.call("DELETE", _path(args, operator),
             missing=CtlError(f"policy '{args.name}' not found in vhost '{args.vhost}'",
                              EX_DATAERR))


def list_policies(api: Api, args: argparse.Namespace, operator: bool = False) -> None:
    say(args, f'Listing policies for vhost "{args.vhost}" ...')
    table(args, COLUMNS, api.call("GET", f"/{_kind(operator)}/{vhost_path(args.vhost)}"))


def _keys_help(operator: bool) -> str:
    keys = VIEWS[RABBITMQ_4_3].operator_keys if operator else tuple(ANY_BY_KEY)
    only_4_3 = [key for key in keys if key not in BY_KEY]
    return (f"DEFINITION is a JSON object such as '{EXAMPLE}'; its keys: "
            + ", ".join(key for key in keys if key in BY_KEY)
            + f"; in a vhost following RabbitMQ 4.3's semantics, also {', '.join(only_4_3)}")


def register(verb: AddVerb) -> None:
    for prefix, operator in (("", False), ("operator_", True)):
        kind = "operator policy" if operator else "policy"
        a_kind = "an operator policy" if operator else "a policy"

        def setting(api: Api, args: argparse.Namespace, operator: bool = operator) -> None:
            set_policy(api, args, operator)

        def clearing(api: Api, args: argparse.Namespace, operator: bool = operator) -> None:
            clear_policy(api, args, operator)

        def listing(api: Api, args: argparse.Namespace, operator: bool = operator) -> None:
            list_policies(api, args, operator)

        sub = verb(f"set_{prefix}policy", setting, f"set {a_kind}")
        sub.epilog = _keys_help(operator)
        sub.add_argument("--priority", type=int, default=0)
        sub.add_argument("--apply-to", default="all")
        sub.add_argument("name")
        sub.add_argument("pattern")
        sub.add_argument("definition")
        verb(f"clear_{prefix}policy", clearing, f"clear {a_kind}").add_argument("name")
        verb(f"list_{prefix}policies", listing, f"list {kind} entries")
