"""The dead-letter archive's files and ledger, shipped to the followers.

The archive writes each batch of dead letters as one new immutable file
(storage/archive.py, by a writer process); the broker learns its path once
it is durable (broker/archiving.py).  Here the finished file is read back
and shipped as it is, in pieces, whatever its format; the batch's messages
leave their queue only once every in-sync follower has the file, so a
follower elected after the leader dies finds every archived dead letter
in its own archive.  The redriven ledger is shipped as the bytes appended
to it since the last time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from . import frames as f
from .shipper import COPY_CHUNK, Shipper

LEDGER_PATH = f"{f.ARCHIVE}/{f.ARCHIVE_LEDGER_NAME}"


class ArchiveShipping:
    def __init__(self, shipper: Shipper, directory: Path) -> None:
        self.shipper = shipper
        self.directory = Path(directory)
        self._ledger_lock = asyncio.Lock()

    async def file(self, path: str) -> None:
        """Ship a durable archive file; returns once it is on every in-sync copy."""
        loop = asyncio.get_running_loop()
        relative = Path(path).relative_to(self.directory).as_posix()
        if not f.archive_file_allowed(relative):
            raise OSError(f"{path} is not where the archive keeps its files")
        data = await loop.run_in_executor(None, Path(path).read_bytes)
        size = len(data)
        # Every piece in one go (no await between them): a copy taken
        # meanwhile has the whole file or none of it.
        for offset in range(0, max(size, 1), COPY_CHUNK):
            self.shipper.ship([f.ARCHIVE_FILE, 0, relative, offset,
                               data[offset:offset + COPY_CHUNK], size])
        # Shipped once; while this node leads, its batch waits as long as
        # the followers take (an in-sync one away until the lag timeout
        # counts it out, too few in sync until one is back).  Giving up
        # would put the messages back for the next batch to archive again:
        # one more copy of each in the archive per try.
        while True:
            try:
                await self.shipper.settled()
                return
            except TimeoutError:
                if self.shipper.stopped:
                    raise  # leadership ended: they stay in the queue

    async def ledger(self) -> None:
        """Ship what was appended to the redriven ledger since last time."""
        loop = asyncio.get_running_loop()
        async with self._ledger_lock:
            offset = self.shipper.file_sizes.get(LEDGER_PATH, 0)
            data = await loop.run_in_executor(None, self._read_from, offset)
            if data:
                self.shipper.ship([f.ARCHIVE_LEDGER, 0, offset, data])
        await self.shipper.settled()

    def _read_from(self, offset: int) -> bytes:
        try:
            with open(self.directory / f.ARCHIVE_LEDGER_NAME, "rb") as handle:
                handle.seek(offset)
                return handle.read()
        except FileNotFoundError:
            return b""
