"""Credit flow without a socket or a loop: a queue's credit part on its
own (broker/queue/credit.py), a queue that withholds credit while its
consumers fall behind, the publish path telling the publisher, a
connection's flow waiting for credit and what the management API shows
of it (protocol/flow.py)."""

from __future__ import annotations

from amqp_server.broker.broker import Broker
from amqp_server.broker.queue import Queue
from amqp_server.broker.queue.credit import Credit
from amqp_server.config import BrokerConfig
from amqp_server.protocol.flow import CREDIT, ChannelCredit, Flow
from amqp_server.wire.table import FieldTable
from policies.effective import resolve
from tests.messages import FakeClock, message
from tests.sansio import Resources, Transport

# ---- the credit part -------------------------------------------------------


def test_a_queue_withholds_credit_once_it_grew_past_its_high_mark():
    credit = Credit(100, 1 << 30)
    assert not credit.grew(100, 0)
    assert credit.grew(101, 0) and credit.withholding


def test_bytes_count_as_well_as_messages():
    credit = Credit(1000, 5000)
    assert credit.grew(10, 5001)


def test_growth_is_counted_from_the_backlog_the_consumers_found():
    credit = Credit(100, 1 << 30)
    credit.consumers_came(1_000_000, 0)
    assert not credit.grew(1_000_050, 0)
    assert credit.grew(1_000_101, 0)


def test_the_base_follows_the_backlog_down_as_it_drains():
    credit = Credit(100, 1 << 30)
    credit.consumers_came(1000, 0)
    credit.drained(400, 0, 600)
    assert not credit.grew(500, 0)
    assert credit.grew(501, 0)


def test_credit_is_granted_back_at_half_the_high_mark():
    credit = Credit(100, 1 << 30)
    credit.grew(101, 0)
    credit.wait("publisher")
    assert credit.drained(51, 0, 1) == ()
    assert credit.drained(50, 0, 2) == {"publisher"}
    assert not credit.withholding and not credit.waiting


def test_zero_turns_the_limit_off():
    credit = Credit(0, 0)
    assert not credit.grew(10**9, 10**12)


def test_a_queue_that_delivers_nothing_for_a_whole_tick_lets_its_publishers_go():
    credit = Credit(100, 1 << 30)
    credit.tick(5)
    credit.grew(101, 0)
    credit.wait("publisher")
    assert credit.tick(5) == ()  # the first tick may come at once
    assert credit.tick(5) == {"publisher"}
    assert credit.stalled and not credit.withholding
    assert not credit.grew(10_000, 0)  # stuck: it withholds nothing more


def test_a_stuck_queue_withholds_credit_again_once_it_delivers():
    credit = Credit(100, 1 << 30)
    credit.tick(5)
    credit.grew(101, 0)
    credit.tick(5)
    credit.tick(5)
    credit.drained(10_000, 0, 6)
    assert not credit.stalled
    assert credit.grew(10_001, 0)


def test_a_queue_that_keeps_delivering_is_slow_not_stuck():
    credit = Credit(100, 1 << 30)
    credit.grew(101, 0)
    credit.wait("publisher")
    for delivered in range(1, 10):
        assert credit.tick(delivered) == ()
    assert credit.withholding


# ---- a queue ------------------------------------------------------------------


class Window:
    """A consumer with a prefetch window that the test empties."""

    priority = 0

    def __init__(self, prefetch: int, flow=None) -> None:
        self.prefetch = prefetch
        self.unacked = 0
        self.flow = flow

    def can_take(self) -> bool:
        return self.unacked < self.prefetch

    def room(self) -> int:
        return self.prefetch - self.unacked

    def output_room(self) -> int:
        return 1 << 20

    def take(self, queue, entry) -> None:
        self.unacked += 1

    def take_many(self, queue, entries) -> None:
        self.unacked += len(entries)

    def ack(self, queue) -> None:
        self.unacked = 0
        queue.dispatch()


class Publisher:
    """A sender: records the credit it is granted."""

    def __init__(self) -> None:
        self.granted: list = []

    def credit_granted(self, queue) -> None:
        self.granted.append(queue.name)


def plain_queue(count: int = 100) -> Queue:
    queue = Queue("/", "q", settings=(resolve(FieldTable()), None, None), clock=FakeClock())
    queue.credit.set_limits(count, 1 << 30)
    return queue


def test_a_queue_whose_consumer_falls_behind_withholds_credit():
    queue = plain_queue()
    consumer = Window(10)
    queue.add_consumer(consumer, False)
    for number in range(110):
        queue.enqueue(message("q", b"%d" % number))
    assert queue.message_count == 100 and not queue.withholds_credit
    queue.enqueue(message("q"))
    assert queue.withholds_credit


def test_a_queue_without_consumers_never_withholds_credit():
    queue = plain_queue()
    queue.enqueue_run([message("q") for _ in range(1000)])
    assert queue.message_count == 1000 and not queue.withholds_credit


def test_a_drained_queue_grants_credit_to_its_publishers():
    queue = plain_queue()
    consumer = Window(60)
    queue.add_consumer(consumer, False)
    queue.enqueue_run([message("q") for _ in range(200)])
    publisher = Publisher()
    assert queue.withholds_credit and queue.await_credit(publisher)
    consumer.ack(queue)  # 60 more out: 80 left, above 50
    assert publisher.granted == []
    consumer.ack(queue)  # 20 left
    assert publisher.granted == ["q"] and not queue.withholds_credit


def test_the_last_consumer_gone_grants_credit():
    queue = plain_queue()
    consumer = Window(10)
    queue.add_consumer(consumer, False)
    queue.enqueue_run([message("q") for _ in range(200)])
    publisher = Publisher()
    queue.await_credit(publisher)
    queue.remove_consumer(consumer)
    assert publisher.granted == ["q"] and not queue.withholds_credit


def test_a_purge_and_a_delete_grant_credit():
    for end in (Queue.purge, Queue.close):
        queue = plain_queue()
        queue.add_consumer(Window(10), False)
        queue.enqueue_run([message("q") for _ in range(200)])
        publisher = Publisher()
        queue.await_credit(publisher)
        end(queue)
        assert publisher.granted == ["q"] and not queue.withholds_credit


def test_a_publisher_that_consumes_the_queue_itself_does_not_wait_for_it():
    queue = plain_queue()
    flow = object()
    queue.add_consumer(Window(10, flow=flow), False)
    queue.enqueue_run([message("q") for _ in range(200)])
    assert queue.withholds_credit
    assert not queue.await_credit(flow)  # its acks come on that connection
    assert queue.await_credit(Publisher())


# ---- the publish path -----------------------------------------------------------


class Sender:
    def __init__(self) -> None:
        self.waited: list = []

    def wait_for(self, queue) -> None:
        self.waited.append(queue.name)


def test_a_publish_into_a_queue_that_withholds_credit_tells_the_sender():
    broker = Broker(BrokerConfig(credit_flow_backlog=10))
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("slow", None)
    queue.add_consumer(Window(1), False)
    other = vhost.declare_queue("fast", None)
    sender = Sender()
    grant = broker.access.login(broker.users["guest"], "/")
    for _ in range(11):
        vhost.publish(message("slow"), grant, sender=sender)
        vhost.publish(message("fast"), grant, sender=sender)
    assert sender.waited == []
    vhost.publish(message("slow"), grant, sender=sender)
    vhost.publish_run([message("slow"), message("slow")], grant, sender=sender)
    vhost.publish(message("fast"), grant, sender=sender)
    assert sender.waited == ["slow", "slow"] and not other.withholds_credit


# ---- the connection's flow --------------------------------------------------


class Seconds:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class QueueStub:
    def __init__(self, name: str, own: bool = False) -> None:
        self.name = name
        self.own = own
        self.waiting: set = set()

    def await_credit(self, sender) -> bool:
        if self.own:
            return False
        self.waiting.add(sender)
        return True

    def forget_sender(self, sender) -> None:
        self.waiting.discard(sender)


def flow_with_clock(resources: Resources | None = None) -> tuple[Flow, Transport, Seconds]:
    clock = Seconds()
    control = Flow(resources or Resources(), clock=clock)
    transport = Transport()
    control.attach(transport)
    control.publishing = True
    return control, transport, clock


def test_a_queue_withholding_credit_stops_reading_the_connection():
    control, transport, _ = flow_with_clock()
    queue = QueueStub("q")
    ChannelCredit(control, 1).wait_for(queue)
    assert transport.calls == ["pause"] and control.reasons() == {CREDIT}
    assert queue.waiting == {control}


def test_reading_resumes_once_every_queue_granted_credit():
    control, transport, _ = flow_with_clock()
    first, second = QueueStub("a"), QueueStub("b")
    control.wait_for(first, 1)
    control.wait_for(second, 2)
    control.credit_granted(first)
    assert transport.calls == ["pause"]
    control.credit_granted(second)
    assert transport.calls == ["pause", "resume"] and control.reasons() == set()


def test_a_connection_is_never_held_for_a_queue_its_own_consumers_read():
    control, transport, _ = flow_with_clock()
    control.wait_for(QueueStub("q", own=True), 1)
    assert transport.calls == [] and control.reading


def test_the_connection_shows_flow_while_held_and_five_seconds_after():
    control, _, clock = flow_with_clock()
    queue = QueueStub("q")
    assert control.state() == "running"
    control.wait_for(queue, 1)
    assert control.state() == "flow"
    clock.now += 60
    assert control.state() == "flow"  # still held
    control.credit_granted(queue)
    clock.now += 4.9
    assert control.state() == "flow"
    clock.now += 0.2
    assert control.state() == "running"


def test_only_the_channel_that_published_shows_flow_and_for_a_second():
    control, _, clock = flow_with_clock()
    queue = QueueStub("q")
    control.wait_for(queue, 3)
    assert control.channel_state(3) == "flow" and control.channel_state(1) == "running"
    control.credit_granted(queue)
    clock.now += 0.9
    assert control.channel_state(3) == "flow"
    clock.now += 0.2
    assert control.channel_state(3) == "running"


def test_alarms_show_as_rabbitmq_shows_them():
    resources = Resources()
    control = Flow(resources, clock=Seconds())
    control.attach(Transport())
    resources.alarms.add("memory")
    control.resources_changed()
    assert control.state() == "blocking"  # not published yet
    control.publishing = True
    control.after_read()
    assert control.state() == "blocked"


def test_a_busy_store_shows_as_flow():
    control, _, _ = flow_with_clock(Resources(store_busy=True))
    control.after_read()
    assert control.state() == "flow"


def test_a_closed_connection_waits_for_no_queue():
    control, transport, _ = flow_with_clock()
    queue = QueueStub("q")
    control.wait_for(queue, 1)
    control.forget_credit()
    assert queue.waiting == set() and control.withheld == {}
    assert transport.calls == ["pause", "resume"]
