"""A lease kept alive, and the moment it can no longer be trusted
(etcd's concurrency.Session).

Every claim a node makes in etcd - its membership key, its place in an
election - is a key on its session's lease, so that etcd deletes them all
when the node stops renewing.  The owner must learn that the lease is gone
*before* etcd could hand its claims to another node, because a leader that
keeps confirming after that would confirm at the same time as its successor.

The rule: a renewal sent at local time `t` that etcd answers with TTL `T`
keeps the lease alive on etcd's side until at least `t + T` (etcd starts the
new TTL when the renewal arrives, which is after `t`; it revokes expired
leases on a 500 ms tick, later still; a new etcd leader extends every lease).
So `deadline = t + T` of the last answered renewal is a time before which no
other node can hold our claims, and `alive()` - a plain clock comparison,
with a small `margin` for the time between the check and the socket write -
is what the broker asks right before it sends a confirm.  The timer that
fires `on_lost` at the deadline tells the owner as soon as the loop runs;
`alive()` is the check that holds even when the process was stopped (SIGSTOP)
past its deadline and the loop has not yet run that timer: time.monotonic()
keeps counting while the process is stopped.

Renewals go every TTL/3 (as etcd's own client does) and, when one fails,
again every 200 ms through the client's failover until the deadline.  A
renewal answered with TTL 0 means etcd already dropped the lease (it expired,
or a follower revoked it): lost at once.  A lost session stays lost; the
owner starts a new one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Self

from .etcd import EtcdClient, EtcdError

__all__ = ["DEFAULT_TTL", "Session"]

log = logging.getLogger("amqp_server.cluster")

# Seconds.  etcd raises any smaller TTL to 1.5 election timeouts rounded up:
# 4 s for an etcd started with --election-timeout 2500 (see grant()).
DEFAULT_TTL = 4

RETRY_INTERVAL = 0.2
CLOSED = "the session was closed"


class Session:
    """`await start()` grants the lease and starts renewing it; `alive()`
    says whether it can still be trusted; `lost` is set and every `on_lost`
    callback called (with a one-line reason) the moment it cannot."""

    def __init__(self, client: EtcdClient, ttl: int = DEFAULT_TTL, *,
                 margin: float | None = None) -> None:
        self.client = client
        self.requested_ttl = ttl
        self.ttl = 0               # as granted, once started
        self.lease = 0
        self.margin = margin
        self.lost = asyncio.Event()
        self.reason: str | None = None
        self._deadline = 0.0
        self._callbacks: list[Callable[[str], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._problem = ""
        self._renewed = 0.0

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call `callback(reason)` once when the session is lost (at once if
        it already is)."""
        if self.reason is not None:
            callback(self.reason)
        else:
            self._callbacks.append(callback)

    async def start(self) -> None:
        sent = time.monotonic()
        self.lease, self.ttl = await self.client.grant(self.requested_ttl)
        if self.ttl != self.requested_ttl:
            log.info("etcd granted a lease TTL of %d s instead of %d s (its minimum for "
                     "its election timeout)", self.ttl, self.requested_ttl)
        if self.margin is None:
            self.margin = self.ttl / 20
        self._renewed = sent
        self._extend(sent + self.ttl)
        self._task = asyncio.get_running_loop().create_task(self._keep_alive())

    @property
    def deadline(self) -> float:
        """time.monotonic() after which the lease may be gone in etcd."""
        return self._deadline

    def alive(self) -> bool:
        return self.reason is None and time.monotonic() < self._deadline - (self.margin or 0)

    async def close(self, revoke: bool = True) -> None:
        """Stop renewing and, with `revoke`, drop the lease (and every key on
        it) in etcd at once rather than when it runs out."""
        lease, had = self.lease, self.reason is None and self.lease != 0
        self._lose(CLOSED)
        if revoke and had:
            try:
                await self.client.revoke(lease, timeout=min(self.client.timeout, 2.0))
            except EtcdError as exc:
                log.warning("could not revoke lease %x on close: %s", lease, exc)

    def _extend(self, deadline: float) -> None:
        if deadline <= self._deadline:
            return
        self._deadline = deadline
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, deadline - (self.margin or 0) - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        if self.reason is not None:
            return
        left = self._deadline - (self.margin or 0) - time.monotonic()
        if left > 0:  # the loop may run a timer a little early
            self._timer = asyncio.get_running_loop().call_later(left, self._expire)
            return
        problem = f"; {self._problem}" if self._problem else ""
        self._lose(f"lease {self.lease:x} could not be renewed before it ran out (last renewed "
                   f"{time.monotonic() - self._renewed:.1f} s ago{problem})")

    async def _keep_alive(self) -> None:
        wait = self.ttl / 3
        while self.reason is None:
            await asyncio.sleep(wait)
            sent = time.monotonic()
            left = self._deadline - (self.margin or 0) - sent
            if left <= 0:
                self._expire()
                return
            try:
                ttl = await self.client.keepalive(self.lease, timeout=left)
            except EtcdError as exc:
                self._problem = str(exc)
                wait = RETRY_INTERVAL
                continue
            if ttl <= 0:
                self._lose(f"lease {self.lease:x} expired or was revoked in etcd")
                return
            self._problem = ""
            self._renewed = sent
            self._extend(sent + ttl)
            wait = ttl / 3

    def _lose(self, reason: str) -> None:
        if self.reason is not None:
            return
        self.reason = reason
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self.lost.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:
                log.exception("a session-lost callback failed")
