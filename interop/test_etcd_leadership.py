"""Sessions, leadership and membership in one process, against three real
etcd members: the rules etcd enforces for a replication group."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time

import pytest

from amqp_server.cluster import (
    EtcdClient,
    Leadership,
    NodeNameInUse,
    NotLeader,
    Session,
    members,
    register,
)
from amqp_server.cluster.leadership import group_prefix

pytestmark = pytest.mark.cluster


@contextlib.asynccontextmanager
async def node(cluster, name, group="vhosts", **options):
    """A node's client, session and leadership of `group`."""
    async with EtcdClient(cluster.endpoints) as client:
        session = Session(client, 4)
        await session.start()
        try:
            yield Leadership(session, "c", group, name, addresses={"amqp": f"{name}:5672"},
                             **options)
        finally:
            await session.close()


async def campaign(leadership):
    """Start a campaign; (task, the reasons it reported for waiting)."""
    reasons: list[str] = []
    return asyncio.ensure_future(leadership.campaign(reasons.append)), reasons


async def until(condition, seconds=15.0):
    """Poll `condition()`, plain or async (bounded); whether it became true."""
    for _ in range(int(seconds / 0.05)):
        holds = condition()
        if inspect.isawaitable(holds):
            holds = await holds
        if holds:
            return True
        await asyncio.sleep(0.05)
    return False


async def election_keys(leadership):
    found = await leadership.client.get(leadership.election + "/", prefix=True)
    return [json.loads(kv.value)["node"] for kv in found.kvs]


async def _keys_are(leadership, nodes):
    return sorted(await election_keys(leadership)) == nodes


async def test_the_first_leader_makes_itself_the_in_sync_set(etcd_cluster):
    async with node(etcd_cluster, "a") as a:
        assert await a.read_isr() is None
        term = await asyncio.wait_for(a.campaign(), 15)
        assert a.leads()
        assert (await a.read_isr()).nodes == ("a",)
        assert term.lease == a.session.lease
        # etcd's own election service sees the same leader.
        leader = await a.leader()
        assert (leader.node, leader.addresses, leader.key) == ("a", {"amqp": "a:5672"}, term.key)


async def test_the_group_name_is_one_key_segment(etcd_cluster):
    async with node(etcd_cluster, "a", group="/") as a:
        await asyncio.wait_for(a.campaign(), 15)
        assert a.isr_key == "/c/groups/%2F/isr" == group_prefix("c", "/") + "isr"
        assert (await a.client.get_one(a.isr_key)) is not None


async def test_a_node_not_in_sync_does_not_campaign(etcd_cluster):
    async with node(etcd_cluster, "a") as a, node(etcd_cluster, "b") as b:
        await asyncio.wait_for(a.campaign(), 15)
        waiting, reasons = await campaign(b)
        try:
            assert await until(lambda: bool(reasons))
            assert reasons == ["not in the in-sync set ['a']"]
            assert await election_keys(a) == ["a"]
            # Once in the set it queues behind the leader.
            assert await a.write_isr(["a", "b"])
            assert await until(lambda: reasons[-1] == "a leads")
            assert await _keys_are(a, ["a", "b"])
            assert not waiting.done()
        finally:
            waiting.cancel()


async def test_a_queued_node_dropped_from_the_set_withdraws(etcd_cluster):
    async with (node(etcd_cluster, "a") as a, node(etcd_cluster, "b") as b,
                node(etcd_cluster, "c") as c):
        await asyncio.wait_for(a.campaign(), 15)
        assert await a.write_isr(["a", "b", "c"])
        waiting_b, _ = await campaign(b)
        waiting_c, reasons_c = await campaign(c)
        try:
            assert await until(lambda: _keys_are(a, ["a", "b", "c"]))
            assert await a.write_isr(["a", "b"])
            assert await until(lambda: _keys_are(a, ["a", "b"]))
            assert reasons_c[-1] == "not in the in-sync set ['a', 'b']"
            await a.resign()
            assert await asyncio.wait_for(waiting_b, 15)
            assert b.leads() and not waiting_c.done()
        finally:
            waiting_b.cancel()
            waiting_c.cancel()


async def test_a_fenced_write_fails_once_leadership_is_lost(etcd_cluster):
    async with node(etcd_cluster, "a") as a, node(etcd_cluster, "b") as b:
        term = await asyncio.wait_for(a.campaign(), 15)
        assert await a.write_isr(["a", "b"])
        lost: list[str] = []
        a.on_lost(lost.append)
        # The lease goes (as if it ran out): etcd deletes the leader key.
        assert await b.client.revoke(a.session.lease)
        assert await until(lambda: bool(lost))
        assert not a.leads()
        assert await a.write_isr(["a", "b"], term=term) is False
        assert await a.write_members(["a", "b", "c"], term=term) is False
        with pytest.raises(NotLeader):
            await a.write_isr(["a", "b"])
        assert (await b.read_isr()).nodes == ("a", "b")
        assert await b.read_members() is None


async def test_the_in_sync_set_never_shrinks_below_min_in_sync(etcd_cluster):
    async with node(etcd_cluster, "a", min_in_sync=2) as a:
        await asyncio.wait_for(a.campaign(), 15)
        assert await a.write_isr(["a", "b", "c"])
        assert await a.write_isr(["a", "b"])
        with pytest.raises(ValueError, match=r"cannot shrink below min-in-sync \(2\)"):
            await a.write_isr(["a"])
        with pytest.raises(ValueError, match="must hold its leader 'a'"):
            await a.write_isr(["b", "c"])
        assert (await a.read_isr()).nodes == ("a", "b")
        assert await a.write_members(["a", "b", "c"])
        assert (await a.read_members()).nodes == ("a", "b", "c")


async def test_an_in_sync_follower_deposes_the_leader_and_takes_over(etcd_cluster):
    async with node(etcd_cluster, "a") as a, node(etcd_cluster, "b") as b:
        await asyncio.wait_for(a.campaign(), 15)
        assert await a.write_isr(["a", "b"])
        lost: list[str] = []
        a.on_lost(lost.append)
        waiting, _ = await campaign(b)
        try:
            assert await until(lambda: _keys_are(a, ["a", "b"]))
            leader = await b.leader()
            assert await b.revoke_leader(leader)
            term = await asyncio.wait_for(waiting, 15)
            assert b.leads() and term.lease == b.session.lease
            assert await until(lambda: not a.leads())
            assert lost
            # Its lease was revoked too: its session learns at the next renewal.
            assert await until(lambda: not a.session.alive())
            # It deposed that leader; it does not depose itself or a newer one.
            assert await b.revoke_leader(leader) is False
            assert await b.revoke_leader() is False
        finally:
            waiting.cancel()


async def test_a_follower_out_of_sync_or_not_campaigning_cannot_depose(etcd_cluster):
    async with node(etcd_cluster, "a") as a, node(etcd_cluster, "b") as b:
        await asyncio.wait_for(a.campaign(), 15)
        # Not in the in-sync set.
        assert await b.revoke_leader() is False
        # In the set but not campaigning: it could not take over.
        assert await a.write_isr(["a", "b"])
        assert await b.revoke_leader() is False
        assert a.leads() and await a.leader() is not None


async def test_observe_follows_the_leader_and_says_when_there_is_none(etcd_cluster):
    async with node(etcd_cluster, "a") as a, node(etcd_cluster, "b") as b:
        seen: list[str | None] = []

        async def observe():
            async for leader in b.observe():
                seen.append(leader.node if leader else None)
                if len(seen) == 3:
                    return

        observing = asyncio.ensure_future(observe())
        assert await until(lambda: seen == [None])
        await asyncio.wait_for(a.campaign(), 15)
        assert await until(lambda: seen == [None, "a"])
        await a.resign()
        await asyncio.wait_for(observing, 15)
        assert seen == [None, "a", None]


async def test_a_session_that_cannot_renew_is_in_doubt_before_its_lease_runs_out(etcd_cluster):
    # Every etcd member stopped: no renewal is answered.  Past its deadline
    # the session is in doubt (alive() is False: no leader may confirm on
    # it), not lost: etcd drops no lease while it has no raft leader, and
    # once the members run again the next renewal finds the lease standing.
    async with EtcdClient(etcd_cluster.endpoints, attempt_timeout=0.5) as client:
        session = Session(client, 4)
        await session.start()
        for member in etcd_cluster.members:
            member.stop()
        try:
            assert await until(lambda: not session.alive(), seconds=15)
            assert time.monotonic() < session.deadline  # before the lease could run out
            assert session.reason is None and not session.lost.is_set()
        finally:
            for member in etcd_cluster.members:
                member.cont()
        assert await until(session.alive, seconds=20)
        assert session.reason is None
        await session.close()


async def test_a_session_is_lost_when_etcd_says_its_lease_is_gone(etcd_cluster):
    async with EtcdClient(etcd_cluster.endpoints) as client:
        session = Session(client, 4)
        await session.start()
        lost: list[str] = []
        session.on_lost(lost.append)
        assert await client.revoke(session.lease)
        await asyncio.wait_for(session.lost.wait(), 15)
        assert not session.alive()
        assert lost == [f"lease {session.lease:x} expired or was revoked in etcd"]


async def test_a_session_outlives_the_death_of_etcds_raft_leader(etcd_cluster):
    # etcd answers no renewal for about one election timeout (2.5 s) and
    # then some: a member that took a renewal meanwhile may sit on it, so
    # the renewal must go again rather than wait for that member.
    async with EtcdClient(etcd_cluster.endpoints) as client:
        session = Session(client, 8)
        await session.start()
        raft_leader = next(m for m in etcd_cluster.members if m.is_raft_leader())
        killed = time.monotonic()
        raft_leader.kill()
        assert await until(lambda: session.deadline > killed + session.ttl, seconds=20)
        assert session.alive() and session.reason is None
        await session.close()


async def test_members_register_their_addresses_on_their_lease(etcd_cluster):
    async with EtcdClient(etcd_cluster.endpoints) as client:
        first = Session(client, 4)
        await first.start()
        await register(first, "c", "n1", {"amqp": "h:5672", "management": "h:15672",
                                          "cluster": "h:25672"})
        up = await members(client, "c")
        assert list(up) == ["n1"]
        assert up["n1"].addresses == {"amqp": "h:5672", "management": "h:15672",
                                      "cluster": "h:25672"}
        assert up["n1"].lease == first.lease
        # Another live broker cannot take the name (after waiting out the
        # earlier lease's TTL, as a restarted node would).
        second = Session(client, 4)
        await second.start()
        with pytest.raises(NodeNameInUse, match="node name 'n1' is in use by another running"):
            await register(second, "c", "n1", {"amqp": "other:5672"})
        # When the first one's lease goes, so does its key, and the name is free.
        await first.close()
        assert await members(client, "c") == {}
        await register(second, "c", "n1", {"amqp": "other:5672"})
        assert (await members(client, "c"))["n1"].lease == second.lease
        await second.close()
