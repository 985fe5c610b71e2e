"""The faults the fault suite makes, each a short round against a
NetCluster (interop/netns_cluster.py) under the workload of
interop/fault_workload.py; shared by the suite (interop/test_cluster_faults.py,
one round of each) and the long runs (python -m bench.faults).

Each fault takes the cluster and the index of the node that leads when it
starts, makes the fault, holds it, and undoes it.  `majority` says whether
the fault leaves a majority of etcd and an in-sync node able to talk, so
that confirms must resume during it (the cluster issue's 10 s target).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from interop.netns_cluster import NetCluster

HOLD = 10.0  # seconds a partition lasts


@dataclass(frozen=True)
class Fault:
    name: str
    make: Callable[[NetCluster, int], None]
    majority: bool = True


def _others(cluster: NetCluster, leader: int) -> list[int]:
    return [i for i in range(len(cluster.nodes)) if i != leader]


def leader_isolated(cluster: NetCluster, leader: int) -> None:
    cluster.isolate(leader)
    time.sleep(HOLD)
    cluster.heal()


def leader_isolated_with_etcds_leader(cluster: NetCluster, leader: int) -> None:
    # The isolated node's own etcd member led etcd: etcd elects anew first.
    cluster.make_etcd_leader(leader)
    cluster.isolate(leader)
    time.sleep(HOLD)
    cluster.heal()


def leader_cut_from_followers(cluster: NetCluster, leader: int) -> None:
    # etcd stays whole: the leader keeps its lease, and must yield.
    for other in _others(cluster, leader):
        cluster.cut(leader, other, keep_etcd=True)
    time.sleep(HOLD + 2)
    cluster.heal()


def follower_cut_from_leader(cluster: NetCluster, leader: int) -> None:
    cluster.cut(leader, _others(cluster, leader)[0], keep_etcd=True)
    time.sleep(HOLD)
    cluster.heal()


def bridge(cluster: NetCluster, leader: int) -> None:
    # The leader and one follower cannot see each other (nor their etcd
    # members); both see the third node.
    cluster.cut(leader, _others(cluster, leader)[0])
    time.sleep(HOLD)
    cluster.heal()


def five_isolations(cluster: NetCluster, leader: int) -> None:
    for _ in range(5):
        cluster.isolate(leader)
        time.sleep(HOLD / 2 + 2)
        cluster.heal()
        leader, _ = cluster.wait_whole(timeout=60)


def leader_paused_past_its_lease(cluster: NetCluster, leader: int) -> None:
    node = cluster.nodes[leader]
    node.pause()
    time.sleep(8.0)  # past the 4 s lease and then some
    node.resume()


def leader_killed(cluster: NetCluster, leader: int) -> None:
    node = cluster.nodes[leader]
    node.kill()
    time.sleep(3.0)
    node.start()


def clocks_jump(cluster: NetCluster, leader: int) -> None:
    # NTP steps: the leader's wall clock five minutes ahead, a follower's
    # five minutes behind (leases are timed by the monotonic clock).
    follower = _others(cluster, leader)[0]
    cluster.nodes[leader].jump_clock(+300)
    cluster.nodes[follower].jump_clock(-300)
    time.sleep(HOLD)
    cluster.nodes[leader].jump_clock(0)
    cluster.nodes[follower].jump_clock(0)


FAULTS = [
    Fault("leader-isolated", leader_isolated),
    Fault("leader-isolated-with-etcds-leader", leader_isolated_with_etcds_leader),
    Fault("leader-cut-from-followers", leader_cut_from_followers),
    Fault("follower-cut-from-leader", follower_cut_from_leader),
    Fault("bridge", bridge),
    Fault("five-isolations", five_isolations),
    Fault("leader-paused-past-its-lease", leader_paused_past_its_lease),
    Fault("leader-killed", leader_killed),
    Fault("clocks-jump", clocks_jump),
]
