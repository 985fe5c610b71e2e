"""A channel is composed of parts (protocol/channel/): each owns its state,
says what it owns and needs, and is called through its public methods only.
These tests hold the parts to that and drive some of them alone, with plain
objects standing for the queue, the connection and the stores."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from amqp_server.errors import AMQPError
from amqp_server.protocol.channel.confirms import Confirms
from amqp_server.protocol.channel.deliveries import Deliveries
from amqp_server.protocol.channel.output import ChannelOutput
from amqp_server.wire import frames
from dlx.redelivery import CLOSED, NACKED, TIMED_OUT

PROTOCOL = Path(__file__).resolve().parent.parent / "amqp_server" / "protocol"
PARTS = sorted((PROTOCOL / "channel").glob("*.py"))


def _private_reaches(path: Path) -> list[str]:
    """`something._name` where something is not `self` (nor a class's own
    name): a call or read into another object's private state."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{path.name}:{node.lineno}: .{node.attr}")
    return found


@pytest.mark.parametrize("path", PARTS + [PROTOCOL / "consumer.py", PROTOCOL / "flow.py",
                                          PROTOCOL / "connection.py"], ids=lambda p: p.name)
def test_no_part_reaches_into_another_objects_private_state(path):
    assert _private_reaches(path) == []


@pytest.mark.parametrize("path", [p for p in PARTS if p.name != "__init__.py"],
                         ids=lambda p: p.name)
def test_every_part_says_what_it_is(path):
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring, f"{path.name} has no module docstring"
    classes = [node for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.ClassDef)]
    if classes and path.name != "core.py":
        assert "Owns" in docstring and "Needs" in docstring, path.name


def test_no_part_is_a_mixin_of_the_channel():
    tree = ast.parse((PROTOCOL / "channel" / "core.py").read_text())
    (channel,) = [node for node in tree.body
                  if isinstance(node, ast.ClassDef) and node.name == "Channel"]
    assert channel.bases == []


# ---- parts driven alone ------------------------------------------------


@dataclass
class Counters:
    acknowledged: dict = field(default_factory=lambda: {"classic": 0, "quorum": 0})

    def delivered(self, *args) -> None:
        pass

    def got(self, *args) -> None:
        pass


@dataclass
class Store:
    synced: int = 0
    waiters: list = field(default_factory=list)

    def wait(self, waiter) -> None:
        self.waiters.append(waiter)


@dataclass
class Journal:
    synced: int = 0
    written: int = 0
    replicating: bool = False
    waiters: list = field(default_factory=list)

    def pending(self) -> int:
        return self.written

    def wait(self, waiter) -> None:
        self.waiters.append(waiter)


@dataclass
class Broker:
    counters: Counters = field(default_factory=Counters)
    store: Store = field(default_factory=Store)


@dataclass
class Connection:
    broker: Broker = field(default_factory=Broker)
    frame_max: int = 131072
    written: list = field(default_factory=list)
    due: list = field(default_factory=list)

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def confirms_due(self, channel) -> None:
        self.due.append(channel)


@dataclass
class Settings:
    queue_type: str = "classic"


@dataclass
class Queue:
    settings: Settings = field(default_factory=Settings)
    deleted: bool = False
    ready: list = field(default_factory=list)
    consumers: list = field(default_factory=list)
    settled: list = field(default_factory=list)
    requeued: list = field(default_factory=list)
    rejected: list = field(default_factory=list)
    how: list = field(default_factory=list)  # how each came back (dlx.redelivery)
    resumed: list = field(default_factory=list)  # consumers out of a 4.3 timeout

    def __hash__(self) -> int:
        return id(self)

    def consumer_resumed(self, consumer) -> None:
        self.resumed.append(consumer)

    def settle(self, entries) -> None:
        self.settled.extend(entries)

    def requeue(self, entries, how) -> None:
        self.requeued.extend(entries)
        self.how.append(how)

    def reject(self, entries, how) -> None:
        self.rejected.extend(entries)
        self.how.append(how)


@dataclass(eq=False)
class Consumer:
    unacked: int = 0
    timed_out: set = field(default_factory=set)  # tags a 4.3 consumer timeout took back
    queue: Queue | None = None


def deliveries_with(tags: int) -> tuple[Deliveries, Queue, Consumer]:
    conn = Connection()
    deliveries = Deliveries(1, conn, ChannelOutput(1, conn, Journal(), None), False, set)
    queue = Queue()
    consumer = Consumer(queue=queue)
    for tag in range(1, tags + 1):
        deliveries.unacked[tag] = (queue, f"m{tag}", consumer)
    deliveries.next_tag = tags + 1
    consumer.unacked = tags
    return deliveries, queue, consumer


def test_a_multiple_ack_takes_every_tag_up_to_it_in_order():
    deliveries, queue, consumer = deliveries_with(5)
    deliveries.settle(deliveries.take(3, multiple=True))
    assert queue.settled == ["m1", "m2", "m3"] and consumer.unacked == 2
    assert list(deliveries.unacked) == [4, 5]


def test_a_multiple_ack_over_gaps_walks_the_tags():
    deliveries, queue, _ = deliveries_with(6)
    deliveries.take(2, multiple=False)
    deliveries.take(4, multiple=False)
    assert [tag for tag, _ in deliveries.take(5, multiple=True)] == [1, 3, 5]
    assert list(deliveries.unacked) == [6]


def test_an_unknown_tag_is_a_406_and_takes_nothing():
    deliveries, _, _ = deliveries_with(2)
    with pytest.raises(AMQPError) as raised:
        deliveries.take(7, multiple=True)
    assert raised.value.code == 406 and list(deliveries.unacked) == [1, 2]


def test_acks_read_together_stop_at_an_unknown_tag_with_its_error():
    deliveries, _, _ = deliveries_with(3)
    taken, error = deliveries.take_each(80, [1, 2, 9, 3])
    assert [tag for tag, _ in taken] == [1, 2]
    assert error is not None and (error.code, error.class_id, error.method_id) == (406, 60, 80)
    assert list(deliveries.unacked) == [3]


def test_timed_out_deliveries_go_back_not_counted_as_failed_and_stay_outstanding():
    # RabbitMQ 4.3's channel keeps their tags (handle_queue_actions/2 only
    # sends basic.cancel for a `released ... timeout`)
    deliveries, queue, consumer = deliveries_with(3)
    consumer.timed_out = {1, 2}
    deliveries.time_out([1, 2])
    assert queue.requeued == ["m1", "m2"] and queue.how == [TIMED_OUT]
    assert consumer.unacked == 1 and list(deliveries.unacked) == [1, 2, 3]


def test_the_consumer_resumes_once_every_timed_out_delivery_is_settled_any_way():
    # rabbit_fifo's maybe_untimeout/2 on settle, return and discard alike
    deliveries, queue, consumer = deliveries_with(4)
    consumer.timed_out = {1, 2, 3}
    deliveries.time_out([1, 2, 3])
    deliveries.settle(deliveries.take(1, multiple=False))
    deliveries.requeue(deliveries.take(2, multiple=False), NACKED)
    assert queue.resumed == [] and consumer.timed_out == {3}
    deliveries.discard(deliveries.take(3, multiple=False))
    assert queue.resumed == [consumer]
    # Each settled nothing in the queue: the messages were back already.
    assert queue.settled == [] and queue.rejected == [] and consumer.unacked == 1
    deliveries.settle(deliveries.take(4, multiple=False))
    assert queue.settled == ["m4"] and consumer.unacked == 0


def test_a_rollback_restores_taken_deliveries_in_tag_order():
    deliveries, _, _ = deliveries_with(4)
    taken = deliveries.take(1, multiple=False) + deliveries.take(3, multiple=False)
    deliveries.restore(taken)
    assert list(deliveries.unacked) == [1, 2, 3, 4]


def test_rejects_requeue_or_discard_and_a_deleted_queue_forgets():
    deliveries, queue, consumer = deliveries_with(3)
    deliveries.requeue(deliveries.take(1, multiple=False))
    deliveries.discard(deliveries.take(2, multiple=False))
    queue.deleted = True
    deliveries.requeue(deliveries.take(3, multiple=False))
    assert (queue.requeued, queue.rejected, queue.settled) == (["m1"], ["m2"], ["m3"])
    assert consumer.unacked == 0


def test_how_a_delivery_came_back_reaches_its_queue():
    """4.3 counts a reject and a nack apart (dlx.redelivery.delivery_failed):
    the queue is told which."""
    deliveries, queue, _ = deliveries_with(3)
    deliveries.requeue(deliveries.take(1, multiple=False), NACKED)
    deliveries.discard(deliveries.take(2, multiple=False), NACKED)
    deliveries.requeue(deliveries.take(3, multiple=False), CLOSED)
    assert queue.how == [NACKED, NACKED, CLOSED]


class Outcome:
    def __init__(self, routed: bool = True, refused: bool = False) -> None:
        self.routed, self.refused = routed, refused


class Message:
    route = b"\x00\x00"
    header = frames.content_header(0, b"\x00\x00")
    body = b""

    def __init__(self, stored_gen: int | None = None) -> None:
        self.stored_gen = stored_gen


def confirming() -> tuple[Confirms, Connection, Journal]:
    conn, journal = Connection(), Journal()
    output = ChannelOutput(1, conn, journal, "channel")
    confirms = Confirms(1, conn, output, "channel")
    confirms.on = True
    return confirms, conn, journal


def test_confirms_ack_a_run_at_once_and_nack_what_a_queue_refused():
    confirms, conn, _ = confirming()
    for refused in (False, False, True, False):
        confirms.answer(Message(), Outcome(refused=refused), mandatory=False)
    assert conn.due == ["channel"]  # one flush asked for, not four
    confirms.flush()
    assert conn.written == [frames.ack_frame(1, 2, True), frames.nack_frame(1, 3, False),
                            frames.ack_frame(1, 4, False)]


def test_a_persistent_publish_is_confirmed_once_the_store_has_synced_it():
    confirms, conn, _ = confirming()
    confirms.answer(Message(), Outcome(), mandatory=False)
    confirms.answer(Message(stored_gen=5), Outcome(), mandatory=False)
    confirms.answer(Message(), Outcome(), mandatory=False)
    confirms.flush()
    assert conn.written == [frames.ack_frame(1, 1, False)]
    assert conn.broker.store.waiters == ["channel"]
    conn.broker.store.synced = 5
    confirms.durable_progress()
    confirms.flush()
    assert conn.written[1:] == [frames.ack_frame(1, 3, True)]


def test_a_run_of_persistent_publishes_is_confirmed_once_all_of_it_is_synced():
    confirms, conn, _ = confirming()
    confirms.answer(Message(), Outcome(), mandatory=False)
    confirms.answer_run([Message(stored_gen=4), Message(stored_gen=5)], Outcome(),
                        mandatory=False)
    confirms.answer(Message(), Outcome(), mandatory=False)
    confirms.flush()
    assert conn.written == [frames.ack_frame(1, 1, False)]
    conn.broker.store.synced = 4  # the run's first message only: none of it yet
    confirms.durable_progress()
    confirms.flush()
    assert conn.written == [frames.ack_frame(1, 1, False)]
    conn.broker.store.synced = 5
    confirms.durable_progress()
    confirms.flush()
    assert conn.written[1:] == [frames.ack_frame(1, 4, True)]


def test_a_closed_channel_confirms_nothing_more():
    confirms, conn, _ = confirming()
    confirms.answer(Message(), Outcome(), mandatory=False)
    confirms.close()
    confirms.flush()
    assert conn.written == []


def test_held_output_goes_out_in_order_once_on_disk():
    conn, journal = Connection(), Journal()
    output = ChannelOutput(1, conn, journal, "channel")
    output.write_when_on_disk(3, 0, b"commit-ok")
    output.write_when_on_disk(0, 0, b"after it")  # on disk already, but behind
    assert conn.written == [] and conn.broker.store.waiters == ["channel"]
    conn.broker.store.synced = 3
    output.release()
    assert conn.written == [b"commit-ok", b"after it"] and not output.holding()
