"""The message store and definitions on disk: damaged files, segment
deletion, and restarts of every kind of definition."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from amqp_server.storage import records
from amqp_server.storage.message_store import MessageStore
from amqp_server.wire.table import FieldTable

from .disk_brokers import open_broker, segment_files
from .messages import persistent


def publish_n(broker, queue_name: str, count: int) -> None:
    vhost = broker.vhosts["/"]
    queue = vhost.queues[queue_name]
    for n in range(count):
        queue.enqueue(persistent(queue_name, f"m{n}".encode()))
    broker.store.flush_now()


def bodies(broker, name: str) -> list[bytes]:
    return [entry.message.body for entry in broker.vhosts["/"].queues[name].ready]


def test_records_survive_a_flipped_byte_and_a_torn_tail():
    data = b"".join(records.encode(["E", n]) for n in range(5))
    one = len(records.encode(["E", 0]))
    damaged = bytearray(data)
    damaged[one * 2 + records.HEAD_SIZE + 1] ^= 0xFF  # inside record 2's payload
    damaged = bytes(damaged) + records.encode(["E", 5])[:7]  # and a torn tail
    found, problems, _ = records.decode_all(damaged)
    assert found == [["E", 0], ["E", 1], ["E", 3], ["E", 4]]
    assert [offset for offset, _ in problems] == [one * 2, one * 5]
    assert "torn" in problems[-1][1]


def test_corrupt_length_field_resyncs_on_the_next_record():
    data = bytearray(b"".join(records.encode(["E", n]) for n in range(3)))
    data[3] = 0x7F  # record 0's length now points far away
    found, problems, _ = records.decode_all(bytes(data))
    assert found == [["E", 1], ["E", 2]] and len(problems) == 1


def test_restart_keeps_messages_and_reports_damage(tmp_path):
    broker, _ = open_broker(tmp_path)
    broker.vhosts["/"].declare_queue("q", None, durable=True)
    publish_n(broker, "q", 5)
    (segment,) = segment_files(tmp_path)
    raw = bytearray(segment.read_bytes())
    raw += b"\xa5\x5a\x00\x00"  # a torn write at the end
    segment.write_bytes(bytes(raw))
    again, problems = open_broker(tmp_path)
    assert bodies(again, "q") == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert any("torn" in p for p in problems)
    assert segment.stat().st_size == len(raw) - 4  # truncated away


def test_flipped_byte_costs_one_message_not_the_rest(tmp_path):
    broker, _ = open_broker(tmp_path)
    broker.vhosts["/"].declare_queue("q", None, durable=True)
    publish_n(broker, "q", 5)
    (segment,) = segment_files(tmp_path)
    raw = bytearray(segment.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    segment.write_bytes(bytes(raw))
    again, problems = open_broker(tmp_path)
    assert len(bodies(again, "q")) == 4 and problems


def test_empty_and_missing_segments_do_not_stop_a_start(tmp_path):
    broker, _ = open_broker(tmp_path)
    broker.vhosts["/"].declare_queue("q", None, durable=True)
    publish_n(broker, "q", 2)
    (tmp_path / "messages" / "00000009.seg").write_bytes(b"")
    again, _ = open_broker(tmp_path)
    assert bodies(again, "q") == [b"m0", b"m1"]
    for segment in segment_files(tmp_path):
        segment.unlink()
    third, _ = open_broker(tmp_path)
    assert bodies(third, "q") == []
    assert "q" in third.vhosts["/"].queues  # definitions are separate


def test_acked_messages_stay_gone_and_drained_segments_are_deleted(tmp_path):
    broker, _ = open_broker(tmp_path)
    broker.store.log.segment_size = 200  # roll often
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    publish_n(broker, "q", 20)
    assert len(segment_files(tmp_path)) > 3
    taken = [queue.take_one() for _ in range(20)]
    queue.settle(taken)
    broker.store.flush_now()
    broker.store.flush_now()
    files = segment_files(tmp_path)
    assert len(files) <= 1 and sum(f.stat().st_size for f in files) < 400
    again, _ = open_broker(tmp_path)
    assert bodies(again, "q") == []


def test_queue_delete_and_purge_are_durable(tmp_path):
    broker, _ = open_broker(tmp_path)
    vhost = broker.vhosts["/"]
    kept = vhost.declare_queue("kept", None, durable=True)
    gone = vhost.declare_queue("gone", None, durable=True)
    publish_n(broker, "kept", 3)
    publish_n(broker, "gone", 3)
    kept.purge()
    vhost.remove_queue(gone)
    broker.store.flush_now()
    again, _ = open_broker(tmp_path)
    assert bodies(again, "kept") == []
    assert "gone" not in again.vhosts["/"].queues


def test_every_kind_of_definition_survives_a_restart(tmp_path):
    broker, _ = open_broker(tmp_path)
    broker.add_vhost("other")
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dx", "topic", durable=True,
                           arguments=FieldTable({"alternate-exchange": "ae"}))
    vhost.declare_exchange("tx", "fanout")  # transient
    durable = vhost.declare_queue("dq", None, durable=True, arguments=FieldTable(
        {"x-dead-letter-exchange": "dlx", "x-max-length": 10}))
    vhost.declare_queue("tq", None)
    vhost.declare_queue("adq", None, durable=True, auto_delete=True)
    vhost.declare_queue("qq", None, durable=True, arguments=FieldTable({"x-queue-type": "quorum"}))
    vhost.bind("dx", durable, "a.#", None)
    vhost.bind("amq.direct", durable, "k", None)
    broker.set_policy("/", "p", "^dq$", {"message-ttl": 100})
    again, _ = open_broker(tmp_path)
    host = again.vhosts["/"]
    assert "other" in again.vhosts
    assert host.exchanges["dx"].type_name == "topic" and host.exchanges["dx"].alternate == "ae"
    assert "tx" not in host.exchanges
    assert set(host.queues) == {"dq", "qq"}
    dq = host.queues["dq"]
    assert dq.arguments == {"x-dead-letter-exchange": "dlx", "x-max-length": 10}
    assert dq.settings.message_ttl == 100 and dq.policy.name == "p"
    assert host.queues["qq"].is_quorum
    assert sorted((b.source.name, b.routing_key) for b in dq.bindings.values()) == [
        ("amq.direct", "k"), ("dx", "a.#")]
    host.delete_exchange("dx")
    third, _ = open_broker(tmp_path)
    assert "dx" not in third.vhosts["/"].exchanges


def test_users_survive_with_their_hashes(tmp_path):
    broker, _ = open_broker(tmp_path)
    again, _ = open_broker(tmp_path)
    assert again.authenticate("guest", "guest") is not None
    assert again.authenticate("guest", "wrong") is None


def test_message_store_ignores_records_of_unknown_queues(tmp_path):
    store = MessageStore(tmp_path / "messages")
    store.recover()
    from amqp_server.broker.message import Entry
    entry = Entry(0, persistent("ghost"))
    store.enqueue("/", "ghost", entry, entry.message)
    store.flush_now()
    broker, problems = open_broker(tmp_path)
    assert any("missing queue 'ghost'" in p for p in problems)


@pytest.mark.parametrize("delivered", [True, False])
def test_redelivered_flag_follows_delivery(tmp_path, delivered):
    broker, _ = open_broker(tmp_path)
    queue = broker.vhosts["/"].declare_queue("q", None, durable=True)
    publish_n(broker, "q", 1)
    if delivered:
        entry = queue.take_one()
        queue.requeue([entry])
    broker.store.flush_now()
    again, _ = open_broker(tmp_path)
    (entry,) = again.vhosts["/"].queues["q"].ready
    assert entry.redelivered is delivered


def test_dead_letter_reaches_disk_before_the_source_forgets_it(tmp_path):
    """A crash at any point of the write keeps the message in the source or
    the target: the target's entry precedes the source's removal in the log."""
    broker, _ = open_broker(tmp_path)
    vhost = broker.vhosts["/"]
    vhost.declare_queue("target", None, durable=True)
    source = vhost.declare_queue("source", None, durable=True, arguments=FieldTable(
        {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "target"}))
    publish_n(broker, "source", 1)
    source.reject([source.take_one()])
    broker.store.flush_now()
    found = []
    for segment in segment_files(tmp_path):
        decoded, _, _ = records.decode_all(segment.read_bytes())
        found += [(r[0], r[2]) for r in decoded]
    assert found.index(("E", "target")) < found.index(("R", "source"))
    again, _ = open_broker(tmp_path)
    assert bodies(again, "target") == [b"m0"] and bodies(again, "source") == []


def test_delivery_counts_and_delays_are_recovered_in_order(tmp_path):
    broker, _ = open_broker(tmp_path)
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", None, durable=True, arguments=FieldTable(
        {"x-redelivery-delay": 600_000, "x-max-delivery-attempts": 5}))
    for body in (b"waits", b"counted"):
        queue.enqueue(persistent("q", body))
    first, second = queue.take_one(), queue.take_one()
    queue.requeue([first])  # delivery 1 of "waits" failed: due in ten minutes
    second.returns = 2
    broker.store.returned("/", "q", second, None)
    broker.store.count_delivery("/", "q", second)  # a third delivery, counted first
    broker.store.flush_now()
    broker.store.close()

    again, _ = open_broker(tmp_path)
    restored = again.vhosts["/"].queues["q"]
    assert [e.message.body for e in restored.delayed] == [b"waits"]
    (ready,) = restored.ready
    assert (ready.message.body, ready.returns, ready.redelivered) == (b"counted", 3, True)


def test_max_redelivery_records_stops_count_records(tmp_path):
    store = MessageStore(tmp_path)
    store.max_redelivery_records = 1
    entry = type("E", (), {"seq": 0, "returns": 2, "segment": 1})()
    assert store.count_delivery("/", "q", entry) == 0
    store.returned("/", "q", entry, None)
    assert store.log._buffer == []


def test_a_write_backlog_reports_congestion_until_the_writer_catches_up(tmp_path):
    import asyncio

    from amqp_server.storage.segments import SegmentLog

    async def scenario():
        seen = []
        log = SegmentLog(tmp_path)
        log.start_after([])
        log.attach(asyncio.get_running_loop())
        log.backlog_high, log.backlog_low = 1000, 500
        log.on_congestion = seen.append
        for n in range(30):
            log.append(["E", n, b"x" * 100], 100)
        assert seen == [True]
        for _ in range(200):
            if len(seen) > 1:
                break
            await asyncio.sleep(0.01)
        assert seen == [True, False] and not log.congested
        await log.drain()
        log.close()

    asyncio.run(scenario())


def test_malformed_records_with_good_checksums_are_skipped(tmp_path):
    """Records no writer of ours makes (a bug, not a torn write): each is
    skipped and logged, the intact entry survives."""
    good = ["E", "/", "q", 0, "", "q", b"h", b"body", None, None, None]
    bad = [["E", 1], "Exxxxxxxxxxxxx", {"a": 1}, 7, ["R", "/", "q", 5],
           ["E", "/", ["x"], 1, "", "q", b"h", b"b", None, None, None],
           ["E", "/", "q", "seq", "", "q", b"h", b"b", None, None, None]]
    (tmp_path / "00000001.seg").write_bytes(b"".join(records.encode(r) for r in [good, *bad]))
    recovered = MessageStore(tmp_path).recover()
    assert [entry.seq for entry in recovered.queues[("/", "q")]] == [0]
    assert all(not entries for key, entries in recovered.queues.items() if key != ("/", "q"))


# ---- an entry's record frames itself as its list would be framed ----------

_texts = st.text(max_size=300)
_blobs = st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"x" * 255, b"x" * 256,
                                                            b"y" * 65535, b"y" * 65536]))


@st.composite
def enqueued(draw, shared: dict):
    """An Enqueued whose fields are, at random, those of the record before
    (the same objects, as a run's are) or new ones."""
    from amqp_server.storage.message_store import Enqueued

    def field(name, strategy):
        if shared.get(name) is not None and draw(st.booleans()):
            return shared[name]
        shared[name] = draw(strategy)
        return shared[name]

    record = Enqueued.__new__(Enqueued)
    record.vhost = field("vhost", _texts)
    record.queue = field("queue", _texts)
    record.seq = draw(st.integers(0, 2**63))
    record.exchange = field("exchange", _texts)
    record.routing_key = field("routing_key", _texts)
    record.header = field("header", _blobs)
    record.body = draw(_blobs)
    record.keys = draw(st.one_of(st.none(), st.lists(_texts, max_size=3)))
    record.bcc = draw(st.one_of(st.none(), st.lists(_texts, min_size=1, max_size=2)))
    record.deadline = draw(st.one_of(st.none(), st.integers(0, 2**53), st.floats(0, 1e15)))
    record.annotations = draw(st.one_of(
        st.none(), st.dictionaries(st.sampled_from(["failed", "acquired"]),
                                   st.integers(0, 100), min_size=1)))
    return record


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_run_of_enqueue_records_frames_as_their_lists_do(data):
    shared: dict = {}
    run = [data.draw(enqueued(shared)) for _ in range(data.draw(st.integers(1, 6)))]
    parts: list = []
    memo: dict = {}
    pack = records.packer().pack
    for record in run:
        record.frame_into(parts, memo, pack)
    assert b"".join(parts) == b"".join(records.encode(record.as_list()) for record in run)
