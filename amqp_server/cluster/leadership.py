"""Who leads a replication group, decided by etcd.

One `Leadership` per replication group (`vhosts`, or one virtual host each
later) and node, on the node's `Session`.  Its keys, under
`/<cluster>/groups/<group>/` (each name percent-encoded, so the virtual host
`/` is the group `%2F`):

    election/<lease in hex>   the campaign keys, JSON {"node", <addresses>};
                              the one with the oldest create revision leads
    isr                       the in-sync set: JSON list of node names
    members                   the nodes the group's leader ships to: JSON list

The election keys are exactly those of etcd's election recipe
(concurrency.Election, which the gateway's /v3/election service runs), so
`/v3/election/leader`, `resign`, `observe` and `etcdctl elect -l` see the same
leader.  The campaign itself is that recipe done here with kv, lease and
watch rather than one long `/v3/election/campaign` request, for three
reasons: the key is created in a txn that also checks the in-sync set, which
is what makes "only an in-sync member may campaign" atomic; a long request
held by a member that is stopped (not dead) would wait forever, while every
step here is a bounded request through the client's failover; and a campaign
request that breaks makes the gateway resign the key behind our back, which
could happen after we resumed the same key through another member.

Rules, each enforced by etcd rather than by trust:

- Campaign only when in the in-sync set: the campaign key is created in a txn
  comparing the `isr` key's mod revision with the one read and found to hold
  this node.  A queued node that is dropped from the set withdraws its key;
  and since a node leads only once a single consistent read shows both its
  key first in line and its name in the set, a node dropped while queued
  never leads even if it has not withdrawn yet.
- Bootstrap: while `isr` does not exist, the group has never had a leader,
  and any node may campaign; the first leader writes `isr = [itself]` (in a
  txn that also requires the key to be still absent) before it reports
  leading.  Followers join the set as the leader sees them caught up.  So an
  etcd whose data was wiped makes a new cluster: any node may then lead.
- Fencing: every write of a leader (`isr`, `members`, or `fenced_txn`) is a
  txn comparing the leader's own election key with its create revision, the
  fencing token of its term.  Once the key is gone - lease expired, revoked,
  resigned - no write of that term can apply, however late it arrives.  The
  shared keys are also compare-and-swapped on their mod revision, so a write
  whose outcome was unknown can never apply after a later one.
- The in-sync set never shrinks below `min_in_sync` (the leader included).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from . import in_sync
from .etcd import (
    Compare,
    EtcdClient,
    EtcdError,
    KeyValue,
    LeaderKey,
    TxnResult,
    delete_op,
    put_op,
    range_op,
)
from .session import Session

__all__ = ["DEFAULT_MIN_IN_SYNC", "InSync", "Leader", "Leadership", "LeadershipLost",
           "NotLeader", "Term", "group_prefix"]

log = logging.getLogger("amqp_server.cluster")

DEFAULT_MIN_IN_SYNC = 2
# How long a wait on a watch lasts before the state is read again: a watch
# held by a stopped etcd member is silent, so it must not be trusted alone.
DEFAULT_RECHECK = 1.0
RETRY_INTERVAL = 0.2
_NOTHING = object()


def name_segment(name: str) -> str:
    if not name:
        raise ValueError("cluster, group and node names must not be empty")
    return quote(name, safe="@:")


def group_prefix(cluster: str, group: str) -> str:
    return f"/{name_segment(cluster)}/groups/{name_segment(group)}/"


class LeadershipLost(Exception):
    """The session under the campaign ended: start a new one."""


class NotLeader(Exception):
    """A fenced write without a term."""


@dataclass(frozen=True)
class Leader:
    """Who leads a group, as anyone can read it."""

    node: str
    addresses: dict[str, str]
    key: str
    revision: int  # the election key's create revision
    lease: int

    @classmethod
    def _from(cls, kv: KeyValue) -> Leader:
        try:
            value = json.loads(kv.value)
            node = str(value.pop("node"))
        except (ValueError, TypeError, KeyError, AttributeError):
            # A key an etcdctl user campaigned with: the value is the name.
            value, node = {}, kv.value.decode("utf-8", "replace")
        return cls(node, {str(k): str(v) for k, v in value.items()}, kv.key,
                   kv.create_revision, kv.lease)


@dataclass(frozen=True)
class Term:
    """This node's leadership of a group; `revision` is its fencing token."""

    group: str
    key: str
    revision: int
    lease: int


@dataclass(frozen=True)
class InSync:
    nodes: tuple[str, ...]
    mod_revision: int  # of the `isr` key; the compare-and-swap token


@dataclass(frozen=True)
class _Snapshot:
    """The group's keys at one revision."""

    revision: int
    queue: list[KeyValue]    # election keys, oldest first
    isr: InSync | None

    @property
    def leader(self) -> Leader | None:
        return Leader._from(self.queue[0]) if self.queue else None


async def _snapshot(client: EtcdClient, prefix: str) -> _Snapshot:
    found = await client.get(prefix, prefix=True)
    election = prefix + "election/"
    queue = sorted((kv for kv in found.kvs if kv.key.startswith(election)),
                   key=lambda kv: kv.create_revision)
    isr = next((InSync(_names(kv.value), kv.mod_revision)
                for kv in found.kvs if kv.key == prefix + "isr"), None)
    return _Snapshot(found.revision, queue, isr)


async def observe(client: EtcdClient, prefix: str, recheck: float = DEFAULT_RECHECK
                  ) -> AsyncIterator[tuple[Leader | None, int]]:
    """A group's leader (None while nobody leads) each time it changes, with
    the etcd revision it was read at.  Needs no session: a node that has
    none (etcd dropped its lease) still sees who leads.  Runs until
    cancelled; etcd being unreachable only delays it."""
    last: object = _NOTHING
    while True:
        try:
            snapshot = await _snapshot(client, prefix)
        except EtcdError:
            await asyncio.sleep(RETRY_INTERVAL)
            continue
        leader = snapshot.leader
        seen = (leader.key, leader.revision, leader.addresses) if leader else None
        if seen != last:
            last = seen
            yield leader, snapshot.revision
        began = time.monotonic()
        changes = await client.watch_once(prefix, prefix=True,
                                          start_revision=snapshot.revision + 1, timeout=recheck)
        if not changes and time.monotonic() - began < RETRY_INTERVAL:
            await asyncio.sleep(RETRY_INTERVAL)  # the watch could not be made


def _names(value: bytes) -> tuple[str, ...]:
    try:
        names = json.loads(value)
    except ValueError:
        return ()
    return tuple(str(n) for n in names) if isinstance(names, list) else ()


class Leadership:
    """One node's part in one group's election.  `campaign()` returns the
    `Term` once this node leads; `leads()` is the check before a confirm;
    `on_lost` callbacks (and the `lost` event) fire the moment the term
    ends - the lease could not be renewed, it was revoked, the key was
    deleted, or a fenced write found it gone."""

    def __init__(self, session: Session, cluster: str, group: str, node: str, *,
                 addresses: Mapping[str, str] | None = None,
                 min_in_sync: int = DEFAULT_MIN_IN_SYNC,
                 recheck: float = DEFAULT_RECHECK) -> None:
        if min_in_sync < 1:
            raise ValueError("min-in-sync must be at least 1 (the leader)")
        self.session = session
        self.client: EtcdClient = session.client
        self.cluster = cluster
        self.group = group
        self.node = node
        self.addresses = dict(addresses or {})
        self.min_in_sync = min_in_sync
        self.recheck = recheck
        self.prefix = group_prefix(cluster, group)
        self.election = self.prefix + "election"
        self.isr_key = self.prefix + "isr"
        self.members_key = self.prefix + "members"
        self.term: Term | None = None
        self.lost = asyncio.Event()
        self._callbacks: list[Callable[[str], None]] = []
        self._monitor: asyncio.Task[None] | None = None
        session.on_lost(self._session_lost)

    # ---- leading ----------------------------------------------------------

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call `callback(reason)` each time a term of this node ends."""
        self._callbacks.append(callback)

    def leads(self) -> bool:
        """Whether this node may act as the group's leader now: it holds a
        term and its lease cannot have run out (a clock check, valid even
        right after the process was stopped)."""
        return self.term is not None and self.session.alive()

    @property
    def my_key(self) -> str:
        return f"{self.election}/{self.session.lease:x}"

    async def campaign(self, on_wait: Callable[[str], None] | None = None) -> Term:
        """Wait until this node leads the group and return its term.
        `on_wait(reason)` is told why it does not lead yet, each time that
        changes.  Raises `LeadershipLost` when the session ends first."""
        if self.term is not None:
            return self.term
        said = ""

        def wait(reason: str) -> None:
            nonlocal said
            if on_wait is not None and reason != said:
                on_wait(reason)
            said = reason

        while True:
            self._check_session()
            try:
                snapshot = await self._snapshot()
                mine = next((kv for kv in snapshot.queue if kv.key == self.my_key), None)
                isr = snapshot.isr
                if isr is not None and self.node not in isr.nodes:
                    if mine is not None:
                        await self._withdraw(mine)
                    wait(f"not in the in-sync set {list(isr.nodes)}")
                elif mine is None:
                    await self._enter(isr)
                    continue
                elif snapshot.queue[0].key == mine.key:
                    term = Term(self.group, mine.key, mine.create_revision, mine.lease)
                    if isr is None and not await self._bootstrap(term):
                        continue
                    self._begin(term)
                    return term
                else:
                    leader = snapshot.leader
                    wait(f"{leader.node if leader else 'another node'} leads")
                await self._wait_change(self.prefix, True, snapshot.revision)
            except EtcdError as exc:
                wait(f"etcd: {exc}")
                await self._sleep(RETRY_INTERVAL)

    async def resign(self) -> None:
        """Give up the lead (or the place in line) at once."""
        term = self.term
        key = term.key if term else self.my_key
        found = await self.client.get_one(key)
        if found is not None and found.lease == self.session.lease:
            await self.client.election_resign(
                LeaderKey(self.election, key, found.create_revision, found.lease))
        if term is not None:
            self._end(term, "resigned")

    def abandon(self, reason: str) -> None:
        """Forget the current term here without touching etcd (the node
        stopped acting on it); a later campaign reads etcd afresh and wins
        again only if the key is still first in line there."""
        if self.term is not None:
            self._end(self.term, reason)

    def _begin(self, term: Term) -> None:
        self.term = term
        self.lost.clear()
        self._monitor = asyncio.get_running_loop().create_task(self._watch_term(term))

    def _end(self, term: Term, reason: str) -> None:
        if self.term is not term:
            return
        self.term = None
        self.lost.set()
        if self._monitor is not None and self._monitor is not asyncio.current_task():
            self._monitor.cancel()
        log.info("node %s no longer leads group %s: %s", self.node, self.group, reason)
        for callback in list(self._callbacks):
            try:
                callback(reason)
            except Exception:
                log.exception("a leadership-lost callback failed")

    def _session_lost(self, reason: str) -> None:
        if self.term is not None:
            self._end(self.term, reason)

    async def _watch_term(self, term: Term) -> None:
        """End the term when its key goes (a follower revoked the lease, an
        operator resigned it); the lease itself is the session's job."""
        while self.term is term:
            try:
                found = await self.client.get(term.key)
                kv = found.kvs[0] if found.kvs else None
                if kv is None or kv.create_revision != term.revision:
                    self._end(term, f"its election key {term.key} was deleted in etcd")
                    return
                await self._wait_change(term.key, False, found.revision)
            except EtcdError:
                await self._sleep(RETRY_INTERVAL)

    # ---- campaign steps ---------------------------------------------------

    async def _snapshot(self) -> _Snapshot:
        return await _snapshot(self.client, self.prefix)

    async def _enter(self, isr: InSync | None) -> None:
        """Create this node's campaign key, if the in-sync set is still the
        one read (or still absent).  An unknown outcome is settled by the
        next read: the key is there or not."""
        value = json.dumps({"node": self.node, **self.addresses})
        try:
            await self.client.txn(
                [Compare.create_revision(self.my_key, 0),
                 Compare.mod_revision(self.isr_key, isr.mod_revision if isr else 0)],
                [put_op(self.my_key, value, self.session.lease)])
        except EtcdError as exc:
            if not exc.outcome_unknown:
                raise

    async def _withdraw(self, mine: KeyValue) -> None:
        await self.client.election_resign(
            LeaderKey(self.election, mine.key, mine.create_revision, mine.lease))

    async def _bootstrap(self, term: Term) -> bool:
        """The group's first leader: the in-sync set is this node alone."""
        try:
            result = await self.client.txn(
                [Compare.create_revision(term.key, term.revision),
                 Compare.create_revision(self.isr_key, 0)],
                [put_op(self.isr_key, json.dumps([self.node]))])
        except EtcdError as exc:
            if not exc.outcome_unknown:
                raise
            return False  # the next read tells
        return result.succeeded

    async def _wait_change(self, key: str, prefix: bool, revision: int) -> None:
        """Until something under `key` changes after `revision`, the session
        ends, or `recheck` seconds pass."""
        watch = asyncio.ensure_future(self.client.watch_once(
            key, prefix=prefix, start_revision=revision + 1, timeout=self.recheck))
        lost = asyncio.ensure_future(self.session.lost.wait())
        try:
            await asyncio.wait([watch, lost], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (watch, lost):
                task.cancel()
            await asyncio.gather(watch, lost, return_exceptions=True)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.session.lost.wait(), seconds)
        except TimeoutError:
            pass

    def _check_session(self) -> None:
        if self.session.reason is not None:
            raise LeadershipLost(f"node {self.node} cannot campaign in group {self.group}: "
                                 f"{self.session.reason}")

    # ---- who leads --------------------------------------------------------

    async def leader(self) -> Leader | None:
        """The group's leader now (through etcd's election service)."""
        kv = await self.client.election_leader(self.election)
        return Leader._from(kv) if kv is not None else None

    async def observe(self) -> AsyncIterator[Leader | None]:
        """The leader each time it changes, None while nobody leads (which
        etcd's /v3/election/observe never says).  Runs until cancelled; etcd
        being unreachable only delays it."""
        async for leader, _ in observe(self.client, self.prefix, self.recheck):
            yield leader

    # ---- fenced writes ----------------------------------------------------

    async def fenced_txn(self, success: Iterable[dict[str, Any]],
                         compare: Iterable[Compare] = (), failure: Iterable[dict[str, Any]] = (),
                         *, term: Term | None = None) -> TxnResult:
        """A txn that applies only while `term` (default: the current one)
        still holds: its election key exists with its create revision."""
        term = term or self.term
        if term is None:
            raise NotLeader(f"node {self.node} does not lead group {self.group}")
        return await self.client.txn([Compare.create_revision(term.key, term.revision),
                                      *compare], success, failure)

    async def read_isr(self) -> InSync | None:
        """The in-sync set, None before the group's first leader wrote it."""
        kv = await self.client.get_one(self.isr_key)
        return InSync(_names(kv.value), kv.mod_revision) if kv is not None else None

    async def write_isr(self, nodes: Iterable[str], *, term: Term | None = None) -> bool:
        """Set the in-sync set; True once etcd applied it, False when it
        refused (this term is over, or the set changed meanwhile: read it
        again).  `EtcdError`: not known to be applied - do not act on it."""
        wanted = tuple(dict.fromkeys(nodes))
        if self.node not in wanted:
            raise ValueError(f"the in-sync set must hold its leader {self.node!r}")
        current = await self.read_isr()
        if current is not None and not in_sync.may_shrink(current.nodes, wanted,
                                                          self.min_in_sync):
            raise ValueError(f"the in-sync set cannot shrink below min-in-sync "
                             f"({self.min_in_sync}): {list(wanted)}")
        return await self._cas(self.isr_key, wanted, current.mod_revision if current else 0, term)

    async def read_members(self) -> InSync | None:
        """The nodes the group's leader ships to, as the leader wrote them."""
        kv = await self.client.get_one(self.members_key)
        return InSync(_names(kv.value), kv.mod_revision) if kv is not None else None

    async def write_members(self, nodes: Iterable[str], *, term: Term | None = None) -> bool:
        """Set the group's members; as write_isr."""
        current = await self.read_members()
        return await self._cas(self.members_key, tuple(dict.fromkeys(nodes)),
                               current.mod_revision if current else 0, term)

    async def _cas(self, key: str, nodes: tuple[str, ...], mod_revision: int,
                   term: Term | None) -> bool:
        term = term or self.term
        if term is None:
            raise NotLeader(f"node {self.node} does not lead group {self.group}")
        value = json.dumps(list(nodes))
        try:
            result = await self.fenced_txn([put_op(key, value)],
                                           [Compare.mod_revision(key, mod_revision)],
                                           [range_op(term.key)], term=term)
        except EtcdError as exc:
            if not exc.outcome_unknown:
                raise
            # Only this term writes the key: finding our value there, at a
            # newer revision, means it applied; otherwise it can never apply
            # after another write (compare-and-swap), but may still apply.
            kv = await self.client.get_one(key)
            if kv is not None and kv.value == value.encode() and kv.mod_revision > mod_revision:
                return True
            raise
        if not result.succeeded:
            held = result.responses[0] if result.responses else []
            if not held or held[0].create_revision != term.revision:
                self._end(term, f"its election key {term.key} was gone at a fenced write")
        return result.succeeded

    # ---- fast failover ----------------------------------------------------

    async def revoke_leader(self, expected: Leader | None = None) -> bool:
        """Depose the current leader at once: delete its election key and
        revoke its lease, so that the next in line (possibly this node) leads
        without waiting for the lease to run out.  For a follower that saw
        the leader's replication link reset.  False (and nothing done) unless
        this node is, in one consistent etcd state, in the in-sync set and
        campaigning, and the leader is still `expected` (when given).

        Why this cannot lose a confirmed message: a leader confirms a record
        only once every member of the in-sync set has it.  The guard is one
        txn comparing the `isr` key's mod revision with the revision at
        which this node read itself in the set, the leader key's create
        revision, and this node's own campaign key; so at the moment the
        leader is deposed, this node is in the in-sync set, and the old
        leader can no longer shrink the set (its fenced writes need the key
        just deleted).  From then on the old leader - if it still runs and
        has not noticed yet - cannot confirm anything new either: this node
        is in its in-sync set and (the caller's duty) acks nothing more from
        it after deciding to revoke, and confirms go on without an in-sync
        member only once its removal is written to etcd, which that leader
        can no longer do.  Every record confirmed before is on every in-sync
        member, and only an in-sync member can lead next.
        A follower that is not in the set cannot do this: the set may have
        been shrunk without it precisely because it lags, and the records
        confirmed since are not on it.
        """
        snapshot = await self._snapshot()
        leader = snapshot.leader
        mine = next((kv for kv in snapshot.queue if kv.key == self.my_key), None)
        isr = snapshot.isr
        if (leader is None or mine is None or leader.key == mine.key or isr is None
                or self.node not in isr.nodes):
            return False
        if expected is not None and (expected.key, expected.revision) != (leader.key,
                                                                          leader.revision):
            return False
        result = await self.client.txn(
            [Compare.create_revision(leader.key, leader.revision),
             Compare.mod_revision(self.isr_key, isr.mod_revision),
             Compare.create_revision(mine.key, mine.create_revision)],
            [delete_op(leader.key)])
        if not result.succeeded:
            return False
        log.info("node %s deposed %s as leader of group %s", self.node, leader.node,
                 self.group)
        try:
            await self.client.revoke(leader.lease)
        except EtcdError as exc:  # the key is gone already: leadership moved
            log.info("could not revoke the deposed leader's lease %x: %s", leader.lease, exc)
        return True
