"""Small file-system steps every store takes the same way."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: str | Path) -> None:
    """Make a directory's entries durable: a file created, renamed or
    deleted there survives a crash only once its directory is fsynced."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentFiles:
    """Numbered segment files in one directory, appended to in order: the
    segment being written stays open; moving on to a newer one syncs and
    closes the older ones; `sync` makes every append since the last one
    durable, the names of files it created too; `remove` deletes whole
    segments.  The message store and each stream's log write their
    segments this way (on their writer thread)."""

    __slots__ = ("path_of", "_handles", "_touched", "_created_in")

    def __init__(self, path_of) -> None:
        # segment number -> its Path (asked each time: a stream's directory
        # is renamed when the stream is deleted)
        self.path_of = path_of
        self._handles: dict[int, object] = {}
        self._touched: dict[int, object] = {}
        self._created_in: Path | None = None

    def append(self, number: int, data: bytes) -> None:
        handle = self._handles.get(number)
        if handle is None:
            for old in [n for n in self._handles if n < number]:
                finished = self._handles.pop(old)
                self._touched.pop(old, None)
                finished.flush()
                os.fsync(finished.fileno())
                finished.close()
            path = self.path_of(number)
            if not path.exists():
                self._created_in = path.parent
            handle = self._handles[number] = open(path, "ab")
        handle.write(data)
        self._touched[number] = handle

    def sync(self) -> None:
        for handle in self._touched.values():
            handle.flush()
            os.fsync(handle.fileno())
        self._touched.clear()
        if self._created_in is not None:
            fsync_dir(self._created_in)  # a new file's name must survive a crash too
            self._created_in = None

    def remove(self, numbers) -> None:
        """Whole segments gone, for good once the directory is synced."""
        directory = None
        for number in numbers:
            handle = self._handles.pop(number, None)
            if handle is not None:
                handle.close()
            path = self.path_of(number)
            path.unlink(missing_ok=True)
            directory = path.parent
        if directory is not None:
            fsync_dir(directory)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        self._touched.clear()
