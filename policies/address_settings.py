"""`[address-settings."pattern"]` tables from the broker's config: ActiveMQ
Artemis's address settings, matched against queue names.

Patterns use Artemis's wildcard syntax: `.` separates words, `*` is exactly
one word, `#` any number of words (none included).  As in Artemis, every
matching table applies and the more specific one wins key by key
(HierarchicalObjectRepository merges the matches): a pattern without
wildcards beats one with `*`, which beats one with `#`; among equals the
longer pattern wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .model import PolicyError, erlang_term
from .registry import BY_KEY

# Keys a table may carry: every queue setting (not the queue type, which
# only a declaration chooses).
ALLOWED = tuple(key for key, setting in BY_KEY.items() if setting.target == "queue")


def wildcard_match(pattern: str, name: str) -> bool:
    return _match(tuple(pattern.split(".")), tuple(name.split(".")))


@lru_cache(maxsize=4096)
def _match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == "*" or head == words[0]) and _match(rest, words[1:])


def specificity(pattern: str) -> tuple:
    """Sort key, most specific first."""
    words = pattern.split(".")
    return ("#" in words, "*" in words, -len(pattern), pattern)


@dataclass(frozen=True)
class AddressSettings:
    tables: tuple[tuple[str, dict], ...] = ()  # (pattern, settings), most specific first

    def match(self, name: str) -> dict:
        """The merged settings for a queue called `name`."""
        merged: dict = {}
        for pattern, table in self.tables:
            if wildcard_match(pattern, name):
                for key, value in table.items():
                    merged.setdefault(key, value)
        return merged

    def __bool__(self) -> bool:
        return bool(self.tables)


def parse(raw: dict) -> AddressSettings:
    """Validate the TOML tables; PolicyError says what is wrong and where."""
    if not isinstance(raw, dict):
        raise PolicyError("address-settings must be a table of tables")
    tables = []
    for pattern, table in raw.items():
        where = f'[address-settings."{pattern}"]'
        if not isinstance(table, dict):
            raise PolicyError(f"{where} must be a table")
        unknown = sorted(key for key in table if key not in ALLOWED)
        if unknown:
            raise PolicyError(f"{where}: unknown settings {', '.join(unknown)}; "
                              f"known: {', '.join(ALLOWED)}")
        for key, value in table.items():
            setting = BY_KEY[key]
            if not setting.policy_valid(value):
                raise PolicyError(f"{where}: {key} = {erlang_term(value)} "
                                  f"{setting.policy_error}")
        tables.append((pattern, dict(table)))
    tables.sort(key=lambda item: specificity(item[0]))
    return AddressSettings(tuple(tables))
