"""A stream's log (amqp_server/storage/stream_log.py) under the message
store's flushes, without an event loop: appends are read back only once
flushed, a restart reads the segments back (a torn tail cut off), readers
start anywhere and retention removes whole segment files."""

from __future__ import annotations

from amqp_server.storage.message_store import MessageStore
from amqp_server.storage.stream_log import INDEX_EVERY

ROUTE = b"\x00\x01q"


def open_log(tmp_path, segment_size=1 << 20):
    store = MessageStore(tmp_path / "messages")
    stream, problems = store.open_stream("/", "s", segment_size)
    assert problems == []
    return store, stream


def append(stream, count, start=0, now=1000.0):
    for i in range(start, start + count):
        stream.append(ROUTE, b"header", b"m%d" % i, now + i)


def bodies(stream, offset=0, limit=10_000):
    return [item.body for item in stream.reader(offset).read(limit)]


def test_readers_see_only_what_a_flush_wrote(tmp_path):
    store, stream = open_log(tmp_path)
    append(stream, 3)
    assert bodies(stream) == []
    store.flush_now()
    assert stream.committed == 3
    assert bodies(stream) == [b"m0", b"m1", b"m2"]


def test_the_log_is_read_back_after_a_restart(tmp_path):
    store, stream = open_log(tmp_path, segment_size=200)
    append(stream, 50)
    store.flush_now()
    store.close()
    store, stream = open_log(tmp_path, segment_size=200)
    assert (stream.first_offset, stream.next_offset, stream.committed) == (0, 50, 50)
    assert bodies(stream) == [b"m%d" % i for i in range(50)]
    append(stream, 1, start=50)
    store.flush_now()
    assert bodies(stream, 49) == [b"m49", b"m50"]


def test_a_torn_tail_is_cut_off(tmp_path):
    store, stream = open_log(tmp_path)
    append(stream, 5)
    store.flush_now()
    store.close()
    segment = sorted(stream.directory.glob("*.seg"))[-1]
    data = segment.read_bytes()
    segment.write_bytes(data[:-3])  # a crash in the middle of the last record
    store, stream = open_log(tmp_path)
    assert stream.next_offset == 4
    assert bodies(stream) == [b"m0", b"m1", b"m2", b"m3"]


def test_a_reader_starts_at_any_offset_of_a_long_segment(tmp_path):
    store, stream = open_log(tmp_path)
    count = 3 * INDEX_EVERY + 5
    append(stream, count)
    store.flush_now()
    for start in (0, 1, INDEX_EVERY, 2 * INDEX_EVERY + 7, count - 1, count):
        got = stream.reader(start).read(3)
        assert [item.offset for item in got] == list(range(start, min(start + 3, count)))


def test_a_timestamp_reader_skips_older_messages(tmp_path):
    store, stream = open_log(tmp_path)
    append(stream, 10, now=1000.0)  # message i at 1000 + i ms
    store.flush_now()
    reader = stream.reader(stream.first_at_or_after(1004.0), 1004.0)
    assert [item.offset for item in reader.read(100)] == [4, 5, 6, 7, 8, 9]


def test_removing_the_oldest_segments_deletes_their_files(tmp_path):
    store, stream = open_log(tmp_path, segment_size=100)
    append(stream, 30)
    store.flush_now()
    files = len(list(stream.directory.glob("*.seg")))
    segments = len(stream.segments)
    removed = stream.remove_oldest(2)
    store.flush_now()
    assert removed > 0 and stream.first_offset == removed
    assert len(list(stream.directory.glob("*.seg"))) == files - 2
    assert len(stream.segments) == segments - 2
    assert bodies(stream)[0] == b"m%d" % removed
    # A reader left behind the removed segments goes on from the first there is.
    assert stream.reader(0).read(1)[0].offset == removed


def test_a_reader_inside_a_removed_segment_carries_on(tmp_path):
    store, stream = open_log(tmp_path, segment_size=100)
    append(stream, 30)
    store.flush_now()
    reader = stream.reader(0)
    first = reader.read(1)[0]
    stream.remove_oldest(1)
    store.flush_now()
    rest = reader.read(100)
    assert first.offset == 0 and [item.offset for item in rest] == list(range(1, 30))


def test_a_deleted_stream_leaves_no_files(tmp_path):
    store, stream = open_log(tmp_path)
    append(stream, 3)
    store.flush_now()
    directory = stream.directory
    store.delete_stream(stream)
    store.flush_now()
    assert not directory.exists()
    assert not any((tmp_path / "streams" / ".trash").iterdir())
    assert store.log.riders == []
    # A stream declared again under the name starts empty.
    again, _ = store.open_stream("/", "s", 1 << 20)
    assert again.next_offset == 0


def test_a_filtered_reader_passes_over_the_others_a_bounded_number_at_a_time(tmp_path):
    from amqp_server.storage.stream_log import SCAN_LIMIT
    store, stream = open_log(tmp_path)
    for i in range(SCAN_LIMIT + 10):
        stream.append(ROUTE, b"header", b"m%d" % i, 1000.0, "a" if i % 2 else None)
    stream.append(ROUTE, b"header", b"last", 1000.0, "b")
    store.flush_now()
    reader = stream.reader(0, wanted=lambda value: value == "b")
    assert reader.read(10) == [] and reader.more
    got = reader.read(10)
    assert [item.body for item in got] == [b"last"] and not reader.more


def test_redriven_marks_survive_a_restart(tmp_path):
    store, stream = open_log(tmp_path)
    append(stream, 5)
    store.flush_now()
    stream.mark_redriven([1, 3])
    stream.mark_redriven([3, 4])
    store.close()
    store, stream = open_log(tmp_path)
    assert stream.redriven == {1, 3, 4}


def test_appends_to_a_stream_count_in_the_stores_backlog(tmp_path):
    """Publishers into a stream are held back (congestion) as publishers of
    persistent messages are, until the writer catches up."""
    import asyncio

    async def scenario():
        store, stream = open_log(tmp_path)
        store.attach(asyncio.get_running_loop())
        store.log.backlog_high, store.log.backlog_low = 2000, 500
        seen = []
        store.log.on_congestion = seen.append
        append(stream, 100)  # ~2.5 KB of records
        assert store.log.congested and seen == [True]
        for _ in range(200):
            if stream.committed == 100 and not store.log.congested:
                break
            await asyncio.sleep(0.01)
        assert stream.committed == 100 and seen == [True, False]
        await store.shutdown()

    asyncio.run(scenario())
