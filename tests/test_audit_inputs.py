"""The audit's pure parts, without Spark: which logs a --data-dir names,
the replay file's lines, and what the driver JVM starts with."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pytest

from spark import jvm_start
from spark.report import Table
from spark.sources import DataDirError, LogSource, local_sources, unique
from spark.table_files import replay_lines, write_replay_file


def broker_dir(root, name: str, *files: str):
    log = root / name / "dead-letters"
    log.mkdir(parents=True)
    for file in files:
        (log / file).write_text("{}\n")
    return root / name


def test_paths_and_globs_name_data_directories_with_their_files_oldest_first(tmp_path):
    broker_dir(tmp_path, "eu-1", "dead-letters-20260102T000000-1-000002.ndjson",
               "dead-letters-20260101T000000-1-000001.ndjson")
    broker_dir(tmp_path, "eu-2", "dead-letters-20260101T000000-7-000001.ndjson")
    sources, notes = local_sources([str(tmp_path / "eu-*")])
    assert [s.name for s in sources] == ["eu-1", "eu-2"] and notes == []
    assert [os.path.basename(f) for f in sources[0].files] == [
        "dead-letters-20260101T000000-1-000001.ndjson",
        "dead-letters-20260102T000000-1-000002.ndjson"]
    assert [os.path.basename(f) for f in sources[0].sealed] == [
        "dead-letters-20260101T000000-1-000001.ndjson"]
    again, _ = local_sources([str(tmp_path / "eu-1"), str(tmp_path / "eu-?")])
    assert [s.name for s in unique(again)] == ["eu-1", "eu-2"]


def test_the_archive_s_parquet_files_are_listed_apart_and_never_compacted(tmp_path):
    data_dir = broker_dir(tmp_path, "eu-1", "dead-letters-20260101T000000-1-000001.ndjson")
    day = data_dir / "dead-letter-archive" / "node=eu-1" / "day=2026-01-01"
    day.mkdir(parents=True)
    for name in ("archive-20260101T000002-1-000002.parquet",
                 "archive-20260101T000001-1-000001.parquet",
                 ".archive-20260101T000003-1-000003.parquet.tmp"):  # a crash's leftover
        (day / name).write_bytes(b"PAR1")
    (data_dir / "dead-letter-archive" / "redriven.ndjson").write_text("{}\n")
    (source,), notes = local_sources([str(data_dir)])
    assert [os.path.basename(f) for f in source.archived] == [
        "archive-20260101T000001-1-000001.parquet", "archive-20260101T000002-1-000002.parquet"]
    assert source.archived_sizes == (4, 4)
    assert source.sealed == ()  # the newest log file is still written; the archive is
    # Parquet already: nothing to compact


def test_a_data_directory_with_an_archive_and_no_log_is_no_note(tmp_path):
    day = tmp_path / "eu-1" / "dead-letter-archive" / "node=eu-1" / "day=2026-01-01"
    day.mkdir(parents=True)
    (day / "archive-20260101T000001-1-000001.parquet").write_bytes(b"PAR1")
    (source,), notes = local_sources([str(tmp_path / "eu-1")])
    assert source.files == () and len(source.archived) == 1 and notes == []


def test_a_data_directory_without_a_log_yet_is_a_note_not_an_error(tmp_path):
    (tmp_path / "fresh").mkdir()
    sources, notes = local_sources([str(tmp_path / "fresh")])
    assert sources == [LogSource(str(tmp_path / "fresh"), ())]
    assert len(notes) == 1 and "no dead letters yet" in notes[0]


def test_a_path_that_names_nothing_is_an_error(tmp_path):
    with pytest.raises(DataDirError, match="no such data directory"):
        local_sources([str(tmp_path / "missing")])
    with pytest.raises(DataDirError, match="no such data directory"):
        local_sources([str(tmp_path / "missing-*")])
    (tmp_path / "file").write_text("")
    with pytest.raises(DataDirError, match="is not a directory"):
        local_sources([str(tmp_path / "file")])


def test_replay_lines_are_one_per_message_and_queue_it_waits_in(tmp_path):
    died = datetime(2026, 11, 23, 14, 0, 0, 123456, tzinfo=UTC)
    table = Table(
        ["time", "node", "vhost", "queue", "reason", "message_id", "body_sha256",
         "original_exchange", "original_routing_keys", "target_queues", "expires_again"],
        [(died, "eu-1", "/", "orders", "expired", None, "ab" * 32, "shop", ["o.eu"],
          ["dlq", "audit-dlq"], True),
         (died, "eu-1", "/", "orders", "maxlen", "m-2", "cd" * 32, "shop", ["o.eu"], [],
          False)])
    lines = replay_lines(table)
    assert lines == [
        {"node": "eu-1", "vhost": "/", "queue": queue, "message_id": None,
         "body_sha256": "ab" * 32, "died_in": "orders", "reason": "expired",
         "exchange": "shop", "routing_keys": ["o.eu"],
         "time": "2026-11-23T14:00:00.123456+00:00", "expires_again": True}
        for queue in ("dlq", "audit-dlq")]
    write_replay_file(tmp_path / "replay.ndjson", table)
    assert [json.loads(line) for line in
            (tmp_path / "replay.ndjson").read_text().splitlines()] == lines


def test_a_written_class_archive_is_put_in_place_once_no_jvm_writes_it(tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv(jvm_start.ENV, str(tmp_path))
    name = jvm_start.archive_name()
    if name is None:
        pytest.skip("no java on this machine")
    (logs, option, quiet) = jvm_start.java_options()
    assert logs == f"-Dlog4j2.configurationFile={tmp_path / 'log4j2.properties'}"
    assert "rootLogger.level = error" in (tmp_path / "log4j2.properties").read_text()
    assert option.startswith("-XX:ArchiveClassesAtExit=") and quiet == jvm_start.QUIET
    written = option.split("=", 1)[1]
    # A JVM that died before writing leaves no usable file: it is dropped.
    open(written, "wb").write(b"\0" * 16)
    assert jvm_start.java_options()[1].startswith("-XX:ArchiveClassesAtExit=")
    assert not os.path.exists(written)
    finished = tmp_path / f"{name}.finished.tmp"
    finished.write_bytes(jvm_start.DYNAMIC_ARCHIVE_MAGIC + b"\0" * 12)
    assert jvm_start.java_options()[1:] == [
        f"-XX:SharedArchiveFile={tmp_path / (name + '.jsa')}", jvm_start.QUIET]
    assert not finished.exists()


def test_archives_of_installs_that_are_gone_are_deleted(tmp_path, monkeypatch):
    monkeypatch.setenv(jvm_start.ENV, str(tmp_path))
    name = jvm_start.archive_name()
    if name is None:
        pytest.skip("no java on this machine")
    install = jvm_start._install()
    removed = tmp_path / "removed venv" / "pyspark.py"
    kept = tmp_path / "kept venv" / "pyspark.py"  # a space in a path is no separator
    kept.parent.mkdir()
    kept.write_text("")
    records = {"spark-4.0.0-aaaa": [install[0], str(removed)],
               "spark-4.0.0-bbbb": [install[0], str(kept)],
               "spark-4.0.0-dddd": install}  # this install before an upgrade in place
    for other, made_from in records.items():
        (tmp_path / f"{other}.jsa").write_bytes(jvm_start.DYNAMIC_ARCHIVE_MAGIC)
        (tmp_path / f"{other}.install").write_text("\n".join(made_from) + "\n")
    # Another live install's archive, finished under its temporary name: put
    # in place for it; another's whose JVM died early: dropped.
    (tmp_path / "spark-4.0.0-bbbb.0123.tmp").write_bytes(jvm_start.DYNAMIC_ARCHIVE_MAGIC + b"2")
    (tmp_path / "spark-4.0.0-cccc.4567.tmp").write_bytes(b"\0" * 4)
    jvm_start.java_options()
    left = sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("spark-"))
    assert left == ["spark-4.0.0-bbbb.install", "spark-4.0.0-bbbb.jsa", f"{name}.install"]
    assert (tmp_path / "spark-4.0.0-bbbb.jsa").read_bytes().endswith(b"2")
    assert (tmp_path / f"{name}.install").read_text().splitlines() == install


def test_the_class_archive_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(jvm_start.ENV, "")
    assert jvm_start.java_options() == []


def test_a_collector_chosen_anywhere_the_driver_reads_is_kept(monkeypatch):
    pytest.importorskip("pyspark")
    from spark import session

    for name in session.JAVA_OPTION_ENV:
        monkeypatch.delenv(name, raising=False)
    assert not session._collector_given({session.DRIVER_OPTIONS: "-Xss4m"})
    assert session._collector_given({session.DRIVER_OPTIONS: "-XX:+UseG1GC"})
    assert session._collector_given({session.DEFAULT_DRIVER_OPTIONS: "-XX:+UseZGC"})
    # The JVM reads these too: two collectors and it would not start.
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:+UseSerialGC")
    assert session._collector_given({})
