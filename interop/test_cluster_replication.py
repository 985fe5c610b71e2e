"""The replication stream on its own: a leader broker ships what its stores
write over the cluster port to a follower's copy of its data directory,
confirms wait for the follower, and a broker booted from the copy holds
what the leader held.  (Who leads is etcd's business: the in-sync set is
given here; tests/test_cluster_*.py and interop/test_cluster_*.py drive
the whole cluster on a real etcd.)"""

from __future__ import annotations

import asyncio

import aio_pika
import pytest

from amqp_server.cluster.follower import Following
from amqp_server.cluster.handshake import tls_contexts
from amqp_server.wire.table import FieldTable

from .replication_pair import CLUSTER, SECRET, Leader, booted, follower, stop_pair, wait_for

pytestmark = pytest.mark.cluster


async def test_a_copy_booted_holds_every_confirmed_message_definition_and_policy(tmp_path):
    leader = Leader(tmp_path / "leader")
    await leader.start()
    replica, following = follower(tmp_path / "follower")
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        dlx = await channel.declare_exchange("dlx", aio_pika.ExchangeType.FANOUT, durable=True)
        dead = await channel.declare_queue("dead", durable=True)
        await dead.bind(dlx)
        work = await channel.declare_queue("work", durable=True,
                                           arguments={"x-dead-letter-exchange": "dlx"})
        for number in range(200):
            await channel.default_exchange.publish(
                aio_pika.Message(f"m{number}".encode(), message_id=str(number),
                                 delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key="work")
        message = await work.get()
        await message.reject(requeue=False)  # dead-lettered, x-death and all
        leader.broker.set_policy("/", "limits", "^work$", {"max-length": 1000})
        # A confirmed publish after the reject: everything before it is replicated.
        await channel.default_exchange.publish(
            aio_pika.Message(b"last", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="work")
        await connection.close()
    finally:
        following.stop()
        await task
        await leader.stop()
    replica.close()
    copy = booted(tmp_path / "follower")
    original = booted(tmp_path / "leader")
    try:
        for broker in (copy, original):
            host = broker.vhosts["/"]
            assert host.queues["work"].message_count == 200
            assert host.queues["dead"].message_count == 1
            assert host.queues["work"].arguments["x-dead-letter-exchange"] == "dlx"
            assert [p.name for p in broker.policies.in_vhost("/")] == ["limits"]
        copied = [entry.message.body for entry in copy.vhosts["/"].queues["work"].ready]
        kept = [entry.message.body for entry in original.vhosts["/"].queues["work"].ready]
        assert copied == kept
        dead_letter = copy.vhosts["/"].queues["dead"].ready[0].message
        assert dead_letter.properties.headers["x-death"][0]["reason"] == "rejected"
    finally:
        for broker in (copy, original):
            broker.store.close()
            broker.journal.close()
            broker.close_data_dir()


async def test_confirms_and_declare_oks_wait_for_an_in_sync_follower(tmp_path):
    leader = Leader(tmp_path / "leader")
    await leader.start()
    replica, following = follower(tmp_path / "follower")
    task = None
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        declare = asyncio.ensure_future(channel.declare_queue("q", durable=True))
        done, _ = await asyncio.wait([declare], timeout=1.0)
        assert not done, "declare-ok before the in-sync follower has the queue"
        task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
        await asyncio.wait_for(declare, 10)
        following.stop()
        await task
        publish = asyncio.ensure_future(channel.default_exchange.publish(
            aio_pika.Message(b"x", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="q"))
        done, _ = await asyncio.wait([publish], timeout=1.0)
        assert not done, "confirmed with the in-sync follower absent"
        following = Following(replica, "b", CLUSTER, SECRET)
        task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
        await asyncio.wait_for(publish, 10)
        await connection.close()
    finally:
        await stop_pair(leader, replica, following, task)


async def test_below_min_in_sync_publishers_are_held_until_a_follower_joins(tmp_path):
    leader = Leader(tmp_path / "leader", in_sync=("a",), min_in_sync=2)
    await leader.start(queues=("q",))
    replica, following = follower(tmp_path / "follower")
    task = None
    try:
        assert leader.broker.store_busy  # held: one copy is not enough
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        publish = asyncio.ensure_future(channel.default_exchange.publish(
            aio_pika.Message(b"x", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="q"))
        done, _ = await asyncio.wait([publish], timeout=1.0)
        assert not done, "confirmed on one copy"
        task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
        await asyncio.wait_for(publish, 10)
        assert leader.isr_writes == [("a", "b")]
        assert not leader.broker.store_busy
        await connection.close()
    finally:
        await stop_pair(leader, replica, following, task)


async def test_a_caught_up_follower_joins_the_in_sync_set(tmp_path):
    leader = Leader(tmp_path / "leader", in_sync=("a",), min_in_sync=1)
    await leader.start()
    replica, following = follower(tmp_path / "follower")
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    try:
        await wait_for(lambda: leader.isr_writes)
        assert leader.isr_writes[0] == ("a", "b")
        assert leader.shipper.in_sync == {"b"}
    finally:
        await stop_pair(leader, replica, following, task)


async def test_a_stranger_without_the_secret_gets_nothing(tmp_path):
    leader = Leader(tmp_path / "leader")
    await leader.start()
    replica, following = follower(tmp_path / "follower", secret=b"wrong")
    try:
        await asyncio.wait_for(following.follow("127.0.0.1", leader.cluster_port), 10)
        assert following.streaming is False
        assert leader.shipper.links == {}
        assert list((tmp_path / "follower" / "messages").glob("*.seg")) == []
        # Nor does a client that speaks something else.
        reader, writer = await asyncio.open_connection("127.0.0.1", leader.cluster_port)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    finally:
        await leader.stop()
        replica.close()


@pytest.mark.parametrize("kill_after", [0, 50])
async def test_a_follower_that_reconnects_resumes_or_copies_and_ends_identical(tmp_path,
                                                                             kill_after):
    leader = Leader(tmp_path / "leader")
    await leader.start()
    replica, following = follower(tmp_path / "follower")
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue("q", durable=True)
        for number in range(100):
            await channel.default_exchange.publish(
                aio_pika.Message(str(number).encode(),
                                 delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key="q")
            if number == kill_after:
                following.stop()
                await task
                following = Following(replica, "b", CLUSTER, SECRET)
                task = asyncio.ensure_future(following.follow("127.0.0.1",
                                                              leader.cluster_port))
        for _ in range(30):  # some acknowledged, so removal records are shipped too
            message = await queue.get()
            await message.ack()
        await channel.default_exchange.publish(
            aio_pika.Message(b"last", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="q")
        await connection.close()
    finally:
        following.stop()
        await task
        await leader.stop()
    replica.close()
    copy = booted(tmp_path / "follower")
    try:
        bodies = [entry.message.body for entry in copy.vhosts["/"].queues["q"].ready]
        assert bodies == [str(n).encode() for n in range(30, 100)] + [b"last"]
    finally:
        copy.store.close()
        copy.journal.close()
        copy.close_data_dir()


def _tls_files(tmp_path, name: str, ca) -> tuple[str, str]:
    cert = ca.issue_cert("127.0.0.1", name)
    certfile, keyfile = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    cert.cert_chain_pems[0].write_to_path(certfile)
    cert.private_key_pem.write_to_path(keyfile)
    return str(certfile), str(keyfile)


async def test_the_stream_runs_over_tls_when_the_cluster_port_has_a_certificate(tmp_path):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(cafile)
    server_tls, _ = tls_contexts(*_tls_files(tmp_path, "a", ca), str(cafile))
    _, client_tls = tls_contexts(*_tls_files(tmp_path, "b", ca), str(cafile))
    leader = Leader(tmp_path / "leader")
    await leader.start(tls=server_tls)
    replica, following = follower(tmp_path / "follower", tls=client_tls)
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue("q", durable=True)
        await channel.default_exchange.publish(
            aio_pika.Message(b"over tls", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="q")
        await connection.close()
        # Without a certificate the CA signed, nothing is shipped.
        _, stranger_tls = tls_contexts(*_tls_files(tmp_path, "c", trustme.CA()), str(cafile))
        stranger_replica, stranger = follower(tmp_path / "stranger", node="c",
                                              tls=stranger_tls)
        await asyncio.wait_for(stranger.follow("127.0.0.1", leader.cluster_port), 10)
        assert "c" not in leader.shipper.links
        stranger_replica.close()
    finally:
        following.stop()
        await task
        await leader.stop()
    replica.close()
    copy = booted(tmp_path / "follower")
    try:
        assert [e.message.body for e in copy.vhosts["/"].queues["q"].ready] == [b"over tls"]
    finally:
        copy.store.close()
        copy.journal.close()
        copy.close_data_dir()


async def test_archived_dead_letters_leave_their_queue_once_the_file_is_on_the_follower(
        tmp_path):
    leader = Leader(tmp_path / "leader")
    await leader.start()
    host = leader.broker.vhosts["/"]
    host.declare_queue("dlq", None, durable=True,
                       arguments=FieldTable({"x-dead-letter-retention": 100}))
    host.declare_queue("work", None, durable=True, arguments=FieldTable({
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    replica, following = follower(tmp_path / "follower")
    task = None
    archive = tmp_path / "leader" / "dead-letter-archive"
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=False)
        await channel.default_exchange.publish(
            aio_pika.Message(b"poison", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="work")
        work = await channel.get_queue("work", ensure=False)
        await wait_for(lambda: host.queues["work"].message_count == 1)
        message = await work.get()
        await message.reject(requeue=False)
        # Archived on the leader's disk, but no follower has it: the dead
        # letter stays (withdrawn) in its queue.
        await wait_for(lambda: list(archive.rglob("archive-*")))
        dlq = host.queues["dlq"]
        assert dlq.stats["archived"] == 0 and dlq.unacked == 1
        task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
        await wait_for(lambda: dlq.stats["archived"] == 1)
        assert dlq.unacked == 0 and dlq.message_count == 0
        await connection.close()
    finally:
        await stop_pair(leader, replica, following, task)
    copied = sorted(path.relative_to(tmp_path / "follower" / "dead-letter-archive")
                    for path in (tmp_path / "follower" / "dead-letter-archive").rglob("*")
                    if path.is_file())
    assert copied == sorted(path.relative_to(archive) for path in archive.rglob("*")
                            if path.is_file()) and copied


async def test_a_streams_confirms_wait_for_the_follower_whose_copy_boots_the_stream(tmp_path):
    leader = Leader(tmp_path / "leader")
    await leader.start()
    replica, following = follower(tmp_path / "follower")
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        await asyncio.wait_for(channel.declare_queue("events", durable=True, arguments={
            "x-queue-type": "stream", "x-stream-max-segment-size-bytes": 500}), 10)
        following.stop()
        await task
        publish = asyncio.ensure_future(channel.default_exchange.publish(
            aio_pika.Message(b"e0"), routing_key="events"))
        done, _ = await asyncio.wait([publish], timeout=1.0)
        assert not done, "a stream's message confirmed with the in-sync follower absent"
        following = Following(replica, "b", CLUSTER, SECRET)
        task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
        await asyncio.wait_for(publish, 10)
        for number in range(1, 40):
            await asyncio.wait_for(channel.default_exchange.publish(
                aio_pika.Message(b"e%d" % number), routing_key="events"), 10)
        await connection.close()
    finally:
        await stop_pair(leader, replica, following, task)
    copy = booted(tmp_path / "follower")
    try:
        stream = copy.vhosts["/"].queues["events"].log
        assert stream.segment_count > 1
        reader = stream.reader(0)
        assert [(item.offset, item.body) for item in reader.read(100)] == [
            (number, b"e%d" % number) for number in range(40)]
        reader.close()
    finally:
        copy.store.close()
        copy.journal.close()
        copy.close_data_dir()
