"""How the management API shapes what it lists, as RabbitMQ's
rabbit_mgmt_util does: `sort` (a dotted path, before the default order)
and `sort_reverse`; `page`, `page_size`, `name` and `use_regex` for the
listings RabbitMQ pages (queues, exchanges, vhosts, connections,
channels); `columns` (dotted paths) for every answer.

Pure functions of the query's values and the items as JSON-ready dicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# rabbit_mgmt_util: ?DEFAULT_PAGE_SIZE and ?MAX_PAGE_SIZE.
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
# The order RabbitMQ's paged listings keep when no `sort` is asked.
DEFAULT_SORT = ("vhost", "name")
_ERLANG_INTEGER = re.compile(r"[+-]?[0-9]+")


class ListingError(Exception):
    """A 400 answer: RabbitMQ's `error` and `reason`."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason


@dataclass(frozen=True)
class Page:
    number: int
    size: int
    name: str | None
    use_regex: bool


def _integer(text: str | None) -> int | None:
    if text is None:
        return None
    if not _ERLANG_INTEGER.fullmatch(text):  # list_to_integer's badarg
        raise ListingError("bad_request", "Pagination parameters are invalid")
    return int(text)


def page_asked(query: Mapping[str, str]) -> Page | None:
    """rabbit_mgmt_util:pagination_params/1: None without `page`."""
    number, size = _integer(query.get("page")), _integer(query.get("page_size"))
    if number is None:
        return None
    if number > 0 and (size is None or 0 < size <= MAX_PAGE_SIZE):
        return Page(number, DEFAULT_PAGE_SIZE if size is None else size,
                    query.get("name") or None, query.get("use_regex") == "true")
    shown = "undefined" if size is None else size
    raise ListingError("invalid_pagination_parameters",
                       f"Invalid pagination parameters: page number {number}, page size {shown}")


def _dotted(item: Any, path: str) -> Any:
    """get_dotted_value/2: what is missing is 0 (before everything else)."""
    for key in filter(None, path.split(".")):
        if not isinstance(item, dict) or key not in item:
            return 0
        item = item[key]
    return item


def _erlang_order(value: Any) -> tuple:
    """A key that orders values as Erlang compares terms: numbers, then
    atoms (true, false, null), then maps, then lists, then binaries."""
    if isinstance(value, bool) or value is None:
        return (1, "null" if value is None else str(value).lower())
    if isinstance(value, (int, float)):
        return (0, value)
    if isinstance(value, dict):  # maps: by size, then keys, then values in key order
        keys = sorted(value, key=_erlang_order)
        return (2, len(value), tuple(_erlang_order(key) for key in keys),
                tuple(_erlang_order(value[key]) for key in keys))
    if isinstance(value, list):
        return (3, tuple(_erlang_order(element) for element in value))
    return (4, str(value).encode("utf-8", "surrogateescape"))


def sorted_items(items: list[dict], sort: str | None, reverse: bool,
                 default: Sequence[str]) -> list[dict]:
    """sort_list/4: by `sort` first, then the default order; an empty
    `sort` leaves the list as it is."""
    if sort == "":
        return items
    keys = ([sort] if sort else []) + list(default)
    if keys:
        items = sorted(items, key=lambda item: [_erlang_order(_dotted(item, key))
                                                for key in keys])
    return items[::-1] if reverse else items


def paged(items: list[dict], page: Page) -> dict:
    """filter_and_paginate/2: the `name` filter (a substring, or a regular
    expression with use_regex; either ignoring case), then the page."""
    kept = items
    if page.name:
        if page.use_regex:
            try:
                pattern = re.compile(page.name, re.IGNORECASE)
            except re.error:
                raise ListingError("bad_request", "Pagination parameters are invalid") from None
            kept = [item for item in items
                    if isinstance(item.get("name"), str) and pattern.search(item["name"])]
        else:
            wanted = page.name.lower()
            kept = [item for item in items
                    if isinstance(item.get("name"), str) and wanted in item["name"].lower()]
    start = (page.number - 1) * page.size
    if start > len(kept):
        raise ListingError("page_out_of_range",
                           f"Page out of range, page: {page.number} page size: {page.size}, "
                           f"len: {len(kept)}")
    shown = kept[start:start + page.size]
    return {"total_count": len(items), "item_count": len(shown),
            "filtered_count": len(kept), "page": page.number, "page_size": page.size,
            "page_count": (len(kept) + page.size - 1) // page.size, "items": shown}


def columns_asked(query: Mapping[str, str]) -> list[list[str]] | None:
    """columns/1: each comma-separated column as its dotted path."""
    text = query.get("columns")
    if text is None:
        return None
    return [[part for part in column.split(".") if part]
            for column in text.split(",") if column.strip(".")]


def with_columns(value: Any, columns: list[list[str]] | None) -> Any:
    """extract_column_items/2 on an answer (an object, or a list of them):
    an object keeps the keys a column names, each narrowed by the rest of
    its paths.  An answer's object left with no key is `[]`, as RabbitMQ
    encodes an empty property list."""
    if isinstance(value, list):
        return [with_columns(element, columns) for element in value]
    narrowed = _narrowed(value, columns)
    return [] if narrowed == {} else narrowed


def _narrowed(value: Any, columns: list[list[str]] | None) -> Any:
    if columns is None:
        return value
    if isinstance(value, list):
        return [_narrowed(element, columns) for element in value]
    if not isinstance(value, dict):
        return value
    kept = {}
    for key, inner in value.items():
        deeper = [path[1:] for path in columns if path[0] == key]
        if not deeper:
            continue
        kept[key] = _narrowed(inner, None if [] in deeper else deeper)
    return kept
