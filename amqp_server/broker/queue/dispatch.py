"""The queue's dispatch part: which consumer gets the next message.

- `RoundRobin`: consumers with room take turns (a deque, rotated: the hot
  path stays in C).
- `PriorityGroups` (`x-priority` on basic.consume): consumers of the
  highest priority get messages while they have prefetch room; lower ones
  only when every higher one is full; equals take turns.
- `SingleActive` (`x-single-active-consumer`): one consumer gets
  everything; when it goes, the next in registration order takes over.
- `SingleActiveByPriority`: a RabbitMQ 4.3 quorum queue's single active
  consumer, which a waiting consumer of a higher `x-priority` takes over.

Each answers the queue's few questions: `next_with_room()` (rotating), the
`sole()` consumer that may take a whole batch, `add`/`discard`, and len()
and iteration over every consumer registered.  A consumer in a 4.3
consumer timeout (its `timed_out` tags) says it cannot take; a single
active one is also told (`timed_out`, `resumed`), as it steps aside.
"""

from __future__ import annotations

import itertools
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


# rabbit_fifo_client's ?UNLIMITED_PREFETCH_COUNT: the credit a consumer
# without a prefetch checks out with, which orders waiting consumers.
UNLIMITED_CREDIT = 2000


def _credit(consumer) -> int:
    return consumer.prefetch or UNLIMITED_CREDIT


class SingleActiveByPriority:
    """A RabbitMQ 4.3 quorum queue's single active consumer (rabbit_fifo
    since 4.0, v4.3.5's activate_next_consumer/2 and sort_waiting/1).

    Waiting consumers are kept in rabbit_fifo's order: those not in a
    consumer timeout first, by x-priority (highest first), then by credit
    (the prefetch, 2000 without one: the larger first), then the earliest
    attached; those in a timeout after them, in the order they came.  The
    first of them becomes active when there is no active one.  One of a
    higher priority than the active consumer takes over at once if the
    active one holds no unsettled delivery; otherwise the active one
    quiesces: it takes nothing more, and once it holds nothing it waits
    again (update_or_remove_con/4) and the first waiting one is active.
    An active consumer that times out steps aside the same way.

    What the active consumer holds changes as its channel settles, so the
    activation is checked whenever the queue asks who may take (as
    rabbit_fifo checks after every settle, return and checkout)."""

    def __init__(self) -> None:
        self._active = None
        self.quiescing = False  # the active one takes nothing more
        self.waiting: list = []  # rabbit_fifo's waiting_consumers order
        self._attached: dict = {}  # consumer -> its attach number (consumer key)
        self._numbers = itertools.count()

    @property
    def active(self):
        self._activate()
        return self._active

    def add(self, consumer) -> None:
        self._attached[consumer] = next(self._numbers)
        self._wait(consumer)
        self._activate()

    def discard(self, consumer) -> bool:
        if consumer not in self._attached:
            return False
        del self._attached[consumer]
        if consumer is self._active:
            self._active = None
            self.quiescing = False
        else:
            self.waiting.remove(consumer)
        self._activate()
        return True

    def timed_out(self, consumer) -> None:
        """`consumer` is in a consumer timeout: if active, it waits behind
        those that are not (rabbit_fifo's evaluate_consumer_timeout moves it
        to waiting_consumers)."""
        if consumer is self._active:
            self._active = None
            self.quiescing = False
            self._wait(consumer)
        elif consumer in self._attached:
            self._sort()
        self._activate()

    def resumed(self, consumer) -> None:
        """Its client settled what timed out: it takes its place by
        priority again (handle_waiting_timedout_consumers/4)."""
        if consumer in self._attached and consumer is not self._active:
            self._sort()
        self._activate()

    def _wait(self, consumer) -> None:
        self.waiting.append(consumer)
        self._sort()

    def _sort(self) -> None:
        # Stable: those in a timeout keep their order, as sort_waiting/1's
        # comparison leaves them.
        self.waiting.sort(key=self._rank)

    def _rank(self, consumer) -> tuple:
        if consumer.timed_out:
            return (1, 0, 0, 0)
        return (0, -consumer.priority, -_credit(consumer), self._attached[consumer])

    def _activate(self) -> None:
        """activate_next_consumer/2."""
        active = self._active
        if active is not None and self.quiescing and not active.unacked:
            # It settled what it held: it waits again, not in a timeout.
            self._active = None
            self.quiescing = False
            self._wait(active)
            active = None
        waiting = self.waiting
        if not waiting or waiting[0].timed_out:
            return
        head = waiting[0]
        if active is None:
            del waiting[0]
            self._active = head
        elif head.priority > active.priority and not self.quiescing:
            if active.unacked:
                self.quiescing = True
            else:
                del waiting[0]
                self._active = head
                self._wait(active)

    def next_with_room(self):
        self._activate()
        active = self._active
        if active is None or self.quiescing:
            return None
        return active if active.can_take() else None

    def sole(self):
        self._activate()
        return None if self.quiescing else self._active

    def is_active(self, consumer) -> bool:
        self._activate()
        return consumer is self._active

    def __contains__(self, consumer) -> bool:
        return consumer in self._attached

    def __len__(self) -> int:
        return len(self._attached)

    def __bool__(self) -> bool:
        return bool(self._attached)

    def __iter__(self):
        return iter(list(self._attached))


def is_single_active(consumers) -> bool:
    return isinstance(consumers, (SingleActive, SingleActiveByPriority))
