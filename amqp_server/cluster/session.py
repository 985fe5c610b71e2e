"""A lease kept alive (etcd's concurrency.Session), and what is known of it.

Every claim a node makes in etcd - its membership key, its place in an
election - is a key on its session's lease, so that etcd deletes them all
when the node stops renewing.

Two things are known of a lease, and they are kept apart:

- Its *deadline*, by this node's clock: a renewal sent at local time `t`
  that etcd answers with TTL `T` keeps the lease alive in etcd until at
  least `t + T` (etcd starts the new TTL when the renewal arrives, after
  `t`; it revokes expired leases on a 500 ms tick, later still; a new etcd
  leader extends every lease).  Before the deadline no other node can hold
  this node's claims: `alive()`, a plain clock comparison with a small
  `margin`, is the check a leader makes right before it confirms.  It holds
  even when the process was stopped (SIGSTOP) past its deadline:
  time.monotonic() keeps counting while the process is stopped.
- Whether it still *exists*: only etcd can say it does not (a renewal
  answered with TTL 0).  Past its deadline without an answer a lease is in
  doubt, not lost: etcd may have been without a raft leader for a while (an
  election, a partition healing, an isolated member coming back with a
  higher term), and then the lease still stands and the next renewal says
  so.  `lost` is set, and `on_lost` callbacks called, only when etcd says
  the lease is gone or the session is closed.

Renewals go every `interval` (a sixth of the TTL, at most a second: an
etcd leader change that takes a few seconds then still leaves time for
one to get through before the deadline) and, while they fail, every 200 ms
through the client's failover, for as long as the session is open.
`on_renewed(sent, ttl)` is told of each answered one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Self

from .etcd import EtcdClient, EtcdError

__all__ = ["DEFAULT_TTL", "Session", "renew_interval"]

log = logging.getLogger("amqp_server.cluster")

# Seconds.  etcd raises any smaller TTL to 1.5 election timeouts rounded up:
# 4 s for an etcd started with --election-timeout 2500 (see grant()).
DEFAULT_TTL = 4

RETRY_INTERVAL = 0.2
CLOSED = "the session was closed"


def renew_interval(ttl: float) -> float:
    return min(1.0, ttl / 6)


class Session:
    """`await start()` grants the lease and starts renewing it; `alive()`
    says whether it is beyond doubt now; `lost` is set, and every `on_lost`
    callback called with a one-line reason, once etcd says it is gone (or
    it is closed)."""

    def __init__(self, client: EtcdClient, ttl: int = DEFAULT_TTL, *,
                 margin: float | None = None,
                 on_renewed: Callable[[float, int], None] | None = None) -> None:
        self.client = client
        self.requested_ttl = ttl
        self.ttl = 0               # as granted, once started
        self.lease = 0
        self.margin = margin
        self.lost = asyncio.Event()
        self.reason: str | None = None
        self.sent = 0.0            # when the grant was sent
        self.on_renewed = on_renewed
        self._deadline = 0.0
        self._callbacks: list[Callable[[str], None]] = []
        self._task: asyncio.Task[None] | None = None
        self.problem = ""          # why the last renewal failed, if it did

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
        sent = self.sent = time.monotonic()
        self.lease, self.ttl = await self.client.grant(self.requested_ttl)
        if self.ttl != self.requested_ttl:
            log.info("etcd granted a lease TTL of %d s instead of %d s (its minimum for "
                     "its election timeout)", self.ttl, self.requested_ttl)
        if self.margin is None:
            self.margin = self.ttl / 20
        self._deadline = sent + self.ttl
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
                log.info("could not revoke lease %x on close: %s", lease, exc)

    async def _keep_alive(self) -> None:
        interval = renew_interval(self.ttl)
        wait = interval
        while self.reason is None:
            await asyncio.sleep(wait)
            sent = time.monotonic()
            try:
                ttl = await self.client.keepalive(self.lease, timeout=max(interval, 1.0))
            except EtcdError as exc:
                self.problem = str(exc)
                wait = RETRY_INTERVAL
                continue
            if ttl <= 0:
                self._lose(f"lease {self.lease:x} expired or was revoked in etcd"
                           + (f" (renewals had failed: {self.problem})" if self.problem else ""))
                return
            self.problem = ""
            self._deadline = max(self._deadline, sent + ttl)
            if self.on_renewed is not None:
                self.on_renewed(sent, ttl)
            wait = max(0.0, interval - (time.monotonic() - sent))

    def _lose(self, reason: str) -> None:
        if self.reason is not None:
            return
        self.reason = reason
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self.lost.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:
                log.exception("a session-lost callback failed")
