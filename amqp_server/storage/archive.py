"""The dead-letter archive: where retention puts dead letters that outstayed
their queue (broker/archiving.py), for the audit to read and the workbench
to search and redrive.

Each batch is one Parquet file (storage/archive_parquet.py: zstd, the
dead-letter event's schema from dlx/events.py, so the audit reads it with
its own schema), partitioned as the audit's dataset is, by node and day
(`node=<node>/day=<YYYY-MM-DD>/archive-....parquet`).  A record is the
dead-letter log's line of the message with outcome `archived`, the body
always in full, the whole death history, and one more field the audit's
schema leaves out: `content_header`, the AMQP content header as stored, so
that a redrive republishes the message's properties byte for byte.

Crash safety: each batch is one file, written under a temporary name,
fsynced, renamed into place and its directory fsynced (storage/files.py)
before `write` returns; only then does a message leave its queue.  A crash
before that leaves at most a temporary file, removed at the next start;
a crash after it, before the queue's removal is on disk, archives the
message again later: a duplicate in the archive, never a loss.  Files are
never changed once written; the redriven ledger is a separate file.

pyarrow is loaded by `write` and `records` only (archive_parquet), never
by the broker's event loop: the writer process writes, the workbench
reads in a worker thread.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from .files import fsync_dir

ARCHIVE_DIR = "dead-letter-archive"
SUFFIX = ".parquet"
PREFIX = "archive-"
LEDGER = "redriven.ndjson"


class ArchiveFiles:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._counter = 0

    def open(self) -> None:
        """Make the directory and prove it takes a file (OSError says why
        not); temporary files a crash left go."""
        self._make_dirs(self.directory)
        probe = self.directory / f".probe-{os.getpid()}"
        with open(probe, "wb") as handle:
            handle.write(b"ok")
            os.fsync(handle.fileno())
        probe.unlink()
        for leftover in self.directory.rglob(f".{PREFIX}*.tmp"):
            leftover.unlink(missing_ok=True)

    def write(self, node: str, columns: dict[str, list], now: float) -> Path:
        """One batch of records, given as columns (archive_record.RECORD_FIELDS' names ->
        a value per record; a column not given is null), as one new file,
        durable when this returns."""
        from . import archive_parquet

        day = time.strftime("%Y-%m-%d", time.gmtime(now))
        part = self.directory / f"node={quote(node, safe='')}" / f"day={day}"
        self._make_dirs(part)
        self._counter += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
        name = f"{PREFIX}{stamp}-{os.getpid()}-{self._counter:06d}{SUFFIX}"
        temporary = part / f".{name}.tmp"
        with open(temporary, "wb") as handle:
            archive_parquet.write(handle, columns)
            handle.flush()
            os.fsync(handle.fileno())
        final = part / name
        os.replace(temporary, final)
        fsync_dir(part)
        return final

    def _make_dirs(self, path: Path) -> None:
        """mkdir -p, each directory made durable in its parent."""
        missing = []
        while not path.exists():
            missing.append(path)
            path = path.parent
        for directory in reversed(missing):
            directory.mkdir(exist_ok=True)
            fsync_dir(directory.parent)

    def files(self) -> list[Path]:
        """Every archive file, oldest first (names sort by time per node)."""
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.rglob(f"{PREFIX}*{SUFFIX}"), key=lambda p: p.name)

    def records(self, vhost: str | None = None, queue: str | None = None) -> Iterator[dict]:
        """The archived records, oldest first, of one queue when given."""
        from . import archive_parquet

        for path in self.files():
            yield from archive_parquet.read(str(path), vhost, queue)

    # ---- the redriven ledger ------------------------------------------------------

    def redriven(self) -> dict[str, float]:
        """event_id -> when (s) it was redriven."""
        path = self.directory / LEDGER
        found: dict[str, float] = {}
        if not path.exists():
            return found
        with open(path, "rb") as handle:
            for raw in handle:
                try:
                    item = json.loads(raw)
                    found[item["event_id"]] = item["time"]
                except (ValueError, KeyError, TypeError):
                    continue
        return found

    def note_redriven(self, event_ids: list[str], now: float) -> None:
        path = self.directory / LEDGER
        with open(path, "ab") as handle:
            handle.write("".join(json.dumps({"event_id": event_id, "time": now}) + "\n"
                                 for event_id in event_ids).encode())
            handle.flush()
            os.fsync(handle.fileno())
