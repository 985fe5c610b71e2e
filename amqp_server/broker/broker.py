"""The broker's shared state: virtual hosts, users and live connections."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from policies.model import Policy, PolicyError, make_policy, validate_definition
from policies.store import PolicyStore

from ..config import BrokerConfig
from ..storage.archive import ARCHIVE_DIR
from ..storage.dead_letter_log import DeadLetterLog
from ..storage.definition_log import NO_JOURNAL, DefinitionLog
from ..storage.lock import DataDirError, DataDirLock
from ..storage.message_store import MessageStore
from ..storage.paging import Paging
from . import boot, resources
from .access_control import AccessControl, Grant
from .archiving import Archiver
from .cluster_view import ClusterView
from .counters import Counters
from .dead_letter_watch import DeadLetterWatch
from .direct_reply import DirectReplies
from .permissions import NO_ACCESS, Permission
from .timers import Timers
from .users import User
from .vhost import VirtualHost

log = logging.getLogger("amqp_server")


@dataclass
class Broker:
    config: BrokerConfig = field(default_factory=BrokerConfig)
    vhosts: dict[str, VirtualHost] = field(default_factory=dict)
    users: dict[str, User] = field(default_factory=dict)
    # (user, vhost) -> Permission; no entry: no access to that vhost.
    permissions: dict[tuple[str, str], Permission] = field(default_factory=dict)
    connections: set = field(default_factory=set)
    timers: Timers = field(default_factory=Timers)
    policies: PolicyStore = field(default_factory=PolicyStore)
    replies: DirectReplies = field(default_factory=DirectReplies)  # direct reply-to
    # Set by open_data_dir: without them the broker keeps nothing on disk.
    journal: DefinitionLog | None = None  # durable definitions' changes
    store: MessageStore | None = None
    paging: Paging | None = None
    dead_letter_log: DeadLetterLog | None = None
    # Retention's archive (archiving.py), with the data directory.
    archiver: Archiver | None = None
    data_dir_lock: DataDirLock | None = None
    _owns_lock: bool = False
    # Resource alarms in force ("disk", "memory"); the shell watches them.
    alarms: set = field(default_factory=set)
    on_alarm: Callable[[], None] = lambda: None
    # The message store is behind its writes, or a clustered leader's
    # followers are (or too few are in sync): publishers are not read
    # (silently, as RabbitMQ's flow control) until it catches up.
    store_busy: bool = False
    _store_behind: bool = False
    _replication_held: bool = False
    # Totals since start for the Prometheus metrics (counters.py).
    counters: Counters = field(default_factory=Counters)
    # The cluster node this broker leads for (amqp_server/node.py), if any:
    # /api/nodes, the health checks and the metrics read it.
    cluster: ClusterView | None = None

    def __post_init__(self) -> None:
        self.dead_letter_watch = DeadLetterWatch(self.config.alert_thresholds(),
                                                 self.config.dead_letter_alert_interval)
        # The one permission service: AMQP channels and the HTTP API ask it.
        self.access = AccessControl(self.users, self.permissions, self.vhosts,
                                    self.config.loopback_users)
        if not self.vhosts:
            self.add_vhost(self.config.default_vhost)
        if not self.users:
            # RabbitMQ's default user may only log in from loopback.
            self.users[self.config.default_user] = User.with_password(
                self.config.default_user, self.config.default_pass, ("administrator",))
            self.permissions[(self.config.default_user, self.config.default_vhost)] = \
                Permission()

    def add_vhost(self, name: str, semantics: str | None = None) -> VirtualHost:
        """The vhost of that name, made if missing; `semantics`: the ones
        it chooses (its metadata), else it follows the broker's.  A vhost
        that exists keeps the semantics it has: ValueError if asked for
        others (its queues were made under them)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(
                name, self.timers, self.policies, self.config.policy_precedence == "policy",
                self.config.address_settings,
                semantics=semantics or self.config.rabbitmq_semantics,
                semantics_chosen=semantics is not None,
                permits=self.config.permit_deprecated_features)
            vhost.counters = self.counters
            vhost.replies = self.replies
            vhost.credit_limits = (self.config.credit_flow_backlog,
                                   self.config.credit_flow_backlog_bytes)
            if self.journal is not None:
                self.attach(vhost)
                self.journal.vhost_added(name, vhost.metadata)
        elif semantics is not None and semantics != vhost.semantics:
            raise ValueError(f"vhost '{name}' follows RabbitMQ {vhost.semantics}'s semantics; "
                             "they cannot change while it exists (delete it and create it "
                             "again)")
        return vhost

    def set_permission(self, user: str, vhost: str, permission: Permission) -> None:
        if user not in self.users:
            raise KeyError(f"user '{user}' not found")
        self._vhost(vhost)
        self.permissions[(user, vhost)] = permission
        self._refresh_access(user, vhost)
        self._journal().permission_set(user, vhost, permission)

    def clear_permission(self, user: str, vhost: str) -> None:
        if self.permissions.pop((user, vhost), None) is None:
            raise KeyError(f"no permissions for user '{user}' in vhost '{vhost}'")
        self._refresh_access(user, vhost)
        self._journal().permission_cleared(user, vhost)

    def _refresh_access(self, user: str, vhost: str) -> None:
        """Open connections of the user follow the change at once (without
        permissions they keep a grant that allows nothing)."""
        for connection in self.connections:
            if (connection.user is not None and connection.user.name == user
                    and connection.vhost is not None and connection.vhost.name == vhost):
                connection.grant = self.access.login(connection.user, vhost) or \
                    Grant(connection.user, vhost, NO_ACCESS)

    def put_user(self, user: User) -> None:
        """Create or replace a user."""
        self.users[user.name] = user
        self._journal().user_put(user)

    def delete_user(self, name: str) -> None:
        if self.users.pop(name, None) is None:
            raise KeyError(f"user '{name}' not found")
        for key in [key for key in self.permissions if key[0] == name]:
            del self.permissions[key]
            self._refresh_access(*key)
            self._journal().permission_cleared(*key)
        self._journal().user_deleted(name)

    def delete_vhost(self, name: str) -> None:
        vhost = self._vhost(name)
        for connection in [c for c in self.connections if c.vhost is vhost]:
            connection.shutdown(320, f"vhost '{name}' is deleted")
        for queue in list(vhost.queues.values()):
            vhost.remove_queue(queue)
        vhost.delayed.drop_all()
        del self.vhosts[name]
        for key in [key for key in self.permissions if key[1] == name]:
            del self.permissions[key]
        for operator in (False, True):  # a vhost made again under the name starts bare
            for policy in self.policies.in_vhost(name, operator):
                self.policies.remove(name, policy.name, operator)
        self._journal().vhost_deleted(name)

    def authenticate(self, username: str, password: str) -> User | None:
        user = self.users.get(username)
        if user is None or not user.check_password(password):
            return None
        return user

    def memory_limit(self) -> int:
        """The memory high watermark in bytes (0: none)."""
        config = self.config
        return resources.memory_limit(config.vm_memory_high_watermark,
                                      config.vm_memory_high_watermark_absolute,
                                      resources.total_memory())

    def check_resources(self) -> None:
        """The memory and disk alarms: set above the memory high watermark or
        below `disk_free_limit` free bytes, cleared when back on the right
        side; the shell blocks and unblocks publishers."""
        config = self.config
        limit = self.memory_limit()
        used = resources.resident_memory()
        if limit and used:
            self.set_alarm("memory", used > limit)
            if self.paging is not None:
                self.set_paging_pressure(
                    used > limit * config.vm_memory_high_watermark_paging_ratio)
        if self.journal is None:
            return  # no data directory
        free = resources.disk_free(config.data_dir)
        if free is not None:
            self.set_alarm("disk", free < config.disk_free_limit)

    def set_alarm(self, resource: str, raised: bool) -> None:
        if raised == (resource in self.alarms):
            return
        if raised:
            self.alarms.add(resource)
            log.warning("%s alarm set: publishers are blocked", resource)
        else:
            self.alarms.discard(resource)
            log.info("%s alarm cleared", resource)
        self.on_alarm()

    def store_congested(self, congested: bool) -> None:
        self._store_behind = congested
        self._update_store_busy()

    def replication_held(self, held: bool) -> None:
        self._replication_held = held
        self._update_store_busy()

    def _update_store_busy(self) -> None:
        self.store_busy = self._store_behind or self._replication_held
        self.on_alarm()

    def set_paging_pressure(self, raised: bool) -> None:
        """Memory is getting short: queues keep fewer messages in memory,
        and those past the lower threshold go to disk now (transient ones
        too); when it is over, the usual thresholds return."""
        if not self.paging.set_pressure(raised):
            return
        paged = 0
        for vhost in self.vhosts.values():
            for queue in vhost.queues.values():
                queue.attach_paging(self.paging)
                if raised:
                    paged += queue.page_out_tail()
        if paged:
            # What the broker does about it, not what an operator must do.
            log.info("memory pressure: %d messages paged to disk", paged)

    def sweep(self, now: float | None = None) -> int:
        """The expiry reaper: expired messages anywhere in any queue die now,
        held at-least-once dead letters are retried.  Returns how many expired."""
        count = 0
        for vhost in list(self.vhosts.values()):
            at = vhost.clock() if now is None else now
            for queue in list(vhost.queues.values()):
                if queue.needs_sweep:
                    count += queue.sweep(at)
        return count

    def watch_dead_letters(self, now: float | None = None) -> None:
        """Once a second: arrival marks, the dead-letter alerts' samples
        when their interval is up (dead_letter_watch.py), and retention's
        archiving (archiving.py)."""
        now = time.time() * 1000.0 if now is None else now
        self.dead_letter_watch.tick(list(self.vhosts.values()), now)
        if self.archiver is not None:
            self.archiver.tick(now)

    def scan_auto_created(self) -> int:
        """Artemis's address-queue scan: delete the unused auto-created
        DLQ./EXP. queues.  Returns how many went."""
        return sum(vhost.auto_created.scan() for vhost in list(self.vhosts.values()))

    def check_credit(self) -> None:
        """Once a second: each queue that withholds credit from a connection
        looks whether its consumers still take anything (queue/credit.py:
        a stuck one lets its publishers go)."""
        queues = {queue for connection in self.connections
                  for queue in connection.flow.withheld}
        for queue in queues:
            queue.credit_tick()

    def check_ack_deadlines(self) -> None:
        """Consumer timeouts: every connection closes its channels whose
        oldest delivery waited too long for an acknowledgement."""
        now = time.monotonic() * 1000.0
        for connection in list(self.connections):
            connection.check_ack_deadlines(now)

    # ---- durable state -------------------------------------------------

    def open_data_dir(self, lock: DataDirLock | None = None) -> list[str]:
        """Lock the data directory (DataDirError when another broker holds
        it, or it cannot be used), load persisted state from it, apply it,
        and keep persisting from now on.  Returns what could not be recovered.
        `lock`: one the caller holds already and keeps (a cluster node keeps
        its directory across its roles)."""
        data_dir = Path(self.config.data_dir)
        if lock is None:
            lock = DataDirLock(data_dir)
            lock.acquire()
            self._owns_lock = True
        self.data_dir_lock = lock
        try:
            problems = boot.load(self, data_dir)
        except (OSError, ValueError) as exc:
            self.close_data_dir()
            raise DataDirError(f"cannot use data directory {data_dir}: {exc}") from None
        # An archive that cannot be written stops no start: the broker keeps
        # the dead letters and says why (Archiver.problem).
        self.archiver = Archiver(self, self.config.dead_letter_archive_dir
                                 or data_dir / ARCHIVE_DIR)
        return problems

    def close_data_dir(self) -> None:
        """After the store has shut down: another broker may take the directory."""
        if self.data_dir_lock is not None and self._owns_lock:
            self.data_dir_lock.release()
        self.data_dir_lock = None

    def attach(self, vhost: VirtualHost) -> None:
        vhost.journal = self.journal
        vhost.store = self.store
        vhost.paging = self.paging
        vhost.dead_letterer.log = self.dead_letter_log
        for queue in vhost.queues.values():
            queue.attach_paging(self.paging)
            if queue.durable:
                queue.store = self.store

    def _journal(self):
        return self.journal if self.journal is not None else NO_JOURNAL

    # ---- policies ------------------------------------------------------

    def set_policy(self, vhost: str, name: str, pattern: str, definition, priority=0,
                   apply_to: str = "all", operator: bool = False) -> Policy:
        """Validate, store and apply at once; PolicyError or KeyError (no such vhost)."""
        host = self._vhost(vhost)
        policy = make_policy(vhost, name, pattern, definition, priority, apply_to, operator,
                             host.semantics)
        self.policies.put(policy, operator)
        host.reapply_policies()
        return policy

    def drop_policies_their_vhosts_refuse(self) -> list[str]:
        """After a restart: a policy its vhost's semantics no longer take
        (the broker's semantics changed, and the vhost follows them) goes,
        and its vhost's queues take their settings again; one line each."""
        problems = []
        for operator in (False, True):
            for policy in list(self.policies.table(operator).values()):
                host = self.vhosts.get(policy.vhost)
                if host is None:
                    continue
                try:
                    validate_definition(policy.definition, operator, host.semantics)
                except PolicyError as exc:
                    self.policies.remove(policy.vhost, policy.name, operator)
                    host.reapply_policies()
                    problems.append(f"policy '{policy.name}' in vhost '{policy.vhost}' "
                                    f"dropped: RabbitMQ {host.semantics}'s semantics refuse "
                                    f"it ({exc.plain})")
        return problems

    def clear_policy(self, vhost: str, name: str, operator: bool = False) -> Policy:
        host = self._vhost(vhost)
        policy = self.policies.remove(vhost, name, operator)
        if policy is None:
            raise KeyError(f"policy '{name}' not found in vhost '{vhost}'")
        host.reapply_policies()
        return policy

    def _vhost(self, name: str) -> VirtualHost:
        host = self.vhosts.get(name)
        if host is None:
            raise KeyError(f"vhost '{name}' not found")
        return host
