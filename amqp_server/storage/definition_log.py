"""Durable definitions as an append-only log of changes.

Each change is one record in the message store's format (records.py: a
checksummed msgpack list) appended to `<data_dir>/definitions/log`, so
declaring the 100,000th durable queue costs what the first did (the whole
set of definitions used to be rewritten on every change):

  ["V", name, metadata]                        a vhost (metadata: what it chose,
                                               {} or absent: nothing)
  ["U", name, password_hash, [tags]]
  ["P", user, vhost, configure, write, read]   permissions
  ["X", vhost, name, type, auto_delete, internal, arguments]
  ["Q", vhost, name, auto_delete, arguments, auto_created]
                                               a durable queue (no auto_created
                                               in older logs)
  ["B", vhost, source, "q" | "e", destination, routing_key, arguments]
  and each kind with "-" appended ("Q-", ...) and the same key: removed.

`arguments` is the AMQP field table as encoded on the wire, so every value
keeps its type across a restart.  A later record with the same key replaces
an earlier one.

A record is written when the change is made (a small write(2) that a
`kill -9` cannot undo, so the reply to the client can go at once) and
fsynced on a worker thread, one fsync for every change since the last
(group commit).  Whatever must not outlive a power cut unless its
definitions did (a publisher confirm) waits for `synced`.  Once the log is
mostly superseded records, the live ones are written to a new file on the
worker thread and it replaces the old (compaction).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from ..wire.table import FieldTable, decode_table, encode_table
from . import records
from .files import fsync_dir
from .replication import ReplicatedPositions, Shipping

log = logging.getLogger("amqp_server.storage")

DIRECTORY = "definitions"
LOG_FILE = "log"
# Compact once the log is more than twice its live records plus this much:
# amortised, a change writes O(1) bytes.
COMPACT_SLACK = 4 << 20
# Restored in this order, so that what a record refers to exists first.
KINDS = ("V", "U", "P", "X", "Q", "B")


def persists(thing) -> bool:
    """Durable exchanges; durable queues that are neither exclusive nor
    auto-delete; a binding when both its ends persist."""
    if not thing.durable:
        return False
    return not (thing.is_queue and (thing.exclusive or thing.auto_delete))


def record_key(record: list) -> tuple:
    kind = record[0].rstrip("-")
    if kind == "B":
        return tuple([kind, *record[1:6], bytes(record[6])])
    if kind in ("X", "Q", "P"):
        return (kind, record[1], record[2])
    return (kind, record[1])


_NO_ARGUMENTS = b"\x00\x00\x00\x00"


def arguments(encoded: bytes):
    """A record's field table, decoded with its wire types."""
    if encoded == _NO_ARGUMENTS:
        return FieldTable()
    return decode_table(bytes(encoded))[0]


class DefinitionLog:
    def __init__(self, data_dir: Path) -> None:
        self.directory = Path(data_dir) / DIRECTORY
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / LOG_FILE
        self._current: dict[tuple, bytes] = {}   # key -> its live record, encoded
        self._live_bytes = 0
        self._size = 0
        self._fd: int | None = None
        self._loop = None
        self.written = 0      # changes written so far
        self.local_synced = 0  # changes fsynced so far
        # A clustered leader's replication stream (storage/replication.py);
        # replies that promise a change wait for it while `replicating`.
        self._shipping: Shipping | None = None
        self.replicating = False
        self._positions: ReplicatedPositions | None = None
        self._syncing = False
        self._waiting: set = set()
        self._compacting: list[bytes] | None = None  # written while a compaction runs

    # ---- reading at start ---------------------------------------------

    def recover(self) -> tuple[dict[str, list], list[str]]:
        """The live records by kind, in the order they were made, and what
        could not be read.  Opens the log for appending."""
        problems = []
        data = self.path.read_bytes() if self.path.exists() else b""
        payloads: list = []
        found, damaged, good_end = records.decode_all(data, payloads)
        for offset, what in damaged:
            problems.append(f"definitions log at offset {offset}: {what}")
        if good_end < len(data) and damaged and "tail" in damaged[-1][1]:
            with open(self.path, "r+b") as handle:
                handle.truncate(good_end)
            data = data[:good_end]
        latest: dict[tuple, list] = {}
        for record, payload in zip(found, payloads):
            try:
                key = record_key(record)
            except (TypeError, AttributeError, IndexError, ValueError):
                problems.append(f"definitions log: malformed record {record!r:.80} skipped")
                continue
            self._forget(key)
            latest.pop(key, None)  # a key made again goes last: change order
            if not record[0].endswith("-"):
                self._remember(key, records.frame(payload))
                latest[key] = record
        self._size = len(data)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        by_kind: dict[str, list] = {kind: [] for kind in KINDS}
        for record in latest.values():
            if record[0] in by_kind:
                by_kind[record[0]].append(record)
        return by_kind, problems

    def _remember(self, key: tuple, encoded: bytes) -> None:
        self._current[key] = encoded
        self._live_bytes += len(encoded)

    def _forget(self, key: tuple) -> bool:
        encoded = self._current.pop(key, None)
        if encoded is None:
            return False
        self._live_bytes -= len(encoded)
        return True

    # ---- writing -------------------------------------------------------

    def attach(self, loop) -> None:
        """From now on fsyncs run on a worker thread, grouped."""
        self._loop = loop

    @contextlib.contextmanager
    def batch(self):
        """Many changes, fsynced once when the block ends (without a loop)."""
        loop, self._loop = self._loop, _DEFERRED
        try:
            yield
        finally:
            self._loop = loop
            self._sync_soon()

    def _write(self, record: list, remembered: bool) -> None:
        encoded = records.encode(record)
        key = record_key(record)
        if remembered:
            self._forget(key)
            self._remember(key, encoded)
        elif not self._forget(key):
            return  # removing what was never stored: nothing to write
        os.write(self._fd, encoded)
        self._size += len(encoded)
        self.written += 1
        if self._shipping is not None:
            self._positions.shipped(self.written, self._shipping.ship(["d", 0, encoded]))
        if self._compacting is not None:
            self._compacting.append(encoded)
        if self._size > 2 * self._live_bytes + COMPACT_SLACK and self._compacting is None:
            self._compact()
        self._sync_soon()

    def _sync_soon(self) -> None:
        loop = self._loop
        if loop is _DEFERRED or self.local_synced == self.written:
            return
        if loop is None:
            os.fsync(self._fd)
            self._synced(self.written)
        elif not self._syncing:
            self._syncing = True
            target = self.written
            future = loop.run_in_executor(None, os.fsync, self._fd)
            future.add_done_callback(lambda f: self._sync_done(f, target))

    def _sync_done(self, future, target: int) -> None:
        self._syncing = False
        error = future.exception()
        if error is not None:
            log.error("definitions log: fsync failed: %s", error)
            return
        self._synced(target)
        self._sync_soon()  # what was written meanwhile

    def _synced(self, target: int) -> None:
        self.local_synced = max(self.local_synced, target)
        if self._waiting:
            waiting, self._waiting = self._waiting, set()
            for waiter in waiting:
                waiter.durable_progress()

    # ---- compaction ----------------------------------------------------

    def _compact(self) -> None:
        """Write the live records to a new file (on the worker thread when
        there is a loop), then append what changed meanwhile and put it in
        the log's place."""
        live = list(self._current.values())
        self._compacting = []
        fresh = self.path.with_name(LOG_FILE + ".new")
        if self._loop is None or self._loop is _DEFERRED:
            self._swap(fresh, _write_file(fresh, live), live)
            return
        future = self._loop.run_in_executor(None, _write_file, fresh, live)
        future.add_done_callback(lambda f: self._compacted(f, fresh, live))

    def _compacted(self, future, fresh: Path, live: list[bytes]) -> None:
        error = future.exception()
        if error is not None:
            self._compacting = None
            log.error("definitions log: compaction failed: %s", error)
            return
        self._swap(fresh, future.result(), live)

    def _swap(self, fresh: Path, fd: int, live: list[bytes]) -> None:
        if self._shipping is not None:
            # Followers replace their copy the same way: what the new file holds.
            self._shipping.ship(["dr", 0, b"".join(live) + b"".join(self._compacting)])
        for encoded in self._compacting:
            os.write(fd, encoded)
        self._compacting = None
        os.fsync(fd)
        os.replace(fresh, self.path)
        fsync_dir(self.directory)
        os.close(self._fd)
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._synced(self.written)  # every change is in the fsynced new file

    # The broker's objects as records.

    def vhost_added(self, name: str, metadata: dict | None = None) -> None:
        self._write(["V", name, metadata] if metadata else ["V", name], True)

    def vhost_deleted(self, name: str) -> None:
        """The vhost and everything still recorded in it."""
        for key in [k for k in self._current if k[0] in ("X", "Q", "B", "P")
                    and (k[2] if k[0] == "P" else k[1]) == name]:
            self._write([key[0] + "-", *key[1:]], False)  # a key is its removal
        self._write(["V-", name], False)

    def user_put(self, user) -> None:
        self._write(["U", user.name, user.password_hash, list(user.tags)], True)

    def user_deleted(self, name: str) -> None:
        self._write(["U-", name], False)

    def permission_set(self, user: str, vhost: str, permission) -> None:
        self._write(["P", user, vhost, permission.configure, permission.write,
                     permission.read], True)

    def permission_cleared(self, user: str, vhost: str) -> None:
        self._write(["P-", user, vhost], False)

    def exchange_declared(self, exchange) -> None:
        self._write(["X", exchange.vhost, exchange.name, exchange.type_name,
                     exchange.auto_delete, exchange.internal,
                     encode_table(exchange.arguments)], True)

    def exchange_deleted(self, exchange) -> None:
        self._write(["X-", exchange.vhost, exchange.name], False)

    def queue_declared(self, queue) -> None:
        self._write(["Q", queue.vhost, queue.name, queue.auto_delete,
                     encode_table(queue.arguments), queue.auto_created], True)

    def queue_deleted(self, queue) -> None:
        self._write(["Q-", queue.vhost, queue.name], False)

    def binding_added(self, vhost: str, binding) -> None:
        self._write(["B", *_binding_fields(vhost, binding)], True)

    def binding_removed(self, vhost: str, binding) -> None:
        self._write(["B-", *_binding_fields(vhost, binding)], False)

    # ---- durability ------------------------------------------------------

    def pending(self) -> int:
        """What to wait for before confirming anything that relies on the
        definitions changed so far (0: all on disk)."""
        return self.written if self.written > self.synced else 0

    @property
    def synced(self) -> int:
        """Changes on disk: here, and on every in-sync follower of a leader."""
        local = self.local_synced
        return local if self._positions is None else self._positions.synced(local)

    def ship_to(self, shipping: Shipping) -> None:
        """From now on every change goes to the followers too, and counts as
        synced once it is on every in-sync copy."""
        self._shipping = shipping
        self.replicating = True
        self._positions = ReplicatedPositions(shipping, self.local_synced)
        shipping.watch(self)

    def replication_progress(self) -> None:
        self._synced(self.local_synced)

    def content(self) -> bytes:
        """The log file as it stands (a follower's starting copy)."""
        with open(self.path, "rb") as handle:
            return handle.read(self._size)

    def wait(self, waiter) -> None:
        """`waiter.durable_progress()` is called after the next fsync."""
        self._waiting.add(waiter)

    def disk_bytes(self) -> int:
        return self._size

    async def shutdown(self) -> None:
        """Let a compaction in flight finish, then fsync and close."""
        import asyncio
        while self._compacting is not None or self._syncing:
            await asyncio.sleep(0.005)
        self._loop = None
        self._sync_soon()
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# `batch()` sets the loop to this while changes are collected.
_DEFERRED = object()


def _binding_fields(vhost: str, binding) -> list:
    destination = binding.destination
    return [vhost, binding.source.name, "q" if destination.is_queue else "e",
            destination.name, binding.routing_key, encode_table(binding.arguments)]


def _write_file(path: Path, encoded: list[bytes]) -> int:
    """Worker thread: a new log holding `encoded`, fsynced; its open fd."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    for start in range(0, len(encoded), 4096):
        os.write(fd, b"".join(encoded[start:start + 4096]))
    os.fsync(fd)
    return fd


class _NoJournal:
    """Where changes go when the broker keeps nothing on disk: nowhere, and
    nothing is ever waited for."""

    synced = 0
    written = 0
    replicating = False

    def pending(self) -> int:
        return 0

    def __getattr__(self, name):  # vhost_added, queue_declared, ...
        return _ignore


def _ignore(*args) -> None:
    return None


NO_JOURNAL = _NoJournal()
