"""Contenders for a group's leadership as real processes (etcd_contender.py),
killed and stopped for real, against three real etcd members.  No timing is
asserted: each wait is bounded generously, and the times are measured by
bench/etcd_failover.py."""

from __future__ import annotations

import contextlib
import time

import pytest

from .etcd_contender import ContenderProcess

pytestmark = pytest.mark.cluster

# Longer than etcd's smallest lease TTL with the harness's flags (4 s), plus
# a loaded machine's delays.
WAIT = 30.0


@pytest.fixture
def contenders(etcd_cluster):
    """Start contenders with `start(node, ...)`; all killed afterwards."""
    started: list[ContenderProcess] = []

    def start(node: str, **options) -> ContenderProcess:
        started.append(ContenderProcess(etcd_cluster.endpoints_arg, "c", "vhosts", node,
                                        **options))
        return started[-1]

    yield start
    for contender in started:
        with contextlib.suppress(OSError):
            contender.close()


def lead_with_b_in_sync(start, **options):
    """a leads with b in its in-sync set and b queued behind it."""
    a = start("a", **options)
    a.wait("leader", WAIT)
    b = start("b", **options)
    b.wait("waiting", WAIT, reason="not in the in-sync set ['a']")
    a.send("write-isr a,b")
    assert a.wait("isr", WAIT)["ok"] is True
    b.wait("waiting", WAIT, reason="a leads")
    return a, b


def test_a_killed_leader_is_replaced_when_its_lease_runs_out(contenders):
    a, b = lead_with_b_in_sync(contenders)
    killed = a.kill()
    took_over = b.wait("leader", WAIT, after=killed)
    assert not b.seen("link-reset")
    assert took_over["t"] > killed


def test_a_stopped_leader_is_replaced_and_learns_it_lost_when_continued(contenders):
    a, b = lead_with_b_in_sync(contenders)
    a.stop()
    stopped = time.monotonic()
    try:
        b.wait("leader", WAIT, after=stopped)
    finally:
        a.cont()
    lost = a.wait("lost", WAIT)
    assert "could not be renewed before it ran out" in lost["reason"] \
        or "expired or was revoked" in lost["reason"]
    # Its fenced write, with the term it had, is refused by etcd.
    sent = time.monotonic()
    a.send("write-isr a,b")
    assert a.wait("isr", WAIT, after=sent)["ok"] is False
    # It campaigns again, behind the new leader.
    a.wait("waiting", WAIT, after=sent, reason="b leads")
    assert not a.seen("leader", after=stopped)


def test_a_follower_that_sees_the_link_reset_deposes_the_killed_leader(contenders):
    a, b = lead_with_b_in_sync(contenders, revoke_on_link_reset=True)
    killed = a.kill()
    b.wait("link-reset", WAIT, after=killed, leader="a")
    b.wait("leader", WAIT, after=killed)
    assert b.wait("revoked", WAIT, after=killed)["ok"] is True


def test_only_in_sync_contenders_campaign(contenders, etcd_cluster):
    a = contenders("a")
    a.wait("leader", WAIT)
    b = contenders("b")
    c = contenders("c")
    for other in (b, c):
        other.wait("waiting", WAIT, reason="not in the in-sync set ['a']")
    a.send("write-isr a,b")
    assert a.wait("isr", WAIT)["ok"] is True
    b.wait("waiting", WAIT, reason="a leads")
    killed = a.kill()
    b.wait("leader", WAIT, after=killed)
    # c saw the set change and a go, and never stood.
    c.wait("waiting", WAIT, reason="not in the in-sync set ['a', 'b']")
    assert not c.seen("leader")
