"""Clustering on etcd: etcd decides who leads, who is in sync and who is a
member; the broker only ships data (see DESIGN.md, "Clustering").

    etcd.py        an asyncio client for etcd's v3 JSON gateway

Nothing here imports the broker: the broker uses this package.
"""

from .etcd import EtcdClient, EtcdError

__all__ = ["EtcdClient", "EtcdError"]
