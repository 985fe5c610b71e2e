"""Delayed messages in a three-node cluster on a real etcd: a durable
x-delayed-message exchange's confirmed delayed messages are replicated with
the message store, so when the leader is killed with `kill -9` the node
that takes over delivers every one of them once, in delay order (the
plugin keeps a single copy, lost with its node)."""

from __future__ import annotations

import time

import pika
import pytest

from interop.etcd_cluster import etcd_binary

from .cluster_clients import leader_of, parameters

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(etcd_binary() is None,
                                 reason="etcd is not installed (Debian's etcd-server)")]

DELAYS = [3000, 1500, 2500, 2000]


def test_delayed_messages_survive_a_failover(cluster):
    connection = pika.BlockingConnection(parameters(cluster))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.exchange_declare("dx", "x-delayed-message", durable=True,
                             arguments={"x-delayed-type": "direct"})
    channel.queue_declare("work", durable=True)
    channel.queue_bind("work", "dx", "k")
    for ms in DELAYS:
        # Confirmed once on the leader and every in-sync follower.
        channel.basic_publish("dx", "k", str(ms).encode(), pika.BasicProperties(
            headers={"x-delay": ms}, delivery_mode=2))
    connection.close()
    leader_of(cluster).kill()
    survivors = [node for node in cluster.nodes if node.running]
    leader_of(cluster, among=survivors)
    connection = pika.BlockingConnection(parameters(cluster))
    channel = connection.channel()
    got = []
    deadline = time.monotonic() + 20
    while len(got) < len(DELAYS) and time.monotonic() < deadline:
        method, _, body = channel.basic_get("work", auto_ack=True)
        if method is None:
            time.sleep(0.05)
            continue
        got.append(body)
    time.sleep(0.5)
    assert channel.basic_get("work")[0] is None  # none twice
    connection.close()
    assert got == [str(ms).encode() for ms in sorted(DELAYS)]
