"""A node's part in its cluster as one state machine: `step(state, event)
-> (state, actions)`.

Shaped as etcd's raft (`raft.go`'s Step): the role is one field, events
come in - etcd's answers, the clock, what the node's own tasks report -
and actions go out; the shell (node.py) carries the actions out and feeds
the outcomes back.  Nothing here does I/O, reads a clock or awaits, so the
rules are driven through thousands of random histories in memory
(tests/test_cluster_control.py) and the invariants checked there.

Roles:

    JOINING        no etcd session: one is being opened (at start, or
                   because etcd said the last one's lease is gone)
    COPYING        a session, but this node's copy is not whole: it does
                   not campaign (it would lead with part of the data)
    CAMPAIGNING    in line in the group's election; etcd says who leads
    BOOTING        elected: the broker boots from this node's copy
    LEADING        serving clients and confirming
    SUSPENDED      leading, but the lease is in doubt: nothing is confirmed
                   until etcd renews it and the election key is still ours
    STEPPING_DOWN  the broker stops (its clients get 320); then it
                   campaigns again, or opens a session first
    STOPPED

Every role but the leading ones follows the leader etcd names.

The lease, from this node's side.  A renewal sent at local time `t` that
etcd answers with TTL `T` keeps the lease alive in etcd until at least
`t + T` (etcd starts the TTL when the renewal arrives, after `t`; a new
etcd leader extends every lease): `deadline`.  Before it no other node can
hold this node's claims, so a leader may confirm while `now < deadline -
margin`; past it the lease is *in doubt*, not lost: etcd may have been
without a raft leader (an election, a partition healing), in which case
the lease still stands and the next renewal says so.  A leader in doubt
holds its confirms (SUSPENDED) and resumes when a renewal comes back and
its election key is still there; it steps down when etcd says the lease or
the key is gone, or when it has heard nothing for `suspend_limit` past the
deadline (it is cut off: its clients are better served by another node).
A lease is lost only when etcd says so (a renewal answered with TTL 0):
then a new session is opened, the node registers again and campaigns
again - a node that can reach etcd always comes back.

A leader that cannot keep its in-sync set - its confirms stall because a
member it may not remove (the set is at `min_in_sync`) does not answer -
yields after `yield_after`, when another in-sync member is up to take over
(in_sync.should_yield); a leader cut off from its followers does not hold
every publisher while two of them can talk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = [
    "Action", "Boot", "BootFailed", "Booted", "BrokerStopped", "Campaign", "CloseSession",
    "CopyStarted", "CopyWhole", "Depose", "Event", "Follow", "HoldConfirms", "LeaderSeen",
    "LeaderUnreachable", "LeaseGone", "Log", "OpenSession", "ReleaseConfirms", "Renewed",
    "Resign", "Revoke", "Role", "SessionFailed", "SessionOpened", "Settings", "Stalled",
    "State", "Stop", "StopBroker", "StopFollowing", "TermChecked", "TermEnded", "Tick",
    "VerifyTerm", "Withdraw", "Won", "backoff", "lease_alive", "may_confirm", "start", "step",
]


class Role(Enum):
    JOINING = "joining"
    COPYING = "copying"
    CAMPAIGNING = "campaigning"
    BOOTING = "booting"
    LEADING = "leading"
    SUSPENDED = "suspended"
    STEPPING_DOWN = "stepping down"
    STOPPED = "stopped"


FOLLOWING = frozenset({Role.JOINING, Role.COPYING, Role.CAMPAIGNING})
LEADER_ROLES = frozenset({Role.BOOTING, Role.LEADING, Role.SUSPENDED})

INFO, WARNING = 20, 30
# A stalled leader with no successor up looks again this often (an etcd read).
ASK_EVERY = 1.0


@dataclass(frozen=True)
class Seen:
    """A leader as etcd names it: its node and its election key."""

    node: str
    key: str
    revision: int = 0
    lease: int = 0


@dataclass(frozen=True)
class Settings:
    node: str
    ttl: float = 4.0                 # the lease TTL etcd granted (seconds)
    margin: float = 0.2              # confirm only this long before the deadline
    suspend_limit: float = 2.0       # in doubt this long past the deadline: step down
    yield_after: float = 4.5         # confirms stalled this long: yield (in_sync.yield_after)
    retry_min: float = 0.2           # opening a session again: backoff from ...
    retry_max: float = 2.0           # ... to at most this
    depose_every: float = 0.5        # one deposition try per this long for one leader


@dataclass(frozen=True)
class State:
    settings: Settings
    role: Role = Role.JOINING
    now: float = 0.0
    lease: int | None = None         # this session's lease (None: no session)
    deadline: float = 0.0            # see the module's docstring
    opening: bool = False            # a session is being opened
    failures: int = 0                # openings failed in a row
    retry_at: float = 0.0
    whole: bool = False              # this node's copy is whole: it may lead
    leader: Seen | None = None       # as etcd names it
    followed: str | None = None      # the election key of the leader followed
    term: Seen | None = None         # this node's own term while it leads
    verifying: bool = False          # SUSPENDED: the election key is being checked
    since: float = 0.0               # when the role began
    deposed: tuple[str, float] = ("", 0.0)  # last deposition tried: (key, when)
    reason: str = ""                 # why the role began (for /api/nodes)
    renewed: float = 0.0             # when the last answered renewal was sent
    seen_revision: int = 0           # the etcd revision `leader` was read at
    asked: float = -1e9              # when successors were last looked for


# ---- events ------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    now: float


@dataclass(frozen=True)
class Tick(Event):
    """The clock moved (the shell sends one every tenth of a second)."""


@dataclass(frozen=True)
class SessionOpened(Event):
    """A lease granted and this node registered on it; `sent` is when the
    grant was sent (the deadline counts from there)."""

    lease: int
    ttl: float
    sent: float


@dataclass(frozen=True)
class SessionFailed(Event):
    reason: str
    jitter: float = 0.0  # in [0, 1), from the shell's random source


@dataclass(frozen=True)
class Renewed(Event):
    lease: int
    ttl: float
    sent: float


@dataclass(frozen=True)
class LeaseGone(Event):
    """etcd said the lease no longer exists (expired, revoked)."""

    lease: int
    reason: str


@dataclass(frozen=True)
class LeaderSeen(Event):
    """etcd names `leader` (None: nobody) as of its store's `revision`."""

    leader: Seen | None
    revision: int = 0


@dataclass(frozen=True)
class Won(Event):
    term: Seen


@dataclass(frozen=True)
class Booted(Event):
    term: Seen


@dataclass(frozen=True)
class BootFailed(Event):
    term: Seen
    reason: str


@dataclass(frozen=True)
class BrokerStopped(Event):
    pass


@dataclass(frozen=True)
class TermChecked(Event):
    term: Seen
    held: bool


@dataclass(frozen=True)
class TermEnded(Event):
    """The election key of a term is gone (deleted, deposed, a fenced write
    found it gone)."""

    term: Seen
    reason: str


@dataclass(frozen=True)
class CopyStarted(Event):
    pass


@dataclass(frozen=True)
class CopyWhole(Event):
    pass


@dataclass(frozen=True)
class LeaderUnreachable(Event):
    """The followed leader's replication link broke and its cluster port
    refuses connections: its process is gone."""

    leader: Seen


@dataclass(frozen=True)
class Stalled(Event):
    """The leader's confirms have waited since `since` (None: they move);
    `successors`: the other in-sync members etcd lists as up, when asked."""

    since: float | None
    successors: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Stop(Event):
    pass


# ---- actions -----------------------------------------------------------------

@dataclass(frozen=True)
class Action:
    pass


@dataclass(frozen=True)
class OpenSession(Action):
    """Grant a lease, keep it alive, register this node on it."""


@dataclass(frozen=True)
class CloseSession(Action):
    lease: int
    revoke: bool


@dataclass(frozen=True)
class Revoke(Action):
    """Revoke a lease of an earlier session of this node's that still heads
    the election (its process was restarted, or it opened a new session)."""

    lease: int


@dataclass(frozen=True)
class Campaign(Action):
    lease: int


@dataclass(frozen=True)
class Withdraw(Action):
    """Stop campaigning and take this node's key out of line."""


@dataclass(frozen=True)
class Follow(Action):
    leader: Seen


@dataclass(frozen=True)
class StopFollowing(Action):
    pass


@dataclass(frozen=True)
class Boot(Action):
    term: Seen


@dataclass(frozen=True)
class StopBroker(Action):
    reason: str


@dataclass(frozen=True)
class Resign(Action):
    """Delete the term's election key.  `yielded`: in the same transaction,
    say so in etcd, so that the next leader does not wait a lag timeout for
    this node, which it knows to be cut off, before it may confirm."""

    term: Seen
    yielded: bool = False


@dataclass(frozen=True)
class VerifyTerm(Action):
    term: Seen


@dataclass(frozen=True)
class FindSuccessors(Action):
    term: Seen


@dataclass(frozen=True)
class HoldConfirms(Action):
    reason: str


@dataclass(frozen=True)
class ReleaseConfirms(Action):
    pass


@dataclass(frozen=True)
class Depose(Action):
    leader: Seen


@dataclass(frozen=True)
class Log(Action):
    level: int
    message: str


__all__ += ["FindSuccessors", "Seen"]


# ---- queries -------------------------------------------------------------------

def lease_alive(state: State, now: float) -> bool:
    """Whether no other node can hold this node's claims yet."""
    return state.lease is not None and now < state.deadline - state.settings.margin


def may_confirm(state: State, now: float) -> bool:
    """The check right before a confirm: leading, and the lease beyond doubt
    by this node's own clock (valid even right after a pause: the monotonic
    clock kept counting)."""
    return state.role is Role.LEADING and lease_alive(state, now)


def backoff(failures: int, settings: Settings, jitter: float) -> float:
    """Seconds before the next try after `failures` in a row: doubling from
    retry_min up to retry_max, spread by up to half (so that nodes that
    failed together do not retry together)."""
    base = min(settings.retry_max, settings.retry_min * (2 ** max(0, failures - 1)))
    return base * (0.5 + jitter / 2) if failures else 0.0


def start(settings: Settings, now: float, *, whole: bool) -> tuple[State, list[Action]]:
    """A node that starts: it opens its first session."""
    state = State(settings, Role.JOINING, now=now, opening=True, whole=whole, since=now,
                  reason="starting")
    return state, [OpenSession()]


# ---- the machine -------------------------------------------------------------

def step(state: State, event: Event) -> tuple[State, list[Action]]:
    """The one way anything happens to a node's role."""
    if state.role is Role.STOPPED:
        return state, []
    now = max(state.now, event.now)  # the clock never goes back here
    state = replace(state, now=now)
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"not an event: {event!r}")
    return handler(state, event)


def _become(state: State, role: Role, reason: str, actions: list[Action],
            level: int = INFO, **changes: Any) -> tuple[State, list[Action]]:
    """A role change: one log line, never one per retry."""
    new = replace(state, role=role, since=state.now, reason=reason, **changes)
    if role is not state.role:
        actions.append(Log(level, f"node {state.settings.node}: {state.role.value} -> "
                                  f"{role.value}: {reason}"))
    return new, actions


def _follower_role(state: State) -> Role:
    if state.lease is None:
        return Role.JOINING
    return Role.CAMPAIGNING if state.whole else Role.COPYING


def _follow(state: State, actions: list[Action]) -> State:
    """Follow the leader etcd names, when it is another node."""
    leader = state.leader
    if leader is None or leader.node == state.settings.node:
        return state
    if state.followed == leader.key:
        return state
    actions.append(Follow(leader))
    return replace(state, followed=leader.key)


# -- time ------------------------------------------------------------------------

def _tick(state: State, event: Event) -> tuple[State, list[Action]]:
    actions: list[Action] = []
    settings = state.settings
    now = state.now
    if state.role is Role.JOINING and not state.opening and now >= state.retry_at:
        actions.append(OpenSession())
        return replace(state, opening=True), actions
    if state.role is Role.LEADING and not lease_alive(state, now):
        actions.append(HoldConfirms("lease in doubt"))
        return _become(state, Role.SUSPENDED,
                       f"lease {state.lease or 0:x} not renewed in time: confirms held "
                       f"until etcd answers", actions, WARNING)
    if state.role is Role.SUSPENDED and now >= state.deadline + settings.suspend_limit:
        actions.append(StopBroker("etcd has not renewed this node's lease"))
        return _become(state, Role.STEPPING_DOWN,
                       f"etcd has not renewed lease {state.lease or 0:x} for "
                       f"{now - state.renewed:.1f} s: stepping down",
                       actions, WARNING, verifying=False)
    return state, actions


# -- the session -------------------------------------------------------------------

def _session_opened(state: State, event: SessionOpened) -> tuple[State, list[Action]]:
    actions: list[Action] = []
    if state.role is not Role.JOINING or state.lease is not None:
        # Not asked for (a stale answer): give the lease back.
        actions.append(CloseSession(event.lease, revoke=True))
        return state, actions
    settings = replace(state.settings, ttl=event.ttl)
    state = replace(state, settings=settings, lease=event.lease,
                    deadline=event.sent + event.ttl, renewed=event.sent, opening=False,
                    failures=0)
    if state.whole:
        actions.append(Campaign(event.lease))
    role = _follower_role(state)
    state, actions = _become(state, role, f"session on lease {event.lease:x}", actions)
    return _follow(state, actions), actions


def _session_failed(state: State, event: SessionFailed) -> tuple[State, list[Action]]:
    if state.role is not Role.JOINING:
        return state, []
    failures = state.failures + 1
    wait = backoff(failures, state.settings, event.jitter)
    actions: list[Action] = []
    if failures == 1:
        actions.append(Log(WARNING, f"node {state.settings.node} cannot open an etcd "
                                    f"session: {event.reason} (trying again until it can)"))
    return replace(state, opening=False, failures=failures, retry_at=state.now + wait), actions


def _renewed(state: State, event: Renewed) -> tuple[State, list[Action]]:
    if event.lease != state.lease:
        return state, []
    deadline = max(state.deadline, event.sent + event.ttl)
    state = replace(state, deadline=deadline, renewed=max(state.renewed, event.sent))
    actions: list[Action] = []
    if (state.role is Role.SUSPENDED and not state.verifying and state.term is not None
            and lease_alive(state, state.now)):
        actions.append(VerifyTerm(state.term))
        state = replace(state, verifying=True)
    return state, actions


def _lease_gone(state: State, event: LeaseGone) -> tuple[State, list[Action]]:
    if event.lease != state.lease:
        return state, []
    actions: list[Action] = [CloseSession(event.lease, revoke=False)]
    state = replace(state, lease=None, deadline=0.0, verifying=False)
    if state.role in LEADER_ROLES:
        actions.append(StopBroker(f"lease {event.lease:x} is gone: {event.reason}"))
        return _become(state, Role.STEPPING_DOWN, f"lease {event.lease:x} is gone in etcd "
                       f"({event.reason})", actions, WARNING)
    if state.role is Role.STEPPING_DOWN:
        return state, actions  # opens a new session once the broker stopped
    actions.append(OpenSession())
    return _become(state, Role.JOINING, f"lease {event.lease:x} is gone in etcd "
                   f"({event.reason}): a new session", actions, WARNING, opening=True,
                   failures=0)


# -- who leads ---------------------------------------------------------------------

def _leader_seen(state: State, event: LeaderSeen) -> tuple[State, list[Action]]:
    actions: list[Action] = []
    leader = event.leader
    if event.revision < state.seen_revision:
        return state, actions  # older than what is known
    state = replace(state, leader=leader, seen_revision=event.revision)
    me = state.settings.node
    if leader is not None and leader.node == me and leader.lease != state.lease:
        # A key of an earlier session of this node (a restart, or a lease
        # etcd dropped) heads the line: nobody else can lead until it goes.
        actions.append(Revoke(leader.lease))
    # A reading older than this node's own key says nothing of its term.
    if state.role in LEADER_ROLES and state.term is not None and (
            event.revision >= state.term.revision) and (
            leader is None or leader.key != state.term.key):
        return _term_over(state, "etcd names another leader" if leader is not None
                          else "etcd names no leader", actions)
    if state.role in FOLLOWING:
        if leader is None or leader.key != state.followed:
            state = replace(state, followed=None)
        state = _follow(state, actions)
    return state, actions


def _won(state: State, event: Won) -> tuple[State, list[Action]]:
    if state.role is not Role.CAMPAIGNING or event.term.lease != state.lease:
        # Won after this node stopped wanting it (it started a copy, its
        # session changed): the key would head the line with nobody acting
        # on it, so it is given back.
        return state, [Resign(event.term)]
    # Elected on a lease in doubt: it boots, and confirms once it is renewed.
    return _become(state, Role.BOOTING, f"elected (term {event.term.revision})",
                   [StopFollowing(), Boot(event.term)], term=event.term, followed=None)


def _booted(state: State, event: Booted) -> tuple[State, list[Action]]:
    if state.role is not Role.BOOTING or state.term != event.term:
        return state, []
    if not lease_alive(state, state.now):
        actions: list[Action] = [HoldConfirms("lease in doubt")]
        return _become(state, Role.SUSPENDED, f"leads term {event.term.revision}, but the "
                       "lease is in doubt: confirms held", actions, WARNING)
    return _become(state, Role.LEADING, f"leads (term {event.term.revision})",
                   [ReleaseConfirms()])


def _boot_failed(state: State, event: BootFailed) -> tuple[State, list[Action]]:
    if state.role is not Role.BOOTING or state.term != event.term:
        return state, []
    actions: list[Action] = [Resign(event.term), StopBroker(event.reason)]
    return _become(state, Role.STEPPING_DOWN, f"could not start leading: {event.reason}",
                   actions, WARNING)


def _broker_stopped(state: State, event: BrokerStopped) -> tuple[State, list[Action]]:
    if state.role is not Role.STEPPING_DOWN:
        return state, []
    actions: list[Action] = []
    state = replace(state, term=None, verifying=False, followed=None)
    if state.lease is None:
        actions.append(OpenSession())
        state, actions = _become(state, Role.JOINING, "stopped leading; a new session",
                                 actions, opening=True, failures=0)
    else:
        role = _follower_role(state)
        if role is Role.CAMPAIGNING:
            actions.append(Campaign(state.lease))
        state, actions = _become(state, role, "stopped leading", actions)
    return _follow(state, actions), actions


def _term_checked(state: State, event: TermChecked) -> tuple[State, list[Action]]:
    if state.role is not Role.SUSPENDED or state.term != event.term:
        return state, []
    state = replace(state, verifying=False)
    if not event.held:
        return _term_over(state, "its election key is gone", [])
    if not lease_alive(state, state.now):
        return state, []  # in doubt again meanwhile: the next renewal checks again
    return _become(state, Role.LEADING, "lease renewed and the election key still held: "
                   "confirms resume", [ReleaseConfirms()])


def _term_ended(state: State, event: TermEnded) -> tuple[State, list[Action]]:
    if state.term != event.term or state.role not in LEADER_ROLES:
        return state, []
    return _term_over(state, event.reason, [])


def _term_over(state: State, reason: str, actions: list[Action]) -> tuple[State, list[Action]]:
    actions.append(StopBroker(reason))
    return _become(state, Role.STEPPING_DOWN, f"term over: {reason}", actions, WARNING,
                   verifying=False)


# -- the copy and the leader's link ----------------------------------------------------

def _copy_started(state: State, event: CopyStarted) -> tuple[State, list[Action]]:
    state = replace(state, whole=False)
    if state.role is Role.CAMPAIGNING:
        return _become(state, Role.COPYING, "taking a full copy", [Withdraw()])
    return state, []


def _copy_whole(state: State, event: CopyWhole) -> tuple[State, list[Action]]:
    state = replace(state, whole=True)
    if state.role is Role.COPYING and state.lease is not None:
        return _become(state, Role.CAMPAIGNING, "copy whole", [Campaign(state.lease)])
    return state, []


def _leader_unreachable(state: State, event: LeaderUnreachable) -> tuple[State, list[Action]]:
    leader = event.leader
    key, when = state.deposed
    if (state.role not in FOLLOWING or state.lease is None or state.leader is None
            or state.leader.key != leader.key
            or (key == leader.key and state.now - when < state.settings.depose_every)):
        return state, []
    return replace(state, deposed=(leader.key, state.now)), [Depose(leader)]


# -- the leader's confirms ---------------------------------------------------------------

def _stalled(state: State, event: Stalled) -> tuple[State, list[Action]]:
    if state.role is not Role.LEADING or state.term is None or event.since is None:
        return state, []
    if state.now - event.since < state.settings.yield_after:
        return state, []
    if event.successors is None:
        if state.now - state.asked < ASK_EVERY:
            return state, []
        return replace(state, asked=state.now), [FindSuccessors(state.term)]
    if not event.successors:
        return state, []
    actions: list[Action] = [HoldConfirms("yielding"), Resign(state.term, yielded=True),
                             StopBroker("yielded its lead")]
    return _become(state, Role.STEPPING_DOWN,
                   f"confirms stalled for {state.now - event.since:.1f} s (an in-sync "
                   f"follower does not answer): yielding to {', '.join(event.successors)}",
                   actions, WARNING)


def _stop(state: State, event: Stop) -> tuple[State, list[Action]]:
    actions: list[Action] = [Withdraw(), StopFollowing()]
    if state.role in LEADER_ROLES or state.role is Role.STEPPING_DOWN:
        actions.append(StopBroker("shutdown"))
    if state.lease is not None:
        actions.append(CloseSession(state.lease, revoke=True))
    return _become(state, Role.STOPPED, "shutdown", actions, lease=None)


_Handler = Callable[[State, Any], tuple[State, list[Action]]]

_HANDLERS: dict[type[Event], _Handler] = {
    Tick: _tick,
    SessionOpened: _session_opened,
    SessionFailed: _session_failed,
    Renewed: _renewed,
    LeaseGone: _lease_gone,
    LeaderSeen: _leader_seen,
    Won: _won,
    Booted: _booted,
    BootFailed: _boot_failed,
    BrokerStopped: _broker_stopped,
    TermChecked: _term_checked,
    TermEnded: _term_ended,
    CopyStarted: _copy_started,
    CopyWhole: _copy_whole,
    LeaderUnreachable: _leader_unreachable,
    Stalled: _stalled,
    Stop: _stop,
}
