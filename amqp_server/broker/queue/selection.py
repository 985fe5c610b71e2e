"""The queue's selection part: chosen ready messages taken out by seq, for
the dead-letter workbench (redrive, move, delete).

A withdrawn message is out of reach of consumers and counted as
unacknowledged, as a basic.get without its ack would be, but nothing is
marked delivered: its redelivered flag and counts stay as they were, and a
crash before it is settled brings it back untouched from the store.  It is
then either discarded (it went elsewhere, or was deleted) or restored to
its old place."""

from __future__ import annotations

from ..message import Entry


class SelectionPart:
    def withdraw(self, seqs) -> list[Entry]:
        """The ready messages in memory whose seq is in `seqs`, taken out in
        delivery order; seqs no longer ready (consumed, expired, paged) are
        left out."""
        wanted = set(seqs)
        chosen = [entry for entry in self.ready if entry.seq in wanted]
        if not chosen:
            return []
        self.ready.drop({id(entry) for entry in chosen})
        self.ready_bytes -= sum(len(entry.message.body) for entry in chosen)
        self.unacked += len(chosen)
        if not self.ready and self.paged_count:
            self._page_in()
        return chosen

    def discard_withdrawn(self, entries: list[Entry]) -> None:
        """Withdrawn messages leave for good (the store forgets them)."""
        if entries:
            self.unacked -= len(entries)
            self._forget(entries)

    def restore_withdrawn(self, entries: list[Entry]) -> None:
        """Withdrawn messages go back where they were, flags unchanged."""
        if not entries:
            return
        self.unacked -= len(entries)
        if self.deleted:
            self._forget(entries)
            return
        self.ready_bytes += sum(len(entry.message.body) for entry in entries)
        self.ready.put_back(entries, False)
        if self.consumers:
            self.dispatch()
