"""amqpctl's command line: global options, the verbs each module registers,
and the one `Error:` line a failure prints.

Global options (--host, --port, --username/--user, --password, -p/--vhost,
--formatter, -q/--quiet) go before or after the verb; connection options
default to AMQPCTL_HOST, AMQPCTL_PORT, AMQPCTL_USERNAME, AMQPCTL_PASSWORD.
An unknown verb or option is named with a "did you mean" for a near miss.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..plain_words import closest
from . import access, dead_letters, objects, policy, runtime
from .api import Api, Verb, missing_vhost
from .output import EX_USAGE, CtlError

# Each module adds its verbs; none imports this one.
VERB_MODULES = (policy, objects, access, runtime, dead_letters)


class _Parser(argparse.ArgumentParser):
    """argparse's own complaints (a missing argument, a bad value) in its
    words, as one line naming the verb and where its usage is; exit 64."""

    def error(self, message: str) -> NoReturn:
        verb = self.prog.removeprefix("amqpctl").strip()
        if verb:
            raise CtlError(f"{verb}: {message} (amqpctl {verb} --help shows the usage)",
                           EX_USAGE)
        raise CtlError(f"{message} (amqpctl --help lists the verbs)", EX_USAGE)


def _global_options() -> _Parser:
    """Options every verb takes, before or after it (see _globals_after_verb)."""
    env = os.environ.get
    common = _Parser(add_help=False, allow_abbrev=False)
    common.add_argument("--host", default=env("AMQPCTL_HOST", "127.0.0.1"))
    port = env("AMQPCTL_PORT", "15672")
    if not port.isdigit():
        raise CtlError(f'AMQPCTL_PORT must be a port number, got "{port}"', EX_USAGE)
    common.add_argument("--port", type=int, default=int(port), help="the management API port")
    common.add_argument("-u", "--username", "--user", dest="username",
                        default=env("AMQPCTL_USERNAME", "guest"))
    common.add_argument("--password", default=env("AMQPCTL_PASSWORD", "guest"))
    common.add_argument("-p", "--vhost", default="/")
    common.add_argument("--formatter", choices=["table", "json"], default="table")
    common.add_argument("-q", "--quiet", action="store_true")
    return common


def _flags(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Each option string of `parser` -> whether it takes a value."""
    return {flag: action.nargs != 0
            for action in parser._actions for flag in action.option_strings}


def _globals_after_verb(argv: list[str], common: argparse.ArgumentParser) -> list[str]:
    """rabbitmqctl takes global options on either side of the verb, argparse
    only after a sub-command: move those given before the verb behind it."""
    takes_value = _flags(common)
    moved, i = [], 0
    while i < len(argv):
        token = argv[i]
        flag = token.split("=", 1)[0] if token.startswith("--") else token
        if flag in takes_value:
            width = 2 if takes_value[flag] and flag == token else 1
        elif takes_value.get(token[:2]) and not token.startswith("--"):
            width = 1  # -pVHOST
        else:
            break
        moved += argv[i:i + width]
        i += width
    if i >= len(argv):
        return argv  # no verb: argparse says so
    return [argv[i], *moved, *argv[i + 1:]]


def parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """amqpctl's parser and each verb's sub-parser."""
    top = _Parser(
        prog="amqpctl", description="Manage an amqp-server through its HTTP API.",
        epilog="Global options (amqpctl VERB --help lists them) go before or after the verb.")
    common = _global_options()
    verbs = top.add_subparsers(dest="verb", metavar="VERB", required=True,
                               parser_class=_Parser)
    subs: dict[str, argparse.ArgumentParser] = {}

    def verb(name: str, func: Verb, help_text: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, parents=[common], help=help_text)
        sub.set_defaults(func=func)
        subs[name] = sub
        return sub

    for module in VERB_MODULES:
        module.register(verb)
    return top, subs


def _unknown(what: str, word: str, known: Sequence[str], where: str) -> CtlError:
    match = closest(word, known)
    hint = f'; did you mean "{match}"?' if match is not None else ""
    return CtlError(f'{where}unknown {what} "{word}"{hint}', EX_USAGE)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line, or CtlError (exit 64) saying what is wrong with it."""
    top, subs = parser()
    argv = _globals_after_verb(list(argv), _global_options())
    if argv and argv[0] not in subs:
        global_flags = [*_flags(_global_options()), "-h", "--help"]
        if not argv[0].startswith("-"):
            raise CtlError(f'{_unknown("verb", argv[0], list(subs), "")} '
                           "(amqpctl --help lists the verbs)", EX_USAGE)
        if argv[0].split("=", 1)[0] not in global_flags:
            raise _unknown("option", argv[0].split("=", 1)[0], global_flags, "")
    args, extra = top.parse_known_args(argv)
    if extra:
        sub = subs[args.verb]
        where = f"{args.verb}: "
        option = next((token for token in extra if token.startswith("-")), None)
        if option is not None:
            raise _unknown("option", option.split("=", 1)[0], list(_flags(sub)), where)
        raise CtlError(f"{where}unexpected argument{'s' if len(extra) > 1 else ''} "
                       f"{' '.join(extra)} (amqpctl {args.verb} --help shows the usage)",
                       EX_USAGE)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help
        return EX_USAGE if exc.code not in (0, None) else 0
    except CtlError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.code
    api = Api(args.host, args.port, args.username, args.password)
    try:
        api.ensure_amqp_server()
        args.func(api, args)
    except CtlError as exc:
        exc = _named(api, args, exc)
        print(f"Error: {exc}", file=sys.stderr)
        return exc.code
    return 0


def _named(api: Api, args: argparse.Namespace, exc: CtlError) -> CtlError:
    """A bare 404 said as what was missing: the vhost when it does not
    exist, else the API path that answered."""
    if str(exc) != "not found":
        return exc
    return missing_vhost(api, args.vhost) or CtlError(f"not found: {exc.path}", exc.code)
