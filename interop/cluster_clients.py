"""A cluster seen from its clients: pika's list of every node, and the leader
once etcd has elected one."""

from __future__ import annotations

import pika
import pika.exceptions


def parameters(nodes, first=None):
    """pika's list of every node, the given one first."""
    order = sorted(nodes.nodes, key=lambda node: node is not first)
    return [pika.ConnectionParameters("127.0.0.1", node.amqp_port, connection_attempts=1,
                                      socket_timeout=3, blocked_connection_timeout=10)
            for node in order if node.running]


def leader_of(nodes, among=None, in_sync=2):
    return nodes.wait_for_leader(among=among, in_sync=in_sync)
