"""The queue's arrivals part: when its messages arrived, to the second,
without a clock read or a field per message on the publish path.

A mark (seq, ms) says: every message numbered below `seq` had arrived by
`ms`.  The broker marks each queue once a second (when messages arrived
since the last mark), so the age of the message numbered `seq` is at least
the age of the first mark above it: a lower bound, late by at most a tick,
never early, which is what an alert on age wants.  Marks at or below the
oldest message still in the queue say nothing and go; when a queue keeps a
message for long under steady traffic, every other old mark goes too, so
the marks stay few and the bound for older messages gets coarser (at most
`CAP` marks a queue).  Marks live in memory: after a restart the
recovered messages count as arrived at the broker's start.

Interface (the queue calls it):

    mark(next_seq, now)     a tick: messages below next_seq had arrived by now
    arrived_by(seq)         ms by which message `seq` had arrived, or None
                            (it arrived after the last mark)
    forget_below(seq)       nothing numbered below `seq` is in the queue
"""

from __future__ import annotations

from bisect import bisect_right

CAP = 512


class Arrivals:
    # Two short lists, not deques: an empty deque is 10 times the size of an
    # empty list, and every queue has this part.
    __slots__ = ("_seqs", "_times")

    def __init__(self) -> None:
        self._seqs: list[int] = []
        self._times: list[float] = []

    def mark(self, next_seq: int, now: float) -> None:
        if self._seqs and self._seqs[-1] >= next_seq:
            return  # nothing arrived since the last mark
        self._seqs.append(next_seq)
        self._times.append(now)
        if len(self._seqs) > CAP:
            self._thin()

    def arrived_by(self, seq: int) -> float | None:
        seqs = self._seqs
        index = bisect_right(seqs, seq)
        if index == len(seqs):
            return None
        return self._times[index]

    def forget_below(self, seq: int) -> None:
        """Marks at or below `seq` bound no message left (the first mark
        above the oldest message is the one that answers for it)."""
        index = bisect_right(self._seqs, seq)
        if index:
            del self._seqs[:index]
            del self._times[:index]

    def _thin(self) -> None:
        """Every other mark of the older half goes: a message between two
        kept marks is then bounded by the later one, still never early."""
        seqs, times = self._seqs, self._times
        half = len(seqs) // 2
        keep = [i for i in range(len(seqs)) if i >= half or i % 2 == 1]
        self._seqs = [seqs[i] for i in keep]
        self._times = [times[i] for i in keep]

    def __len__(self) -> int:
        return len(self._seqs)

