"""What a follower's copy holds when it matters, found by a review: a
follower taking a full copy while in sync, a stream deleted just before
its leader died, an archive batch the followers are slow to take, and a
copy of thousands of archive files.  One leader and one follower in this
process, as in test_cluster_replication.py (no etcd: the in-sync set is
given)."""

from __future__ import annotations

import asyncio
import os
import threading

import aio_pika
import pytest

from amqp_server.cluster import frames
from amqp_server.cluster.follower import Following
from amqp_server.cluster.shipper import Shipper
from amqp_server.storage.archive import ArchiveFiles
from amqp_server.wire.table import FieldTable

from .replication_pair import CLUSTER, SECRET, Leader, booted, follower, stop_pair, wait_for

pytestmark = pytest.mark.cluster

STREAM_DIR = f"streams/{b'/'.hex()}/{b'events'.hex()}"


async def test_a_confirm_waits_until_a_follower_taking_a_copy_has_it_on_disk(tmp_path):
    """An in-sync follower back with an empty data directory takes a full
    copy; the leader counted it as holding the copy once the copy was
    sent, and released a confirm held for it while its disk had nothing."""
    leader = Leader(tmp_path / "leader")  # in sync: a and b, at least 2
    await leader.start()
    replica, following = follower(tmp_path / "b1")
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    release = threading.Event()
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        await asyncio.wait_for(channel.declare_queue("events", durable=True, arguments={
            "x-queue-type": "stream"}), 10)
        await asyncio.wait_for(channel.default_exchange.publish(
            aio_pika.Message(b"e0"), routing_key="events"), 10)
        following.stop()  # b goes, still in the in-sync set
        await task
        replica.close()
        publish = asyncio.ensure_future(channel.default_exchange.publish(
            aio_pika.Message(b"e1"), routing_key="events"))
        done, _ = await asyncio.wait([publish], timeout=1.0)
        assert not done
        # b comes back empty, and makes its copy whole only when released.
        replica, _ = follower(tmp_path / "b2")
        finish = replica.finish_copy

        def slow_finish(lsn: int, **link) -> None:
            release.wait(20)
            finish(lsn, **link)
        replica.finish_copy = slow_finish
        following = Following(replica, "b", CLUSTER, SECRET)
        task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
        done, _ = await asyncio.wait([publish], timeout=3.0)
        assert not done, "confirmed before the follower's copy was on its disk"
        release.set()
        await asyncio.wait_for(publish, 10)
        await connection.close()
    finally:
        release.set()
        await stop_pair(leader, replica, following, task)


async def test_a_stream_deleted_before_its_leader_died_is_declared_again_empty(tmp_path):
    """The queue's deletion ships at once, the stream's files go with the
    next store flush: a follower that had the one and not the other when
    its leader died kept the files, and a stream declared again under the
    name read the deleted one's messages."""
    leader = Leader(tmp_path / "leader")
    await leader.start()
    replica, following = follower(tmp_path / "follower")
    apply = replica.apply

    def dies_before_the_files_go(batch, **link):
        kinds = [frame[0] for frame in batch]
        if frames.STREAM_DELETED in kinds:
            prefix = batch[:kinds.index(frames.STREAM_DELETED)]
            if prefix:
                apply(prefix, **link)
            raise frames.FrameError("the leader died here")
        return apply(batch, **link)
    replica.apply = dies_before_the_files_go
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=True)
        queue = await asyncio.wait_for(channel.declare_queue("events", durable=True, arguments={
            "x-queue-type": "stream"}), 10)
        for n in range(5):
            await asyncio.wait_for(channel.default_exchange.publish(
                aio_pika.Message(b"old-%d" % n), routing_key="events"), 10)
        await asyncio.wait_for(queue.delete(if_unused=False, if_empty=False), 10)
        await connection.close()
    finally:
        await stop_pair(leader, replica, following, task)
    assert (tmp_path / "follower" / STREAM_DIR).is_dir()  # the files stayed
    copy = booted(tmp_path / "follower")
    try:
        host = copy.vhosts["/"]
        assert "events" not in host.queues
        host.declare_queue("events", None, durable=True,
                           arguments=FieldTable({"x-queue-type": "stream"}))
        reader = host.queues["events"].log.reader(0)
        assert reader.read(100) == []
        reader.close()
    finally:
        copy.store.close()
        copy.journal.close()
        copy.close_data_dir()


async def test_an_archive_batch_the_followers_are_slow_to_take_is_archived_once(
        tmp_path, monkeypatch):
    """While too few members are in sync the batch's file waits on the
    leader; it used to give up after the wait's timeout, put the messages
    back and archive them again into a new file: a copy more of each per
    try.  (The wait's timeout is 1 s here instead of 60.)"""
    monkeypatch.setattr(Shipper.settled, "__defaults__", (1.0,))
    leader = Leader(tmp_path / "leader")  # in sync: a and b (away for now)
    await leader.start()
    host = leader.broker.vhosts["/"]
    host.declare_queue("dlq", None, durable=True,
                       arguments=FieldTable({"x-dead-letter-retention": 100}))
    host.declare_queue("work", None, durable=True, arguments=FieldTable({
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    archive = tmp_path / "leader" / "dead-letter-archive"
    replica, following = follower(tmp_path / "follower")
    task = None
    try:
        connection = await aio_pika.connect(leader.url)
        channel = await connection.channel(publisher_confirms=False)
        await channel.default_exchange.publish(
            aio_pika.Message(b"poison", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="work")
        await wait_for(lambda: host.queues["work"].message_count == 1)
        work = await channel.get_queue("work", ensure=False)
        message = await work.get()
        await message.reject(requeue=False)
        await asyncio.sleep(6)  # several of the wait's timeouts, several archiver ticks
        task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
        dlq = host.queues["dlq"]
        await wait_for(lambda: dlq.stats["archived"] == 1, 30)
        assert dlq.message_count == 0
        await connection.close()
    finally:
        await stop_pair(leader, replica, following, task)
    assert [r["body"] for r in ArchiveFiles(archive).records()] == ["cG9pc29u"]
    copied = ArchiveFiles(tmp_path / "follower" / "dead-letter-archive").records()
    assert [r["body"] for r in copied] == ["cG9pc29u"]


async def test_a_copy_of_thousands_of_archive_files_holds_one_open_at_a_time(tmp_path):
    """The archive writes a file per batch and keeps them all: a copy that
    held every copied file open until its end ran out of descriptors
    (Debian's soft limit is 1024) and never finished."""
    day = tmp_path / "leader" / "dead-letter-archive" / "node=a" / "day=2026-11-01"
    day.mkdir(parents=True)
    for n in range(1500):
        (day / f"archive-20261101T000000-1-{n:06d}.parquet").write_bytes(b"PAR1" + b"x" * 60)
    leader = Leader(tmp_path / "leader")
    await leader.start()
    replica, following = follower(tmp_path / "follower")
    before = len(os.listdir("/proc/self/fd"))
    peak = before
    copy_piece = replica.copy_piece

    def counting(path, offset, data, **link) -> None:
        nonlocal peak
        copy_piece(path, offset, data, **link)
        peak = max(peak, len(os.listdir("/proc/self/fd")))
    replica.copy_piece = counting
    task = asyncio.ensure_future(following.follow("127.0.0.1", leader.cluster_port))
    try:
        await wait_for(lambda: replica.epoch is not None, 60)
    finally:
        await stop_pair(leader, replica, following, task)
    assert peak - before < 20
    copied = tmp_path / "follower" / "dead-letter-archive" / "node=a" / "day=2026-11-01"
    assert len(list(copied.iterdir())) == 1500
