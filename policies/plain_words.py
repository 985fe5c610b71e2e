"""Messages for people, not for RabbitMQ's clients: a value shown as it was
typed, and a "did you mean" for a near miss.  The CLI and the config file
speak these; AMQP reply texts and the HTTP API keep RabbitMQ's wording."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable


def shown(value: object) -> str:
    """A JSON or TOML value as the user wrote it: "soon", 5, true, [1,2]."""
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def quoted(words: Iterable[str]) -> str:
    return ", ".join(f'"{word}"' for word in words)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` most likely misspells, or None when none is close."""
    choices = list(choices)
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not found:
        # "TTL" for "ttl", "--Port" for "--port"
        lowered = {choice.lower(): choice for choice in choices}
        found = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
        return lowered[found[0]] if found else None
    return found[0]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'; did you mean "x"?' for a near miss, else ''."""
    match = closest(word, choices)
    return f'; did you mean "{match}"?' if match is not None and match != word else ""
