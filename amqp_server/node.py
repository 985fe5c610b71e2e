"""One node of a cluster: it follows, or it leads, as etcd decides.

A node always listens on its AMQP, management, Prometheus and cluster
ports.  While another node leads, this one keeps a copy of the leader's
data directory (cluster/follower.py) and forwards clients to the leader
(cluster/forwarding.py).  When etcd makes it the leader, it stops
following, boots a broker from its copy (the ordinary boot, as after a
restart) on the same ports, and ships everything its stores write to the
followers (cluster/shipper.py).  When its lease is lost it stops at once:
confirms stop, clients get 320 CONNECTION_FORCED, and it follows again.

Who leads, who is in sync and who is a member is decided by etcd only
(cluster/leadership.py); nothing here elects, heartbeats or votes.

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
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from .broker.broker import Broker
from .cluster import frames as cluster_frames
from .cluster.etcd import EtcdClient, EtcdError
from .cluster.follower import Following
from .cluster.forwarding import AmqpForwarder, HttpForwarder
from .cluster.handshake import tls_contexts
from .cluster.leadership import Leader, Leadership, LeadershipLost, NotLeader, Term
from .cluster.leading import attach, detach, listen, sources_of
from .cluster.membership import members, register
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
FOLLOWER, LEADER = "follower", "leader"


@dataclass
class NodeStats:
    """What /api/nodes and the metrics say about this node."""

    role: str = FOLLOWER
    leader: str | None = None
    elections_won: int = 0
    leadership_changes: int = 0
    became: float = field(default_factory=time.time)


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
        self._following_task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._role_lock = asyncio.Lock()
        self._stopping = False
        self.ports: dict[str, int] = {}
        self.amqp_forwarder: AmqpForwarder | None = None
        self.http_forwarder: HttpForwarder | None = None
        self.metrics_server: FollowerMetrics | None = None

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
        try:
            self.client = EtcdClient(config.cluster_etcd)
            self.session = Session(self.client, config.cluster_lease_ttl)
            await self.session.start()
        except EtcdError as exc:
            await self.client.close()
            self.lock.release()
            raise ClusterError(f"cannot join the cluster: {exc}") from None
        try:
            self.cluster_server = await listen(config.host, config.cluster_port, self.secret,
                                               config.cluster_name, self.node,
                                               lambda: self.shipper, tls=server_tls)
            self.ports["cluster"] = self.cluster_server.sockets[0].getsockname()[1]
            await self._forward()  # a follower until etcd says otherwise: learns the ports
        except OSError as exc:
            await self._stop_forwarding()
            await self.session.close()
            await self.client.close()
            self.lock.release()
            raise ClusterError(f"cannot listen on {config.host}: {exc.strerror or exc} "
                               "(--port, --management-port, --prometheus-port and "
                               "--cluster-port take 0 for a free port)") from None
        self.leadership = Leadership(self.session, config.cluster_name, GROUP, self.node,
                                     addresses=self.addresses(),
                                     min_in_sync=config.min_in_sync)
        self.leadership.on_lost(self._lost)
        try:
            await register(self.session, config.cluster_name, self.node, self.addresses())
        except EtcdError as exc:
            await self.stop()
            raise ClusterError(f"cannot join the cluster: {exc}") from None
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._observe()), loop.create_task(self._campaign())]
        for task in self._tasks:
            task.add_done_callback(self._task_ended)
        log.info("node %s joined cluster %s (etcd %s)", self.node, config.cluster_name,
                 ", ".join(config.cluster_etcd))

    def _task_ended(self, task: asyncio.Task) -> None:
        """Following and campaigning run as long as the node does: one that
        ends otherwise is a bug to see, not to lose quietly."""
        if not task.cancelled() and task.exception() is not None and not self._stopping:
            log.error("node %s: %s stopped: %r", self.node, task.get_coro().__name__,
                      task.exception(), exc_info=task.exception())

    def addresses(self) -> dict[str, str]:
        host = self.config.cluster_advertise_host or self.config.host
        return {name: f"{host}:{port}" for name, port in self.ports.items()}

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stop_following()
        if self.server is not None:
            await self._step_down("shutdown")
        await self._stop_forwarding()
        self.cluster_server.close()
        with contextlib.suppress(Exception):
            await self.session.close()
        await self.client.close()
        self.lock.release()

    # ---- following -----------------------------------------------------------

    async def _observe(self) -> None:
        async for leader in self.leadership.observe():
            self.leader = leader
            self.stats.leader = leader.node if leader else None
            if leader is None or leader.node == self.node:
                continue
            if self.server is not None:
                continue  # still stepping down: _lost handles it
            await self._follow(leader)

    async def _follow(self, leader: Leader) -> None:
        if (self._following_task is not None and not self._following_task.done()
                and self._followed is not None and self._followed.key == leader.key):
            return
        await self._stop_following(keep_copy=True)
        self._followed = leader
        self._following_task = asyncio.ensure_future(self._follow_forever(leader))

    async def _follow_forever(self, leader: Leader) -> None:
        host, port = _split(leader.addresses.get("cluster", ""))
        # This leader's stream broke under us while it was flowing: once its
        # port refuses connections too, its process is gone.  Remembered
        # across attempts: a killed process's listening socket can outlive
        # the connection it just reset by a moment, and accept one more.
        broke = False
        tried = 0.0
        while not self._stopping and self._followed is leader and self.server is None:
            if self.replica is None:
                self.replica = Replica(self.data_dir, self._dead_letter_files(),
                                       self.config.dead_letter_log_body_limit,
                                       self.config.dead_letter_archive_dir or None)
            following = self.following = Following(self.replica, self.node,
                                                   self.config.cluster_name, self.secret,
                                                   self.client_tls)
            await following.follow(host, port)
            if self._stopping or self._followed is not leader:
                return
            if following.was_streaming:
                broke = following.link_broke
            now = time.monotonic()
            if broke and now - tried > 0.5 and (following.refused
                                                 or await _refused(host, port)):
                tried = now
                await self._depose(leader)
            await asyncio.sleep(0.1)

    async def _depose(self, leader: Leader) -> None:
        """The leader's process is gone (its stream broke and its port refuses):
        depose it now rather than wait for its lease; leadership.revoke_leader
        says why no confirmed message can be lost by it.  This node acks
        nothing more from that leader: its link is gone."""
        try:
            deposed = await self.leadership.revoke_leader(leader)
        except EtcdError as exc:
            log.warning("could not depose leader %s: %s", leader.node, exc)
            return
        log.warning("leader %s is gone (its cluster port refuses connections): %s",
                    leader.node, "deposed" if deposed else "not deposed by this node "
                    "(not in the in-sync set, or already replaced)")

    async def _stop_following(self, keep_copy: bool = False) -> None:
        """Stop following; `keep_copy`: the next leader may resume this copy
        (its files are closed, what it holds is remembered)."""
        self._followed = None
        if self.following is not None:
            self.following.stop()
        if self._following_task is not None:
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

    async def _campaign(self) -> None:
        while not self._stopping:
            if not await self._may_lead():
                await asyncio.sleep(0.5)  # until a copy is whole
                continue
            try:
                term = await self.leadership.campaign(
                    on_wait=lambda why: log.info("node %s does not lead: %s", self.node, why))
            except LeadershipLost as exc:
                log.error("%s", exc)
                return
            await self._lead(term)
            await self.leadership.lost.wait()

    async def _may_lead(self) -> bool:
        if (self.data_dir / COPY_MARKER).exists():
            return True
        try:
            return await self.leadership.read_isr() is None  # a new group: anyone
        except EtcdError:
            return False

    async def _lead(self, term: Term) -> None:
        async with self._role_lock:
            if not self.leadership.leads():
                return
            try:
                in_sync = await self._in_sync_now(term)
            except EtcdError as exc:
                log.warning("node %s cannot start leading: %s", self.node, exc)
                await self.leadership.resign()
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

            def ship_from_boot(booted: Broker) -> None:
                # Before the loop runs anything else: no write goes unshipped.
                nonlocal shipper
                shipper = Shipper(self.node, term.revision, sources_of(booted),
                                  min_in_sync=config.min_in_sync,
                                  lag_timeout=config.cluster_lag_timeout / 1000,
                                  in_sync=in_sync, isr=self._write_isr,
                                  alive=self.leadership.leads, base=base)
                attach(booted, shipper)

            server.on_booted = ship_from_boot
            try:
                await server.start()
            except Exception:
                log.exception("node %s could not start leading", self.node)
                await self.leadership.resign()
                await self._forward()
                return
            shipper.on_follower = lambda name: asyncio.ensure_future(
                self._remember_members(term, [name]))
            shipper.start()
            self.server, self.shipper, self.term = server, shipper, term
            await self._remember_members(term, [self.node, *in_sync])
            self.stats.role = LEADER
            self.stats.elections_won += 1
            self.stats.leadership_changes += 1
            self.stats.became = time.time()
            log.warning("node %s leads cluster %s (term %d, in sync: %s)", self.node,
                        config.cluster_name, term.revision, ", ".join(in_sync))
            if not self.leadership.leads():
                self._lost("lost while starting")

    async def _in_sync_now(self, term: Term) -> tuple[str, ...]:
        """The in-sync set, without the nodes that are no longer up (their
        membership went with their lease): they cannot answer, and waiting
        for them to time out would only delay the first confirm."""
        isr = await self.leadership.read_isr()
        current = isr.nodes if isr is not None else (self.node,)
        up = await members(self.client, self.config.cluster_name)
        kept = tuple(name for name in current if name == self.node or name in up)
        if len(kept) < self.config.min_in_sync:
            # Never below the minimum: keep the absent ones too; the shipper
            # counts them out one by one as followers catch up.
            kept = tuple(dict.fromkeys((self.node, *current)))
        if kept != current:
            await self.leadership.write_isr(kept, term=term)
        return kept

    async def _write_isr(self, names: tuple[str, ...]) -> None:
        if not await self.leadership.write_isr(names):
            raise ClusterError("the in-sync set changed under this leader")

    def _lost(self, reason: str) -> None:
        """The lease is gone: nothing more is confirmed from this instant."""
        if self.shipper is not None:
            self.shipper.stop()
        if not self._stopping:
            asyncio.ensure_future(self._step_down(reason))

    async def _step_down(self, reason: str) -> None:
        async with self._role_lock:
            server, self.server = self.server, None
            if server is None:
                return
            log.warning("node %s stops leading: %s", self.node, reason)
            if self.shipper is not None:
                self.shipper.stop()
            self.shipper = None
            self.term = None
            detach(server.broker)
            await server.stop()  # clients get 320 CONNECTION_FORCED
            self.stats.role = FOLLOWER
            self.stats.leadership_changes += 1
            self.stats.became = time.time()
            if not self._stopping:
                await self._forward()
                if self.leader is not None and self.leader.node != self.node:
                    await self._follow(self.leader)

    # ---- forwarding ----------------------------------------------------------

    def _leader_address(self, name: str) -> tuple[str, int] | None:
        leader = self.leader
        if leader is None or leader.node == self.node or self.server is not None:
            return None
        address = leader.addresses.get(name)
        return _split(address) if address else None

    async def _forward(self) -> None:
        """Listen on this node's ports and forward to the leader."""
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
        up = await members(self.client, self.config.cluster_name)
        isr = await self.leadership.read_isr()
        known = await self.leadership.read_members()
        in_sync = set(isr.nodes) if isr is not None else set()
        leader = self.leader.node if self.leader is not None else None
        shipper = self.shipper
        listed = []
        for name in sorted({*up, *in_sync, *(known.nodes if known else ())}):
            lag = None
            if shipper is not None and name != self.node:
                acked = shipper.acked.get(name, -1)
                lag = max(0, shipper.lsn - acked) if acked >= 0 else None
            elif name == self.node and leader == self.node:
                lag = 0
            member = up.get(name)
            listed.append({"name": name, "role": LEADER if name == leader else FOLLOWER,
                           "in_sync": name in in_sync, "replication_lag": lag,
                           "running": member is not None,
                           "addresses": member.addresses if member is not None else {}})
        return listed

    async def _remember_members(self, term: Term, names) -> None:
        """Add nodes to the group's member list (the nodes its leaders ship
        to, kept in etcd by fenced writes), so that /api/nodes still names
        one that stopped."""
        try:
            known = await self.leadership.read_members()
            current = set(known.nodes) if known is not None else set()
            if not set(names) <= current:
                await self.leadership.write_members(sorted(current | set(names)), term=term)
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
        self._runner = web.AppRunner(app, access_log=None)
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
