"""Who is in sync and how far a confirm may go: the rules, as pure functions.

A leader ships one numbered stream (LSNs) to its followers; each follower
says which LSN it has on disk.  The in-sync set (kept in etcd, written by
the leader only, in fenced transactions) names the nodes that hold every
confirmed record; only they may lead next.  Everything here decides from
plain data and a clock reading passed in, so the rules are tested without
sockets or etcd (tests/test_cluster_in_sync.py), and the shipper, the node
and the fault suite's model all use the same ones:

- `frontier`: the LSN a confirm may rely on, the lowest acknowledged LSN
  over the in-sync followers, and none at all while the set, leader
  included, is below `min_in_sync` (Kafka's `min.insync.replicas`).
- `lagging` / `caught_up` / `change`: a follower leaves the set when its
  oldest unacknowledged frame, or its absence, is older than the lag
  timeout; one that has everything shipped joins.  The set never shrinks
  below `min_in_sync` and a change is written to etcd before it is acted on.
- `stalled_since` / `should_yield`: a leader whose confirms cannot move (an
  in-sync member it cannot remove does not answer) for longer than the yield
  bound gives up its lead, if another in-sync member is up to take it.
- `initial` : the set a new leader starts with.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Follower", "caught_up", "change", "frontier", "initial", "lagging",
           "may_shrink", "should_yield", "stalled_since", "yield_after"]


@dataclass(frozen=True)
class Follower:
    """One follower as its leader sees it."""

    acked: int = -1             # the LSN on its disk (-1: nothing of this stream yet)
    streaming: bool = False     # connected and past its copy
    linked: bool = False        # connected at all (copying or streaming)
    # When it was last connected (or when the term began, for one never
    # connected in it): its absence is measured from there.
    seen: float = 0.0


def frontier(lsn: int, in_sync: Collection[str], acked: Mapping[str, int],
             min_in_sync: int) -> int | None:
    """The highest LSN on every in-sync copy, or None while the in-sync
    set (the leader and `in_sync`, its followers) has fewer than
    `min_in_sync` members: then nothing may be confirmed."""
    if 1 + len(in_sync) < min_in_sync:
        return None
    return min((acked.get(name, -1) for name in in_sync), default=lsn) if in_sync else lsn


def lagging(now: float, lsn: int, base: int, in_sync: Iterable[str],
            followers: Mapping[str, Follower], shipped_at: Callable[[int], float | None],
            lag_timeout: float) -> list[str]:
    """In-sync followers behind by more than `lag_timeout`: the oldest
    frame one has not acknowledged was shipped longer ago than that, or it
    has not been connected for that long.  `base` is the LSN this term's
    stream started from; `shipped_at(n)` is when frame n was shipped, None
    once it is no longer kept (whoever needs it then is far behind)."""
    late = []
    for name in sorted(in_sync):
        follower = followers.get(name, Follower())
        if not follower.linked and now - follower.seen > lag_timeout:
            late.append(name)
            continue
        if follower.acked >= lsn:
            continue  # nothing waits for it
        since = shipped_at(max(follower.acked, base) + 1)
        if since is None or now - since > lag_timeout:
            late.append(name)
    return late


def caught_up(lsn: int, in_sync: Collection[str], followers: Mapping[str, Follower]
              ) -> list[str]:
    """Streaming followers outside the set that hold everything shipped."""
    return sorted(name for name, follower in followers.items()
                  if name not in in_sync and follower.streaming and follower.acked >= lsn)


def change(in_sync: Collection[str], late: Iterable[str], joining: Iterable[str],
           min_in_sync: int) -> tuple[list[str], list[str]]:
    """(leaving, joining) for one write of the set: as many of `late` as
    keep the set, leader included, at `min_in_sync` or above, before the
    joining ones count (a joiner counts once etcd has it; the next check
    can then let another late one go)."""
    room = max(0, 1 + len(in_sync) - min_in_sync)
    leaving = sorted(set(late) & set(in_sync))[:room]
    return leaving, sorted(set(joining) - set(in_sync))


def may_shrink(current: Collection[str], wanted: Collection[str], min_in_sync: int) -> bool:
    """Whether the set may go from `current` to `wanted`: never below
    `min_in_sync`, unless it was smaller already (a set may grow back)."""
    return len(wanted) >= min_in_sync or len(wanted) >= len(current)


def initial(me: str, current: Collection[str] | None, up: Collection[str],
            min_in_sync: int, yielded: str | None = None) -> tuple[str, ...]:
    """The set a new leader starts with: the one etcd holds (itself alone
    for a new group) without the members that are not up, nor the leader
    that yielded because it was cut off - they cannot answer, and waiting
    for them to time out would only delay the first confirm - but never
    below `min_in_sync`: then the absent ones stay, to be counted out one
    by one as others catch up."""
    current = tuple(current) if current is not None else (me,)
    kept = tuple(name for name in current
                 if name == me or (name in up and name != yielded))
    if len(kept) < min_in_sync:
        kept = tuple(dict.fromkeys((me, *current)))
    elif me not in kept:
        kept = (me, *kept)
    return kept


def stalled_since(replicated: int, lsn: int, shipped_at: Callable[[int], float | None],
                  moved_at: float) -> float | None:
    """Since when confirms have waited: the time the oldest frame not yet on
    every in-sync copy was shipped (or, when it is no longer kept, the last
    time the frontier moved); None when nothing waits."""
    if replicated >= lsn:
        return None
    shipped = shipped_at(replicated + 1)
    return shipped if shipped is not None else moved_at


def yield_after(lag_timeout: float) -> float:
    """How long a leader's confirms may stall before it gives up its lead:
    long enough for it to count a late follower out first (one lag timeout,
    then the next check) where the set has room for that."""
    return 2 * lag_timeout + 0.5


def should_yield(now: float, stalled: float | None, bound: float,
                 successors: Collection[str]) -> bool:
    """Whether a leader stalled since `stalled` yields: past `bound`, and
    only when another member of the in-sync set (`successors`: in the set
    and up, as etcd says) can lead with everything confirmed."""
    return stalled is not None and now - stalled >= bound and bool(successors)
