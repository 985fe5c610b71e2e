"""A RabbitMQ 4.3 quorum queue's single active consumer by consumer
priority (rabbit_fifo.erl of v4.3.5, a 4.0 change): the waiting consumers'
order, a higher-priority consumer taking over once the active one holds
nothing, and a consumer timeout stepping it aside.  3.13's quorum queue
keeps the earliest waiting consumer as the successor."""

from __future__ import annotations

from amqp_server.broker.queue.dispatch import SingleActive, SingleActiveByPriority
from amqp_server.broker.vhost import VirtualHost
from amqp_server.wire.table import FieldTable
from dlx.redelivery import NACKED, TIMED_OUT

from .messages import FakeClock, message, publish


class Worker:
    """A consumer holding what it gets until told to settle it."""

    def __init__(self, name: str, priority: int = 0, prefetch: int = 1) -> None:
        self.name = name
        self.priority = priority
        self.prefetch = prefetch
        self.no_ack = False
        self.unacked = 0
        self.timed_out: set = set()
        self.held: list = []
        self.got: list[bytes] = []

    def can_take(self) -> bool:
        return not self.timed_out and self.unacked < self.prefetch

    def room(self) -> int:
        return self.prefetch - self.unacked if self.can_take() else 0

    def output_room(self) -> int:
        return 1 << 20

    def take(self, queue, entry) -> None:
        self.take_many(queue, [entry])

    def take_many(self, queue, entries) -> None:
        self.unacked += len(entries)
        self.held.extend(entries)
        self.got.extend(entry.message.body for entry in entries)

    def ack(self, queue) -> None:
        """Settles what it holds, as a channel's ack does (unacked first,
        then the queue, then a dispatch)."""
        entries, self.held = self.held, []
        self.unacked -= len(entries)
        queue.settle(entries)
        queue.dispatch()

    def __repr__(self) -> str:
        return self.name


def sac_queue(semantics: str = "4.3"):
    host = VirtualHost("/", clock=FakeClock(), semantics=semantics)
    args = FieldTable({"x-queue-type": "quorum", "x-single-active-consumer": True})
    return host, host.declare_queue("q", None, durable=True, arguments=args)


def send(host, *bodies: bytes) -> None:
    for body in bodies:
        publish(host, message("q", body))


def test_a_4_3_quorum_queue_orders_its_single_active_consumers_by_priority():
    _, q = sac_queue()
    assert isinstance(q.consumers, SingleActiveByPriority)
    assert isinstance(sac_queue("3.13")[1].consumers, SingleActive)


def test_a_higher_priority_consumer_takes_over_an_idle_active_one_at_once():
    # activate_next_consumer/2 (rabbit_fifo.erl:1852): WaitingPriority >
    # ActivePriority and map_size(ActiveChecked) == 0
    host, q = sac_queue()
    low, high = Worker("low", 1), Worker("high", 3)
    q.add_consumer(low, False)
    q.add_consumer(high, False)
    assert q.consumers.active is high and q.consumers.waiting == [low]
    send(host, b"m")
    assert high.got == [b"m"] and low.got == []


def test_an_active_consumer_holding_messages_quiesces_until_it_settles_them():
    # activate_next_consumer/2: the active one becomes `quiescing` (no
    # credit is used: maybe_queue_consumer/3 serves `up` only); once its
    # checked-out messages are settled, update_or_remove_con/4
    # (rabbit_fifo.erl:3082) puts it back among the waiting and the higher
    # one is activated (quorum_queue_SUITE single_active_consumer_priority_take_over)
    host, q = sac_queue()
    low = Worker("low", 1, prefetch=5)
    q.add_consumer(low, False)
    send(host, b"1")
    high = Worker("high", 3)
    q.add_consumer(high, False)
    assert q.consumers.active is low and q.consumers.quiescing
    send(host, b"2")
    assert low.got == [b"1"] and high.got == []  # it takes nothing more
    low.ack(q)
    assert q.consumers.active is high and not q.consumers.quiescing
    assert high.got == [b"2"]


def test_a_quiescing_consumer_hands_over_when_it_returns_what_it_held():
    # single_active_consumer_priority_take_over_return: a nack brings the
    # message back and the higher-priority consumer gets it
    host, q = sac_queue()
    low = Worker("low", 1)
    q.add_consumer(low, False)
    send(host, b"m")
    high = Worker("high", 3)
    q.add_consumer(high, False)
    entries, low.held = low.held, []
    low.unacked -= 1
    q.requeue(entries, NACKED)
    assert q.consumers.active is high and high.got == [b"m"]


def test_an_equal_or_lower_priority_consumer_only_waits():
    host, q = sac_queue()
    first, same, lower = Worker("first", 2), Worker("same", 2), Worker("lower", 1)
    for worker in (first, same, lower):
        q.add_consumer(worker, False)
    assert q.consumers.active is first and not q.consumers.quiescing
    send(host, b"m")
    assert first.got == [b"m"]


def test_the_successor_is_the_waiting_one_of_the_highest_priority():
    # sort_waiting/1 (rabbit_fifo.erl:3179); quorum_queue_SUITE
    # single_active_consumer_priority: Ch3 closes, Ch2 (priority 2) is next
    _, q = sac_queue()
    top, low, mid = Worker("top", 3), Worker("low", 1), Worker("mid", 2)
    for worker in (top, low, mid):
        q.add_consumer(worker, False)
    q.remove_consumer(top)
    assert q.consumers.active is mid
    q.remove_consumer(mid)
    assert q.consumers.active is low


def test_among_equal_priorities_the_larger_credit_then_the_earliest_waits_first():
    # sort_waiting/1: same priority, "sort by credit" (the larger first),
    # same credit "sort by key, first attached"; a consumer without a
    # prefetch checks out with rabbit_fifo_client's ?UNLIMITED_PREFETCH_COUNT
    # (2000)
    _, q = sac_queue()
    active = Worker("active", 9)
    small, big, unlimited, small_later = (Worker("small", 0, 10), Worker("big", 0, 50),
                                          Worker("unlimited", 0, 0), Worker("small2", 0, 10))
    for worker in (active, small, big, unlimited, small_later):
        q.add_consumer(worker, False)
    assert q.consumers.waiting == [unlimited, big, small, small_later]


def test_3_13_keeps_the_active_consumer_and_the_earliest_successor():
    host, q = sac_queue("3.13")
    low, high, mid = Worker("low", 1), Worker("high", 3), Worker("mid", 2)
    for worker in (low, high, mid):
        q.add_consumer(worker, False)
    send(host, b"m")
    assert low.got == [b"m"]
    low.ack(q)
    q.remove_consumer(low)
    assert q.consumers.active is high
    q.remove_consumer(high)
    assert q.consumers.active is mid


def test_a_timed_out_active_consumer_steps_aside_until_its_client_settles():
    # evaluate_consumer_timeout (rabbit_fifo.erl:722): its messages go back
    # and, holding none, it moves to waiting_consumers behind those that
    # are up; handle_waiting_timedout_consumers/4 (rabbit_fifo.erl:4279)
    # puts it back in order once every timed-out message is settled
    host, q = sac_queue()
    first, second = Worker("first", 2), Worker("second", 1)
    q.add_consumer(first, False)
    q.add_consumer(second, False)
    send(host, b"m")
    entries, first.held = first.held, []
    first.unacked -= 1
    first.timed_out = {1}
    q.consumer_timed_out(first)
    q.requeue(entries, TIMED_OUT)
    assert q.consumers.active is second and q.consumers.waiting == [first]
    assert second.got == [b"m"]
    assert q.consumers_up == 2  # a waiting one counts, in a timeout or not
    first.timed_out.clear()
    q.consumer_resumed(first)
    assert q.consumers.quiescing  # higher than `second`, which holds `m`
    second.ack(q)
    assert q.consumers.active is first


def test_a_competing_consumer_in_a_timeout_takes_nothing_and_is_not_counted():
    # maybe_queue_consumer/3 serves `up` consumers only;
    # query_consumer_count/1 (rabbit_fifo.erl:1592) counts plain statuses
    host = VirtualHost("/", clock=FakeClock(), semantics="4.3")
    q = host.declare_queue("q", None, durable=True,
                           arguments=FieldTable({"x-queue-type": "quorum"}))
    idle, busy = Worker("idle"), Worker("busy")
    q.add_consumer(idle, False)
    q.add_consumer(busy, False)
    idle.timed_out = {7}
    q.consumer_timed_out(idle)
    send(host, b"a")
    assert busy.got == [b"a"] and idle.got == []
    assert q.consumers_up == 1 and len(q.consumers) == 2
    idle.timed_out.clear()
    q.consumer_resumed(idle)
    send(host, b"b")
    assert idle.got == [b"b"] and q.consumers_up == 2
