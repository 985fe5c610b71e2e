"""The suite's kinds of test, and how a parallel run (pytest-xdist, as
./scripts/test runs it) keeps the ones that share something apart.

A test's kind is a marker (registered in pyproject.toml): a module marks
itself (`pytestmark`), and a test that uses a fixture of one kind is marked
here, so that `-m "not cluster"` and the like select by what a test needs.

Under `--dist loadgroup` the tests of a kind that shares one thing run one
after another on one worker, while the other workers take the rest:
differential tests share the reference RabbitMQ (a policy, a user or the
consumer timeout set there for one test is the whole broker's), a module's
Spark tests its worker's SparkSession and what the module builds for them
(two modules may run at once, each on its own worker and session), cluster
tests the cores their etcd members and broker nodes need to keep their
leases (two clusters at once on two cores starve each other's heartbeats),
slow tests what they build once for a module (the wheel and the venv it is
installed into).
"""

from __future__ import annotations

import os

import pytest

# A test using one of these fixtures is of that kind.
KIND_OF_FIXTURE = {
    "rabbitmq_url": "differential",
    "rabbitmq_management_url": "differential",
    "rabbitmq_prometheus_url": "differential",
    "spark": "spark",
    "connect_server": "spark",
    "chromium": "browser",
    "etcd_cluster": "cluster",
    "cluster": "cluster",
}

# The kinds whose tests run one at a time, each kind (Spark: each module) on
# one worker, in the order a parallel run starts them: the longest chains
# first (the Spark modules, then the clusters, then the differential
# tests), so that none of them is the run's tail.
SERIAL_KINDS = ("spark", "cluster", "differential", "slow")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = getattr(item, "fixturenames", ())
        for kind in sorted({KIND_OF_FIXTURE[name] for name in used if name in KIND_OF_FIXTURE}):
            if item.get_closest_marker(kind) is None:
                item.add_marker(kind)
        serial = [kind for kind in SERIAL_KINDS if item.get_closest_marker(kind) is not None]
        if serial and item.get_closest_marker("xdist_group") is None:
            # A test of two such kinds joins the first one's group.
            group = serial[0] if serial[0] != "spark" else f"spark:{item.path.stem}"
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # xdist hands out the work in the order its workers collected it
        # (--no-loadscope-reorder): the groups first, longest first.
        items.sort(key=_start_order)


def _start_order(item: pytest.Item) -> int:
    group = item.get_closest_marker("xdist_group")
    name = group.args[0].split(":")[0] if group is not None and group.args else None
    return SERIAL_KINDS.index(name) if name in SERIAL_KINDS else len(SERIAL_KINDS)
