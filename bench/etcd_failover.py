"""Leader failover on etcd: the time from SIGKILL of the leading contender
to the other one leading, over N kills, by lease expiry and by a follower
that sees the leader's link reset and revokes its lease.

    python -m bench.etcd_failover [--kills 20] [--ttl 2 3] [--election-ms 1000]

Each kill gets a fresh group: contender a leads, writes `isr = [a, b]`, b
queues behind it; a is killed at a random point of its renewal cycle (a
lease runs out TTL after the last renewal, which is up to TTL/3 before the
kill).  Times are time.monotonic() of the kill and of b's `leader` event (the
same clock in both processes).  etcd raises a lease TTL below 1.5 election
timeouts rounded up to whole seconds: a 2 s TTL needs `--election-ms 1000`
or less (the harness's default, 2500 ms, makes every TTL at least 4 s).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from interop.etcd_cluster import EtcdCluster
from interop.etcd_contender import ContenderProcess

WAIT = 30.0


def one_kill(cluster: EtcdCluster, group: str, ttl: int, revoke: bool) -> tuple[float, int]:
    """Seconds from the kill to b leading, and the TTL etcd granted."""
    a = ContenderProcess(cluster.endpoints_arg, "bench", group, "a", ttl=ttl,
                         revoke_on_link_reset=revoke)
    b = None
    try:
        a.wait("leader", WAIT)
        b = ContenderProcess(cluster.endpoints_arg, "bench", group, "b", ttl=ttl,
                             revoke_on_link_reset=revoke)
        b.wait("waiting", WAIT, reason="not in the in-sync set ['a']")
        a.send("write-isr a,b")
        if not a.wait("isr", WAIT)["ok"]:
            raise SystemExit("the in-sync write failed")
        b.wait("waiting", WAIT, reason="a leads")
        granted = a.wait("ready", WAIT)["ttl"]
        time.sleep(random.uniform(0, granted / 3))
        killed = a.kill()
        return b.wait("leader", WAIT, after=killed)["t"] - killed, granted
    finally:
        for contender in (a, b):
            if contender is not None:
                contender.close()


def measure(cluster: EtcdCluster, kills: int, ttl: int, revoke: bool, label: str) -> None:
    times = []
    granted = ttl
    for number in range(kills):
        seconds, granted = one_kill(cluster, f"{label}-{number}", ttl, revoke)
        times.append(seconds)
    times.sort()
    print(f"{label}: lease TTL {granted} s (asked {ttl} s), {kills} kills: "
          f"median {statistics.median(times):.3f} s, min {times[0]:.3f} s, "
          f"max {times[-1]:.3f} s, p90 {times[int(0.9 * (len(times) - 1))]:.3f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--ttl", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--heartbeat-ms", type=int, default=100)
    parser.add_argument("--election-ms", type=int, default=1000)
    args = parser.parse_args()
    with EtcdCluster(3, heartbeat_ms=args.heartbeat_ms, election_ms=args.election_ms) as cluster:
        print(f"etcd: 3 members, --heartbeat-interval {args.heartbeat_ms} --election-timeout "
              f"{args.election_ms}", flush=True)
        for ttl in args.ttl:
            measure(cluster, args.kills, ttl, False, f"lease-expiry-ttl{ttl}")
        for ttl in args.ttl:
            measure(cluster, args.kills, ttl, True, f"revoke-by-follower-ttl{ttl}")


if __name__ == "__main__":
    main()
