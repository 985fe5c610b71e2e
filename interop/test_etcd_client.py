"""The etcd client against three real etcd 3.4 members (Debian's etcd-server)
through their v3 JSON gateway: every call clustering uses, and what happens
when members die or stop."""

from __future__ import annotations

import asyncio

import pytest

from amqp_server.cluster.etcd import (
    Compare,
    EtcdClient,
    EtcdError,
    LeaderKey,
    delete_op,
    put_op,
    range_op,
)

pytestmark = pytest.mark.cluster


def first(cluster, member):
    """The cluster's endpoints with `member`'s first: where requests go first."""
    return [member.client_url] + [url for url in cluster.endpoints if url != member.client_url]


async def test_put_get_and_txn_through_the_gateway(etcd_cluster):
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        revision = await etcd.put("/t/k\u00e9y", b"\x00bytes\xff")
        found = await etcd.get("/t/k\u00e9y")
        assert [(kv.key, kv.value) for kv in found.kvs] == [("/t/k\u00e9y", b"\x00bytes\xff")]
        assert found.kvs[0].create_revision == found.kvs[0].mod_revision == revision

        swapped = await etcd.txn([Compare.mod_revision("/t/k\u00e9y", revision)],
                                 [put_op("/t/k\u00e9y", "second"), range_op("/t/k\u00e9y")])
        assert swapped.succeeded
        assert swapped.responses[0] is None
        assert [kv.value for kv in swapped.responses[1]] == [b"second"]

        # The same compare again: the key moved on, so the failure branch runs.
        refused = await etcd.txn([Compare.mod_revision("/t/k\u00e9y", revision)],
                                 [put_op("/t/k\u00e9y", "third")], [range_op("/t/k\u00e9y")])
        assert not refused.succeeded
        assert [kv.value for kv in refused.responses[0]] == [b"second"]

        created = await etcd.txn([Compare.create_revision("/t/new", 0)],
                                 [put_op("/t/new", "x")])
        assert created.succeeded
        assert (await etcd.get_one("/t/new")).value == b"x"
        assert await etcd.get_one("/t/absent") is None


async def test_prefix_ranges_and_deletes(etcd_cluster):
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        for name in ("a", "b", "c"):
            await etcd.put(f"/p/{name}", name)
        await etcd.put("/p0", "outside")
        found = await etcd.get("/p/", prefix=True)
        assert [kv.key for kv in found.kvs] == ["/p/a", "/p/b", "/p/c"]
        assert found.count == 3
        assert await etcd.delete("/p/", prefix=True) == 3
        assert (await etcd.get("/p/", prefix=True)).kvs == []
        result = await etcd.txn([], [delete_op("/p0")])
        assert result.responses == [1]


async def test_lease_grant_keepalive_and_revoke(etcd_cluster):
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        lease, ttl = await etcd.grant(10)
        assert ttl == 10
        await etcd.put("/l/on-lease", "x", lease=lease)
        assert await etcd.keepalive(lease) == 10
        assert (await etcd.get_one("/l/on-lease")).lease == lease

        assert await etcd.revoke(lease) is True
        assert await etcd.get_one("/l/on-lease") is None
        assert await etcd.keepalive(lease) == 0
        assert await etcd.revoke(lease) is False


async def test_a_short_ttl_is_raised_to_etcds_minimum(etcd_cluster):
    # 1.5 election timeouts (2500 ms) rounded up to whole seconds.
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        _, ttl = await etcd.grant(2)
        assert ttl == 4


async def test_watch_reports_puts_and_deletes_in_order(etcd_cluster):
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        start = (await etcd.get("/w/")).revision + 1
        await etcd.put("/w/a", "1")
        await etcd.put("/w/a", "2")
        await etcd.delete("/w/a")
        seen = []
        stream = etcd.watch("/w/", prefix=True, start_revision=start)
        try:
            async with asyncio.timeout(10):
                async for events in stream:
                    seen += [(e.type, e.kv.key, e.kv.value) for e in events]
                    if len(seen) >= 3:
                        break
        finally:
            await stream.aclose()
        assert seen == [("PUT", "/w/a", b"1"), ("PUT", "/w/a", b"2"), ("DELETE", "/w/a", b"")]


async def test_a_watch_batch_longer_than_a_read_line(etcd_cluster):
    # 300 kB of value is 400 kB of base64 on one line of the stream.
    big = bytes(range(256)) * 1200
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        start = (await etcd.get("/big")).revision + 1
        await etcd.put("/big", big)
        events = await etcd.watch_once("/big", start_revision=start, timeout=10)
        assert [e.kv.value for e in events] == [big]


async def test_a_watch_resumes_on_another_member_without_missing_a_change(etcd_cluster):
    served_by = etcd_cluster.raft_follower()
    async with EtcdClient(first(etcd_cluster, served_by)) as etcd:
        start = (await etcd.get("/r/")).revision + 1
        stream = etcd.watch("/r/", prefix=True, start_revision=start)
        seen: list[bytes] = []

        async def writer():
            async with EtcdClient(etcd_cluster.endpoints) as other:
                await other.put("/r/k", "before")
                await asyncio.sleep(0.5)
                served_by.kill()
                for number in range(3):
                    await other.put("/r/k", f"after {number}")

        writing = asyncio.ensure_future(writer())
        try:
            async with asyncio.timeout(20):
                async for events in stream:
                    seen += [e.kv.value for e in events]
                    if len(seen) >= 4:
                        break
        finally:
            await stream.aclose()
            await writing
        assert seen == [b"before", b"after 0", b"after 1", b"after 2"]
        assert etcd.endpoint != served_by.client_url


async def test_the_election_leader_and_resign_of_the_gateway(etcd_cluster):
    """The election calls the leadership makes: who leads (the oldest key
    under the election's name, as etcd's election service keeps its
    campaigns' keys) and resigning that key."""
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        first, _ = await etcd.grant(30)
        second, _ = await etcd.grant(30)
        assert await etcd.election_leader("/e") is None
        await etcd.put(f"/e/{first:x}", "one", lease=first)
        await etcd.put(f"/e/{second:x}", "two", lease=second)
        leading = await etcd.election_leader("/e")
        assert (leading.key, leading.value, leading.lease) == (f"/e/{first:x}", b"one", first)
        await etcd.election_resign(LeaderKey("/e", leading.key, leading.create_revision, first))
        assert (await etcd.election_leader("/e")).value == b"two"
        assert await etcd.get_one(leading.key) is None


async def test_requests_go_to_another_member_after_sigkill(etcd_cluster):
    dead = etcd_cluster.raft_follower()
    async with EtcdClient(first(etcd_cluster, dead)) as etcd:
        await etcd.put("/f/k", "v")
        dead.kill()
        assert (await etcd.get_one("/f/k")).value == b"v"
        assert etcd.endpoint != dead.client_url
    # A write to a member that refuses the connection was never sent: it
    # goes to the next member too.
    async with EtcdClient(first(etcd_cluster, dead)) as etcd:
        await etcd.put("/f/k", "w")
        assert (await etcd.get_one("/f/k")).value == b"w"


async def test_a_stopped_member_costs_one_attempt_and_an_unsure_write_is_not_repeated(
        etcd_cluster):
    stopped = etcd_cluster.raft_follower()
    stopped.stop()
    try:
        async with EtcdClient(first(etcd_cluster, stopped), attempt_timeout=0.5) as etcd:
            assert await etcd.get_one("/s/k") is None
            assert etcd.endpoint != stopped.client_url
        # The stopped member takes the connection and the request, and may
        # apply it when it runs again: it is not sent anywhere else.
        async with EtcdClient(first(etcd_cluster, stopped), timeout=2,
                              attempt_timeout=0.5) as etcd:
            with pytest.raises(EtcdError) as caught:
                await etcd.put("/s/k", "w")
        assert caught.value.outcome_unknown
        assert str(caught.value) == (f"etcd at {stopped.client_url} did not answer a put (no "
                                     f"answer within 2.0 s): it may or may not have been applied")
    finally:
        stopped.cont()


async def test_no_member_reachable_is_one_line(etcd_cluster):
    for member in etcd_cluster.members:
        member.kill()
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        with pytest.raises(EtcdError) as caught:
            await etcd.get("/k")
    where = ", ".join(etcd_cluster.endpoints)
    assert str(caught.value) == f"etcd at {where} is not reachable: connection refused"
    assert caught.value.unreachable
    async with EtcdClient(etcd_cluster.endpoints[0]) as etcd:
        with pytest.raises(EtcdError) as caught:
            await etcd.put("/k", "v")
    assert str(caught.value) == (f"etcd at {etcd_cluster.endpoints[0]} is not reachable: "
                                 f"connection refused")


async def test_a_killed_member_restarts_with_its_data(etcd_cluster):
    async with EtcdClient(etcd_cluster.endpoints) as etcd:
        await etcd.put("/d/k", "kept")
        member = etcd_cluster.raft_follower()
        member.kill()
        await etcd.put("/d/k2", "while down")
        member.restart()
        etcd_cluster.wait_healthy([member])
    async with EtcdClient([member.client_url]) as only:
        assert (await only.get_one("/d/k")).value == b"kept"
        assert (await only.get_one("/d/k2")).value == b"while down"
