"""Queue tails paged to disk, without any socket: order, counts, limits,
expiry, purge and restart with most of a queue paged, and the page file's
own chunking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from amqp_server.broker.queue import REFUSED
from amqp_server.storage.paging import PageFile
from amqp_server.wire.table import FieldTable
from dlx.redelivery import NACKED, REJECTED
from tests.disk_brokers import (
    PAGING_THRESHOLD,
    open_paging_broker,
    segment_files,
)
from tests.messages import TakeAll, message, persistent

THRESHOLD = PAGING_THRESHOLD
open_broker = open_paging_broker


def page_files(path) -> list:
    return sorted((path / "paging").glob("*.page"))


def drain(queue, settle: bool = True) -> list[bytes]:
    got = []
    while (entry := queue.take_one()) is not None:
        got.append(entry.message.body)
        if settle:
            queue.settle([entry])
    return got


def names(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{n}".encode() for n in range(count)]


def fill(queue, bodies, make=persistent) -> None:
    for body in bodies:
        queue.enqueue(make(queue.name, body))


# ---- the page file -------------------------------------------------------


def test_page_file_reads_back_in_order_across_chunks_and_deletes_them(tmp_path):
    pages = PageFile(tmp_path, 1, chunk_size=1000)
    for n in range(100):
        pages.append([n, b"x" * 50])
    assert len(list(tmp_path.iterdir())) > 3
    assert [r[0] for r in pages.read(30)] == list(range(30))
    for n in range(100, 120):  # appends while reading go behind
        pages.append([n, b"y"])
    rest = []
    while batch := pages.read(7):
        rest += [r[0] for r in batch]
    assert rest == list(range(30, 120))
    assert len(list(tmp_path.iterdir())) == 1  # only the chunk still being written
    pages.clear()
    assert list(tmp_path.iterdir()) == []


def test_paging_directory_is_wiped_at_start(tmp_path):
    (tmp_path / "paging").mkdir()
    (tmp_path / "paging" / "7.000000.page").write_bytes(b"left over")
    open_broker(tmp_path)
    assert page_files(tmp_path) == []


# ---- a queue past its threshold ------------------------------------------


def test_only_the_head_stays_in_memory_and_order_is_kept(tmp_path):
    broker = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    fill(queue, names("m", 100))
    assert (len(queue.ready), queue.paged_count, queue.message_count) == (THRESHOLD, 90, 100)
    assert queue.ready_bytes == sum(len(b) for b in names("m", 100))
    assert page_files(tmp_path)
    assert drain(queue) == names("m", 100)
    assert (queue.message_count, queue.ready_bytes) == (0, 0)
    assert page_files(tmp_path) == []


def test_a_byte_threshold_pages_large_messages(tmp_path):
    broker = open_broker(tmp_path, paging_threshold_bytes=1000)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    fill(queue, [bytes([n]) * 300 for n in range(10)])
    assert len(queue.ready) == 4 and queue.paged_count == 6
    assert drain(queue) == [bytes([n]) * 300 for n in range(10)]


def test_consumers_get_paged_messages_in_order(tmp_path):
    broker = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    fill(queue, names("m", 55))
    consumer = TakeAll()
    queue.add_consumer(consumer, exclusive=False)
    assert consumer.got == names("m", 55)
    fill(queue, names("n", 3))  # straight through once the queue is empty
    assert consumer.got[55:] == names("n", 3)


def test_a_new_message_never_overtakes_paged_ones(tmp_path):
    broker = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    fill(queue, names("m", 20))
    queue.settle([queue.take_one() for _ in range(THRESHOLD)])  # the head is used up
    consumer = TakeAll()
    queue.consumers.append(consumer)  # registered, not yet dispatched to
    fill(queue, [b"new"])
    queue.dispatch()
    assert consumer.got == names("m", 20)[THRESHOLD:] + [b"new"]


def test_requeued_messages_return_before_the_paged_ones(tmp_path):
    broker = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    fill(queue, names("m", 30))
    taken = [queue.take_one() for _ in range(12)]  # past the first page-in
    queue.requeue([taken[3], taken[11]])
    assert drain(queue) == [b"m3", b"m11"] + names("m", 30)[12:]


def test_max_length_counts_paged_messages_and_drops_from_the_head(tmp_path):
    broker = open_broker(tmp_path)
    vhost = broker.vhosts["/"]
    vhost.declare_queue("dlq", None)
    queue = vhost.declare_queue("q", None, durable=True, arguments=FieldTable({
        "x-max-length": 25, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    fill(queue, names("m", 40))
    assert queue.message_count == 25
    assert drain(vhost.queues["dlq"]) == names("m", 15)
    assert drain(queue) == names("m", 40)[15:]


def test_reject_publish_counts_paged_messages(tmp_path):
    broker = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True, arguments=FieldTable({
        "x-max-length": 25, "x-overflow": "reject-publish"}))
    verdicts = [queue.enqueue(persistent("q", body)) for body in names("m", 30)]
    assert verdicts.count(REFUSED) == 5
    assert drain(queue) == names("m", 25)


def test_paged_messages_expire_when_they_reach_the_head(tmp_path):
    broker = open_broker(tmp_path)
    vhost = broker.vhosts["/"]
    vhost.declare_queue("dlq", None)
    queue = vhost.declare_queue("q", None, durable=True, arguments=FieldTable({
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    fill(queue, names("keep", 5))
    fill(queue, names("short", 20), lambda key, body: persistent(key, body, expiration="1"))
    fill(queue, names("late", 5))
    assert queue.paged_count == 20
    taken = [queue.take_one() for _ in range(5)]
    queue.settle(taken)
    for entry in queue.ready:  # let every deadline pass
        entry.deadline = 0 if entry.deadline else None
    queue.expire(float(1 << 60))
    assert drain(vhost.queues["dlq"]) == names("short", 20)
    assert drain(queue) == names("late", 5)


def test_quorum_delivery_counts_survive_paging(tmp_path):
    broker = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True, arguments=FieldTable({
        "x-queue-type": "quorum"}))
    fill(queue, names("m", 15), persistent)
    taken = [queue.take_one() for _ in range(12)]
    queue.requeue([taken[11]])  # m11 comes back once: x-delivery-count 1
    queue.requeue(taken[:11])
    broker.store.flush_now()
    broker.store.close()

    again = open_broker(tmp_path)
    restored = again.vhosts["/"].queues["q"]
    assert restored.paged_count == 5  # m11 among them, as a record
    entries = [restored.take_one() for _ in range(15)]
    counts = {e.message.body: e.message.headers.get("x-delivery-count") for e in entries}
    assert counts[b"m11"] == 1 and counts[b"m3"] == 1 and counts[b"m12"] is None
    assert restored.take_one() is None


def test_4_3_counts_and_a_carried_count_survive_paging_and_a_restart(tmp_path):
    """A 4.3 quorum queue's failed and acquired counts, and the count a dead
    letter brought with it, go to the page file and come back from it."""
    broker = open_broker(tmp_path, rabbitmq_semantics="4.3")
    vhost = broker.vhosts["/"]
    dlq = vhost.declare_queue("dlq", None, durable=True,
                              arguments=FieldTable({"x-queue-type": "quorum"}))
    work = vhost.declare_queue("q", None, durable=True, arguments=FieldTable({
        "x-queue-type": "quorum", "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "dlq"}))
    fill(dlq, names("d", 12), persistent)
    fill(work, [b"poison"], persistent)
    work.requeue([work.take_one()], REJECTED)
    work.reject([work.take_one()], REJECTED)  # to the dlq, paged there, count 2
    assert dlq.paged_count == 3
    taken = [dlq.take_one() for _ in range(12)]
    dlq.requeue(taken[:1], NACKED)
    broker.store.flush_now()
    broker.store.close()

    again = open_broker(tmp_path, rabbitmq_semantics="4.3")
    restored = again.vhosts["/"].queues["dlq"]
    entries = [restored.take_one() for _ in range(13)]
    counts = {e.message.body: (e.message.headers.get("x-acquired-count"),
                               e.message.headers.get("x-delivery-count")) for e in entries}
    assert counts[b"poison"] == (2, 2) and counts[b"d0"] == (1, None)
    assert counts[b"d5"] == (None, None)


# ---- durable queues ------------------------------------------------------


def test_restart_pages_recovered_messages_and_keeps_flags(tmp_path):
    broker = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    fill(queue, names("m", 40), persistent)
    first = queue.take_one()  # delivered, never acked: redelivered after the restart
    broker.store.flush_now()
    broker.store.close()

    again = open_broker(tmp_path)
    restored = again.vhosts["/"].queues["q"]
    assert (len(restored.ready), restored.paged_count) == (THRESHOLD, 30)
    entries = []
    while (entry := restored.take_one()) is not None:
        entries.append(entry)
    assert [e.message.body for e in entries] == names("m", 40)
    assert [e.redelivered for e in entries] == [True] + [False] * 39
    assert first.message.body == b"m0"


def test_purge_of_a_paged_queue_is_durable_and_keeps_unacked(tmp_path):
    broker = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    fill(queue, names("m", 40), persistent)
    out = [queue.take_one() for _ in range(3)]
    assert queue.purge() == 37
    assert page_files(tmp_path) == [] and queue.message_count == 0
    fill(queue, names("n", 2), persistent)
    broker.store.flush_now()
    broker.store.close()

    again = open_broker(tmp_path)
    restored = again.vhosts["/"].queues["q"]
    entries = [restored.take_one() for _ in range(restored.message_count)]
    assert [e.message.body for e in entries] == [e.message.body for e in out] + names("n", 2)
    assert [e.redelivered for e in entries] == [True, True, True, False, False]


@pytest.mark.parametrize("how", ["consume", "purge", "delete"])
def test_store_segments_of_paged_messages_are_released(tmp_path, how):
    broker = open_broker(tmp_path)
    broker.store.log.segment_size = 300  # roll often
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", None, durable=True)
    fill(queue, names("m", 60), persistent)
    broker.store.flush_now()
    assert len(segment_files(tmp_path)) > 5 and queue.paged_count == 50
    if how == "consume":
        assert drain(queue) == names("m", 60)
    elif how == "purge":
        queue.purge()
    else:
        vhost.remove_queue(queue)
    broker.store.flush_now()
    broker.store.flush_now()
    assert len(segment_files(tmp_path)) <= 1
    assert all(count == 0 for count in broker.store.log.live.values())


def test_paging_under_memory_pressure_is_news_and_only_the_alarm_a_warning(tmp_path, caplog):
    """Warnings are for what an operator must act on: the alarm raised;
    what the broker does about it, and the alarm's end, are information."""
    caplog.set_level("INFO")
    broker = open_broker(tmp_path, paging_pressure_threshold=5)
    fill(broker.vhosts["/"].declare_queue("q", None), names("m", 50), message)
    broker.set_alarm("memory", True)
    broker.set_paging_pressure(True)
    broker.set_paging_pressure(False)
    broker.set_alarm("memory", False)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "amqp_server"]
    assert said == [("WARNING", "memory alarm set: publishers are blocked"),
                    ("INFO", "memory pressure: 45 messages paged to disk"),
                    ("INFO", "memory alarm cleared")]


def test_transient_messages_page_only_under_memory_pressure(tmp_path):
    broker = open_broker(tmp_path, paging_pressure_threshold=5)
    queue = broker.vhosts["/"].declare_queue("q", None)
    fill(queue, names("m", 50), message)
    assert queue.paged_count == 0  # past the threshold, but nothing is on disk anyway
    broker.set_paging_pressure(True)
    assert (len(queue.ready), queue.paged_count) == (5, 45)
    fill(queue, [b"new"], message)
    broker.set_paging_pressure(False)
    assert queue.pager.transient_limit > 1 << 40 and queue.pager.limit == THRESHOLD
    assert drain(queue) == names("m", 50) + [b"new"]
    assert queue.paged_count == 0


# ---- priority queues: a lane per priority --------------------------------


def prioritised(queue, items) -> None:
    """(body, priority) pairs, persistent."""
    for body, priority in items:
        queue.enqueue(persistent(queue.name, body, priority=priority))


def priority_queue(broker, name: str = "pq"):
    return broker.vhosts["/"].declare_queue(name, None, durable=True,
                                            arguments=FieldTable({"x-max-priority": 9}))


def test_a_priority_queue_pages_and_a_paged_higher_priority_goes_first(tmp_path):
    broker = open_broker(tmp_path)
    queue = priority_queue(broker)
    prioritised(queue, [(b, 1) for b in names("low", 30)])
    assert (len(queue.ready), queue.paged_count) == (THRESHOLD, 20)
    prioritised(queue, [(b, 7) for b in names("high", 15)])  # memory is full: paged
    assert (len(queue.ready), queue.paged_count) == (THRESHOLD, 35)
    assert drain(queue) == names("high", 15) + names("low", 30)
    assert page_files(tmp_path) == []


def test_priority_lanes_keep_their_order_with_returns_and_consumers(tmp_path):
    broker = open_broker(tmp_path)
    queue = priority_queue(broker)
    bodies = names("m", 60)
    prioritised(queue, [(b, n % 3) for n, b in enumerate(bodies)])
    taken = [queue.take_one() for _ in range(5)]  # m2, m5, m8, m11, m14
    queue.requeue([taken[4], taken[1]])  # back in place, ahead of the paged rest
    consumer = TakeAll()
    queue.add_consumer(consumer, exclusive=False)
    out = {entry.message.body for entry in taken}
    by_level = [b for level in (2, 1, 0) for n, b in enumerate(bodies) if n % 3 == level]
    assert consumer.got == [b"m5", b"m14"] + [b for b in by_level if b not in out]


def test_a_priority_queue_under_memory_pressure_pages_its_lowest_tail(tmp_path):
    broker = open_broker(tmp_path, paging_pressure_threshold=5)
    queue = broker.vhosts["/"].declare_queue("pq", None, arguments=FieldTable(
        {"x-max-priority": 5}))
    for n, body in enumerate(names("m", 40)):
        queue.enqueue(message("pq", body, priority=n % 4))
    broker.set_paging_pressure(True)
    assert (len(queue.ready), queue.paged_count) == (5, 35)
    broker.set_paging_pressure(False)
    expected = [b for level in (3, 2, 1, 0) for n, b in enumerate(names("m", 40))
                if n % 4 == level]
    assert drain(queue) == expected


def test_purge_of_a_paged_priority_queue_keeps_unacked_and_is_durable(tmp_path):
    broker = open_broker(tmp_path)
    queue = priority_queue(broker)
    prioritised(queue, [(b, 1) for b in names("low", 20)])
    prioritised(queue, [(b, 8) for b in names("high", 20)])  # paged behind the lows
    out = [queue.take_one() for _ in range(3)]  # highs, read back from their lane
    assert [e.message.body for e in out] == names("high", 3)
    assert queue.purge() == 37
    broker.store.flush_now()
    broker.store.close()
    again = open_broker(tmp_path)
    restored = again.vhosts["/"].queues["pq"]
    assert sorted(drain(restored)) == sorted(names("high", 3))


def test_restart_pages_a_priority_queue_by_lane(tmp_path):
    broker = open_broker(tmp_path)
    queue = priority_queue(broker)
    items = [(b, n % 4 * 3) for n, b in enumerate(names("m", 50))]
    prioritised(queue, items)
    broker.store.flush_now()
    broker.store.close()
    again = open_broker(tmp_path)
    restored = again.vhosts["/"].queues["pq"]
    assert (len(restored.ready), restored.paged_count) == (THRESHOLD, 40)
    expected = [b for level in (9, 6, 3, 0) for b, p in items if p == level]
    assert drain(restored) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("publish"), st.integers(0, 5)),
                          st.just(("take", 0)), st.just(("return", 0))), max_size=80))
def test_a_paged_priority_queue_serves_as_the_model_says(tmp_path_factory, operations):
    """Any mix of publishes, gets and returns: the highest priority first,
    oldest first within one, paged or not (the model: the smallest
    (-priority, seq) among the ready)."""
    broker = open_broker(tmp_path_factory.mktemp("pq"), paging_threshold=3)
    queue = broker.vhosts["/"].declare_queue("pq", None, durable=True, arguments=FieldTable(
        {"x-max-priority": 4}))
    model: set[tuple[int, int]] = set()  # (-priority, n) ready
    out: list = []  # (entry, model key) taken, not settled
    for n, (operation, priority) in enumerate(operations):
        if operation == "publish":
            queue.enqueue(persistent("pq", str(n).encode(), priority=priority))
            model.add((-min(priority, 4), n))
        elif operation == "take":
            entry = queue.take_one()
            if not model:
                assert entry is None
                continue
            expected = min(model)
            model.remove(expected)
            assert int(entry.message.body) == expected[1]
            out.append((entry, expected))
        elif out:
            entry, key = out.pop(0)
            queue.requeue([entry])
            model.add(key)
        assert queue.message_count == len(model)
    assert [int(body) for body in drain(queue)] == [n for _, n in sorted(model)]
