"""The cluster's control plane (cluster/control.py) and in-sync rules
(cluster/in_sync.py), without sockets or etcd: single transitions first,
then random histories of faults in a model cluster (tests/cluster_model.py)
with the invariants checked at every step:

- safety: a node confirms only on a lease etcd still holds (or one a
  deposition revoked, which the in-sync set covers), and never two nodes at
  once whose election keys both stand; no term is won twice;
- liveness: once the faults heal, every node has a session again and
  campaigns (or leads), and exactly one leads - whatever happened before;
- the rules: nothing confirmed while the in-sync set is below
  min-in-sync, never above what an in-sync member acknowledged; the set
  never shrinks below the minimum.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings, strategies as st

from amqp_server.cluster import control as c, in_sync
from tests.cluster_model import TTL, World

ME = "n1"
SETTINGS = c.Settings(node=ME, ttl=4.0, margin=0.2, suspend_limit=2.0, yield_after=4.5)
TERM = c.Seen(ME, "election/a", 10, 0xA)
OTHER = c.Seen("n2", "election/b", 12, 0xB)


def run(state: c.State, *events: c.Event) -> tuple[c.State, list[c.Action]]:
    actions: list[c.Action] = []
    for event in events:
        state, more = c.step(state, event)
        actions += more
    return state, actions


def kinds(actions: list[c.Action]) -> list[type]:
    return [type(action) for action in actions if not isinstance(action, c.Log)]


def leading(now: float = 1.0) -> c.State:
    state, _ = c.start(SETTINGS, 0.0, whole=True)
    state, _ = run(state, c.SessionOpened(0.0, 0xA, 4.0, 0.0),
                   c.Won(0.5, TERM), c.Booted(now, TERM))
    assert state.role is c.Role.LEADING
    return state


# ---- single transitions ------------------------------------------------------

def test_a_starting_node_opens_a_session_and_campaigns_with_a_whole_copy():
    state, actions = c.start(SETTINGS, 0.0, whole=True)
    assert kinds(actions) == [c.OpenSession]
    state, actions = c.step(state, c.SessionOpened(0.1, 0xA, 4.0, 0.05))
    assert state.role is c.Role.CAMPAIGNING and state.deadline == 4.05
    assert kinds(actions) == [c.Campaign]


def test_a_node_without_a_whole_copy_does_not_campaign_until_it_has_one():
    state, _ = c.start(SETTINGS, 0.0, whole=False)
    state, actions = c.step(state, c.SessionOpened(0.1, 0xA, 4.0, 0.05))
    assert state.role is c.Role.COPYING and c.Campaign not in kinds(actions)
    state, actions = c.step(state, c.CopyWhole(2.0))
    assert state.role is c.Role.CAMPAIGNING and kinds(actions) == [c.Campaign]


def test_a_follower_taking_a_copy_withdraws_from_the_election():
    state, _ = c.start(SETTINGS, 0.0, whole=True)
    state, _ = c.step(state, c.SessionOpened(0.1, 0xA, 4.0, 0.05))
    state, actions = c.step(state, c.CopyStarted(1.0))
    assert state.role is c.Role.COPYING and kinds(actions) == [c.Withdraw]


def test_a_term_won_after_the_node_stopped_campaigning_is_given_back():
    state, _ = c.start(SETTINGS, 0.0, whole=True)
    state, _ = run(state, c.SessionOpened(0.1, 0xA, 4.0, 0.05), c.CopyStarted(1.0))
    state, actions = c.step(state, c.Won(1.1, TERM))
    assert state.role is c.Role.COPYING and actions == [c.Resign(TERM)]


def test_a_node_whose_lease_etcd_dropped_opens_a_new_session_and_campaigns_again():
    state, _ = c.start(SETTINGS, 0.0, whole=True)
    state, _ = c.step(state, c.SessionOpened(0.1, 0xA, 4.0, 0.05))
    state, actions = c.step(state, c.LeaseGone(9.0, 0xA, "expired"))
    assert state.role is c.Role.JOINING and state.lease is None
    assert kinds(actions) == [c.CloseSession, c.OpenSession]
    state, actions = c.step(state, c.SessionOpened(9.2, 0xC, 4.0, 9.1))
    assert state.role is c.Role.CAMPAIGNING and actions[0] == c.Campaign(0xC)


def test_failed_session_openings_back_off_with_jitter_up_to_a_bound():
    state, _ = c.start(SETTINGS, 0.0, whole=True)
    waits = []
    now = 0.0
    for _ in range(8):
        state, _ = c.step(state, c.SessionFailed(now, "etcd unreachable", 0.999))
        waits.append(round(state.retry_at - now, 3))
        now = state.retry_at
        state, actions = c.step(state, c.Tick(now))
        assert kinds(actions) == [c.OpenSession]
    assert waits[0] < waits[1] < waits[2] and max(waits) <= SETTINGS.retry_max


def test_a_leader_past_its_deadline_holds_confirms_until_etcd_renews_and_its_key_stands():
    state = leading()
    assert c.may_confirm(state, 3.0)
    state, actions = c.step(state, c.Tick(3.85))  # deadline 4.0 - margin 0.2
    assert state.role is c.Role.SUSPENDED and not c.may_confirm(state, 3.85)
    assert kinds(actions) == [c.HoldConfirms]
    # etcd was without a raft leader; its next answer says the lease stands.
    state, actions = c.step(state, c.Renewed(5.0, 0xA, 4.0, 4.9))
    assert state.role is c.Role.SUSPENDED and kinds(actions) == [c.VerifyTerm]
    state, actions = c.step(state, c.TermChecked(5.1, TERM, True))
    assert state.role is c.Role.LEADING and c.may_confirm(state, 5.1)
    assert kinds(actions) == [c.ReleaseConfirms]


def test_a_suspended_leader_whose_key_is_gone_steps_down_and_campaigns_again():
    state = leading()
    state, _ = run(state, c.Tick(3.9), c.Renewed(5.0, 0xA, 4.0, 4.9))
    state, actions = c.step(state, c.TermChecked(5.1, TERM, False))
    assert state.role is c.Role.STEPPING_DOWN and kinds(actions) == [c.StopBroker]
    state, actions = c.step(state, c.BrokerStopped(5.5))
    assert state.role is c.Role.CAMPAIGNING and c.Campaign in kinds(actions)


def test_a_suspended_leader_steps_down_when_etcd_stays_silent_past_its_bound():
    state = leading()
    state, _ = c.step(state, c.Tick(3.9))
    state, actions = c.step(state, c.Tick(5.9))
    assert state.role is c.Role.SUSPENDED
    state, actions = c.step(state, c.Tick(6.0))  # deadline 4.0 + suspend_limit 2.0
    assert state.role is c.Role.STEPPING_DOWN and kinds(actions) == [c.StopBroker]
    # It keeps its session: campaigning again wins only if etcd still names it.
    state, actions = c.step(state, c.BrokerStopped(6.5))
    assert state.role is c.Role.CAMPAIGNING and state.lease == 0xA


def test_a_leader_whose_lease_is_gone_steps_down_then_opens_a_new_session():
    state = leading()
    state, actions = c.step(state, c.LeaseGone(2.0, 0xA, "revoked"))
    assert state.role is c.Role.STEPPING_DOWN and not c.may_confirm(state, 2.0)
    assert kinds(actions) == [c.CloseSession, c.StopBroker]
    state, actions = c.step(state, c.BrokerStopped(2.5))
    assert state.role is c.Role.JOINING and kinds(actions) == [c.OpenSession]


def test_a_stalled_leader_yields_only_to_an_in_sync_successor_that_is_up():
    state = leading()
    state, actions = c.step(state, c.Stalled(3.0, 1.0))
    assert actions == []  # stalled 2 s: not yet
    state, actions = c.step(state, c.Stalled(5.6, 1.0))
    assert kinds(actions) == [c.FindSuccessors]
    state, actions = c.step(state, c.Stalled(5.7, 1.0))
    assert actions == []  # asked already: not again at once
    state, actions = c.step(state, c.Stalled(5.8, 1.0, ()))
    assert state.role is c.Role.LEADING and actions == []  # nobody to yield to
    state = replace(state, deadline=20.0)
    state, actions = c.step(state, c.Stalled(6.9, 1.0, ("n2",)))
    assert state.role is c.Role.STEPPING_DOWN
    assert kinds(actions) == [c.HoldConfirms, c.Resign, c.StopBroker]
    assert not c.may_confirm(state, 6.9)


def test_a_key_of_an_earlier_session_heading_the_line_is_revoked():
    state, _ = c.start(SETTINGS, 0.0, whole=True)
    state, _ = c.step(state, c.SessionOpened(0.1, 0xC, 4.0, 0.05))
    old = c.Seen(ME, "election/a", 3, 0xA)
    state, actions = c.step(state, c.LeaderSeen(0.2, old, 20))
    assert c.Revoke(0xA) in actions and c.Follow not in kinds(actions)


def test_a_reading_older_than_the_leaders_own_key_does_not_end_its_term():
    state = leading()
    state, actions = c.step(state, c.LeaderSeen(1.1, OTHER, TERM.revision - 1))
    assert state.role is c.Role.LEADING and actions == []
    state, actions = c.step(state, c.LeaderSeen(1.2, OTHER, TERM.revision + 5))
    assert state.role is c.Role.STEPPING_DOWN and kinds(actions) == [c.StopBroker]


def test_a_follower_follows_the_leader_etcd_names_once():
    state, _ = c.start(SETTINGS, 0.0, whole=True)
    state, _ = c.step(state, c.SessionOpened(0.1, 0xA, 4.0, 0.05))
    state, actions = c.step(state, c.LeaderSeen(0.2, OTHER, 20))
    assert actions == [c.Follow(OTHER)]
    state, actions = c.step(state, c.LeaderSeen(0.3, OTHER, 21))
    assert actions == []


def test_a_gone_leader_is_deposed_at_most_once_per_interval():
    state, _ = c.start(SETTINGS, 0.0, whole=True)
    state, _ = run(state, c.SessionOpened(0.1, 0xA, 4.0, 0.05), c.LeaderSeen(0.2, OTHER, 20))
    state, actions = c.step(state, c.LeaderUnreachable(1.0, OTHER))
    assert actions == [c.Depose(OTHER)]
    state, actions = c.step(state, c.LeaderUnreachable(1.2, OTHER))
    assert actions == []
    state, actions = c.step(state, c.LeaderUnreachable(1.6, OTHER))
    assert actions == [c.Depose(OTHER)]


def test_a_stopped_node_gives_its_lease_back():
    state = leading()
    state, actions = c.step(state, c.Stop(2.0))
    assert state.role is c.Role.STOPPED
    assert c.StopBroker in kinds(actions) and c.CloseSession(0xA, revoke=True) in actions
    assert c.step(state, c.Tick(3.0)) == (state, [])


# ---- the in-sync rules -----------------------------------------------------------

names = st.sampled_from(["n2", "n3", "n4", "n5"])


@given(lsn=st.integers(0, 100), in_sync_set=st.sets(names),
       acked=st.dictionaries(names, st.integers(-1, 100)), minimum=st.integers(1, 4))
def test_nothing_is_confirmed_below_min_in_sync_or_beyond_an_in_sync_copy(
        lsn, in_sync_set, acked, minimum):
    acked = {name: min(value, lsn) for name, value in acked.items()}
    frontier = in_sync.frontier(lsn, in_sync_set, acked, minimum)
    if 1 + len(in_sync_set) < minimum:
        assert frontier is None
    else:
        assert frontier is not None and frontier <= lsn
        for name in in_sync_set:
            assert frontier <= acked.get(name, -1)


@given(current=st.sets(names, min_size=0), late=st.sets(names), joining=st.sets(names),
       minimum=st.integers(1, 4))
def test_the_in_sync_set_never_shrinks_below_min_in_sync(current, late, joining, minimum):
    leaving, entering = in_sync.change(current, late, joining, minimum)
    after = (set(current) - set(leaving)) | set(entering)
    assert set(leaving) <= set(late) & set(current)
    if leaving:
        assert 1 + len(set(current) - set(leaving)) >= minimum
    assert in_sync.may_shrink({ME, *current}, {ME, *after}, minimum)


@given(current=st.none() | st.lists(names, unique=True), up=st.sets(names),
       minimum=st.integers(1, 4))
def test_a_new_leader_starts_with_itself_and_never_below_the_minimum(current, up, minimum):
    start = in_sync.initial(ME, [ME, *current] if current is not None else None, up, minimum)
    assert start[0] == ME or ME in start
    if current is not None:
        assert set(start) <= {ME, *current}
        assert len(start) >= min(minimum, 1 + len(current))


def test_a_new_leader_does_not_wait_for_the_leader_that_yielded_to_it():
    assert in_sync.initial("n2", ["n1", "n2", "n3"], {"n1", "n2", "n3"}, 2, "n1") == ("n2", "n3")
    # ... unless the set would fall below the minimum without it.
    assert in_sync.initial("n2", ["n1", "n2"], {"n1", "n2"}, 2, "n1") == ("n2", "n1")


def test_a_follower_away_longer_than_the_lag_timeout_is_late_even_when_idle():
    followers = {"n2": in_sync.Follower(acked=5, linked=False, seen=10.0),
                 "n3": in_sync.Follower(acked=5, linked=True, streaming=True, seen=10.0)}
    late = in_sync.lagging(13.0, 5, 0, {"n2", "n3"}, followers, lambda lsn: None, 2.0)
    assert late == ["n2"]


def test_a_follower_whose_oldest_unacknowledged_frame_is_old_is_late():
    followers = {"n2": in_sync.Follower(acked=5, linked=True, streaming=True, seen=0.0)}
    shipped = {6: 10.0, 7: 11.0}
    assert in_sync.lagging(12.5, 7, 0, {"n2"}, followers, shipped.get, 2.0) == ["n2"]
    assert in_sync.lagging(11.5, 7, 0, {"n2"}, followers, shipped.get, 2.0) == []


def test_a_stall_counts_from_the_oldest_frame_not_yet_everywhere():
    shipped = {4: 7.0, 5: 8.0}
    assert in_sync.stalled_since(3, 5, shipped.get, 1.0) == 7.0
    assert in_sync.stalled_since(5, 5, shipped.get, 1.0) is None
    assert in_sync.should_yield(12.0, 7.0, 4.5, ["n2"])
    assert not in_sync.should_yield(12.0, 7.0, 4.5, [])
    assert not in_sync.should_yield(11.0, 7.0, 4.5, ["n2"])


# ---- random histories ------------------------------------------------------------

NODES = ["n1", "n2", "n3"]
fault = st.one_of(
    st.tuples(st.just("etcd-leaderless"), st.just(""), st.floats(0.2, 8.0)),
    st.tuples(st.just("isolate"), st.sampled_from(NODES), st.floats(0.5, 12.0)),
    st.tuples(st.just("cut"), st.sampled_from(["n1|n2", "n1|n3", "n2|n3"]),
              st.floats(0.5, 12.0)),
    st.tuples(st.just("pause"), st.sampled_from(NODES), st.floats(0.5, 10.0)),
    st.tuples(st.just("restart"), st.sampled_from(NODES), st.floats(0.0, 3.0)),
    st.tuples(st.just("quiet"), st.just(""), st.floats(0.1, 6.0)),
)


def play(world: World, history) -> None:
    for kind, target, seconds in history:
        if kind == "etcd-leaderless":
            world.etcd_leaderless(seconds)
        elif kind == "isolate":
            world.isolate(target)
        elif kind == "cut":
            world.cut_link(*target.split("|"))
        elif kind == "pause":
            world.pause(target, seconds)
        elif kind == "restart":
            world.restart(target)
        if kind != "etcd-leaderless":
            world.run(seconds)
        assert not world.violations, world.violations[:3]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(fault, min_size=1, max_size=8), seed=st.integers(0, 2**32))
def test_any_history_keeps_one_leader_and_ends_with_every_node_back(history, seed):
    world = World(NODES, seed)
    world.run(5.0)
    play(world, history)
    world.heal()
    # Leases of the faults' time run out, sessions open again, one leads:
    # a few TTLs and backoffs, then the cluster is whole without a restart.
    world.run(6 * TTL)
    assert not world.violations, world.violations[:3]
    assert len(world.leaders()) == 1, {n.name: n.state.role for n in world.nodes.values()}
    for node in world.nodes.values():
        assert node.state.role in (c.Role.CAMPAIGNING, c.Role.LEADING), (
            node.name, node.state.role, node.state.reason)
        assert node.state.lease in world.etcd.leases
        assert world.etcd.members.get(node.name) == node.state.lease


def test_five_isolations_of_the_leader_in_a_row_leave_one_leader_each_time():
    world = World(NODES, 7)
    world.run(5.0)
    for _ in range(5):
        [leader] = world.leaders()
        world.isolate(leader)
        world.run(15.0)
        assert world.leaders() and world.leaders() != [leader]
        world.heal()
        world.run(10.0)
        assert len(world.leaders()) == 1
    assert not world.violations
