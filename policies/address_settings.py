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
from typing import Any

from .model import PolicyError, unknown_keys_problem, value_problem
from .registry import BY_KEY

# Keys a table may carry: the settings table's `address` column.
ALLOWED = tuple(key for key, setting in BY_KEY.items() if setting.address)


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


def specificity(pattern: str) -> tuple[bool, bool, int, str]:
    """Sort key, most specific first."""
    words = pattern.split(".")
    return ("#" in words, "*" in words, -len(pattern), pattern)


@dataclass(frozen=True)
class AddressSettings:
    # (pattern, settings), most specific first
    tables: tuple[tuple[str, dict[str, Any]], ...] = ()

    def match(self, name: str) -> dict[str, Any]:
        """The merged settings for a queue called `name`."""
        merged: dict[str, Any] = {}
        for pattern, table in self.tables:
            if wildcard_match(pattern, name):
                for key, value in table.items():
                    merged.setdefault(key, value)
        return merged

    def __bool__(self) -> bool:
        return bool(self.tables)


def parse(raw: object) -> AddressSettings:
    """Validate the TOML tables; PolicyError says in plain words what is
    wrong and where (str() and `plain` alike: no RabbitMQ reads these)."""
    if not isinstance(raw, dict):
        raise PolicyError("address-settings must be a table of tables, such as "
                          '[address-settings."orders.#"]')
    tables = []
    for pattern, table in raw.items():
        where = f'[address-settings."{pattern}"]'
        if not isinstance(table, dict):
            raise PolicyError(f"{where} must be a table of settings, got {table!r}")
        unknown = [key for key in table if key not in ALLOWED]
        if unknown:
            raise PolicyError(f"{where}: {unknown_keys_problem(unknown, ALLOWED, 'setting')}")
        for key, value in table.items():
            problem = value_problem(key, value)
            if problem is not None:
                raise PolicyError(f"{where}: {problem}")
        tables.append((pattern, dict(table)))
    tables.sort(key=lambda item: specificity(item[0]))
    return AddressSettings(tuple(tables))
