"""The broker's clock and its one timer service.

Queues ask for a callback at a wall-clock time (message deadlines are wall
clock, as RabbitMQ's are, so they can survive a restart).  Until the asyncio
shell attaches a loop nothing fires; unit tests drive queues with an explicit
`now` instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable


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


class Alarm:
    """One callback at the earliest of the times asked for: asking for a
    later time while an earlier one is pending changes nothing (a queue's
    next expiry, its next delayed redelivery)."""

    __slots__ = ("_timers", "_callback", "_handle", "at")

    def __init__(self, timers: Timers, callback: Callable[[], None]) -> None:
        self._timers = timers
        self._callback = callback
        self._handle = None
        self.at: float | None = None

    def arm(self, when_ms: float) -> None:
        if self.at is not None and self.at <= when_ms:
            return
        if self._handle is not None:
            self._handle.cancel()
        self.at = when_ms
        self._handle = self._timers.call_at(when_ms, self._fire)

    def _fire(self) -> None:
        self._handle = self.at = None
        self._callback()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self.at = None
