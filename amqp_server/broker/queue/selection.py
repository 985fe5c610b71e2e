"""The queue's selection part: chosen ready messages taken out by seq, for
the dead-letter workbench (redrive, move, delete).

A withdrawn message is out of reach of consumers and counted as
unacknowledged, as a basic.get without its ack would be, but nothing is
marked delivered: its redelivered flag and counts stay as they were, and a
crash before it is settled brings it back untouched from the store.  It is
then either discarded (it went elsewhere, or was deleted) or restored to
its old place.

Interface (the queue calls it):

    pick(ready, seqs)     the entries of `ready` (in memory, in delivery
                          order) whose seq is in `seqs`
    withdrawn(entries)    these were taken out
    settled(entries)      these were discarded or restored
    out                   how many are withdrawn now

It owns the count of withdrawn messages; the task that withdrew them holds
the entries."""

from __future__ import annotations

from ..message import Entry


class Selection:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = 0

    @staticmethod
    def pick(ready, seqs) -> list[Entry]:
        wanted = set(seqs)
        return [entry for entry in ready if entry.seq in wanted]

    def withdrawn(self, entries: list[Entry]) -> None:
        self.out += len(entries)

    def settled(self, entries: list[Entry]) -> None:
        self.out -= len(entries)
