"""Retention that archives instead of deleting: once a second, each dead
letter queue with a retention (`x-dead-letter-retention` / policy
`dead-letter-retention`) gives up the dead letters that outstayed it
(`dlx.retention.due`) to the archive (storage/archive.py), and only once
their archive file is durable do they leave the queue; the removal is
recorded in the dead-letter log (outcome `archived`).

The messages are withdrawn from the queue first, as the workbench does
(out of consumers' reach, still in the store), then encoded and written
by one writer process, off the event loop and out of its GIL (as the
dead-letter log's writer).  If the write fails (the
archive directory cannot be written, the disk is full), they go back where
they were, flags unchanged: the broker keeps them and says why, in its log
(once per problem) and in `problem` (the management API's overview and
health check `dead-letter-archive`), trying again every RETRY_SECONDS.
One batch per queue is in flight at a time (at most BATCH messages and
64 MB of bodies); each is followed by the next at once while any is due.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import secrets
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from dlx.retention import due

from ..storage.archive import ArchiveFiles
from ..storage.archive_record import CONTENT_HEADER, RECORD_FIELDS
from ..storage.dead_letter_lines import event_fields
from .dead_letter_events import archive_head
from .queue.census import history_of

log = logging.getLogger("amqp_server.archive")

RETRY_SECONDS = 10.0
BATCH = 1000


def _death_time(entry) -> int | None:
    history = history_of(entry.message)
    return None if history is None else history.deaths[0].time


def archive_records(items: list, node: str, now: float) -> tuple[dict[str, list], list[str]]:
    """(archive records as columns, the dead-letter log heads) of withdrawn
    messages: items are (vhost, queue, message snapshot, event id).  A
    record holds the fields of the message's dead-letter log line (the same
    head, event_fields as event_line's), with its content header as stored."""
    heads: list[str] = []
    if not items:
        return {}, heads
    shared_fields, own_fields = [], []
    shared: dict = {}  # dead letters that died together share their history object
    parsed: dict[str, dict] = {}  # and dead letters of one history its head
    for vhost, queue, (exchange, keys, history, header, body), _event_id in items:
        key = (vhost, queue, exchange, keys, id(history))
        head = shared.get(key)
        if head is None:
            head = shared[key] = archive_head(vhost, queue, exchange, keys, history, now)
        fields = parsed.get(head)
        if fields is None:
            fields = parsed[head] = json.loads(head + "}")
        heads.append(head)
        shared_fields.append(fields)
        own_fields.append(event_fields(header, body, sys.maxsize))
    # Column by column (comprehensions, not an append per field and record).
    columns: dict[str, list] = {}
    for name in RECORD_FIELDS:
        if name in shared_fields[0]:
            columns[name] = [fields[name] for fields in shared_fields]
        elif name in own_fields[0]:
            columns[name] = [fields[name] for fields in own_fields]
    columns["event_id"] = [item[3] for item in items]
    columns["node"] = [node] * len(items)
    columns[CONTENT_HEADER] = [item[2][3] for item in items]
    return columns, heads


_FILES: dict[str, ArchiveFiles] = {}  # the writer process's, per directory


def write_batch(directory: str, node: str, items: list, now: float) -> tuple[str, list[str]]:
    """The writer's job: a batch's records as one durable file; returns its
    path and the dead-letter log heads.  Runs in the writer process (or in
    the broker's, without an event loop)."""
    files = _FILES.get(directory)
    if files is None:
        files = _FILES[directory] = ArchiveFiles(directory)
    columns, heads = archive_records(items, node, now)
    return str(files.write(node, columns, now)), heads


def _behind_the_broker() -> None:
    # As the dead-letter log's writer: behind the broker and its clients for CPU.
    os.nice(10)


class Archiver:
    def __init__(self, broker, directory: str | Path) -> None:
        self.broker = broker
        self.files = ArchiveFiles(directory)
        self.node = broker.config.node_name
        self.problem: str | None = None
        self.problem_since: float | None = None
        self._cause: str | None = None  # the error last logged
        self.archived = 0
        self._retry_at = 0.0
        self._busy: set[tuple[str, str]] = set()
        self._id = secrets.token_hex(6)
        self._number = 0
        self._loop = None
        self._executor: ProcessPoolExecutor | None = None
        self._writing: set = set()  # futures of batches in flight
        # A clustered leader's (cluster/archive_shipping.py): `file(path)`
        # returns once the durable file is on every in-sync follower too,
        # `ledger()` once the redriven ledger's appends are.  A batch's
        # messages leave their queue only then, as a confirm waits.
        self.replication = None
        try:
            self.files.open()
        except OSError as exc:
            self._failed(f"cannot use the dead-letter archive directory {directory}: {exc}",
                         time.time(), str(exc))

    def attach(self, loop) -> None:
        self._loop = loop

    def _writer(self) -> ProcessPoolExecutor:
        """One writer process, started at the first batch: encoding a batch
        is CPU work that a thread would do under the event loop's GIL."""
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_behind_the_broker)
        return self._executor

    @property
    def directory(self) -> Path:
        return self.files.directory

    def tick(self, now_ms: float) -> int:
        """Archive what is due in every queue with a retention; returns how
        many messages were handed to the writer."""
        if now_ms < self._retry_at * 1000.0:
            return 0
        started = 0
        for vhost in list(self.broker.vhosts.values()):
            for queue in list(vhost.queues.values()):
                started += self._consider(vhost.name, queue, now_ms)
        return started

    def _consider(self, vhost: str, queue, now_ms: float) -> int:
        retention = queue.settings.dead_letter_retention
        if retention is None or queue.deleted or (vhost, queue.name) in self._busy:
            return 0
        seqs = due(((entry.seq, _death_time(entry), len(entry.message.body))
                    for entry in queue.ready), retention, now_ms, BATCH)
        return self._archive(vhost, queue, seqs, now_ms / 1000.0) if seqs else 0

    def _archive(self, vhost: str, queue, seqs: list[int], now: float) -> int:
        entries = queue.withdraw(seqs)
        if not entries:
            return 0
        items = []
        for entry in entries:
            message = entry.message
            self._number += 1
            snapshot = (message.exchange, message.routing_keys, history_of(message),
                        message.header, message.body)
            items.append((vhost, queue.name, snapshot, f"{self._id}-a{self._number}"))
        key = (vhost, queue.name)
        self._busy.add(key)
        directory = str(self.files.directory)
        if self._loop is None:  # tools and unit tests: in-process, at once
            try:
                result = write_batch(directory, self.node, items, now)
            except OSError as exc:
                self._done(key, queue, entries, None, exc, now)
            else:
                self._done(key, queue, entries, result, None, now)
            return len(entries)
        try:
            submitted = self._writer().submit(write_batch, directory, self.node, items, now)
        except (BrokenProcessPool, RuntimeError, OSError) as exc:
            self._executor = None
            self._done(key, queue, entries, None, exc, now)
            return 0
        future = asyncio.wrap_future(submitted, loop=self._loop)

        def finished(done) -> None:
            error = done.exception()
            self._done(key, queue, entries, None if error else done.result(), error, now)
        self._writing.add(future)
        future.add_done_callback(self._writing.discard)
        future.add_done_callback(finished)
        return len(entries)

    def _done(self, key, queue, entries, result, error, now: float) -> None:
        if error is None and self.replication is not None and self._loop is not None:
            task = self._loop.create_task(self._replicated(key, queue, entries, result, now))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)
            return
        self._settle(key, queue, entries, result, error, now)

    async def _replicated(self, key, queue, entries, result, now: float) -> None:
        try:
            await self.replication.file(result[0])
        except (TimeoutError, OSError) as exc:
            # Not on the followers, and this node no longer leads (or the
            # file could not be read back): the messages stay (archived
            # again by whoever leads: a duplicate in the archive, no loss).
            why = exc if str(exc) else TimeoutError("not on every in-sync follower in time")
            self._settle(key, queue, entries, None, why, now)
        else:
            self._settle(key, queue, entries, result, None, now)

    async def ledger_changed(self) -> None:
        """The redriven ledger was appended to: on a clustered leader, until
        the followers have it too."""
        if self.replication is not None:
            await self.replication.ledger()

    def _settle(self, key, queue, entries, result, error, now: float) -> None:
        self._busy.discard(key)
        if isinstance(error, BrokenProcessPool):
            self._executor = None  # a new writer for the next batch
        if error is not None:
            queue.restore_withdrawn(entries)
            self._failed(f"cannot archive dead letters of queue '{queue.name}' in vhost "
                         f"'{queue.vhost}' to {self.files.directory}: {error}; they stay "
                         "in the queue", now, str(error))
            return
        _path, heads = result
        queue.discard_withdrawn(entries)
        queue.stats["archived"] += len(entries)
        self.archived += len(entries)
        dead_letter_log = self.broker.dead_letter_log
        if dead_letter_log is not None:
            for head, entry in zip(heads, entries):
                dead_letter_log.record(head, entry.message.header, entry.message.body)
        if self.problem is not None:
            log.info("the dead-letter archive at %s takes records again", self.directory)
            self.problem = self.problem_since = self._cause = None
        if self._loop is not None:
            # More may be due (a batch is cut at BATCH messages or its
            # bytes): the next goes now, not at the next tick.
            self._loop.call_soon(self._consider, key[0], queue, time.time() * 1000.0)

    def _failed(self, why: str, now: float, cause: str) -> None:
        """Logged once per cause, not once per queue and retry."""
        if self._cause != cause:
            log.error("%s", why)
            self._cause = cause
        if self.problem is None:
            self.problem_since = now
        self.problem = why
        self._retry_at = now + RETRY_SECONDS

    async def stop(self, timeout: float = 30.0) -> None:
        """Let the batches in flight finish (their messages then leave their
        queues, or go back), then stop the worker."""
        if self._writing:
            await asyncio.wait(list(self._writing), timeout=timeout)
            await asyncio.sleep(0)  # their callbacks
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
