"""What storage needs to know of replication, and nothing more.

A clustered leader ships every change its storage writes (message store
flushes, definition log records, the policies document, dead-letter log
events) to its followers as one ordered stream of frames, each numbered by
a log sequence number (LSN).  Storage does not know who the followers are;
it hands each change to a `Shipping` and asks it how far the stream is on
disk on every in-sync follower (`replicated`).  A position of a local log
(a message store generation, a count of definition changes) counts as
synced only once it is on the local disk *and* the frame that shipped it is
replicated: that is what makes a publisher confirm mean "on every in-sync
copy" without the channel knowing about clustering.

Without a Shipping (a single node) nothing here is used and every log is
synced when it is on the local disk, as before.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class Shipping(Protocol):
    """The leader's replication stream, as storage sees it."""

    # The highest LSN on disk on every in-sync follower, and allowed to be
    # confirmed (it stops moving while the leader's lease is in doubt or
    # the in-sync set is below its minimum).
    replicated: int

    def ship(self, frame: list) -> int:
        """Queue `frame` (a list whose second item is filled in with its
        LSN) for every follower, on the event loop's thread; returns the LSN."""

    def ship_from_thread(self, frame: list, shipped) -> None:
        """`ship`, from a worker thread: `shipped(lsn)` is then called on
        the loop's thread, in the order the frames were handed over."""

    def watch(self, owner) -> None:
        """`owner.replication_progress()` is called on the loop whenever
        `replicated` moves forward."""


class ReplicatedPositions:
    """A local log's positions paired with the LSNs that shipped them.

    `synced(local)` is the highest position that is on the local disk
    (at most `local`) and whose frame, and every earlier one, is replicated.
    Positions are shipped in increasing order, so one deque suffices."""

    def __init__(self, shipping: Shipping, start: int = 0) -> None:
        self.shipping = shipping
        self._pending: deque[tuple[int, int]] = deque()
        self._synced = start  # positions before shipping began need no copy

    def shipped(self, position: int, lsn: int) -> None:
        self._pending.append((position, lsn))

    def synced(self, local: int) -> int:
        replicated = self.shipping.replicated
        pending = self._pending
        while pending and pending[0][0] <= local and pending[0][1] <= replicated:
            self._synced = pending.popleft()[0]
        if not pending:
            # Nothing shipped is waiting: what is on the local disk is
            # everything there is (a position with no frame of its own,
            # such as a compaction's, is covered by the ones before it).
            self._synced = max(self._synced, local)
        return min(self._synced, local)
