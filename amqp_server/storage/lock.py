"""One broker per data directory.

Two brokers on one directory would each wipe and rewrite the other's files
(page files, segments, definitions), and confirmed messages would be lost at
the next start.  The running broker holds an exclusive `flock` on
`<data_dir>/broker.lock`, which names its PID; the kernel drops the lock
when the process dies, `kill -9` included, so no stale lock survives it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import weakref
from pathlib import Path

LOCK_FILE = "broker.lock"


class DataDirError(Exception):
    """The data directory cannot be used; the message says why and where."""


def prepare(data_dir: Path) -> None:
    """Create the directory if needed, or say precisely why it cannot be."""
    if data_dir.exists() and not data_dir.is_dir():
        raise DataDirError(f"data directory {data_dir} is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(f"cannot create data directory {data_dir}: "
                           f"{exc.strerror or exc}") from None
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise DataDirError(f"data directory {data_dir} is not writable")


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir).absolute() / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise DataDirError naming the broker holding it."""
        prepare(self.path.parent)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DataDirError(f"cannot open {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise DataDirError(f"cannot lock {self.path}: {exc.strerror}") from None
            who = f"process {holder}" if holder else "another process"
            raise DataDirError(
                f"data directory {self.path.parent} is in use by another broker "
                f"({who} holds {self.path}); give this one its own --data-dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        # A broker dropped without closing its data directory gives it back
        # when it is collected.
        self._finalizer = weakref.finalize(self, os.close, fd)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        self._finalizer.detach()
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing drops the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
