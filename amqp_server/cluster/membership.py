"""Which nodes are up and where they listen: `/<cluster>/members/<node>`.

Each node writes its own key, on its own session's lease, with its AMQP,
management and cluster addresses; etcd deletes it when the node stops
renewing (or a follower revokes the lease of a leader it deposed).  This is
presence, written by each node for itself; the set of nodes a group's leader
ships to is the group's fenced `members` key (leadership.py).

Two live brokers must not share a node name: registration creates the key
only if it is absent, and when another lease holds it waits for that lease
to run out (the previous run of this node, killed) before giving up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from .etcd import Compare, EtcdClient, put_op, range_op
from .leadership import name_segment
from .session import Session

__all__ = ["Member", "NodeNameInUse", "members", "members_prefix", "register"]


class NodeNameInUse(Exception):
    """Another live broker is registered under this node name."""


@dataclass(frozen=True)
class Member:
    node: str
    addresses: dict[str, str]  # "amqp", "management", "cluster": host:port
    lease: int


def members_prefix(cluster: str) -> str:
    return f"/{name_segment(cluster)}/members/"


async def register(session: Session, cluster: str, node: str,
                   addresses: Mapping[str, str]) -> None:
    """Write this node's member key on the session's lease."""
    client = session.client
    key = members_prefix(cluster) + name_segment(node)
    value = json.dumps(dict(addresses))
    # The lease of a killed earlier run of this node holds the key until it
    # runs out: wait as long as one TTL of ours (a restart of the same node
    # has the same TTL), not longer.
    deadline = time.monotonic() + session.ttl + 1
    while True:
        result = await client.txn(
            [Compare.create_revision(key, 0)], [put_op(key, value, session.lease)],
            [range_op(key)])
        if result.succeeded:
            return
        held = result.responses[0] if result.responses else []
        if not held:
            continue  # deleted meanwhile
        holder = held[0]
        if holder.lease == session.lease:
            update = await client.txn([Compare.lease_is(key, session.lease)],
                                      [put_op(key, value, session.lease)])
            if update.succeeded:
                return
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            raise NodeNameInUse(f"node name {node!r} is in use by another running broker "
                                f"(etcd key {key} on lease {holder.lease:x})")
        await client.watch_once(key, start_revision=holder.mod_revision + 1,
                                timeout=min(left, 1.0))


async def members(client: EtcdClient, cluster: str) -> dict[str, Member]:
    """The nodes up now, by name."""
    prefix = members_prefix(cluster)
    found = await client.get(prefix, prefix=True)
    up: dict[str, Member] = {}
    for kv in found.kvs:
        try:
            addresses = json.loads(kv.value)
        except ValueError:
            continue
        if isinstance(addresses, dict):
            node = unquote(kv.key[len(prefix):])
            up[node] = Member(node, {str(k): str(v) for k, v in addresses.items()}, kv.lease)
    return up
