"""What the broker and its management side know of the cluster node that
leads with it (amqp_server/node.py), and nothing more: the broker is below
the node and never imports it."""

from __future__ import annotations

from typing import Any, Protocol

# (name, type, help, [(labels, value), ...]) as management/prometheus.py renders.
MetricFamily = tuple[str, str, str, list[tuple[dict[str, str], float]]]


class ClusterView(Protocol):
    async def settled(self) -> None:
        """Until every change made so far is on every in-sync copy."""

    async def nodes(self) -> list[dict[str, Any]]:
        """Every member as /api/nodes lists it."""

    def metric_families(self) -> list[MetricFamily]:
        """This node's replication metrics."""
