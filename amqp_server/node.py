"""One node of a cluster: it follows, or it leads, as etcd decides.

A node always listens on its AMQP, management, Prometheus and cluster
ports.  While another node leads, this one keeps a copy of the leader's
data directory (cluster/follower.py) and forwards clients to the leader
(cluster/forwarding.py).  When etcd makes it the leader, it stops
following, boots a broker from its copy (the ordinary boot, as after a
restart) on the same ports, and ships everything its stores write to the
followers (cluster/shipper.py).

What the node does when is decided by one state machine,
cluster/control.py (`step(state, event) -> (state, actions)`); this module
is its shell: it turns etcd's answers, the clock and what its own tasks
report into events, runs them through the machine one at a time, and
carries out the actions.  Who leads, who is in sync and who is a member is
decided by etcd only (cluster/leadership.py); nothing here elects,
heartbeats or votes.

A node may campaign only when its data directory holds a whole copy: the
marker file `cluster-copy` is written when a copy is complete (or when the
node leads) and deleted before a copy starts, so a node whose directory was
wiped, or whose copy was cut off half-way, never leads with it - even if
etcd still lists it in the in-sync set.  A group that has never had a
leader (no in-sync set in etcd yet) may be led by any node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from .broker.broker import Broker
from .cluster import control as c, frames as cluster_frames, in_sync
from .cluster.etcd import Compare, EtcdClient, EtcdError, LeaderKey, delete_op, put_op
from .cluster.follower import Following
from .cluster.forwarding import AmqpForwarder, HttpForwarder
from .cluster.handshake import tls_contexts
from .cluster.leadership import (
    Leader,
    Leadership,
    LeadershipLost,
    NotLeader,
    Term,
    group_prefix,
    observe,
)
from .cluster.leading import attach, detach, listen, sources_of
from .cluster.membership import NodeNameInUse, members, register
from .cluster.replica import COPY_MARKER, Replica, mark_whole
from .cluster.session import Session
from .cluster.shipper import Shipper
from .config import BrokerConfig
from .management import prometheus
from .management.prometheus_listener import CONTENT_TYPE
from .server import Server
from .storage.dead_letter_log import LogFiles
from .storage.lock import DataDirLock

log = logging.getLogger("amqp_server.cluster")

GROUP = "vhosts"  # one replication group for every virtual host, for now
# The key a leader that yielded names itself in (control.Resign).
YIELDED = "yielded"
FOLLOWER, LEADER = "follower", "leader"
TICK = 0.1  # seconds between two clock events
# Reconnecting to a leader's cluster port: backoff from ... to ... seconds.
RECONNECT_MIN, RECONNECT_MAX = 0.1, 2.0


@dataclass
class NodeStats:
    """What /api/nodes and the metrics say about this node."""

    role: str = FOLLOWER
    leader: str | None = None
    elections_won: int = 0
    leadership_changes: int = 0
    became: float = field(default_factory=time.time)


def _seen(leader: Leader | Term, node: str | None = None) -> c.Seen:
    if isinstance(leader, Term):
        return c.Seen(node or "", leader.key, leader.revision, leader.lease)
    return c.Seen(leader.node, leader.key, leader.revision, leader.lease)


class ClusterNode:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node = config.node_name
        self.secret = config.cluster_secret.encode()
        self.data_dir = Path(config.data_dir)
        self.stats = NodeStats()
        self.server: Server | None = None
        self.shipper: Shipper | None = None
        self.leader: Leader | None = None
        self.term: Term | None = None
        self.replica: Replica | None = None
        self.following: Following | None = None
        self.session: Session | None = None
        self.leadership: Leadership | None = None
        self._followed: Leader | None = None
        self._following_task: asyncio.Task | None = None
        self._campaign_task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._jobs: set[asyncio.Task] = set()
        # Booting, stepping down and stopping to follow run one after the
        # other, in the order the machine asked for them.
        self._serial = asyncio.Lock()
        self._events: asyncio.Queue[c.Event] = asyncio.Queue()
        self._random = random.Random()
        self._stopping = False
        self.ports: dict[str, int] = {}
        self.amqp_forwarder: AmqpForwarder | None = None
        self.http_forwarder: HttpForwarder | None = None
        self.metrics_server: FollowerMetrics | None = None
        lag = config.cluster_lag_timeout / 1000
        self.settings = c.Settings(node=self.node, ttl=config.cluster_lease_ttl,
                                   yield_after=in_sync.yield_after(lag))
        self.state = c.State(self.settings)

    # ---- start and stop ----------------------------------------------------

    async def start(self) -> None:
        config = self.config
        try:
            server_tls, self.client_tls = tls_contexts(config.cluster_tls_certfile,
                                                       config.cluster_tls_keyfile,
                                                       config.cluster_tls_cacertfile)
        except (OSError, ssl.SSLError) as exc:
            raise ClusterError(f"cluster TLS certificate, key or CA file cannot be used: "
                               f"{exc}") from None
        self.lock = DataDirLock(self.data_dir)
        self.lock.acquire()
        self.client = EtcdClient(config.cluster_etcd)
        try:
            self.cluster_server = await listen(config.host, config.cluster_port, self.secret,
                                               config.cluster_name, self.node,
                                               lambda: self.shipper, tls=server_tls)
            self.ports["cluster"] = self.cluster_server.sockets[0].getsockname()[1]
            await self._forward()  # a follower until etcd says otherwise: learns the ports
        except OSError as exc:
            await self._stop_forwarding()
            await self.client.close()
            self.lock.release()
            raise ClusterError(f"cannot listen on {config.host}: {exc.strerror or exc} "
                               "(--port, --management-port, --prometheus-port and "
                               "--cluster-port take 0 for a free port)") from None
        try:
            # The first session is opened here, so that a node that cannot
            # reach etcd at all says so and exits; later ones in the background.
            opened = await self._open_session()
            whole = await self._may_lead()
        except (EtcdError, NodeNameInUse) as exc:
            await self._stop_forwarding()
            self.cluster_server.close()
            if self.session is not None:
                await self.session.close()
            await self.client.close()
            self.lock.release()
            raise ClusterError(f"cannot join the cluster: {exc}") from None
        self.state, actions = c.start(self.settings, time.monotonic(), whole=whole)
        self.state, more = c.step(self.state, opened)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run()), loop.create_task(self._tick()),
                       loop.create_task(self._observe())]
        for task in self._tasks:
            task.add_done_callback(self._task_ended)
        for action in [a for a in actions if not isinstance(a, c.OpenSession)] + more:
            self._execute(action)
        log.info("node %s joined cluster %s (etcd %s)", self.node, config.cluster_name,
                 ", ".join(config.cluster_etcd))

    def _task_ended(self, task: asyncio.Task) -> None:
        """The node's own loops run as long as it does: one that ends
        otherwise is a bug to see, not to lose quietly."""
        if not task.cancelled() and task.exception() is not None and not self._stopping:
            log.error("node %s: %s stopped: %r", self.node, task.get_coro().__name__,
                      task.exception(), exc_info=task.exception())

    def addresses(self) -> dict[str, str]:
        host = self.config.cluster_advertise_host or self.config.host
        return {name: f"{host}:{port}" for name, port in self.ports.items()}

    async def stop(self) -> None:
        self._stopping = True
        self.state, _ = c.step(self.state, c.Stop(time.monotonic()))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._cancel_campaign()
        for job in list(self._jobs):
            job.cancel()
        await asyncio.gather(*self._jobs, return_exceptions=True)
        await self._stop_following()
        if self.server is not None:
            await self._stop_broker("shutdown", report=False)
        await self._stop_forwarding()
        self.cluster_server.close()
        if self.session is not None:
            with contextlib.suppress(Exception):
                await self.session.close()
        await self.client.close()
        self.lock.release()

    # ---- the machine's loop ---------------------------------------------------

    def feed(self, event: c.Event) -> None:
        if not self._stopping:
            self._events.put_nowait(event)

    async def _run(self) -> None:
        while True:
            event = await self._events.get()
            self.state, actions = c.step(self.state, event)
            for action in actions:
                self._execute(action)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self.feed(c.Tick(time.monotonic()))

    def _spawn(self, coroutine: Coroutine[Any, Any, None], serial: bool = False) -> None:
        async def run() -> None:
            if serial:
                async with self._serial:
                    await coroutine
            else:
                await coroutine

        job = asyncio.get_running_loop().create_task(run())
        self._jobs.add(job)
        job.add_done_callback(self._job_done)

    def _job_done(self, job: asyncio.Task) -> None:
        self._jobs.discard(job)
        if not job.cancelled() and job.exception() is not None and not self._stopping:
            log.error("node %s: a cluster task failed: %r", self.node, job.exception(),
                      exc_info=job.exception())

    def _execute(self, action: c.Action) -> None:
        match action:
            case c.Log(level=level, message=message):
                log.log(level, "%s", message)
            case c.OpenSession():
                self._spawn(self._reopen())
            case c.CloseSession(lease=lease, revoke=revoke):
                self._spawn(self._close_session(lease, revoke))
            case c.Revoke(lease=lease):
                self._spawn(self._revoke(lease))
            case c.Campaign(lease=lease):
                self._start_campaign(lease)
            case c.Withdraw():
                self._spawn(self._withdraw())
            case c.Follow(leader=seen):
                if self.leader is not None and self.leader.key == seen.key:
                    self._spawn(self._follow(self.leader), serial=True)
            case c.StopFollowing():
                self._spawn(self._stop_following(keep_copy=True), serial=True)
            case c.Boot(term=seen):
                self._spawn(self._boot(seen), serial=True)
            case c.StopBroker(reason=reason):
                self._spawn(self._stop_broker(reason), serial=True)
            case c.Resign(term=seen, yielded=yielded):
                self._spawn(self._resign(seen, yielded))
            case c.VerifyTerm(term=seen):
                self._spawn(self._verify(seen))
            case c.FindSuccessors(term=seen):
                self._spawn(self._find_successors(seen))
            case c.HoldConfirms() | c.ReleaseConfirms():
                if self.shipper is not None:
                    self.shipper.poke()  # the shipper asks may_confirm: it holds or goes on
            case c.Depose(leader=seen):
                self._spawn(self._depose(seen))
            case _:
                raise TypeError(f"not an action: {action!r}")

    def may_confirm(self) -> bool:
        return c.may_confirm(self.state, time.monotonic())

    # ---- the session -----------------------------------------------------------

    async def _open_session(self) -> c.SessionOpened:
        """Grant a lease, keep it alive, register this node on it."""
        session = Session(self.client, self.config.cluster_lease_ttl)
        await session.start()
        lease = session.lease
        try:
            await register(session, self.config.cluster_name, self.node, self.addresses())
        except BaseException:
            await session.close()
            raise
        session.on_renewed = lambda sent, ttl: self.feed(
            c.Renewed(time.monotonic(), lease, ttl, sent))
        session.on_lost(lambda reason: self.feed(c.LeaseGone(time.monotonic(), lease, reason)))
        leadership = Leadership(session, self.config.cluster_name, GROUP, self.node,
                                addresses=self.addresses(),
                                min_in_sync=self.config.min_in_sync)
        leadership.on_lost(lambda reason: self._term_lost(leadership, reason))
        self.session, self.leadership = session, leadership
        return c.SessionOpened(time.monotonic(), lease, session.ttl, session.sent)

    async def _reopen(self) -> None:
        try:
            opened = await self._open_session()
        except (EtcdError, NodeNameInUse) as exc:
            self.feed(c.SessionFailed(time.monotonic(), str(exc), self._random.random()))
            return
        self.feed(opened)

    def _term_lost(self, leadership: Leadership, reason: str) -> None:
        term = self.term
        if term is not None and leadership is self.leadership:
            self.feed(c.TermEnded(time.monotonic(), _seen(term, self.node), reason))

    async def _close_session(self, lease: int, revoke: bool) -> None:
        session = self.session
        if session is None or session.lease != lease:
            return
        self.session = None
        await self._cancel_campaign()
        await session.close(revoke=revoke)

    async def _revoke(self, lease: int) -> None:
        try:
            await self.client.revoke(lease)
            log.info("node %s: revoked lease %x of an earlier session of its own", self.node,
                     lease)
        except EtcdError as exc:
            log.info("node %s could not revoke its earlier lease %x: %s", self.node, lease,
                     exc)

    # ---- campaigning ---------------------------------------------------------

    async def _may_lead(self) -> bool:
        if (self.data_dir / COPY_MARKER).exists():
            return True
        assert self.leadership is not None
        return await self.leadership.read_isr() is None  # a new group: anyone

    def _start_campaign(self, lease: int) -> None:
        leadership = self.leadership
        if leadership is None or leadership.session.lease != lease:
            return
        if self._campaign_task is not None:
            self._campaign_task.cancel()
        self._campaign_task = asyncio.get_running_loop().create_task(
            self._campaign(leadership))

    async def _campaign(self, leadership: Leadership) -> None:
        def waiting(why: str) -> None:
            log.info("node %s does not lead: %s", self.node, why)

        while True:
            try:
                term = await leadership.campaign(on_wait=waiting)
            except LeadershipLost:
                return  # etcd dropped the lease: the machine opens a new session
            except (EtcdError, OSError) as exc:
                log.info("node %s: campaign interrupted (%s); trying again", self.node, exc)
                await asyncio.sleep(1.0)
                continue
            self.term = term
            self.feed(c.Won(time.monotonic(), _seen(term, self.node)))
            return

    async def _cancel_campaign(self) -> None:
        task, self._campaign_task = self._campaign_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _withdraw(self) -> None:
        await self._cancel_campaign()
        leadership = self.leadership
        if leadership is not None and leadership.term is None:
            with contextlib.suppress(EtcdError):
                await leadership.resign()

    async def _resign(self, seen: c.Seen, yielded: bool = False) -> None:
        """Delete the term's election key, if it is still the one created at
        its revision, whatever this node holds locally; a yield says so in
        the same transaction (control.Resign)."""
        prefix = group_prefix(self.config.cluster_name, GROUP)
        try:
            if yielded:
                await self.client.txn([Compare.create_revision(seen.key, seen.revision)],
                                      [put_op(prefix + YIELDED, self.node), delete_op(seen.key)])
            else:
                await self.client.election_resign(
                    LeaderKey(prefix + "election", seen.key, seen.revision, seen.lease))
        except EtcdError as exc:
            log.warning("node %s could not resign its lead: %s (its lease will run out)",
                        self.node, exc)

    async def _verify(self, seen: c.Seen) -> None:
        """Whether this node's election key is still there, asked until etcd
        answers (or the node no longer waits for the answer)."""
        while not self._stopping:
            state = self.state
            if state.role is not c.Role.SUSPENDED or state.term != seen:
                return
            try:
                kv = await self.client.get_one(seen.key)
            except EtcdError:
                await asyncio.sleep(0.2)
                continue
            held = kv is not None and kv.create_revision == seen.revision
            self.feed(c.TermChecked(time.monotonic(), seen, held))
            return

    async def _find_successors(self, seen: c.Seen) -> None:
        leadership, shipper = self.leadership, self.shipper
        if leadership is None or shipper is None:
            return
        try:
            isr = await leadership.read_isr()
            up = await members(self.client, self.config.cluster_name)
        except EtcdError:
            return  # asked again on the next stall report
        successors = tuple(name for name in (isr.nodes if isr else ())
                           if name != self.node and name in up)
        self.feed(c.Stalled(time.monotonic(), shipper.stalled_since(), successors))

    # ---- following -----------------------------------------------------------

    async def _observe(self) -> None:
        prefix = group_prefix(self.config.cluster_name, GROUP)
        async for leader, revision in observe(self.client, prefix):
            self.leader = leader
            self.stats.leader = leader.node if leader else None
            if self.amqp_forwarder is not None:
                self.amqp_forwarder.retarget(self._leader_address("amqp"))
            self.feed(c.LeaderSeen(time.monotonic(), _seen(leader) if leader else None,
                                   revision))

    async def _follow(self, leader: Leader) -> None:
        if (self._following_task is not None and not self._following_task.done()
                and self._followed is not None and self._followed.key == leader.key):
            return
        await self._stop_following(keep_copy=True)
        if self.server is not None or self._stopping:
            return
        self._followed = leader
        self._following_task = asyncio.ensure_future(self._follow_forever(leader))

    async def _follow_forever(self, leader: Leader) -> None:
        """Follow `leader` until told otherwise: connect, take a copy or
        resume, apply; after a break, connect again with backoff (and say
        so once, not on every try)."""
        host, port = _split(leader.addresses.get("cluster", ""))
        # This leader's stream broke under us while it was flowing: once its
        # port refuses connections too, its process is gone.  Remembered
        # across attempts: a killed process's listening socket can outlive
        # the connection it just reset by a moment, and accept one more.
        broke = False
        failures = 0
        while not self._stopping and self._followed is leader and self.server is None:
            if self.replica is None:
                self.replica = Replica(self.data_dir, self._dead_letter_files(),
                                       self.config.dead_letter_log_body_limit,
                                       self.config.dead_letter_archive_dir or None)
            following = self.following = Following(
                self.replica, self.node, self.config.cluster_name, self.secret,
                self.client_tls, on_copy=self._copy_changed, quiet=failures > 0)
            await following.follow(host, port)
            if self._stopping or self._followed is not leader:
                return
            if following.was_streaming:
                broke = following.link_broke
                failures = 0
            failures += 1
            if failures == 2:
                log.info("node %s cannot reach leader %s at %s:%d (trying again with "
                         "backoff)", self.node, leader.node, host, port)
            if broke and (following.refused or await _refused(host, port)):
                self.feed(c.LeaderUnreachable(time.monotonic(), _seen(leader)))
            wait = min(RECONNECT_MAX, RECONNECT_MIN * 2 ** min(failures - 1, 5))
            await asyncio.sleep(wait * (0.5 + self._random.random() / 2))

    def _copy_changed(self, whole: bool) -> None:
        now = time.monotonic()
        self.feed(c.CopyWhole(now) if whole else c.CopyStarted(now))

    async def _depose(self, seen: c.Seen) -> None:
        """The leader's process is gone (its stream broke and its port refuses):
        depose it now rather than wait for its lease; leadership.revoke_leader
        says why no confirmed message can be lost by it.  This node acks
        nothing more from that leader: its link is gone."""
        leadership, leader = self.leadership, self.leader
        if leadership is None or leader is None or leader.key != seen.key:
            return
        try:
            deposed = await leadership.revoke_leader(leader)
        except EtcdError as exc:
            log.info("could not depose leader %s: %s", leader.node, exc)
            return
        log.info("leader %s is gone (its cluster port refuses connections): %s",
                 leader.node, "deposed" if deposed else "not deposed by this node "
                 "(not in the in-sync set, or already replaced)")

    async def _stop_following(self, keep_copy: bool = False) -> None:
        """Stop following; `keep_copy`: the next leader may resume this copy
        (its files are closed, what it holds is remembered)."""
        self._followed = None
        if self.following is not None:
            self.following.stop()
        if self._following_task is not None:
            # Not waited for: it may be connecting to a leader that is cut off.
            self._following_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._following_task
        self._following_task = None
        self.following = None
        if self.replica is not None:
            self.replica.close()
            if not keep_copy:
                self.replica = None

    def _dead_letter_files(self) -> LogFiles:
        config = self.config
        return LogFiles(self.data_dir / "dead-letters", config.dead_letter_log_file_bytes,
                        config.dead_letter_log_file_seconds,
                        config.dead_letter_log_retention_bytes)

    # ---- leading -------------------------------------------------------------

    async def _boot(self, seen: c.Seen) -> None:
        """Start the broker from this node's copy and ship what it writes."""
        term, leadership = self.term, self.leadership
        if term is None or term.key != seen.key or leadership is None:
            self.feed(c.BootFailed(time.monotonic(), seen, "elected on an old session"))
            return
        try:
            in_sync_now = await self._in_sync_now(leadership, term)
        except (EtcdError, NotLeader) as exc:
            self.feed(c.BootFailed(time.monotonic(), seen, f"etcd: {exc}"))
            return
        # What this node's copy is: the new term's stream continues it.
        base = ((self.replica.epoch, self.replica.lsn) if self.replica is not None
                else (None, 0))
        await self._stop_following()
        await self._stop_forwarding()
        mark_whole(self.data_dir, term.revision)
        config = self.config
        broker = Broker(config)
        server = Server(broker, port=self.ports["amqp"], data_dir_lock=self.lock)
        broker.config.management_port = self.ports.get("management", -1)
        broker.config.prometheus_port = self.ports.get("prometheus", -1)
        broker.cluster = self  # /api/nodes, health and metrics read it
        shipper = None

        async def write_isr(names: tuple[str, ...]) -> None:
            if not await leadership.write_isr(names, term=term):
                raise ClusterError("the in-sync set changed under this leader")

        def ship_from_boot(booted: Broker) -> None:
            # Before the loop runs anything else: no write goes unshipped.
            nonlocal shipper
            shipper = Shipper(self.node, term.revision, sources_of(booted),
                              min_in_sync=config.min_in_sync,
                              lag_timeout=config.cluster_lag_timeout / 1000,
                              in_sync=in_sync_now, isr=write_isr,
                              alive=self.may_confirm, base=base)
            attach(booted, shipper)

        server.on_booted = ship_from_boot
        try:
            await server.start()
        except Exception as exc:
            log.exception("node %s could not start leading", self.node)
            await self._forward()
            self.feed(c.BootFailed(time.monotonic(), seen, str(exc) or type(exc).__name__))
            return
        assert shipper is not None
        shipper.on_follower = lambda name: asyncio.ensure_future(
            self._remember_members(leadership, term, [name]))
        shipper.on_check = lambda: self.feed(
            c.Stalled(time.monotonic(), shipper.stalled_since()))
        shipper.start()
        self.server, self.shipper = server, shipper
        self.stats.role = LEADER
        self.stats.elections_won += 1
        self.stats.leadership_changes += 1
        self.stats.became = time.time()
        log.info("node %s leads cluster %s (term %d, in sync: %s)", self.node,
                 config.cluster_name, term.revision, ", ".join(in_sync_now))
        self.feed(c.Booted(time.monotonic(), seen))
        await self._remember_members(leadership, term, [self.node, *in_sync_now])

    async def _in_sync_now(self, leadership: Leadership, term: Term) -> tuple[str, ...]:
        """The in-sync set this term starts with (in_sync.initial)."""
        isr = await leadership.read_isr()
        up = await members(self.client, self.config.cluster_name)
        yielded_key = group_prefix(self.config.cluster_name, GROUP) + YIELDED
        yielded = await self.client.get_one(yielded_key)
        current = isr.nodes if isr is not None else None
        kept = in_sync.initial(self.node, current, up, self.config.min_in_sync,
                               yielded.value.decode() if yielded is not None else None)
        if current is None or kept != current:
            await leadership.write_isr(kept, term=term)
        if yielded is not None:
            await leadership.fenced_txn([delete_op(yielded_key)], term=term)
        return kept

    async def _stop_broker(self, reason: str, report: bool = True) -> None:
        """Nothing more is confirmed from this instant; clients get 320
        CONNECTION_FORCED and the node forwards them to the next leader."""
        server, self.server = self.server, None
        if self.shipper is not None:
            self.shipper.stop()
        self.shipper = None
        self.term = None
        if self.leadership is not None:
            self.leadership.abandon(reason)
        if server is not None:
            log.info("node %s stops leading: %s", self.node, reason)
            detach(server.broker)
            await server.stop()  # clients get 320 CONNECTION_FORCED
            self.stats.role = FOLLOWER
            self.stats.leadership_changes += 1
            self.stats.became = time.time()
            if not self._stopping:
                await self._forward()
        if report:
            self.feed(c.BrokerStopped(time.monotonic()))

    # ---- forwarding ----------------------------------------------------------

    def _leader_address(self, name: str) -> tuple[str, int] | None:
        leader = self.leader
        if leader is None or leader.node == self.node or self.server is not None:
            return None
        address = leader.addresses.get(name)
        return _split(address) if address else None

    async def _forward(self) -> None:
        """Listen on this node's ports and forward to the leader."""
        if self.amqp_forwarder is not None:
            return
        config = self.config
        self.amqp_forwarder = AmqpForwarder(self.secret, self.node,
                                            lambda: self._leader_address("amqp"))
        self.ports["amqp"] = await self.amqp_forwarder.start(
            config.host, self.ports.get("amqp", config.port))
        if config.management_port >= 0:
            self.http_forwarder = HttpForwarder(self.secret, self.node,
                                                lambda: self._leader_address("management"))
            self.ports["management"] = await self.http_forwarder.start(
                config.host, self.ports.get("management", config.management_port))
        if config.prometheus_port >= 0:
            self.metrics_server = FollowerMetrics(self)
            self.ports["prometheus"] = await self.metrics_server.start(
                config.host, self.ports.get("prometheus", config.prometheus_port))

    async def _stop_forwarding(self) -> None:
        for forwarder in (self.amqp_forwarder, self.http_forwarder, self.metrics_server):
            if forwarder is not None:
                await forwarder.stop()
        self.amqp_forwarder = self.http_forwarder = self.metrics_server = None

    async def settled(self) -> None:
        """A management change is answered once it is on every in-sync copy."""
        shipper = self.shipper
        if shipper is not None:
            await shipper.settled()

    # ---- what operators see --------------------------------------------------

    def metric_families(self) -> list:
        """This node's replication gauges and counters (management/prometheus.py's
        shape); the leader's also say how far behind each follower is."""
        stats = self.stats
        shipper = self.shipper
        node = {"node": self.node}
        families = [
            ("cluster_node_leader", "gauge", "1 when this node leads its cluster, else 0",
             [(node, 1 if stats.role == LEADER else 0)]),
            ("cluster_node_state", "gauge",
             "1 for the state this node's control plane is in (joining, copying, "
             "campaigning, booting, leading, suspended, stepping down)",
             [({"node": self.node, "state": role.value}, 1 if self.state.role is role else 0)
              for role in c.Role if role is not c.Role.STOPPED]),
            ("cluster_node_confirming", "gauge",
             "1 while this node may confirm a publish (it leads and its etcd lease is beyond "
             "doubt by its own clock)", [(node, 1 if self.may_confirm() else 0)]),
            ("cluster_elections_won_total", "counter",
             "Times this node was elected leader", [(node, stats.elections_won)]),
            ("cluster_leadership_changes_total", "counter",
             "Times this node started or stopped leading", [(node, stats.leadership_changes)]),
        ]
        if shipper is not None:
            families += [
                ("cluster_in_sync_members", "gauge",
                 "Members of the in-sync set, the leader included",
                 [(node, 1 + len(shipper.in_sync))]),
                ("cluster_replication_shipped_lsn", "gauge",
                 "Last log sequence number the leader shipped", [(node, shipper.lsn)]),
                ("cluster_replication_replicated_lsn", "gauge",
                 "Log sequence number on every in-sync copy", [(node, shipper.replicated)]),
                ("cluster_replication_lag", "gauge",
                 "Frames a follower is behind the leader",
                 [({"node": self.node, "follower": name},
                   shipper.lsn - acked if acked >= 0 else shipper.lsn)
                  for name, acked in sorted(shipper.acked.items())]),
            ]
        elif self.replica is not None:
            families.append(("cluster_replica_lsn", "gauge",
                             "Last log sequence number this follower has on disk",
                             [(node, self.replica.lsn)]))
        return families

    async def nodes(self) -> list[dict]:
        """Every member, as /api/nodes lists it: those up now, and those the
        group's leaders shipped to that are not (running false, as RabbitMQ
        lists a stopped cluster node)."""
        leadership = self.leadership
        if leadership is None:
            raise EtcdError("this node has no etcd session right now", unreachable=True)
        up = await members(self.client, self.config.cluster_name)
        isr = await leadership.read_isr()
        known = await leadership.read_members()
        in_sync_nodes = set(isr.nodes) if isr is not None else set()
        leader = self.leader.node if self.leader is not None else None
        shipper = self.shipper
        listed = []
        for name in sorted({*up, *in_sync_nodes, *(known.nodes if known else ())}):
            lag = None
            if shipper is not None and name != self.node:
                acked = shipper.acked.get(name, -1)
                lag = max(0, shipper.lsn - acked) if acked >= 0 else None
            elif name == self.node and leader == self.node:
                lag = 0
            member = up.get(name)
            listed.append({"name": name, "role": LEADER if name == leader else FOLLOWER,
                           "in_sync": name in in_sync_nodes, "replication_lag": lag,
                           "running": member is not None,
                           "addresses": member.addresses if member is not None else {}})
        return listed

    async def _remember_members(self, leadership: Leadership, term: Term, names) -> None:
        """Add nodes to the group's member list (the nodes its leaders ship
        to, kept in etcd by fenced writes), so that /api/nodes still names
        one that stopped."""
        try:
            known = await leadership.read_members()
            current = set(known.nodes) if known is not None else set()
            if not set(names) <= current:
                await leadership.write_members(sorted(current | set(names)), term=term)
        except (EtcdError, NotLeader) as exc:
            log.info("could not record the cluster's members: %s", exc)


class FollowerMetrics:
    """A follower's own Prometheus endpoint: its role and replica, on the
    port the leader's exporter has while it leads."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        return self._runner.addresses[0][1]

    async def _metrics(self, request: web.Request) -> web.Response:
        lines = prometheus.text_lines(prometheus.OWN_PREFIX, self.node.metric_families())
        return web.Response(body=("\n".join(lines) + "\n").encode(),
                            headers={"Content-Type": CONTENT_TYPE})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None


class ClusterError(Exception):
    """This node cannot take part in its cluster; the message says why."""


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


async def _refused(host: str, port: int) -> bool:
    """Whether nothing listens at host:port any more (a killed process);
    a stopped one still accepts the connection in its kernel backlog."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 0.5)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    return False


__all__ = ["ClusterError", "ClusterNode", "cluster_frames"]
