"""A stream queue (broker/stream/queue.py) without a socket: the message
store flushed by hand, consumers that only count what they take.  Credit,
offsets, readers sharing reads, and a consumer caught up with messages
appended but not yet on disk."""

from __future__ import annotations

from amqp_server.broker.message import Message
from amqp_server.broker.stream import StreamQueue
from amqp_server.storage.message_store import MessageStore
from amqp_server.wire.frames import content_header
from amqp_server.wire.table import FieldTable
from policies.effective import resolve

HEADER = content_header(2, b"\x00\x00")


class Taker:
    """A consumer with `credit` deliveries of room, which it keeps."""

    def __init__(self, tag: str, credit: int, offset="first") -> None:
        self.tag = tag
        self.credit = credit
        self.arguments = FieldTable({"x-stream-offset": offset})
        self.priority = 0
        self.taken: list[int] = []

    def room(self) -> int:
        return self.credit - len(self.taken)

    def take(self, queue, entry) -> None:
        self.taken.append(entry.seq)

    def take_many(self, queue, entries) -> None:
        self.taken.extend(entry.seq for entry in entries)


def stream(tmp_path) -> tuple[StreamQueue, MessageStore]:
    arguments = FieldTable({"x-queue-type": "stream"})
    queue = StreamQueue("/", "s", True, None, False, arguments, (resolve(arguments), None, None))
    store = MessageStore(tmp_path / "messages")
    queue.store = store
    return queue, store


def publish(queue, count: int) -> None:
    for i in range(count):
        queue.enqueue(Message.to("", "s", HEADER, b"m%d" % i))


def test_a_consumer_caught_up_waits_for_the_flush_and_does_not_spin(tmp_path):
    queue, store = stream(tmp_path)
    publish(queue, 3)
    store.flush_now()
    taker = Taker("a", 100)
    queue.add_consumer(taker, False)
    assert taker.taken == [0, 1, 2]
    publish(queue, 2)        # appended, not yet on disk
    queue.dispatch()         # (an ack, say): nothing to deliver, and it returns
    assert taker.taken == [0, 1, 2]
    store.flush_now()        # on disk: delivered
    assert taker.taken == [0, 1, 2, 3, 4]


def test_credit_bounds_deliveries_and_settling_gives_it_back(tmp_path):
    queue, store = stream(tmp_path)
    publish(queue, 10)
    store.flush_now()
    taker = Taker("a", 4)
    queue.add_consumer(taker, False)
    assert taker.taken == [0, 1, 2, 3]
    taker.credit += 4
    queue.settle([None] * 4)
    assert taker.taken == list(range(8))
    assert queue.message_count == 10  # settling removes nothing


def test_readers_each_read_everything_from_their_start(tmp_path):
    queue, store = stream(tmp_path)
    publish(queue, 20)
    store.flush_now()
    first, middle, nxt = Taker("a", 100), Taker("b", 100, 15), Taker("c", 100, "next")
    for taker in (first, middle, nxt):
        queue.add_consumer(taker, False)
    publish(queue, 2)
    store.flush_now()
    assert first.taken == list(range(22))
    assert middle.taken == list(range(15, 22))
    assert nxt.taken == [20, 21]


def test_what_one_reader_read_another_gets_without_reading_the_file(tmp_path):
    queue, store = stream(tmp_path)
    publish(queue, 50)
    store.flush_now()
    leader = Taker("a", 30)
    queue.add_consumer(leader, False)
    follower = Taker("b", 50)
    queue.add_consumer(follower, False)
    # the follower took 0..29 from the leader's reads, the rest from the file
    assert follower.taken == list(range(50))
    assert queue.readers[follower].offset == 50


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000.0

    def __call__(self) -> float:
        return self.now


def aged_stream(tmp_path, clock, **arguments):
    table = FieldTable({"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 300,
                        **arguments})
    queue = StreamQueue("/", "s", True, None, False, table, (resolve(table), None, None),
                        clock=clock)
    store = MessageStore(tmp_path / "messages")
    queue.store = store
    return queue, store


def test_retention_by_age_removes_old_segments_when_one_fills(tmp_path):
    clock = Clock()
    queue, store = aged_stream(tmp_path, clock, **{"x-max-age": "1h"})
    publish(queue, 20)
    store.flush_now()
    old_segments = len(queue.log.segments)
    assert old_segments > 2 and queue.log.first_offset == 0
    clock.now += 2 * 3_600_000
    publish(queue, 10)  # fills a segment: retention looks
    store.flush_now()
    # The segments holding only old messages went, whole; the first left
    # holds a young message too (a segment goes whole or not at all).
    assert 0 < queue.log.first_offset < 20
    assert queue.log.segments[0].newest >= clock.now - 3_600_000
    taker = Taker("a", 100)
    queue.add_consumer(taker, False)
    assert taker.taken == list(range(queue.log.first_offset, 30))
    assert queue.retained == queue.log.first_offset
    assert len(list(queue.log.directory.glob("*.seg"))) == queue.log.segment_count


def test_a_policy_lowering_max_length_bytes_applies_at_once(tmp_path):
    clock = Clock()
    queue, store = aged_stream(tmp_path, clock)
    publish(queue, 40)
    store.flush_now()
    assert queue.log.first_offset == 0
    table = FieldTable({"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 300})
    queue.apply_settings(resolve(table, {"max-length-bytes": 600}))
    store.flush_now()
    assert queue.log.first_offset > 0 and queue.log.size <= 600 + 300


class Shipping:
    """A replication stream that keeps what it is handed (storage/replication.py):
    frames from the writer thread are shipped at once (flush_now runs there
    on this thread)."""

    def __init__(self) -> None:
        self.frames: list[list] = []
        self.replicated = 0
        self.owners: list = []

    def ship(self, frame: list) -> int:
        self.frames.append(frame)
        frame[1] = len(self.frames)
        return frame[1]

    def ship_from_thread(self, frame: list, shipped) -> None:
        shipped(self.ship(frame))

    def watch(self, owner) -> None:
        self.owners.append(owner)

    def replicate_all(self) -> None:
        self.replicated = len(self.frames)
        for owner in self.owners:
            owner.replication_progress()


def test_a_clustered_leader_ships_a_stream_and_readers_wait_for_the_followers(tmp_path):
    queue, store = stream(tmp_path)
    shipping = Shipping()
    store.ship_to(shipping)
    queue.enqueue(Message.to("", "s", HEADER, b"first"))
    assert queue.plain  # shipped like any durable queue: nothing refused
    store.flush_now()
    kinds = [frame[0] for frame in shipping.frames]
    assert kinds == ["s", "m"]  # the stream's write, then the flush that confirms it
    name = shipping.frames[0][2]
    assert name == f"streams/{b'/'.hex()}/{b's'.hex()}"
    ((number, data),) = shipping.frames[0][3]
    assert (queue.log.directory / f"{number:08d}.seg").read_bytes() == data
    # On the leader's disk, not yet on the followers': not confirmed, not read.
    taker = Taker("a", 10)
    queue.add_consumer(taker, False)
    assert store.synced == 0 and queue.log.committed == 0 and taker.taken == []
    shipping.replicate_all()
    assert store.synced == 1 and taker.taken == [0]
    queue.log.mark_redriven([0])
    assert shipping.frames[-1][::2] == ["sr", name] and shipping.frames[-1][3] == b"0\n"
    store.delete_stream(queue.log)
    store.flush_now()
    assert shipping.frames[-2][0::2] == ["sx", name]


def test_a_run_of_publishes_reaches_tail_consumers_and_later_readers_alike(tmp_path):
    queue, store = stream(tmp_path)
    tail = Taker("tail", 1000, "next")
    queue.add_consumer(tail, False)
    queue.enqueue_run([Message.to("", "s", HEADER, b"r%d" % i) for i in range(300)])
    publish(queue, 5)
    store.flush_now()
    assert tail.taken == list(range(305))
    # A reader that starts later reads the same from the file, and one that
    # took the recent ones goes on in the file where they ended.
    late = Taker("late", 1000)
    queue.add_consumer(late, False)
    assert late.taken == list(range(305))
    queue.enqueue_run([Message.to("", "s", HEADER, b"more") for _ in range(3)])
    store.flush_now()
    assert tail.taken[-3:] == late.taken[-3:] == [305, 306, 307]


# ---- any interleaving: every consumer gets exactly the log from its start -----------

from hypothesis import (  # noqa: E402
    HealthCheck,
    given,
    settings,
    strategies as st,  # noqa: E402
)

from policies.stream_rules import OffsetSpec, start_offset  # noqa: E402

STEPS = st.lists(st.one_of(
    st.tuples(st.just("publish"), st.integers(1, 40)),
    st.tuples(st.just("run"), st.integers(1, 40)),
    st.tuples(st.just("flush"), st.just(0)),
    st.tuples(st.just("consume"), st.integers(0, 80)),
    st.tuples(st.just("credit"), st.integers(0, 3)),
    st.tuples(st.just("retain"), st.integers(200, 2000)),
), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_readers_get_the_log_in_order_whatever_the_interleaving(tmp_path_factory, steps):
    """Publishes (one by one and in runs), flushes, consumers starting at
    any offset, credit given back and retention at any moment: each
    consumer gets consecutive offsets from where it started (or from the
    first one retention left), bodies matching, never one not on disk."""
    tmp_path = tmp_path_factory.mktemp("prop")
    table = FieldTable({"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 400})
    queue = StreamQueue("/", "s", True, None, False, table, (resolve(table), None, None))
    store = MessageStore(tmp_path / "messages")
    queue.store = store
    sent = 0
    takers: list[tuple[Taker, int]] = []
    for kind, value in steps:
        if kind == "publish":
            for _ in range(value):
                queue.enqueue(Message.to("", "s", HEADER, b"%d" % sent))
                sent += 1
        elif kind == "run":
            queue.enqueue_run([Message.to("", "s", HEADER, b"%d" % (sent + i))
                               for i in range(value)])
            sent += value
        elif kind == "flush":
            store.flush_now()
        elif kind == "consume":
            taker = Taker(f"t{len(takers)}", 10 ** 6, value)
            expected = start_offset(OffsetSpec("offset", value), queue.log.first_offset,
                                    queue.log.next_offset)
            queue.add_consumer(taker, False)
            takers.append((taker, expected))
        elif kind == "credit" and takers:
            queue.dispatch()
        elif kind == "retain":
            queue.apply_settings(resolve(table, {"max-length-bytes": value}))
        for taker, _ in takers:
            assert all(offset < queue.log.committed for offset in taker.taken)
    store.flush_now()
    for taker, start in takers:
        taken = taker.taken
        if taken:
            assert taken == list(range(taken[0], taken[0] + len(taken)))
            assert taken[0] >= start
            assert taken[-1] == sent - 1
    # Every message read back has the body it was published with.
    reader = queue.log.reader(queue.log.first_offset)
    for item in reader.read(10 ** 6):
        assert item.body == b"%d" % item.offset
    reader.close()
    store.close()


def reopened(tmp_path, clock, store, **arguments):
    """The stream of `aged_stream` after a clean stop: opened again from its files."""
    store.close()
    return aged_stream(tmp_path, clock, **arguments)


def test_a_restart_keeps_the_newest_segment_over_max_length_bytes(tmp_path):
    # osiris reopens its last segment and never removes the newest one.
    clock = Clock()
    table = {"x-stream-max-segment-size-bytes": 100_000, "x-max-length-bytes": 1000}
    queue, store = aged_stream(tmp_path, clock, **table)
    for _ in range(20):
        queue.enqueue(Message.to("", "s", HEADER, b"x" * 100))
    store.flush_now()
    assert queue.message_count == 20  # one segment, never filled: all kept
    queue, store = reopened(tmp_path, clock, store, **table)
    store.flush_now()
    assert queue.message_count == 20


def test_a_restart_keeps_the_newest_segment_past_max_age(tmp_path):
    clock = Clock()
    queue, store = aged_stream(tmp_path, clock, **{"x-max-age": "1h"})
    publish(queue, 3)
    store.flush_now()
    clock.now += 2 * 3_600_000
    queue, store = reopened(tmp_path, clock, store, **{"x-max-age": "1h"})
    store.flush_now()
    assert queue.message_count == 3


def test_a_timestamp_after_the_newest_message_attaches_at_the_next(tmp_path):
    # osiris_log's timestamp search: after the newest chunk, `next`; later
    # messages go whatever their time (a client's clock ahead of ours).
    clock = Clock()
    queue, store = aged_stream(tmp_path, clock)
    publish(queue, 2)
    store.flush_now()
    ahead = int(clock.now // 1000) + 60
    taker = Taker("a", 100, offset=ahead)
    taker.arguments.types["x-stream-offset"] = "timestamp"
    queue.add_consumer(taker, False)
    clock.now += 1000
    publish(queue, 1)
    store.flush_now()
    assert taker.taken == [2]


def test_a_numeric_offset_past_the_end_waits_for_its_own(tmp_path):
    # rabbit_stream_queue delivers nothing below the offset asked for.
    queue, store = stream(tmp_path)
    publish(queue, 5)
    store.flush_now()
    taker = Taker("a", 100, offset=7)
    queue.add_consumer(taker, False)
    publish(queue, 5)
    store.flush_now()
    assert taker.taken == [7, 8, 9]
