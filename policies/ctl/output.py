"""What amqpctl prints: rabbitmqctl's exit codes, the progress lines
`--quiet` hides, and tables (tab-separated with a header row, or JSON with
`--formatter json`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..plain_words import closest

# rabbitmqctl's exit codes: usage, bad data, broker unreachable, access refused.
EX_USAGE, EX_DATAERR, EX_UNAVAILABLE, EX_NOPERM = 64, 65, 69, 77


class CtlError(Exception):
    """One `Error:` line on stderr and the exit code."""

    def __init__(self, message: str, code: int, path: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.path = path  # the API path that answered 404, for a clearer message


def say(args: argparse.Namespace, text: str) -> None:
    """A progress line, as rabbitmqctl prints before its output."""
    if not args.quiet and args.formatter != "json":
        print(text)


def cell(value: object) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def table(args: argparse.Namespace, columns: Sequence[str],
          rows: Iterable[Mapping[str, Any]]) -> None:
    if args.formatter == "json":
        print(json.dumps([{c: row.get(c) for c in columns} for row in rows]))
        return
    print("\t".join(columns))
    for row in rows:
        print("\t".join(cell(row.get(c)) for c in columns))


def columns(args: argparse.Namespace, valid: Sequence[str], default: Sequence[str]) -> list[str]:
    """The columns asked for, refused as rabbitmqctl refuses an unknown info
    key: before anything is asked of the broker, with the valid ones."""
    asked: list[str] = args.columns
    unknown = [column for column in asked if column not in valid]
    if unknown:
        named = ", ".join(f'"{column}"' for column in unknown)
        guesses = [(column, closest(column, valid)) for column in unknown]
        hints = [f'"{guess}" for "{column}"' if len(unknown) > 1 else f'"{guess}"'
                 for column, guess in guesses if guess is not None]
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        raise CtlError(f"{args.verb}: unknown column{'s' if len(unknown) > 1 else ''} {named}"
                       f"{hint}; valid columns: {', '.join(sorted(valid))}", EX_USAGE)
    return asked or list(default)
