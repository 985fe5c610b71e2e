"""A three-node cluster on a real three-member etcd, every node a real
subprocess killed for real: no confirmed message is lost, none is
delivered twice, and a leader that is only paused confirms nothing once
its successor leads.  Every loop is bounded in count and time."""

from __future__ import annotations

import asyncio
import threading
import time

import aio_pika
import pika
import pika.exceptions
import pytest

from interop.etcd_cluster import etcd_binary

from .cluster_clients import leader_of, parameters

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(etcd_binary() is None,
                                 reason="etcd is not installed (Debian's etcd-server)")]


class ConfirmingPublisher(threading.Thread):
    """Publishes numbered persistent messages with confirms, one at a time,
    reconnecting to any node; remembers which were confirmed.  A message
    whose confirm did not come is never sent again (so a duplicate at the
    end could only be the broker's doing)."""

    def __init__(self, nodes, queue: str, limit: int = 100_000) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.queue = queue
        self.limit = limit
        self.confirmed: list[int] = []
        self.unconfirmed: list[int] = []
        self.stopping = threading.Event()
        self.failures = 0

    def run(self) -> None:
        number = 0
        while not self.stopping.is_set() and number < self.limit:
            try:
                connection = pika.BlockingConnection(parameters(self.nodes))
            except pika.exceptions.AMQPError:
                self.failures += 1
                time.sleep(0.05)
                continue
            try:
                channel = connection.channel()
                channel.confirm_delivery()
                while not self.stopping.is_set() and number < self.limit:
                    current, number = number, number + 1
                    try:
                        channel.basic_publish("", self.queue, str(current).encode(),
                                              pika.BasicProperties(delivery_mode=2,
                                                                   message_id=str(current)),
                                              mandatory=True)
                    except (pika.exceptions.AMQPError, OSError):
                        self.unconfirmed.append(current)
                        raise
                    self.confirmed.append(current)
            except (pika.exceptions.AMQPError, OSError):
                self.failures += 1
            finally:
                try:
                    connection.close()
                except (pika.exceptions.AMQPError, OSError):
                    pass


def declare(nodes, queue: str, arguments: dict) -> None:
    connection = pika.BlockingConnection(parameters(nodes))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments=arguments)
    connection.close()


def drain(nodes, queue: str, seconds: float = 20.0) -> list[bytes]:
    """Every message body left in the queue, acknowledged one by one."""
    connection = pika.BlockingConnection(parameters(nodes))
    channel = connection.channel()
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        method, _, body = channel.basic_get(queue)
        if method is None:
            break
        got.append(body)
        channel.basic_ack(method.delivery_tag)
    connection.close()
    return got


def test_kill_9_of_the_leader_under_confirmed_load_loses_no_confirmed_message(cluster):
    declare(cluster, "work", {"x-queue-type": "quorum"})
    publisher = ConfirmingPublisher(cluster, "work")
    publisher.start()
    try:
        for kill in range(3):
            deadline = time.monotonic() + 20
            while len(publisher.confirmed) < 200 * (kill + 1) and time.monotonic() < deadline:
                time.sleep(0.05)
            leader = leader_of(cluster)
            leader.kill()
            survivors = [node for node in cluster.nodes if node.running]
            leader_of(cluster, among=survivors)
            leader.start()  # back as a follower: it takes a copy
            leader_of(cluster, in_sync=3)
        confirmed_before = len(publisher.confirmed)
        deadline = time.monotonic() + 20
        while len(publisher.confirmed) < confirmed_before + 100 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        publisher.stopping.set()
        publisher.join(30)
    assert not publisher.is_alive()
    got = [int(body) for body in drain(cluster, "work")]
    assert len(got) == len(set(got)), "a message was delivered twice"
    missing = sorted(set(publisher.confirmed) - set(got))
    assert missing == [], f"confirmed and lost: {missing[:20]}"
    assert len(publisher.confirmed) >= 700


async def test_a_leader_stopped_past_its_lease_confirms_nothing_after_its_successor_leads(
        cluster):
    declare(cluster, "work", {"x-queue-type": "quorum"})
    old = leader_of(cluster)
    # A client of the old leader itself, not forwarded.
    connection = await aio_pika.connect(old.url)
    channel = await connection.channel(publisher_confirms=True)
    await channel.default_exchange.publish(
        aio_pika.Message(b"before", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
        routing_key="work")
    old.stop()  # SIGSTOP: the process holds its sockets, renews nothing
    try:
        # Sent while it is stopped: waits in its socket buffer.
        pending = [asyncio.ensure_future(channel.default_exchange.publish(
            aio_pika.Message(f"paused{n}".encode(),
                             delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="work")) for n in range(5)]
        others = [node for node in cluster.nodes if node is not old]
        successor = await asyncio.to_thread(leader_of, cluster, others)
        assert successor is not old
    finally:
        old.cont()
    done, _ = await asyncio.wait(pending, timeout=15)
    assert len(done) == len(pending)
    for publish in done:
        assert publish.exception() is not None, "confirmed by a leader whose successor led"
    assert connection.is_closed or channel.is_closed
    got = await asyncio.to_thread(drain, cluster, "work")
    assert b"before" in got  # confirmed before the pause: kept
    await connection.close()


def test_a_stopped_follower_leaves_the_in_sync_set_and_confirms_go_on(cluster):
    declare(cluster, "work", {"x-queue-type": "quorum"})
    leader = leader_of(cluster)
    follower = next(node for node in cluster.nodes if node is not leader)
    follower.stop()
    try:
        connection = pika.BlockingConnection(parameters(cluster, first=leader))
        channel = connection.channel()
        channel.confirm_delivery()
        for number in range(50):
            channel.basic_publish("", "work", str(number).encode(),
                                  pika.BasicProperties(delivery_mode=2))
        connection.close()
        listed = {node["name"]: node for node in cluster.describe([leader])}
        # Listed though stopped (its lease may have run out: running false).
        assert listed[follower.name]["in_sync"] is False
        assert listed[leader.name]["in_sync"] is True
    finally:
        follower.cont()
    # Back, it catches up and is counted in again.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        listed = {node["name"]: node for node in cluster.describe([leader])}
        if listed[follower.name]["in_sync"]:
            break
        time.sleep(0.1)
    assert listed[follower.name]["in_sync"] is True
    assert sorted(int(body) for body in drain(cluster, "work")) == list(range(50))


def test_a_wiped_follower_rejoins_with_a_copy_and_can_lead_with_it(cluster):
    declare(cluster, "work", {"x-queue-type": "quorum"})
    connection = pika.BlockingConnection(parameters(cluster))
    channel = connection.channel()
    channel.confirm_delivery()
    for number in range(100):
        channel.basic_publish("", "work", str(number).encode(),
                              pika.BasicProperties(delivery_mode=2))
    connection.close()
    leader = leader_of(cluster)
    wiped = next(node for node in cluster.nodes if node is not leader)
    wiped.wipe_and_restart()
    leader_of(cluster, in_sync=3)
    # The third node goes: the wiped one must now hold everything.
    third = next(node for node in cluster.nodes if node not in (leader, wiped))
    third.kill()
    leader.kill()
    third.start()
    assert leader_of(cluster, among=[wiped, third]) in (wiped, third)
    assert sorted(int(body) for body in drain(cluster, "work")) == list(range(100))


def test_a_quorum_delivery_limit_carries_over_a_failover(cluster):
    connection = pika.BlockingConnection(parameters(cluster))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.exchange_declare("dlx", "fanout", durable=True)
    channel.queue_declare("dead", durable=True)
    channel.queue_bind("dead", "dlx")
    channel.queue_declare("work", durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 1, "x-dead-letter-exchange": "dlx"})
    channel.basic_publish("", "work", b"poison", pika.BasicProperties(delivery_mode=2))
    method, _, _ = channel.basic_get("work")
    channel.basic_nack(method.delivery_tag, requeue=True)  # returned once: the limit
    # A confirmed publish after the return: the return is replicated too.
    channel.basic_publish("", "marker", b"", pika.BasicProperties(delivery_mode=2))
    connection.close()
    leader_of(cluster).kill()
    survivors = [node for node in cluster.nodes if node.running]
    leader_of(cluster, among=survivors)
    connection = pika.BlockingConnection(parameters(cluster))
    channel = connection.channel()
    method, properties, body = channel.basic_get("work")
    assert body == b"poison" and method.redelivered
    assert properties.headers["x-delivery-count"] == 1
    channel.basic_nack(method.delivery_tag, requeue=True)  # past the limit now
    deadline = time.monotonic() + 10
    dead = None
    while time.monotonic() < deadline:
        dead = channel.basic_get("dead", auto_ack=True)
        if dead[0] is not None:
            break
        time.sleep(0.05)
    assert dead[2] == b"poison"
    assert dead[1].headers["x-death"][0]["reason"] == "delivery_limit"
    assert dead[1].headers["x-death"][0]["count"] == 1  # dead-lettered once
    assert channel.basic_get("work")[0] is None
    assert channel.basic_get("dead")[0] is None
    connection.close()
