"""The queue's parts and its effects, without a socket, an event loop or a
real clock: each part's decisions on its own, the effects a queue's
decisions come back as, the clock and random source a virtual host passes
in, and the hot path checked against the general path it bypasses."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from amqp_server.broker.message import Entry
from amqp_server.broker.queue import REFUSED, TAKEN, Queue
from amqp_server.broker.queue.effects import (
    EXPIRES,
    REDELIVERY,
    TTL,
    ArmTimer,
    CountReturn,
    DeadLetter,
    Deliver,
    Forget,
    Unused,
)
from amqp_server.broker.queue.limits import Limits
from amqp_server.broker.queue.paging import Pager
from amqp_server.broker.queue.redelivery import Redelivery
from amqp_server.broker.timers import Timers
from amqp_server.broker.vhost import VirtualHost
from amqp_server.storage.paging import Paging
from amqp_server.wire.table import FieldTable
from dlx import limits as dlx_limits
from dlx.redelivery import REJECTED
from policies.effective import resolve
from tests.messages import FakeClock, TakeAll, message, persistent

T0 = 1_700_000_000_000.0


def settings_of(**arguments):
    return resolve(FieldTable({k.replace("_", "-"): v for k, v in arguments.items()}))


def queue_of(clock=None, **arguments) -> Queue:
    return Queue("/", "q", durable=True, arguments=None,
                 settings=(settings_of(**arguments), None, None),
                 clock=clock or FakeClock(T0))


def recording(queue: Queue) -> list:
    """The queue's effects, recorded instead of carried out (those its hot
    paths carry out without building them too)."""
    effects: list = []
    queue.carry_out = effects.extend
    queue._hand_over = lambda consumer, entries: effects.append(Deliver(consumer, list(entries)))
    queue._arm = lambda timer, due: effects.append(ArmTimer(timer, due))
    return effects


class Scripted:
    """A random source that draws what a test says."""

    def __init__(self, *draws: float) -> None:
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


class FakeStore:
    """The message store's interface, recording what it is told as its
    records would be: an entry stored (E) and a return counted (C) are
    appended at once, in order; deliveries (D) and removals (R) are
    batched until the next flush (storage/message_store.py)."""

    def __init__(self) -> None:
        self.log: list = []
        self.delivered_seqs: list = []
        self.removed_seqs: list = []

    @property
    def calls(self) -> tuple:
        return self.log, self.delivered_seqs, self.removed_seqs

    def enqueue(self, vhost, queue, entry, message) -> int:
        entry.segment = 1
        self.log.append(("E", entry.seq))
        return 1

    def enqueue_run(self, vhost, queue, entries) -> None:
        for entry in entries:
            entry.message.stored_gen = self.enqueue(vhost, queue, entry, entry.message)

    def delivered(self, vhost, queue, entry) -> None:
        self.delivered_seqs.append(entry.seq)

    def remove(self, vhost, queue, entries) -> None:
        for entry in entries:
            if entry.segment is not None:
                entry.segment = None
                self.removed_seqs.append(entry.seq)

    def returned(self, vhost, queue, entry, due, always=False) -> None:
        self.log.append(("C", entry.seq, entry.returns, due))

    def drop_below(self, vhost, queue, upto, entries, paged=None) -> None:
        self.log.append(("P", upto))


class Prefetching:
    """A consumer with a prefetch window, as a channel keeps it."""

    def __init__(self, prefetch: int, priority: int = 0) -> None:
        self.prefetch = prefetch
        self.priority = priority
        self.unacked = 0
        self.held: list = []
        self.got: list[int] = []

    def can_take(self) -> bool:
        return self.unacked < self.prefetch

    def room(self) -> int:
        return max(0, self.prefetch - self.unacked)

    def output_room(self) -> int:
        return 1 << 20

    def take(self, queue, entry) -> None:
        self.take_many(queue, [entry])

    def take_many(self, queue, entries) -> None:
        self.got.extend(entry.seq for entry in entries)
        self.held.extend(entries)
        self.unacked += len(entries)


# ---- limits ------------------------------------------------------------------


def test_limits_refuse_a_publish_that_would_not_fit():
    part = Limits(T0)
    part.apply(settings_of(x_max_length=2, x_overflow="reject-publish-dlx"))
    assert part.has_length_limit and not part.sheds_head
    assert part.admit(1, 0, 10) == dlx_limits.ACCEPT
    assert part.admit(2, 0, 10) == dlx_limits.REJECT_DLX


def test_limits_give_the_lower_of_queue_and_message_ttl_as_a_deadline():
    part = Limits(T0)
    part.apply(settings_of(x_message_ttl=1000))
    assert part.deadline(message("q"), T0) == T0 + 1000
    assert not part.saw_message_ttl
    assert part.deadline(message("q", expiration="10"), T0) == T0 + 10
    assert part.saw_message_ttl


def test_x_expires_asks_for_a_check_and_the_check_deletes_only_an_unused_queue():
    part = Limits(T0)
    part.apply(settings_of(x_expires=1000))
    assert part.used(T0, consumers=True) == ()
    assert part.used(T0 + 100, consumers=False) == (ArmTimer(EXPIRES, T0 + 1100),)
    assert part.unused(T0 + 1099, consumers=False) == (ArmTimer(EXPIRES, T0 + 1100),)
    assert part.unused(T0 + 1100, consumers=True) == ()
    assert part.unused(T0 + 1100, consumers=False) == (Unused(),)


# ---- redelivery --------------------------------------------------------------


def returned_entry(seq: int = 0, stored: bool = True) -> Entry:
    entry = Entry(seq, message("q", b"m"))
    entry.segment = 3 if stored else None
    return entry


def test_a_delayed_return_waits_with_a_timer_and_its_count_stored():
    part = Redelivery(Scripted(0.0, 0.5))  # a plus sign, half the factor
    part.apply(settings_of(x_redelivery_delay=1000, x_redelivery_collision_avoidance_factor=0.2))
    entry = returned_entry()
    back, _tail, effects = part.returned([entry], REJECTED, T0)
    due = T0 + 1100
    assert back == [] and effects == [ArmTimer(REDELIVERY, due), CountReturn(entry, due)]
    assert (part.delayed, part.next_due, entry.redelivered) == ([entry], due, True)
    assert part.due(due - 1) == [] and part.due(due) == [entry] and part.next_due is None


def test_a_return_at_max_attempts_is_forgotten_and_dead_lettered():
    part = Redelivery(random.Random(0))
    part.apply(settings_of(x_max_delivery_attempts=2))
    entry = returned_entry(stored=False)
    back, _tail, effects = part.returned([entry], REJECTED, T0)
    assert back == [entry] and effects == []  # first attempt failed: back at once
    back, _tail, effects = part.returned([entry], REJECTED, T0)
    assert back == [] and effects == [Forget([entry]),
                                      DeadLetter([entry.message], "delivery_limit")]


def test_a_quorum_return_carries_its_count_and_goes_to_the_head():
    part = Redelivery(random.Random(0))
    part.apply(settings_of(x_queue_type="quorum"))
    entry = returned_entry()
    back, _tail, effects = part.returned([entry], REJECTED, T0)
    assert part.at_head and back == [entry] and effects == [CountReturn(entry, None)]
    assert entry.message.properties.headers["x-delivery-count"] == 1


def test_held_dead_letters_are_taken_by_reason_for_a_retry():
    part = Redelivery(random.Random(0))
    one, two = message("q", b"1"), message("q", b"2")
    part.hold_dead_letters([(one, "rejected"), (two, "expired")])
    assert part.held_count == 2
    assert part.take_held() == {"rejected": [one], "expired": [two]}
    assert part.held_count == 0


# ---- paging ------------------------------------------------------------------


class MemoryPages:
    """A page file kept in a list: the pager does no I/O of its own."""

    def __init__(self) -> None:
        self.records: list = []
        self.cleared = 0

    def append(self, record) -> None:
        self.records.append(record)

    def read(self, count: int) -> list:
        taken, self.records = self.records[:count], self.records[count:]
        return taken

    def clear(self) -> None:
        self.records.clear()
        self.cleared += 1


class MemoryPaging:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.files: list[MemoryPages] = []

    def open(self) -> MemoryPages:
        self.files.append(MemoryPages())
        return self.files[-1]

    def limits(self, stored: bool) -> tuple[int, int]:
        return self.limit, 1 << 30


def test_the_pager_reads_paged_entries_back_in_order_with_their_flags():
    pager = Pager("/", "q", 1)
    pager.adopt(settings_of())
    pager.attach(MemoryPaging(limit=4))
    assert pager.past_threshold(4, 0, stored=True) and not pager.past_threshold(3, 0, True)
    entries = [returned_entry(seq) for seq in range(5)]
    entries[1].redelivered, entries[1].returns = True, 2
    for entry in entries:
        pager.page_out(entry, 0)
    assert (pager.count, pager.bytes, pager.segments[3]) == (5, 5, 5)
    assert pager.paged_refs() == (0, None)  # a purge forgets seqs from 0 on
    first = pager.page_in(0, in_memory=0)  # half the threshold
    assert [(e.seq, e.redelivered, e.returns) for e in first] == [(0, False, 0), (1, True, 2)]
    rest = pager.page_in(0, in_memory=0) + pager.page_in(0, in_memory=0)
    assert [e.seq for e in rest] == [2, 3, 4]
    assert (pager.count, pager.bytes, +pager.segments) == (0, 0, {})


# ---- a queue's decisions as effects ------------------------------------------


def test_an_expired_head_is_forgotten_dead_lettered_and_the_next_deadline_armed():
    clock = FakeClock(T0)
    queue = queue_of(clock, x_message_ttl=1000)
    queue.enqueue(message("q", b"old"))
    clock.advance(400)
    queue.enqueue(message("q", b"new"))
    old = queue.ready[0]
    effects = recording(queue)
    assert queue.expire(clock.advance(600)) == 1
    assert effects == [Forget([old]), DeadLetter([old.message], "expired"),
                       ArmTimer(TTL, T0 + 1400)]
    assert queue.stats["expired"] == 1 and queue.message_count == 1


def test_drop_head_forgets_and_dead_letters_the_head_as_maxlen():
    queue = queue_of(x_max_length=1)
    queue.enqueue(message("q", b"first"))
    first = queue.ready[0]
    effects = recording(queue)
    queue.enqueue(message("q", b"second"))
    assert effects == [Forget([first]), DeadLetter([first.message], "maxlen")]
    assert [entry.message.body for entry in queue.ready] == [b"second"]


def test_reject_publish_dlx_refuses_and_dead_letters_the_publish():
    queue = queue_of(x_max_length=0, x_overflow="reject-publish-dlx")
    effects = recording(queue)
    refused = message("q", b"refused")
    assert queue.enqueue(refused) is REFUSED
    assert effects == [DeadLetter([refused], "maxlen")]
    assert queue.stats["rejected_publishes"] == 1 and queue.published == 0


def test_a_waiting_consumer_is_handed_the_message_after_the_decision():
    queue = queue_of(x_max_length=5)  # the general path
    consumer = TakeAll()
    queue.add_consumer(consumer, False)
    effects = recording(queue)
    queue.enqueue(message("q", b"m"))
    ((kind, to, entries),) = [(type(effect), *effect) for effect in effects]
    assert (kind, to, [entry.message.body for entry in entries]) == (Deliver, consumer, [b"m"])
    assert consumer.got == [] and (queue.unacked, queue.delivered) == (1, 1)


class SettlesAsItTakes(TakeAll):
    """A no-ack consumer: its channel settles each delivery as it writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def take(self, queue, entry) -> None:
        self.seen.append((queue.unacked, queue.delivered, queue.message_count))
        queue.settle([entry])


@pytest.mark.parametrize("arguments", [{}, {"x_max_length": 10}], ids=["plain", "limited"])
def test_a_consumer_settling_as_it_takes_finds_the_decision_complete(arguments):
    """The queue it calls back has counted the delivery already, on the
    hot path and on the general one."""
    queue = queue_of(**arguments)
    consumer = SettlesAsItTakes()
    queue.add_consumer(consumer, False)
    queue.enqueue(message("q"))
    assert consumer.seen == [(1, 1, 0)]
    assert (queue.unacked, queue.acked) == (0, 1)


def test_held_dead_letters_come_back_from_the_dead_letterer_and_are_retried():
    queue = queue_of(x_queue_type="quorum")
    refused = message("q", b"held")
    answers = [[(refused, "rejected")], []]
    tried = []

    def sink(dying_in, messages, reason):
        tried.append((list(messages), reason))
        return answers.pop(0)

    queue.dead_letter_sink = sink
    queue.carry_out((DeadLetter([refused], "rejected"),))
    assert queue.held_count == 1
    queue.sweep(T0)
    assert tried == [([refused], "rejected")] * 2 and queue.held_count == 0


# ---- the clock and random source come from the virtual host ----------------------


class ManualTimers(Timers):
    """Timers a test fires by hand: no loop, no waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list = []

    def call_at(self, when_ms, callback):
        self.pending.append((when_ms, callback))
        return self

    def cancel(self) -> None:
        pass


def test_an_unused_queue_is_deleted_when_its_timer_fires_on_the_fake_clock():
    clock, timers = FakeClock(T0), ManualTimers()
    vhost = VirtualHost("/", timers=timers, clock=clock)
    vhost.declare_queue("q", None, arguments=FieldTable({"x-expires": 1000}))
    ((due, check),) = timers.pending
    assert due == T0 + 1000
    clock.advance(500)
    vhost.declare_queue("q", None, passive=True)  # used: the check will wait again
    timers.pending.clear()
    clock.advance(500)
    check()
    assert "q" in vhost.queues and timers.pending[0][0] == T0 + 1500
    clock.advance(500)
    timers.pending.pop()[1]()
    assert "q" not in vhost.queues


def test_a_dead_letter_dies_at_the_time_of_the_virtual_hosts_clock():
    vhost = VirtualHost("/", clock=FakeClock(T0 + 999))
    vhost.declare_queue("dlq", None)
    queue = vhost.declare_queue("q", None, arguments=FieldTable({
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    queue.enqueue(message("q"))
    queue.reject([queue.take_one()])
    dead = vhost.queues["dlq"].ready[0].message
    assert dead.death_history().deaths[0].time == int(T0 // 1000)


def test_queues_of_a_virtual_host_draw_jitter_from_its_random_source():
    vhost = VirtualHost("/", clock=FakeClock(T0), rng=Scripted(0.0, 0.5))
    queue = vhost.declare_queue("q", None, arguments=FieldTable({
        "x-redelivery-delay": 1000, "x-redelivery-collision-avoidance-factor": 0.2}))
    queue.enqueue(message("q"))
    queue.requeue([queue.take_one()])
    assert queue.redelivery.next_due == T0 + 1100


# ---- the hot path against the general path ------------------------------------------

operations = st.lists(st.one_of(
    st.tuples(st.just("publish"), st.booleans(), st.integers(1, 300)),  # persistent, size
    st.tuples(st.just("run"), st.booleans(), st.integers(1, 12)),       # persistent, count
    st.tuples(st.just("ack"), st.integers(0, 2), st.integers(1, 8)),    # consumer, how many
    st.tuples(st.just("consume"), st.integers(1, 6), st.integers(0, 1)),  # prefetch, priority
), max_size=50)


def twin(tmp_path, name: str) -> tuple[Queue, FakeStore]:
    queue = Queue("/", "q", durable=True, clock=FakeClock(T0))
    queue.store = FakeStore()
    queue.attach_paging(Paging(tmp_path / name, limit=6, bytes_limit=900))
    return queue, queue.store


def state(queue: Queue, store: FakeStore, consumers: list) -> tuple:
    return (queue.published, queue.delivered, queue.unacked, queue.acked, queue.next_seq,
            queue.ready_bytes, queue.message_count, queue.paged_count,
            [entry.seq for entry in queue.ready], store.calls,
            [(consumer.got, consumer.unacked) for consumer in consumers])


@pytest.fixture(scope="module")
def paging_dirs(tmp_path_factory):
    return tmp_path_factory


@settings(max_examples=120, deadline=None)
@given(operations)
def test_the_hot_path_fares_as_the_general_path(paging_dirs, ops):
    """A plain queue's `enqueue` and `enqueue_run` against the general
    `_enqueue_checked`, one message at a time: the same deliveries to the
    same consumers, the same counters, the same store calls, the same
    messages in memory and paged."""
    tmp_path = paging_dirs.mktemp("twins")
    fast, fast_store = twin(tmp_path, "fast")
    general, general_store = twin(tmp_path, "general")
    try:
        play(ops, fast, fast_store, general, general_store)
    finally:
        fast.close()  # the page files go
        general.close()


def play(ops, fast, fast_store, general, general_store) -> None:
    fast_consumers: list = []
    general_consumers: list = []
    for op in ops:
        if op[0] == "consume":
            for queue, consumers in ((fast, fast_consumers), (general, general_consumers)):
                consumers.append(Prefetching(op[1], op[2]))
                queue.add_consumer(consumers[-1], False)
        elif op[0] == "ack":
            for queue, consumers in ((fast, fast_consumers), (general, general_consumers)):
                if op[1] >= len(consumers):
                    continue
                consumer = consumers[op[1]]
                taken, consumer.held = consumer.held[:op[2]], consumer.held[op[2]:]
                consumer.unacked -= len(taken)
                queue.settle(taken)
                if queue.ready and queue.consumers:
                    queue.dispatch()  # as the channel does after an ack
        else:
            make = persistent if op[1] else message
            size = op[2] if op[0] == "publish" else 50
            count = 1 if op[0] == "publish" else op[2]
            messages = [make("q", b"x" * size) for _ in range(count)]
            if op[0] == "publish":
                assert fast.enqueue(messages[0]) is TAKEN
            else:
                fast.enqueue_run(messages)
            for one in messages:
                assert general._enqueue_checked(one) is TAKEN
        assert (state(fast, fast_store, fast_consumers)
                == state(general, general_store, general_consumers))
