"""A cluster in memory for the control plane's property tests: a model of
etcd (leases with TTLs, the election's keys by create revision, the in-sync
set, members) and of the network (each node's reach to etcd, the links
between nodes), and nodes driven only by cluster/control.py's `step`.

The model plays the shell's part (node.py): it carries out each action
against the model etcd, with the outcome delivered back as an event after a
random delay, as the real tasks report theirs.  Faults are scheduled by the
test: etcd without a raft leader for a while, a node cut off from etcd, a
link between two nodes cut, a node paused (its events wait, its clock does
not), a node restarted.  Time advances in steps of DT seconds.

What the model guarantees about etcd is what etcd guarantees: a lease is
revoked only while etcd has a leader, no earlier than its TTL after the last
renewal etcd received; a new etcd leader extends every lease by its
election timeout; keys on a lease go with it.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from amqp_server.cluster import control as c

DT = 0.05
TTL = 4.0
ELECTION = 1.0          # etcd's election timeout: a new leader extends leases by it
RENEW_EVERY = TTL / 6
MIN_IN_SYNC = 2
LAG = 1.0               # a follower cut from the leader this long leaves the set


@dataclass
class Key:
    node: str
    lease: int
    create_revision: int


@dataclass
class Etcd:
    revision: int = 1
    leases: dict[int, float] = field(default_factory=dict)   # lease -> expiry (model time)
    election: dict[str, Key] = field(default_factory=dict)   # key -> Key
    members: dict[str, int] = field(default_factory=dict)    # node -> lease
    isr: list[str] | None = None
    available: bool = True
    next_lease: int = 0x100
    revoked_by_deposition: set[int] = field(default_factory=set)

    def bump(self) -> int:
        self.revision += 1
        return self.revision

    def grant(self, now: float) -> int:
        self.next_lease += 1
        self.leases[self.next_lease] = now + TTL
        return self.next_lease

    def revoke(self, lease: int) -> None:
        if self.leases.pop(lease, None) is None:
            return
        for key in [k for k, v in self.election.items() if v.lease == lease]:
            del self.election[key]
        for node in [n for n, held in self.members.items() if held == lease]:
            del self.members[node]
        self.bump()

    def expire(self, now: float) -> None:
        if self.available:
            for lease, expiry in list(self.leases.items()):
                if expiry <= now:
                    self.revoke(lease)

    def promote(self, now: float) -> None:
        """A new etcd leader: every lease lives at least TTL + ELECTION more."""
        for lease in self.leases:
            self.leases[lease] = max(self.leases[lease], now + TTL + ELECTION)

    def queue(self) -> list[tuple[str, Key]]:
        return sorted(self.election.items(), key=lambda item: item[1].create_revision)

    def leader(self) -> c.Seen | None:
        queue = self.queue()
        if not queue:
            return None
        key, held = queue[0]
        return c.Seen(held.node, key, held.create_revision, held.lease)


@dataclass
class Node:
    name: str
    state: c.State
    paused_until: float = 0.0
    sessions: set[int] = field(default_factory=set)     # leases this node renews
    renew_at: dict[int, float] = field(default_factory=dict)
    campaign: int | None = None                         # the lease it campaigns on
    watched: c.Seen | None = None                       # its term, watched in etcd
    seen: tuple | None = None                           # last leader it was told of
    booted: c.Seen | None = None                        # the term its broker serves
    stalled: float | None = None
    verify: c.Seen | None = None                        # a term check etcd has not answered


class World:
    def __init__(self, names: list[str], seed: int) -> None:
        self.random = random.Random(seed)
        self.now = 0.0
        self.etcd = Etcd()
        self.reach = dict.fromkeys(names, True)          # node <-> etcd
        self.cut: set[frozenset[str]] = set()             # node <-> node links cut
        self.cut_since: dict[frozenset[str], float] = {}
        self.events: list[tuple[float, int, str, c.Event]] = []
        self.sequence = 0
        self.nodes: dict[str, Node] = {}
        self.violations: list[str] = []
        self.won: dict[int, str] = {}                      # term revision -> node
        for name in names:
            self._start(name)

    # ---- the shell's part ----------------------------------------------------

    def _start(self, name: str) -> None:
        settings = c.Settings(node=name, ttl=TTL, yield_after=2 * LAG + 0.5)
        state, actions = c.start(settings, self.now, whole=True)
        node = self.nodes[name] = Node(name, state)
        for action in actions:
            self._act(node, action)

    def deliver(self, node: Node, event: c.Event, delay: float | None = None) -> None:
        if delay is None:
            delay = self.random.uniform(0.0, 0.3)
        self.sequence += 1
        heapq.heappush(self.events, (self.now + delay, self.sequence, node.name, event))

    def _ok(self, node: Node) -> bool:
        """Whether `node` can talk to etcd now."""
        return self.etcd.available and self.reach[node.name]

    def _linked(self, a: str, b: str) -> bool:
        return frozenset((a, b)) not in self.cut

    def _act(self, node: Node, action: c.Action) -> None:
        etcd = self.etcd
        match action:
            case c.OpenSession():
                if self._ok(node):
                    lease = etcd.grant(self.now)
                    etcd.members[node.name] = lease
                    etcd.bump()
                    node.sessions.add(lease)
                    node.renew_at[lease] = self.now + RENEW_EVERY
                    self.deliver(node, c.SessionOpened(self.now, lease, TTL, self.now))
                else:
                    self.deliver(node, c.SessionFailed(self.now, "etcd unreachable",
                                                       self.random.random()), 1.0)
            case c.CloseSession(lease=lease, revoke=revoke):
                node.sessions.discard(lease)
                if node.campaign == lease:
                    node.campaign = None
                if revoke and self._ok(node):
                    etcd.revoke(lease)
            case c.Revoke(lease=lease):
                if self._ok(node):
                    etcd.revoke(lease)
            case c.Campaign(lease=lease):
                node.campaign = lease
            case c.Withdraw():
                lease = node.campaign
                node.campaign = None
                key = f"election/{lease:x}" if lease is not None else None
                if key in etcd.election and self._ok(node):
                    del etcd.election[key]
                    etcd.bump()
            case c.Boot(term=term):
                if self.random.random() < 0.05:
                    self.deliver(node, c.BootFailed(self.now, term, "boot failed"))
                else:
                    node.booted = term
                    self.deliver(node, c.Booted(self.now, term))
            case c.StopBroker():
                node.booted = None
                node.stalled = None
                self.deliver(node, c.BrokerStopped(self.now))
            case c.Resign(term=term):
                if self._ok(node) and term.key in etcd.election:
                    del etcd.election[term.key]
                    etcd.bump()
            case c.VerifyTerm(term=term):
                if self._ok(node):
                    held = etcd.election.get(term.key)
                    self.deliver(node, c.TermChecked(
                        self.now, term, held is not None
                        and held.create_revision == term.revision), 0.0)
                else:
                    node.verify = term  # the shell asks until etcd answers
            case c.FindSuccessors():
                if self._ok(node):
                    successors = tuple(name for name in etcd.isr or ()
                                       if name != node.name and name in etcd.members)
                    self.deliver(node, c.Stalled(self.now, node.stalled, successors))
            case c.Depose(leader=leader):
                self._depose(node, leader)
            case c.Follow() | c.StopFollowing() | c.HoldConfirms() | c.ReleaseConfirms() \
                    | c.Log():
                pass
            case _:
                raise AssertionError(f"unknown action {action!r}")

    def _depose(self, node: Node, leader: c.Seen) -> None:
        """Leadership.revoke_leader: one txn guarded by the in-sync set and
        this node's own campaign key."""
        etcd = self.etcd
        if not self._ok(node) or node.campaign is None:
            return
        mine = f"election/{node.campaign:x}"
        current = etcd.leader()
        if (mine not in etcd.election or current is None or current.key != leader.key
                or current.key == mine or etcd.isr is None or node.name not in etcd.isr):
            return
        del etcd.election[leader.key]
        etcd.revoked_by_deposition.add(leader.lease)
        etcd.revoke(leader.lease)
        etcd.bump()

    # ---- what runs on its own --------------------------------------------------

    def _background(self, node: Node) -> None:
        etcd = self.etcd
        ok = self._ok(node)
        # Renewals.
        for lease in list(node.sessions):
            if self.now < node.renew_at.get(lease, 0.0):
                continue
            if not ok:
                node.renew_at[lease] = self.now + 0.2
                continue
            node.renew_at[lease] = self.now + RENEW_EVERY
            if lease in etcd.leases:
                etcd.leases[lease] = max(etcd.leases[lease], self.now + TTL)
                self.deliver(node, c.Renewed(self.now, lease, TTL, self.now))
            else:
                node.sessions.discard(lease)
                self.deliver(node, c.LeaseGone(self.now, lease, "expired"))
        if not ok:
            return
        # The campaign (Leadership.campaign).
        lease = node.campaign
        if lease is not None and lease in etcd.leases:
            key = f"election/{lease:x}"
            isr = etcd.isr
            if isr is not None and node.name not in isr:
                if key in etcd.election:
                    del etcd.election[key]
                    etcd.bump()
            elif key not in etcd.election:
                etcd.election[key] = Key(node.name, lease, etcd.bump())
            elif etcd.queue()[0][0] == key:
                if etcd.isr is None:
                    etcd.isr = [node.name]
                    etcd.bump()
                held = etcd.election[key]
                term = c.Seen(node.name, key, held.create_revision, lease)
                node.campaign = None
                node.watched = term
                self.deliver(node, c.Won(self.now, term))
        term = node.verify
        if term is not None:
            node.verify = None
            held = etcd.election.get(term.key)
            self.deliver(node, c.TermChecked(self.now, term, held is not None
                                             and held.create_revision == term.revision), 0.0)
        # Its term's key (Leadership._watch_term).
        term = node.watched
        if term is not None and term.key not in etcd.election:
            node.watched = None
            self.deliver(node, c.TermEnded(self.now, term, "key deleted"))
        # Who leads (observe).
        leader = etcd.leader()
        seen = (leader.key, leader.revision) if leader else None
        if seen != node.seen:
            node.seen = seen
            self.deliver(node, c.LeaderSeen(self.now, leader, etcd.revision))
        # The leader's in-sync set and its stalls (the shipper).
        if node.booted is not None and c.may_confirm(node.state, self.now):
            self._keep_in_sync(node)

    def _keep_in_sync(self, node: Node) -> None:
        etcd = self.etcd
        isr = list(etcd.isr or [node.name])
        if node.booted is None or node.booted.key not in etcd.election:
            return  # its fenced writes no longer apply
        away = [name for name in isr if name != node.name
                and self.now - self.cut_since.get(frozenset((node.name, name)), self.now) > LAG]
        room = len(isr) - MIN_IN_SYNC
        leaving = away[:max(0, room)]
        joining = [name for name in self.nodes if name not in isr
                   and self._linked(node.name, name) and name in etcd.members]
        if leaving or joining:
            etcd.isr = [name for name in isr if name not in leaving] + joining
            etcd.bump()
        stuck = [name for name in etcd.isr or () if name != node.name
                 and not self._linked(node.name, name)]
        node.stalled = (node.stalled or self.now) if stuck else None
        self.deliver(node, c.Stalled(self.now, node.stalled), 0.0)

    # ---- the test's part -------------------------------------------------------

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now = round(self.now + DT, 6)
            was = self.etcd.available
            self.etcd.expire(self.now)
            for node in self.nodes.values():
                if self.now < node.paused_until:
                    continue
                self._background(node)
                self.deliver(node, c.Tick(self.now), 0.0)
            while self.events and self.events[0][0] <= self.now:
                _, _, name, event = heapq.heappop(self.events)
                node = self.nodes[name]
                if self.now < node.paused_until:
                    self.deliver(node, event, node.paused_until - self.now)
                    continue
                node.state, actions = c.step(node.state, event)
                for action in actions:
                    self._act(node, action)
            assert was == self.etcd.available
            self.check()

    def check(self) -> None:
        """The safety invariants, at this instant."""
        etcd = self.etcd
        confirming = []
        for node in self.nodes.values():
            if not c.may_confirm(node.state, self.now):
                continue
            lease = node.state.lease
            if lease not in etcd.leases and lease not in etcd.revoked_by_deposition:
                self.violations.append(f"{self.now:.2f}: {node.name} may confirm on lease "
                                       f"{lease:x}, which etcd let expire")
            term = node.state.term
            if term is not None and term.key in etcd.election:
                confirming.append(node.name)
        if len(confirming) > 1:
            self.violations.append(f"{self.now:.2f}: {confirming} all lead")
        for node in self.nodes.values():
            term = node.state.term
            if node.state.role is c.Role.BOOTING and term is not None:
                if self.won.setdefault(term.revision, node.name) != node.name:
                    self.violations.append(f"term {term.revision} won twice")

    # ---- faults ------------------------------------------------------------------

    def etcd_leaderless(self, seconds: float) -> None:
        self.etcd.available = False
        self.run(seconds)
        self.etcd.available = True
        self.etcd.promote(self.now)

    def isolate(self, name: str) -> None:
        self.reach[name] = False
        for other in self.nodes:
            if other != name:
                self.cut_link(name, other)

    def cut_link(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair not in self.cut:
            self.cut.add(pair)
            self.cut_since[pair] = self.now

    def pause(self, name: str, seconds: float) -> None:
        self.nodes[name].paused_until = self.now + seconds

    def restart(self, name: str) -> None:
        old = self.nodes.pop(name)
        self.events = [item for item in self.events if item[2] != name]
        heapq.heapify(self.events)
        del old  # its leases run out in etcd by themselves
        self._start(name)

    def heal(self) -> None:
        self.reach = dict.fromkeys(self.reach, True)
        self.cut.clear()
        self.cut_since.clear()
        for node in self.nodes.values():
            node.paused_until = 0.0
        if not self.etcd.available:
            self.etcd.available = True
            self.etcd.promote(self.now)

    def leaders(self) -> list[str]:
        return [node.name for node in self.nodes.values()
                if c.may_confirm(node.state, self.now)]
