"""The queues a virtual host auto-created for Artemis dead letter and expiry
addresses (`DLQ.<address>`, `EXP.<address>`), deleted once unused, as the
seed says: "the queue is auto-created which means it will be auto-deleted
as per the relevant address-settings".

Whether one is unused is decided in `dlx/addresses.py` from the queue's own
settings (a policy or the address settings matching its name).  As Artemis
does, it is checked when its last consumer leaves (again after
`auto-delete-queues-delay`) and by a periodic scan (Artemis's
`address-queue-scan-period`), which also finds one emptied by basic.get or
a purge, or that never had a consumer.
"""

from __future__ import annotations

from collections.abc import Callable

from dlx.addresses import auto_created_queue_unused

from .timers import Timers, now_ms


class AutoCreatedQueues:
    def __init__(self, timers: Timers, delete: Callable[[object], object]) -> None:
        self._timers = timers
        self._delete = delete
        self._queues: set = set()

    def adopt(self, queue) -> None:
        queue.auto_created = True
        self._queues.add(queue)

    def forget(self, queue) -> None:
        self._queues.discard(queue)

    def consumer_left(self, queue) -> None:
        """The last consumer of an auto-created queue went."""
        if not self.check(queue) and queue.settings.auto_delete_queues_delay:
            self._after_delay(queue, queue.consumers_gone_at)

    def _after_delay(self, queue, gone_at: float) -> None:
        """Check again once the delay has passed since `gone_at` (and again
        should the timer fire early: uvloop's have millisecond grain)."""
        def fire() -> None:
            if (not self.check(queue) and not queue.consumers
                    and queue.consumers_gone_at == gone_at and now_ms() < due):
                self._after_delay(queue, gone_at)
        due = gone_at + queue.settings.auto_delete_queues_delay
        self._timers.call_at(due + 1, fire)

    def check(self, queue, now: float | None = None) -> bool:
        """Delete the queue if it is unused; whether it was."""
        if queue.deleted:
            return False
        now = now_ms() if now is None else now
        gone_at = queue.consumers_gone_at
        messages = queue.message_count + queue.unacked + queue.delayed_count
        if not auto_created_queue_unused(queue.settings, len(queue.consumers), messages,
                                         None if gone_at is None else now - gone_at):
            return False
        self._delete(queue)
        return True

    def scan(self) -> int:
        """Check every auto-created queue; how many were deleted."""
        now = now_ms()
        return sum(self.check(queue, now) for queue in list(self._queues))
