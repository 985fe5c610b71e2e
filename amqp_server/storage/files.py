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
