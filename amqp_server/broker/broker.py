"""The broker's shared state: virtual hosts, users and live connections."""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.model import Policy, PolicyError, make_policy
from policies.store import PolicyStore

from ..config import BrokerConfig
from .timers import Timers, now_ms
from .users import User
from .vhost import VirtualHost


@dataclass
class Broker:
    config: BrokerConfig = field(default_factory=BrokerConfig)
    vhosts: dict[str, VirtualHost] = field(default_factory=dict)
    users: dict[str, User] = field(default_factory=dict)
    connections: set = field(default_factory=set)
    timers: Timers = field(default_factory=Timers)
    policies: PolicyStore = field(default_factory=PolicyStore)

    def __post_init__(self) -> None:
        if not self.vhosts:
            self.add_vhost(self.config.default_vhost)
        if not self.users:
            # RabbitMQ's default user may only log in from loopback.
            self.users[self.config.default_user] = User.with_password(
                self.config.default_user, self.config.default_pass,
                ("administrator",), loopback_only=self.config.default_user_loopback_only)

    def add_vhost(self, name: str) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(
                name, self.timers, self.policies, self.config.policy_precedence == "policy")
        return vhost

    def authenticate(self, username: str, password: str) -> User | None:
        user = self.users.get(username)
        if user is None or not user.check_password(password):
            return None
        return user

    def sweep(self, now: float | None = None) -> int:
        """The expiry reaper: expired messages anywhere in any queue die now,
        held at-least-once dead letters are retried.  Returns how many expired."""
        now = now_ms() if now is None else now
        count = 0
        for vhost in list(self.vhosts.values()):
            for queue in list(vhost.queues.values()):
                if not queue.plain or queue.saw_message_ttl or queue.dlx_pending:
                    count += queue.sweep(now)
        return count

    # ---- policies ------------------------------------------------------

    def open_data_dir(self) -> list[str]:
        """Load persisted state from the data directory and apply it."""
        problems = self.policies.open(self.config.data_dir)
        for vhost in self.vhosts.values():
            vhost.reapply_policies()
        return problems

    def set_policy(self, vhost: str, name: str, pattern: str, definition, priority=0,
                   apply_to: str = "all", operator: bool = False) -> Policy:
        """Validate, store and apply at once; PolicyError or KeyError (no such vhost)."""
        host = self._vhost(vhost)
        policy = make_policy(vhost, name, pattern, definition, priority, apply_to, operator)
        self.policies.put(policy, operator)
        host.reapply_policies()
        return policy

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
