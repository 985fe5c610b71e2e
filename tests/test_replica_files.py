"""A follower's copy (cluster/replica.py) of what is not the message store:
streams' segment files, their redriven marks, the dead-letter archive's
files and its ledger, each written from its frame as the leader wrote it,
and a full copy that replaces them.  No socket: frames handed over."""

from __future__ import annotations

import pytest

from amqp_server.cluster import frames as f
from amqp_server.cluster.replica import Replica

STREAM = f"streams/{b'/'.hex()}/{b'events'.hex()}"
ARCHIVED = "node=a/day=2026-11-25/archive-20261125T091500-1-000001.ndjson"


def replica(tmp_path) -> Replica:
    copy = Replica(tmp_path / "data", archive_dir=tmp_path / "archive")
    copy.start_copy(1)
    copy.finish_copy(0)
    return copy


def test_a_streams_appends_retention_and_deletion_land_as_on_the_leader(tmp_path):
    copy = replica(tmp_path)
    directory = tmp_path / "data" / STREAM
    assert copy.apply([[f.STREAM, 1, STREAM, [[1, b"one"], [2, b"two"]], []],
                       [f.STREAM, 2, STREAM, [[2, b"+"]], []]]) == 2
    assert (directory / "00000001.seg").read_bytes() == b"one"
    assert (directory / "00000002.seg").read_bytes() == b"two+"
    copy.apply([[f.STREAM, 3, STREAM, [[3, b"three"]], [1]]])  # retention took the oldest
    assert sorted(path.name for path in directory.iterdir()) == ["00000002.seg",
                                                                "00000003.seg"]
    copy.apply([[f.STREAM_REDRIVEN, 4, STREAM, b"7\n"], [f.STREAM_REDRIVEN, 5, STREAM, b"9\n"]])
    assert (directory / "redriven").read_bytes() == b"7\n9\n"
    # Deleted, then declared again under the name in the same batch: empty.
    copy.apply([[f.STREAM_DELETED, 6, STREAM], [f.STREAM, 7, STREAM, [[1, b"new"]], []]])
    assert [path.name for path in directory.iterdir()] == ["00000001.seg"]
    assert (directory / "00000001.seg").read_bytes() == b"new"
    copy.close()


def test_an_archive_file_is_written_whole_from_its_pieces(tmp_path):
    copy = replica(tmp_path)
    target = tmp_path / "archive" / ARCHIVED
    copy.apply([[f.ARCHIVE_FILE, 1, ARCHIVED, 0, b"abc", 5]])
    assert not target.exists()  # not whole yet: only a hidden temporary file
    copy.apply([[f.ARCHIVE_FILE, 2, ARCHIVED, 3, b"de", 5]])
    assert target.read_bytes() == b"abcde"
    assert [p.name for p in target.parent.iterdir()] == [target.name]
    empty = ARCHIVED.replace("000001", "000002")
    copy.apply([[f.ARCHIVE_FILE, 3, empty, 0, b"", 0]])
    assert (tmp_path / "archive" / empty).read_bytes() == b""
    copy.apply([[f.ARCHIVE_LEDGER, 4, 0, b'{"event_id":"x"}\n'],
                [f.ARCHIVE_LEDGER, 5, 17, b'{"event_id":"y"}\n']])
    assert (tmp_path / "archive" / "redriven.ndjson").read_bytes().count(b"\n") == 2
    copy.close()


@pytest.mark.parametrize("frame", [
    [f.STREAM, 1, "streams/2f/../../etc", [[1, b"x"]], []],
    [f.STREAM_DELETED, 1, "messages"],
    [f.ARCHIVE_FILE, 1, "../escape/archive-1", 0, b"x", 1],
    [f.ARCHIVE_FILE, 1, "node=a/day=2026-11-25/../../archive-1", 0, b"x", 1],
    [f.ARCHIVE_FILE, 1, ARCHIVED, 3, b"x", 4],  # a piece without its start
])
def test_frames_naming_anything_else_are_refused(tmp_path, frame):
    copy = replica(tmp_path)
    with pytest.raises(f.FrameError):
        copy.apply([frame])
    copy.close()


def test_a_full_copy_replaces_streams_and_archive_and_maps_the_archive(tmp_path):
    copy = replica(tmp_path)
    copy.apply([[f.STREAM, 1, STREAM, [[1, b"old"]], []],
                [f.ARCHIVE_FILE, 2, ARCHIVED, 0, b"old", 3],
                [f.ARCHIVE_LEDGER, 3, 0, b"old\n"]])
    copy.start_copy(2)
    assert not (tmp_path / "data" / "streams").exists()
    assert not (tmp_path / "archive" / ARCHIVED).exists()
    assert not (tmp_path / "archive" / "redriven.ndjson").exists()
    other = ARCHIVED.replace("node=a", "node=b")
    copy.copy_piece(f"{STREAM}/00000004.seg", 0, b"copied")
    copy.copy_piece(f"{STREAM}/redriven", 0, b"1\n")
    copy.copy_piece(f"{f.ARCHIVE}/{other}", 0, b"file")
    copy.copy_piece(f"{f.ARCHIVE}/redriven.ndjson", 0, b"ledger\n")
    with pytest.raises(f.FrameError):
        copy.copy_piece(f"{f.ARCHIVE}/../outside", 0, b"x")
    copy.finish_copy(10)
    assert (tmp_path / "data" / STREAM / "00000004.seg").read_bytes() == b"copied"
    assert (tmp_path / "data" / STREAM / "redriven").read_bytes() == b"1\n"
    assert (tmp_path / "archive" / other).read_bytes() == b"file"
    assert (tmp_path / "archive" / "redriven.ndjson").read_bytes() == b"ledger\n"
    copy.close()
