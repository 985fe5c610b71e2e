"""bench/cluster.py's rows on this broker's side, at a tiny scale, on three
real etcd members and three real nodes: each runs end to end, and a run
whose queue lacks a confirmed message is reported as failed.  No number is
asserted (python -m bench.cluster measures them); every wait is bounded in
the bench itself."""

from __future__ import annotations

import random

import pytest

from bench import cluster as bench
from interop.etcd_cluster import etcd_binary

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(etcd_binary() is None,
                                 reason="etcd is not installed (Debian's etcd-server)")]


@pytest.fixture(scope="module")
def ours():
    with bench.OurCluster() as side:
        yield side


def test_every_row_runs_end_to_end_and_makes_a_table(ours):
    raw = {"ours": {
        "quorum-publish": [bench.quorum_publish(ours, 600, on_leader=False)],
        "quorum-publish-leader": [bench.quorum_publish(ours, 600, on_leader=True)],
        "quorum-dead-letter": [bench.quorum_dead_letter(ours, 300)],
        "failover": [bench.failover(ours, 1, random.Random(0))],
    }}
    for row, runs in raw["ours"].items():
        assert "failed" not in runs[0], (row, runs[0])
    assert raw["ours"]["quorum-publish"][0]["confirmed"] == 600
    assert raw["ours"]["quorum-dead-letter"][0]["dead_letters"] == 300
    kill = raw["ours"]["failover"][0]["kills"][0]
    assert "seconds" in kill and kill["killed"] != kill["publisher_on"]
    summary = bench.summarize(raw)
    assert summary["ours"]["failover"]["kills"] == 1
    assert "| quorum-publish: " in bench.table(summary)


def test_a_run_whose_queue_lacks_a_confirmed_message_is_failed(ours, monkeypatch):
    depth = bench._depth

    async def one_short(url: str, queue: str) -> int:
        return await depth(url, queue) - 1

    monkeypatch.setattr(bench, "_depth", one_short)
    result = bench._attempt(ours, "quorum-publish",
                            lambda side: bench.quorum_publish(side, 600, on_leader=False))
    assert result == {"failed": "600 publishes confirmed, the queue holds 599"}
