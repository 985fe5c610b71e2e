"""What a channel writes to its connection, some of it held until what it
promises is on disk.

Owns: the frames held back (tx.commit-ok, deliveries counted before they
go out, replies of a clustered leader), each with the store generation and
the definition log generation it waits for, in the order they were to go.
Needs: the connection (`write`), the broker (its message store, read when
asked, since it may be opened after the channel), the definition log, and
the waiter the stores call back once they synced (the channel, whose
`durable_progress` calls `release` here).

Interface: `send` (a reply), `write` (at once), `write_when_on_disk`,
`on_disk`, `wait_for_disk`, `release`, `close`.
"""

from __future__ import annotations

from collections import deque

from ...wire import frames


class ChannelOutput:
    __slots__ = ("number", "_conn", "_broker", "_journal", "_waiter", "_held", "write")

    def __init__(self, number: int, connection, journal, waiter) -> None:
        self.number = number
        self._conn = connection
        self._broker = connection.broker
        self._journal = journal
        self._waiter = waiter
        # (store generation, definition log generation, frames), in order.
        self._held: deque[tuple[int, int, bytes]] = deque()
        self.write = connection.write  # frames that need not wait

    def send(self, method) -> None:
        """A reply to the client."""
        frame = frames.method_frame(self.number, method)
        journal = self._journal
        if self._held or (journal.replicating and journal.written > journal.synced):
            # A clustered leader: what a reply promises (a durable queue
            # declared, a binding made) is on every in-sync copy before the
            # reply goes; later replies wait behind it, in order.
            self._held.append((0, journal.written, frame))
            self.wait_for_disk(0, journal.written)
            return
        self._conn.write(frame)

    def write_when_on_disk(self, generation: int, definitions: int, data: bytes) -> None:
        """`data` once the store has synced `generation` and the definition
        log `definitions`, and after everything held before it."""
        if self._held or not self.on_disk(generation, definitions):
            self._held.append((generation, definitions, data))
            self.wait_for_disk(generation, definitions)
        else:
            self._conn.write(data)

    def on_disk(self, generation: int, definitions: int) -> bool:
        return ((not generation or generation <= self._broker.store.synced)
                and definitions <= self._journal.synced)

    def wait_for_disk(self, generation: int, definitions: int) -> None:
        """Have the waiter called back when the stores have synced these."""
        if generation and generation > self._broker.store.synced:
            self._broker.store.wait(self._waiter)
        if definitions > self._journal.synced:
            self._journal.wait(self._waiter)

    def pending_definitions(self) -> int:
        """The definition log generation a promise made now must wait for."""
        return self._journal.pending()

    def release(self) -> None:
        """The stores synced: write what is on disk now, in order."""
        held = self._held
        while held and self.on_disk(held[0][0], held[0][1]):
            self._conn.write(held.popleft()[2])
        if held:
            self.wait_for_disk(held[0][0], held[0][1])

    def holding(self) -> bool:
        return bool(self._held)

    def close(self) -> None:
        """The channel closed: what was held is never sent (its unacked
        messages went back to their queues)."""
        self._held.clear()
