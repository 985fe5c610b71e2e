"""Clustering on etcd: etcd decides who leads, who is in sync and who is a
member; the broker only ships data (see DESIGN.md, "Clustering").

    etcd.py        an asyncio client for etcd's v3 JSON gateway
    session.py     a lease kept alive, and when it can no longer be trusted
    leadership.py  per replication group: campaign, observe, fenced writes of
                   the in-sync set and members, deposing a dead leader
    membership.py  each node's own presence key and addresses

Nothing here imports the broker: the broker uses this package.
"""

from .etcd import EtcdClient, EtcdError
from .leadership import Leader, Leadership, LeadershipLost, NotLeader, Term
from .membership import NodeNameInUse, members, register
from .session import Session

__all__ = ["EtcdClient", "EtcdError", "Leader", "Leadership", "LeadershipLost",
           "NodeNameInUse", "NotLeader", "Session", "Term", "members", "register"]
