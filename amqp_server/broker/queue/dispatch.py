"""The queue's dispatch part: which consumer gets the next message.

- `RoundRobin`: consumers with room take turns (a deque, rotated: the hot
  path stays in C).
- `PriorityGroups` (`x-priority` on basic.consume): consumers of the
  highest priority get messages while they have prefetch room; lower ones
  only when every higher one is full; equals take turns.
- `SingleActive` (`x-single-active-consumer`): one consumer gets
  everything; when it goes, the next in registration order takes over.

Each answers the queue's few questions: `next_with_room()` (rotating), the
`sole()` consumer that may take a whole batch, `add`/`discard`, and len()
and iteration over every consumer registered.
"""

from __future__ import annotations

from collections import deque


class RoundRobin(deque):
    __slots__ = ()

    def add(self, consumer) -> None:
        self.append(consumer)

    def discard(self, consumer) -> bool:
        try:
            self.remove(consumer)
        except ValueError:
            return False
        return True

    def next_with_room(self):
        """The next consumer in turn that may take a message, or None."""
        for _ in range(len(self)):
            consumer = self[0]
            self.rotate(-1)
            if consumer.can_take():
                return consumer
        return None

    def sole(self):
        return self[0] if len(self) == 1 else None

    def is_active(self, consumer) -> bool:
        return True


class PriorityGroups:
    """Round robin within each priority, higher priorities served first."""

    def __init__(self) -> None:
        self.groups: list[tuple[int, RoundRobin]] = []  # highest priority first

    @classmethod
    def of(cls, consumers) -> PriorityGroups:
        """Consumers so far, now kept by priority (the first one to give a
        priority turns a queue's round robin into this)."""
        groups = cls()
        for consumer in consumers:
            groups.add(consumer)
        return groups

    def add(self, consumer) -> None:
        priority = consumer.priority
        for index, (level, group) in enumerate(self.groups):
            if level == priority:
                group.add(consumer)
                return
            if level < priority:
                self.groups.insert(index, (priority, RoundRobin([consumer])))
                return
        self.groups.append((priority, RoundRobin([consumer])))

    def discard(self, consumer) -> bool:
        for index, (_, group) in enumerate(self.groups):
            if group.discard(consumer):
                if not group:
                    del self.groups[index]
                return True
        return False

    def next_with_room(self):
        for _, group in self.groups:
            consumer = group.next_with_room()
            if consumer is not None:
                return consumer
        return None

    def sole(self):
        return self.groups[0][1][0] if len(self) == 1 else None

    def is_active(self, consumer) -> bool:
        return True

    def __len__(self) -> int:
        return sum(len(group) for _, group in self.groups)

    def __bool__(self) -> bool:
        return bool(self.groups)

    def __iter__(self):
        for _, group in self.groups:
            yield from group


class SingleActive:
    """One consumer at a time: the first registered.  When it goes, a
    classic queue's successor is the waiting consumer of the highest
    x-priority, then the earliest (rabbit_queue_consumers); a quorum
    queue's is the earliest (rabbit_fifo, 3.13)."""

    def __init__(self, by_priority: bool) -> None:
        self.by_priority = by_priority
        self.waiting: list = []  # registration order
        self.active = None

    def add(self, consumer) -> None:
        self.waiting.append(consumer)
        if self.active is None:
            self.active = consumer

    def discard(self, consumer) -> bool:
        try:
            self.waiting.remove(consumer)
        except ValueError:
            return False
        if consumer is self.active:
            self.active = self._successor()
        return True

    def _successor(self):
        if not self.waiting:
            return None
        if not self.by_priority:
            return self.waiting[0]
        return max(self.waiting, key=lambda consumer: consumer.priority)  # the earliest of ties

    def next_with_room(self):
        active = self.active
        return active if active is not None and active.can_take() else None

    def sole(self):
        return self.active

    def is_active(self, consumer) -> bool:
        return consumer is self.active

    def __len__(self) -> int:
        return len(self.waiting)

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def __iter__(self):
        return iter(list(self.waiting))
