"""The broker's clock and its one timer service.

Queues ask for a callback at a wall-clock time (message deadlines are wall
clock, as RabbitMQ's are, so they can survive a restart).  Until the asyncio
shell attaches a loop nothing fires; unit tests drive queues with an explicit
`now` instead.
"""

from __future__ import annotations

import time
from typing import Callable


def now_ms() -> float:
    return time.time() * 1000.0


class Timers:
    def __init__(self) -> None:
        self._loop = None

    def attach(self, loop) -> None:
        self._loop = loop

    def call_at(self, when_ms: float, callback: Callable[[], None]):
        """Run `callback` at wall-clock `when_ms`; returns a cancellable handle
        or None when no loop is attached."""
        if self._loop is None:
            return None
        delay = max(0.0, (when_ms - now_ms()) / 1000.0)
        return self._loop.call_later(delay, callback)

    def call_every(self, seconds: float, callback: Callable[[], None]):
        """Run `callback` every `seconds` until the returned handle is cancelled."""
        if self._loop is None:
            return None
        return _Repeating(self._loop, seconds, callback)


class _Repeating:
    def __init__(self, loop, seconds: float, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._seconds = seconds
        self._callback = callback
        self._handle = loop.call_later(seconds, self._fire)

    def _fire(self) -> None:
        self._handle = self._loop.call_later(self._seconds, self._fire)
        self._callback()

    def cancel(self) -> None:
        self._handle.cancel()
