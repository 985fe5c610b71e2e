"""The queue's ordering part: which ready message leaves next.

`FifoReady` is publish order (a deque, so the hot path stays in C): a
classic queue puts a returned message back where it was, by its per-queue
sequence number; a quorum queue puts it at the head.  `PriorityReady`
(`x-max-priority`) keeps one such FIFO per priority and serves the highest
first; a message without a priority counts as 0, one above the maximum as
the maximum (rabbit_priority_queue).  `StrictPriorityReady` is a RabbitMQ
4.3 quorum queue's: 32 priorities and a returns queue served first.

Interface (the queue calls it; both take the same calls):

    append(entry), extend(entries)    at the tail
    popleft(), [0]                    take, or look at, the head
    pop()                             the last to leave (paging out a tail)
    put_back(entries, at_head)        returned messages
    drop(doomed)                      the entries whose id() is in `doomed` go
    len(), iteration, clear()         in delivery order
    lane_count, lane_of(entry), lane_of_header(header)
                                      the page lane an entry goes to (paging.py):
                                      a FIFO queue has one, a priority queue one
                                      per priority
    watch(refill)                     once the queue pages: `refill(lane)` reads a
                                      lane back if anything is paged in it (a
                                      priority queue asks before it serves a
                                      lower priority from memory)

It owns the ready messages in memory."""

from __future__ import annotations

import bisect
from collections import deque
from operator import attrgetter

from ...wire.properties import message_priority
from ..message import HEADER_PREFIX, Entry

_SEQ = attrgetter("seq")


class FifoReady(deque):
    __slots__ = ()
    lane_count = 1

    @staticmethod
    def lane_of(entry: Entry) -> int:
        return 0

    @staticmethod
    def lane_of_header(header: bytes) -> int:
        return 0

    @staticmethod
    def watch(refill) -> None:
        """The queue reads its one lane back itself when the head runs dry."""

    def put_back(self, entries: list[Entry], at_head: bool) -> None:
        """Returned messages: at the head (quorum), or back in their places."""
        if at_head:
            self.extendleft(reversed(entries))
            return
        entries = sorted(entries, key=_SEQ)
        if not self or entries[-1].seq < self[0].seq:
            self.extendleft(reversed(entries))
        else:
            for entry in entries:
                self.insert(bisect.bisect_left(self, entry.seq, key=_SEQ), entry)

    def drop(self, doomed: set[int]) -> None:
        """Remove the entries whose id() is in `doomed`, wherever they are."""
        kept = [entry for entry in self if id(entry) not in doomed]
        self.clear()
        self.extend(kept)


class PriorityReady:
    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        self.levels = [FifoReady() for _ in range(max_priority + 1)]
        self.lane_count = max_priority + 1
        self._count = 0
        # Set once the queue pages: reads a level's paged messages back,
        # if it has any (they go before lower levels).
        self._refill = None

    def watch(self, refill) -> None:
        self._refill = refill

    def level_of(self, priority: int | None) -> int:
        return min(priority or 0, self.max_priority)

    def lane_of(self, entry: Entry) -> int:
        return self.level_of(message_priority(entry.message.header, HEADER_PREFIX))

    def lane_of_header(self, header: bytes) -> int:
        return self.level_of(message_priority(header, HEADER_PREFIX))

    def _level(self, entry: Entry) -> FifoReady:
        return self.levels[self.lane_of(entry)]

    def _top(self) -> FifoReady | None:
        """The level served next: the highest holding anything, in memory
        or paged (read back first)."""
        refill = self._refill
        for index in range(self.max_priority, -1, -1):
            level = self.levels[index]
            if level:
                return level
            if refill is not None and refill(index):
                return level
        return None

    def append(self, entry: Entry) -> None:
        self._level(entry).append(entry)
        self._count += 1

    def extend(self, entries) -> None:
        for entry in entries:
            self.append(entry)

    def popleft(self) -> Entry:
        level = self._top()
        if not level:
            raise IndexError("pop from an empty queue")
        self._count -= 1
        return level.popleft()

    def pop(self) -> Entry:
        """The last to leave: the newest of the lowest priority."""
        for level in self.levels:
            if level:
                self._count -= 1
                return level.pop()
        raise IndexError("pop from an empty queue")

    def __getitem__(self, index: int) -> Entry:
        if index == 0 and self._refill is not None:
            self._top()  # the head may be a higher priority read back
        if index < 0:
            index += self._count
        for level in reversed(self.levels):
            if index < len(level):
                return level[index]
            index -= len(level)
        raise IndexError("queue index out of range")

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self):
        for level in reversed(self.levels):
            yield from level

    def clear(self) -> None:
        for level in self.levels:
            level.clear()
        self._count = 0

    def put_back(self, entries: list[Entry], at_head: bool) -> None:
        """Each returned message goes back into its own priority."""
        by_level: dict[int, list[Entry]] = {}
        for entry in entries:
            by_level.setdefault(id(self._level(entry)), []).append(entry)
        for level in self.levels:
            mine = by_level.get(id(level))
            if mine:
                level.put_back(mine, at_head)
        self._count += len(entries)

    def drop(self, doomed: set[int]) -> None:
        for level in self.levels:
            level.drop(doomed)
        self._count = sum(map(len, self.levels))


class StrictPriorityReady(PriorityReady):
    """A RabbitMQ 4.3 quorum queue's order (rabbit_fifo v8): every message
    has one of 32 priorities, its own clamped to 0-31 or 4 without one
    (rabbit_fifo:msg_priority/1), the highest served first
    (rabbit_fifo_pq); messages that came back wait in a returns queue of
    their own, in the order they came back, served before any priority
    (take_next_msg/1).  A plain return with no delivery limit is a new
    message at priority 4 (`append_requeued`: the #requeue command).
    Paged messages go in a lane per priority; returns are never paged."""

    def __init__(self) -> None:
        super().__init__(MAX_PRIORITY_4_3)
        self.returns = FifoReady()

    def level_of(self, priority: int | None) -> int:
        return DEFAULT_PRIORITY_4_3 if priority is None else min(priority, MAX_PRIORITY_4_3)

    def by_priority(self) -> dict[int, int]:
        """Messages waiting at each priority that has any (in memory)."""
        return {level: len(queue) for level, queue in enumerate(self.levels) if queue}

    def append_requeued(self, entry: Entry) -> None:
        self.levels[DEFAULT_PRIORITY_4_3].append(entry)
        self._count += 1

    def popleft(self) -> Entry:
        if self.returns:
            self._count -= 1
            return self.returns.popleft()
        return super().popleft()

    def pop(self) -> Entry:
        if self._count == len(self.returns):
            self._count -= 1
            return self.returns.pop()
        return super().pop()

    def __getitem__(self, index: int) -> Entry:
        returns = self.returns
        if index < 0:
            index += self._count
        if index < len(returns):
            return returns[index]
        return super().__getitem__(index - len(returns))

    def __iter__(self):
        yield from self.returns
        yield from super().__iter__()

    def clear(self) -> None:
        super().clear()
        self.returns.clear()

    def put_back(self, entries: list[Entry], at_head: bool) -> None:
        """Returned messages join the returns queue, behind earlier ones
        (rabbit_fifo:return_one/8: lqueue:in)."""
        self.returns.extend(entries)
        self._count += len(entries)

    def drop(self, doomed: set[int]) -> None:
        self.returns.drop(doomed)
        for level in self.levels:
            level.drop(doomed)
        self._count = len(self.returns) + sum(map(len, self.levels))


# rabbit_fifo.erl: ?MAX_PRIORITY (rabbit_fifo_pq's 32 levels) and ?DEFAULT_PRIORITY.
MAX_PRIORITY_4_3 = 31
DEFAULT_PRIORITY_4_3 = 4


def ready_for(max_priority: int | None, strict: bool = False):
    """The ordering a queue declared with these arguments keeps.  As 3.13.4
    and later (rabbit_priority_queue:priorities/1), x-max-priority 0 still
    makes two levels, 0 and 1; earlier releases made it plain FIFO.
    `strict`: a 4.3 quorum queue's (StrictPriorityReady)."""
    if strict:
        return StrictPriorityReady()
    if max_priority is None:
        return FifoReady()
    return PriorityReady(max(1, max_priority))
