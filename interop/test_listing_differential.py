"""How the management API shapes a listing (management/listing.py), against
this broker and a real RabbitMQ side by side: pages, the name filter,
sorting by a dotted numeric column, `columns` on a listing and on one
object, and the 400 answers of bad pagination.  Three queues of this run
on each broker (their x-max-length differs, set at once, unlike message
counts, which RabbitMQ's statistics report seconds later), deleted after.

Compared in full except `total_count`, which counts every queue a broker
holds (other tests' too)."""

from __future__ import annotations

import uuid

import pytest

from .management_api import call

LENGTHS = {"a": 2, "b": 10, "c": 1}  # sorted as numbers: c, a, b; as text: c, b, a


@pytest.fixture
def run(broker, rabbitmq_management_url):
    """(the two management URLs, this run's queue name prefix)."""
    prefix = f"listing-{uuid.uuid4().hex[:8]}"
    bases = {"ours": broker.management_url, "theirs": rabbitmq_management_url}
    for base in bases.values():
        for suffix, length in LENGTHS.items():
            assert call(base, "PUT", f"/api/queues/%2F/{prefix}-{suffix}", {
                "durable": False, "arguments": {"x-max-length": length}})[0] == 201
    yield bases, prefix
    for base in bases.values():
        for suffix in LENGTHS:
            call(base, "DELETE", f"/api/queues/%2F/{prefix}-{suffix}")


def both(run, path: str) -> tuple:
    bases, prefix = run
    answers = []
    for side in ("theirs", "ours"):
        status, body = call(bases[side], "GET", path.format(prefix=prefix))
        if isinstance(body, dict):
            body.pop("total_count", None)
        answers.append((status, body))
    return tuple(answers)


@pytest.mark.parametrize("query", [
    "page=1&page_size=2&name={prefix}&columns=name",
    "page=2&page_size=2&name={prefix}&columns=name",
    "page=1&name={prefix}&columns=name,arguments.x-max-length",
    "page=1&name={prefix}&sort=arguments.x-max-length&columns=name",
    "page=1&name={prefix}&sort=arguments.x-max-length&sort_reverse=true&columns=name",
    "page=1&name={prefix}-[ab]&use_regex=true&columns=name",
    "page=1&name={prefix}&sort=name&sort_reverse=true&columns=name,durable",
], ids=["first page", "second page", "nested column", "numeric dotted sort", "reversed",
        "regex", "by name reversed"])
def test_a_page_of_queues_alike(run, query):
    theirs, ours = both(run, "/api/queues/%2F?" + query)
    assert ours == theirs
    assert theirs[0] == 200 and theirs[1]["items"]


@pytest.mark.parametrize("query", [
    "page=0", "page=abc", "page_size=abc", "page=1&page_size=501", "page=1&page_size=0",
    "page=-1&page_size=5", "page=5&page_size=1&name={prefix}",
    "page=1&name=(&use_regex=true",
])
def test_bad_pagination_is_refused_alike(run, query):
    theirs, ours = both(run, "/api/queues?" + query)
    assert ours == theirs
    assert theirs[0] == 400


def test_columns_narrow_one_queue_alike(run):
    theirs, ours = both(run, "/api/queues/%2F/{prefix}-a?columns=name,consumer_details,"
                              "arguments.x-max-length")
    assert ours == theirs == (200, {"name": ours[1]["name"], "consumer_details": [],
                                    "arguments": {"x-max-length": 2}})


def test_columns_narrow_the_overview_to_the_same_keys(run):
    theirs, ours = both(run, "/api/overview?columns=object_totals.queues,no_such_key")
    assert ours[0] == theirs[0] == 200
    assert list(ours[1]) == list(theirs[1]) == ["object_totals"]
    assert list(ours[1]["object_totals"]) == ["queues"]


@pytest.mark.parametrize("path", [
    "/api/queues/%2F/{prefix}-a?columns=",
    "/api/queues/%2F/{prefix}-a?columns=no_such_key",
    "/api/queues/%2F?page=1&name={prefix}&sort=arguments&columns=name",
    "/api/queues/%2F?page=1&name={prefix}&sort=arguments..x-max-length&columns=name",
], ids=["empty columns", "unknown column", "sort by an object", "empty dotted segment"])
def test_the_edges_of_columns_and_sort_alike(run, path):
    theirs, ours = both(run, path)
    assert ours == theirs


def test_one_object_asked_with_a_page_keeps_every_key_alike(run):
    # rabbit_mgmt_util:maybe_pagination/3 narrows only a page's items.
    theirs, ours = both(run, "/api/queues/%2F/{prefix}-a?columns=name&page=1")
    assert ours[0] == theirs[0] == 200
    assert {"name", "arguments", "durable"} <= set(ours[1]) & set(theirs[1])
