"""Streams and the dead-letter archive in a three-node cluster on a real
three-member etcd, every node a real subprocess killed with SIGKILL: a
stream's confirmed messages are on the new leader at their offsets, its
retention removes segments on the followers too, a wiped follower's copy
holds the stream and the archive, and an archived dead letter is found
and redriven by the new leader's workbench.  Every loop is bounded."""

from __future__ import annotations

import time
from pathlib import Path

import pika
import pytest

from interop.cluster_clients import leader_of, parameters
from interop.etcd_cluster import etcd_binary
from interop.stream_scenarios import consume
from interop.waiting import wait_for, wait_get_noack

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(etcd_binary() is None,
                                 reason="etcd is not installed (Debian's etcd-server)")]

STREAM_DIR = f"streams/{b'/'.hex()}/{b'events'.hex()}"


def channel_on(cluster, node=None):
    connection = pika.BlockingConnection(parameters(cluster, first=node))
    return connection, connection.channel()


def publish_confirmed(cluster, queue: str, count: int, start: int = 0,
                      body: bytes = b"") -> list[int]:
    """Numbered messages, each confirmed; returns the numbers confirmed."""
    connection, channel = channel_on(cluster, leader_of(cluster))
    channel.confirm_delivery()
    confirmed = []
    for number in range(start, start + count):
        channel.basic_publish("", queue, b"m%d" % number + body,
                              pika.BasicProperties(headers={"i": number}))
        confirmed.append(number)
    connection.close()
    return confirmed


def files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {path.relative_to(directory).as_posix(): path.read_bytes()
            for path in directory.rglob("*") if path.is_file()}


def test_a_streams_confirmed_messages_are_on_the_new_leader_at_their_offsets(cluster):
    connection, channel = channel_on(cluster, leader_of(cluster))
    channel.queue_declare("events", durable=True, arguments={
        "x-queue-type": "stream", "x-initial-cluster-size": 3,
        "x-stream-max-segment-size-bytes": 2000})
    connection.close()
    confirmed = publish_confirmed(cluster, "events", 300)
    leader_of(cluster).kill()
    survivors = [node for node in cluster.nodes if node.running]
    successor = leader_of(cluster, among=survivors)
    got = consume(successor.url, "events", offset="first", expect=len(confirmed),
                  seconds=20)
    assert [(offset, number, body) for offset, number, body, _ in got] == [
        (n, n, b"m%d" % n) for n in confirmed]
    # The new leader goes on appending after them.
    publish_confirmed(cluster, "events", 1, start=300)
    tail = consume(successor.url, "events", offset=300, expect=1, seconds=10)
    assert [(offset, body) for offset, _, body, _ in tail] == [(300, b"m300")]


def test_a_streams_retention_removes_segments_on_the_followers_too(cluster):
    leader = leader_of(cluster)
    connection, channel = channel_on(cluster, leader)
    channel.queue_declare("events", durable=True, arguments={
        "x-queue-type": "stream", "x-stream-max-segment-size-bytes": 1000,
        "x-max-length-bytes": 3000})
    connection.close()
    publish_confirmed(cluster, "events", 200, body=b"x" * 50)
    followers = [node for node in cluster.nodes if node is not leader]

    def segments(node) -> list[str]:
        return sorted(path.name for path in (node.data_dir / STREAM_DIR).glob("*.seg"))

    kept = segments(leader)
    assert "00000001.seg" not in kept and len(kept) <= 5  # retention ran on the leader
    # A confirmed publish carries every earlier frame: the followers have
    # the same segments, byte for byte.
    publish_confirmed(cluster, "events", 1, start=200)
    assert wait_for(lambda: all(files(node.data_dir / STREAM_DIR)
                                == files(leader.data_dir / STREAM_DIR)
                                for node in followers), 15)
    assert "00000001.seg" not in segments(followers[0])


def dead_letter_setup(cluster, retention_ms: int = 500) -> None:
    """work -> dlx -> dlq, whose dead letters are archived after `retention_ms`."""
    connection, channel = channel_on(cluster, leader_of(cluster))
    channel.exchange_declare("dlx", "fanout", durable=True)
    channel.queue_declare("dlq", durable=True,
                          arguments={"x-dead-letter-retention": retention_ms})
    channel.queue_bind("dlq", "dlx")
    channel.queue_declare("work", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    connection.close()


def die(cluster, count: int) -> None:
    """`count` persistent messages into work, each rejected into dlq."""
    connection, channel = channel_on(cluster, leader_of(cluster))
    channel.confirm_delivery()
    for n in range(count):
        channel.basic_publish("", "work", f"invoice {n}".encode(), pika.BasicProperties(
            delivery_mode=2, message_id=f"inv-{n}"))
    for _ in range(count):
        method, _, _ = wait_get_noack(channel, "work")
        channel.basic_reject(method.delivery_tag, requeue=False)
    connection.close()


def archived_out_of(cluster, queue: str, count: int) -> bool:
    """Whether `count` dead letters left `queue` for the archive."""
    leader = leader_of(cluster)
    return wait_for(lambda: leader.api(f"/api/queues/%2F/{queue}").get(
        "dead_letters_archived") == count and leader.api(
        f"/api/queues/%2F/{queue}")["messages"] == 0, 20, step=lambda: time.sleep(0.2))


def test_an_archived_dead_letter_is_found_and_redriven_on_the_new_leader(cluster):
    dead_letter_setup(cluster)
    die(cluster, 3)
    assert archived_out_of(cluster, "dlq", 3)
    leader_of(cluster).kill()
    survivors = [node for node in cluster.nodes if node.running]
    successor = leader_of(cluster, among=survivors)
    page = successor.api("/api/queues/%2F/dlq/archive?body=invoice%201")
    assert page["matched"] == 1
    (found,) = page["messages"]
    assert found["payload_text"] == "invoice 1" and found["original_queue"] == "work"
    assert successor.api("/api/queues/%2F/dlq/archive")["matched"] == 3
    result = successor.api("/api/queues/%2F/dlq/archive/redrive",
                           body={"event_ids": [found["event_id"]]})
    assert result["redriven"] == 1
    connection, channel = channel_on(cluster, successor)
    method, properties, body = wait_get_noack(channel, "work")
    assert body == b"invoice 1" and properties.message_id == "inv-1"
    channel.basic_ack(method.delivery_tag)
    connection.close()
    # The redrive's ledger entry is on the followers too.
    page = successor.api("/api/queues/%2F/dlq/archive?message_id=inv-1")
    assert page["messages"][0]["redriven_at"] is not None
    survivor = next(node for node in survivors if node is not successor)
    ledger = survivor.data_dir / "dead-letter-archive" / "redriven.ndjson"
    assert wait_for(lambda: ledger.exists() and found["event_id"] in ledger.read_text(), 10)


def test_a_wiped_follower_takes_the_stream_and_the_archive_in_its_copy(cluster):
    leader = leader_of(cluster)
    connection, channel = channel_on(cluster, leader)
    channel.queue_declare("events", durable=True, arguments={
        "x-queue-type": "stream", "x-stream-max-segment-size-bytes": 2000})
    connection.close()
    publish_confirmed(cluster, "events", 100)
    dead_letter_setup(cluster)
    die(cluster, 2)
    assert archived_out_of(cluster, "dlq", 2)
    wiped = next(node for node in cluster.nodes if node is not leader)
    wiped.wipe_and_restart()
    leader_of(cluster, in_sync=3)
    archive = "dead-letter-archive"
    assert wait_for(lambda: files(wiped.data_dir / STREAM_DIR)
                    == files(leader.data_dir / STREAM_DIR), 15)
    copied = files(wiped.data_dir / archive)
    assert copied == files(leader.data_dir / archive) and copied
    # The third node and the leader go: the wiped one leads with its copy.
    third = next(node for node in cluster.nodes if node not in (leader, wiped))
    third.kill()
    leader.kill()
    third.start()
    successor = leader_of(cluster, among=[wiped, third])
    got = consume(successor.url, "events", offset="first", expect=100, seconds=20)
    assert [offset for offset, _, _, _ in got] == list(range(100))
    assert successor.api("/api/queues/%2F/dlq/archive")["matched"] == 2
