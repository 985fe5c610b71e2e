"""A follower's copy of its leader's data directory, written frame by frame.

The leader ships what its stores write, as they lay it out on disk: a
message store flush is the bytes it appended to each segment file and the
segments it deleted; a definition change is the record it appended to the
definition log; a stream's share of a flush is the bytes appended to its
segments and the segments retention removed; a new dead-letter archive
file is its bytes, whatever its format.  The copy is therefore the leader's data directory itself,
and a follower that is elected recovers from it with the broker's ordinary
boot (broker/boot.py), as after a restart.

Frames are applied strictly in LSN order, and `apply` returns only once
they are on disk (one fsync per touched file per batch, as the leader's
group commit), so an acknowledged LSN is a durable one.  Everything here
blocks; the follower runs it on a worker thread.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from policies.store import write_document

from ..storage.dead_letter_log import LogFiles, write_batch
from ..storage.files import fsync_dir
from . import frames as f

log = logging.getLogger("amqp_server.cluster")

# Present while the data directory holds a whole copy of some leader's
# stream (its term inside): only such a node may be elected.
COPY_MARKER = "cluster-copy"


def mark_whole(data_dir: Path, epoch: int) -> None:
    path = Path(data_dir) / COPY_MARKER
    with open(path, "w") as handle:
        handle.write(f"{epoch}\n")
        handle.flush()
        os.fsync(handle.fileno())
    fsync_dir(path.parent)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _one_at_a_time(method: _Method) -> _Method:
    """The follower applies frames on a worker thread; closing the copy
    (the node stops following to lead) waits for the batch in hand rather
    than closing files under it, and a call made for a link that was closed
    since (`generation`, still queued for a thread) writes nothing."""
    @functools.wraps(method)
    def guarded(self: Replica, *args: Any, generation: int | None = None,
                **kwargs: Any) -> Any:
        with self._busy:
            if generation is not None and generation != self.generation:
                raise f.FrameError("the link this was received on is closed")
            return method(self, *args, **kwargs)
    return guarded  # type: ignore[return-value]


class Replica:
    def __init__(self, data_dir: str | Path, dead_letter_files: LogFiles | None = None,
                 body_limit: int = 64 << 10, archive_dir: str | Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        (self.data_dir / "messages").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "definitions").mkdir(parents=True, exist_ok=True)
        self.dead_letter_files = dead_letter_files
        self.body_limit = body_limit
        # This node's dead-letter archive (its own config's), which the
        # leader's archive files are copied into.
        self.archive_dir = Path(archive_dir) if archive_dir else self.data_dir / f.ARCHIVE
        # Streams' segment files being appended to, by (stream, segment).
        self._stream_files: dict[tuple[str, int], object] = {}
        # An archive file arriving in pieces: (path, its temporary file).
        self._archive_piece: tuple[str, object] | None = None
        self._made: set[Path] = set()  # directories whose entries changed
        # What this copy holds: the leader's term it came from and the
        # last frame applied.  epoch None: nothing usable (start empty).
        self.epoch: int | None = None
        self.lsn = 0
        self._segments: dict[int, object] = {}
        self._definitions: int | None = None
        self._copying: dict[str, object] | None = None
        self._busy = threading.RLock()
        # Moves on at each close: what was received before is not applied after.
        self.generation = 0

    # ---- a full copy -----------------------------------------------------

    @_one_at_a_time
    def start_copy(self, epoch: int) -> None:
        """Forget the old copy: the leader sends all of its own."""
        self._close_files()
        self.epoch = None
        # Not whole from here until finish_copy: this node may not lead.
        (self.data_dir / COPY_MARKER).unlink(missing_ok=True)
        fsync_dir(self.data_dir)
        for path in (self.data_dir / "messages").glob("*.seg"):
            path.unlink()
        for name in (f.DEFINITIONS_FILE, f.DEFINITIONS_FILE + ".new", f.POLICIES_FILE):
            (self.data_dir / name).unlink(missing_ok=True)
        shutil.rmtree(self.data_dir / "streams", ignore_errors=True)
        self._made.clear()
        for path in self._archive_files():
            path.unlink()
        self._copying = {}
        self._copy_epoch = epoch

    @_one_at_a_time
    def copy_piece(self, path: str, offset: int, data: bytes) -> None:
        if self._copying is None or not f.copy_path_allowed(path):
            raise f.FrameError(f"unexpected piece of {path!r} in a copy")
        handle = self._copying.get(path)
        if handle is None:
            # The leader sends a copy's files one after the other: the one
            # before is whole.  One open at a time, however many there are
            # (the archive alone may hold thousands).
            self._close_copied()
            target = self._local(path)
            self._make_dirs(target.parent)
            handle = self._copying[path] = open(target, "wb")
        if handle.tell() != offset:
            raise f.FrameError(f"piece of {path!r} at {offset}, expected {handle.tell()}")
        handle.write(data)

    def _close_copied(self) -> None:
        """The copied files still open, durable and closed."""
        copying = self._copying or {}
        for handle in copying.values():
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
        copying.clear()

    @_one_at_a_time
    def finish_copy(self, lsn: int) -> None:
        if self._copying is None:
            raise f.FrameError("a copy ended that had not started")
        self._close_copied()
        self._copying = None
        for directory in (self.data_dir, self.data_dir / "messages",
                          self.data_dir / "definitions"):
            fsync_dir(directory)
        self._sync_made()
        self.epoch = self._copy_epoch
        self.lsn = lsn
        mark_whole(self.data_dir, self.epoch)

    @_one_at_a_time
    def resume(self, epoch: int, lsn: int, from_epoch: int) -> None:
        """Go on from `lsn` in term `epoch`: this copy must be at `lsn` of
        `from_epoch` (the same term, or the copy a new leader started from)."""
        if from_epoch != self.epoch or lsn != self.lsn:
            raise f.FrameError(f"cannot resume at {from_epoch}/{lsn}: this copy is at "
                               f"{self.epoch}/{self.lsn}")
        if epoch != self.epoch:
            self.epoch = epoch
            mark_whole(self.data_dir, epoch)

    # ---- the stream ------------------------------------------------------

    @_one_at_a_time
    def apply(self, batch: list[list]) -> int:
        """Apply data frames in order and make them durable; returns the
        last LSN applied."""
        if self.epoch is None:
            raise f.FrameError("data frame before a copy")
        touched: set = set()
        new_files = False
        for frame in batch:
            kind, lsn = frame[0], frame[1]
            if lsn != self.lsn + 1:
                raise f.FrameError(f"frame {lsn} after {self.lsn}")
            if kind == f.MESSAGES:
                new_files |= self._messages(frame[2], frame[3], touched)
            elif kind == f.DEFINITION:
                os.write(self._definitions_fd(), frame[2])
                touched.add("definitions")
            elif kind == f.DEFINITIONS_REPLACED:
                self._replace_definitions(frame[2])
            elif kind == f.POLICIES:
                write_document(self.data_dir / f.POLICIES_FILE, frame[2])
            elif kind == f.DEAD_LETTERS:
                if self.dead_letter_files is not None:
                    write_batch(self.dead_letter_files, frame[4], self.body_limit, frame[2],
                                frame[3])
            elif kind == f.STREAM:
                self._stream(self._stream_name(frame[2]), frame[3], frame[4], touched)
            elif kind == f.STREAM_DELETED:
                self._stream_deleted(self._stream_name(frame[2]), touched)
            elif kind == f.STREAM_REDRIVEN:
                self._append(self.data_dir / self._stream_name(frame[2]) / "redriven",
                             None, frame[3])
            elif kind == f.ARCHIVE_FILE:
                self._archive_file(frame[2], frame[3], frame[4], frame[5])
            elif kind == f.ARCHIVE_LEDGER:
                self._append(self.archive_dir / f.ARCHIVE_LEDGER_NAME, frame[2], frame[3])
            else:
                raise f.FrameError(f"unknown frame {kind!r}")
            self.lsn = lsn
        for what in touched:
            if what == "definitions":
                os.fsync(self._definitions)
            else:
                handle = (self._segments[what] if isinstance(what, int)
                          else self._stream_files[what])
                handle.flush()
                os.fsync(handle.fileno())
        if new_files:
            fsync_dir(self.data_dir / "messages")
        self._sync_made()
        return self.lsn

    def _messages(self, chunks: list, doomed: list, touched: set) -> bool:
        created = False
        for number, data in chunks:
            handle = self._segments.get(number)
            if handle is None:
                path = self.data_dir / f.segment_path(number)
                created = created or not path.exists()
                handle = self._segments[number] = open(path, "ab")
            handle.write(data)
            touched.add(number)
        for number in doomed:
            handle = self._segments.pop(number, None)
            if handle is not None:
                handle.close()
            touched.discard(number)
            (self.data_dir / f.segment_path(number)).unlink(missing_ok=True)
        # A segment the leader rolled past is complete: close it, as the
        # leader does.
        if chunks:
            newest = max(number for number, _ in chunks)
            for number in [n for n in self._segments if n < newest]:
                _close_file(self._segments, number, touched)
        return created

    # ---- streams and the archive -------------------------------------------

    @staticmethod
    def _stream_name(name) -> str:
        if not isinstance(name, str) or not f.stream_allowed(name):
            raise f.FrameError(f"not a stream's directory: {name!r}")
        return name

    def _stream(self, name: str, chunks: list, doomed: list, touched: set) -> None:
        """A stream's share of a flush: appends by segment, then the
        segments retention removed (stream_log.py writes it so)."""
        directory = self.data_dir / name
        if chunks and not directory.is_dir():
            self._make_dirs(directory)
        files = self._stream_files
        for number, data in chunks:
            key = (name, number)
            handle = files.get(key)
            if handle is None:
                # A segment the leader rolled past is complete: close it.
                for old in [k for k in files if k[0] == name and k[1] < number]:
                    _close_file(files, old, touched)
                path = directory / f"{number:08d}.seg"
                if not path.exists():
                    self._made.add(directory)
                handle = files[key] = open(path, "ab")
            handle.write(data)
            touched.add(key)
        for number in doomed:
            key = (name, number)
            handle = files.pop(key, None)
            if handle is not None:
                handle.close()
            touched.discard(key)
            (directory / f"{number:08d}.seg").unlink(missing_ok=True)
            self._made.add(directory)

    def _stream_deleted(self, name: str, touched: set) -> None:
        for key in [k for k in self._stream_files if k[0] == name]:
            self._stream_files.pop(key).close()
            touched.discard(key)
        directory = self.data_dir / name
        if directory.exists():
            shutil.rmtree(directory)
            self._made.add(directory.parent)

    def _append(self, path: Path, offset: int | None, data: bytes) -> None:
        """Bytes appended to a small file (at `offset`, when the leader
        says where), durable before the batch is acknowledged."""
        self._make_dirs(path.parent)
        with open(path, "ab") as handle:
            if offset is not None and handle.tell() != offset:
                if handle.tell() < offset:
                    raise f.FrameError(f"{path.name} at {handle.tell()}, the leader's at "
                                       f"{offset}")
                handle.truncate(offset)  # a tail this copy wrote and the leader did not
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def _archive_file(self, path, offset: int, data: bytes, size: int) -> None:
        """A piece of a new archive file: written under a temporary name,
        renamed into place once whole (as the archive writes its own)."""
        if not isinstance(path, str) or not f.archive_file_allowed(path):
            raise f.FrameError(f"not an archive file: {path!r}")
        target = self.archive_dir / path
        if offset == 0:
            self._drop_archive_piece()
            self._make_dirs(target.parent)
            temporary = target.with_name(f".{target.name}.tmp")
            self._archive_piece = (path, open(temporary, "wb"))
        piece = self._archive_piece
        if piece is None or piece[0] != path or piece[1].tell() != offset:
            raise f.FrameError(f"piece of archive file {path!r} out of order")
        handle = piece[1]
        handle.write(data)
        if handle.tell() >= size:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
            self._archive_piece = None
            os.replace(handle.name, target)
            self._made.add(target.parent)

    def _drop_archive_piece(self) -> None:
        if self._archive_piece is not None:
            handle = self._archive_piece[1]
            handle.close()
            Path(handle.name).unlink(missing_ok=True)
            self._archive_piece = None

    def _archive_files(self) -> list[Path]:
        """The archive's files and ledger this copy holds (what a copy replaces)."""
        if not self.archive_dir.is_dir():
            return []
        found = [path for path in self.archive_dir.glob("node=*/day=*/*")
                 if path.is_file() and (f.archive_file_allowed(
                     path.relative_to(self.archive_dir).as_posix())
                     or path.name.startswith("."))]
        ledger = self.archive_dir / f.ARCHIVE_LEDGER_NAME
        return [*found, ledger] if ledger.exists() else found

    def _local(self, path: str) -> Path:
        """Where a file of a copy goes: the archive's into this node's archive."""
        if path.startswith(f.ARCHIVE + "/"):
            return self.archive_dir / path[len(f.ARCHIVE) + 1:]
        return self.data_dir / path

    def _sync_made(self) -> None:
        for directory in sorted(self._made, key=lambda path: -len(path.parts)):
            if directory.exists():  # (a stream deleted later in the batch: gone)
                fsync_dir(directory)
        self._made.clear()

    def _make_dirs(self, directory: Path) -> None:
        """mkdir -p; each new directory's entry is made durable with the batch."""
        missing = []
        while not directory.exists():
            missing.append(directory)
            directory = directory.parent
        for made in reversed(missing):
            made.mkdir(exist_ok=True)
            self._made.add(made.parent)

    def _definitions_fd(self) -> int:
        if self._definitions is None:
            self._definitions = os.open(self.data_dir / f.DEFINITIONS_FILE,
                                        os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self._definitions

    def _replace_definitions(self, content: bytes) -> None:
        path = self.data_dir / f.DEFINITIONS_FILE
        fresh = path.with_name(path.name + ".new")
        with open(fresh, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        if self._definitions is not None:
            os.close(self._definitions)
            self._definitions = None
        os.replace(fresh, path)
        fsync_dir(path.parent)

    @_one_at_a_time
    def close(self) -> None:
        self.generation += 1
        self._close_files()

    def _close_files(self) -> None:
        for handle in self._segments.values():
            handle.close()
        self._segments.clear()
        for handle in self._stream_files.values():
            handle.close()
        self._stream_files.clear()
        self._drop_archive_piece()
        if self._definitions is not None:
            os.close(self._definitions)
            self._definitions = None
        if self._copying:
            for handle in self._copying.values():
                handle.close()
        self._copying = None
        if self.dead_letter_files is not None:
            self.dead_letter_files.close()


def _close_file(files: dict, key, touched: set) -> None:
    """Close a segment file the leader rolled past (a message segment or a
    stream's), fsynced first if this batch wrote to it."""
    handle = files.pop(key)
    if key in touched:
        touched.discard(key)
        handle.flush()
        os.fsync(handle.fileno())
    handle.close()
