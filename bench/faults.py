"""python -m bench.faults: many rounds of the fault suite's faults, with the
numbers the suite does not assert.

    python -m bench.faults [--rounds N] [--fault NAME ...] [--seed N]
                           [--json FILE] [--logs DIR]

Three nodes, each beside its etcd member in a network namespace of its own
(interop/netns_cluster.py; root only), under the workload of
interop/fault_workload.py; the faults of interop/cluster_faults.py in turn
(or those named), each round checked as the suite checks it.  For each
round:

- `gap`: the longest time without a confirm while the fault held, for the
  faults that leave a majority of etcd and an in-sync node able to talk
  (the target: confirms resume within 10 s);
- `whole`: seconds from the heal until one node leads with every other
  running and in sync (the target: within 15 s);
- the verdict: confirmed messages and dead letters lost, duplicated or
  never published, and moments two nodes could confirm at once (the
  target: none of any, over at least 50 rounds).

Prints a markdown table and a summary, and exits with status 1 when any
round lost, duplicated or had two leaders.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from interop import netns_cluster
from interop.cluster_faults import FAULTS
from interop.fault_workload import Workload, check

GAP_TARGET = 10.0
WHOLE_TARGET = 15.0


def one_round(cluster: netns_cluster.NetCluster, fault, number: int) -> dict:
    leader, _ = cluster.wait_whole(timeout=90)
    urls = [node.url for node in cluster.nodes]
    with Workload(urls, [node.confirming for node in cluster.nodes],
                  f"r{number}.{fault.name}") as load:
        load.wait_flowing()
        began = time.monotonic()
        leader, _ = cluster.wait_whole(timeout=60)  # the leader as the fault begins
        fault.make(cluster, leader)
        healed = time.monotonic()
        _, whole = cluster.wait_whole(timeout=120)
        time.sleep(1.0)
    verdict = check(load)
    gap = load.longest_gap(began, healed) if fault.majority else None
    return {"round": number, "fault": fault.name, "leader": leader,
            "held_s": round(healed - began, 2), "gap_s": None if gap is None else round(gap, 2),
            "whole_s": round(whole, 2), "confirmed": verdict.confirmed,
            "dead_letters": verdict.dead_letters, "lost": len(verdict.lost),
            "duplicated": len(verdict.duplicated), "phantom": len(verdict.phantom),
            "bad_dead_letters": len(verdict.bad_dead_letters),
            "two_leaders": len(verdict.two_leaders), "ok": verdict.ok,
            "detail": "" if verdict.ok else verdict.summary()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=len(FAULTS))
    parser.add_argument("--fault", action="append", choices=[f.name for f in FAULTS])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--logs", type=Path)
    args = parser.parse_args(argv)
    why = netns_cluster.available()
    if why is not None:
        print(f"bench.faults: {why}", file=sys.stderr)
        return 2
    faults = [f for f in FAULTS if not args.fault or f.name in args.fault]
    order = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="amqp-bench-faults-"))
    results = []
    try:
        with netns_cluster.NetCluster(root) as cluster:
            cluster.wait_whole(timeout=90)
            for number in range(args.rounds):
                fault = faults[number % len(faults)] if args.seed is None else order.choice(
                    faults)
                result = one_round(cluster, fault, number)
                results.append(result)
                print(json.dumps(result), flush=True)
    finally:
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            for path in root.glob("*.log"):
                shutil.copy(path, args.logs / path.name)
        shutil.rmtree(root, ignore_errors=True)
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


def report(results: list[dict]) -> str:
    lines = ["| fault | rounds | longest gap in confirms during it (s) | heal to whole (s) "
             "| confirmed | dead letters | lost | duplicated | two leaders |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in dict.fromkeys(r["fault"] for r in results):
        rows = [r for r in results if r["fault"] == name]
        gaps = [r["gap_s"] for r in rows if r["gap_s"] is not None]
        lines.append(
            f"| {name} | {len(rows)} | {max(gaps) if gaps else '-'} "
            f"| {statistics.median(r['whole_s'] for r in rows):.1f} "
            f"(max {max(r['whole_s'] for r in rows):.1f}) "
            f"| {sum(r['confirmed'] for r in rows):,} | {sum(r['dead_letters'] for r in rows):,} "
            f"| {sum(r['lost'] for r in rows)} | {sum(r['duplicated'] for r in rows)} "
            f"| {sum(r['two_leaders'] for r in rows)} |")
    gaps = [r["gap_s"] for r in results if r["gap_s"] is not None]
    lines.append("")
    lines.append(
        f"{len(results)} rounds: {sum(r['confirmed'] for r in results):,} confirmed, "
        f"{sum(r['dead_letters'] for r in results):,} dead letters; lost "
        f"{sum(r['lost'] for r in results)}, duplicated {sum(r['duplicated'] for r in results)}, "
        f"phantom {sum(r['phantom'] for r in results)}, two leaders "
        f"{sum(r['two_leaders'] for r in results)}; longest gap in confirms during a fault "
        f"with a majority {max(gaps) if gaps else '-'} s (target {GAP_TARGET:.0f}); heal to "
        f"whole at most {max(r['whole_s'] for r in results) if results else '-'} s "
        f"(target {WHOLE_TARGET:.0f})")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
