"""The dead-letter log: newline-delimited JSON in `<data-dir>/dead-letters/`,
one line per message that died (fields in dlx/events.py), read by the Spark
audit.

The broker only collects (shared line head, content header, body) per event
and ships them in batches to a writer process, which builds the JSON lines
and writes the files: dead-lettering a flood of messages costs the event
loop a list append per message, not a JSON encoding.  Without an event loop
(tools, unit tests) lines are written in-process, by the same code.

Files roll when they reach a size or an age, and the oldest files are
deleted once all of them together pass the retention size.  File names
sort by time, so a reader can take them in order.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .dead_letter_lines import event_line, node_member

log = logging.getLogger("amqp_server.storage")

SUFFIX = ".ndjson"


class LogFiles:
    """Appends lines to rolling files and enforces retention."""

    def __init__(self, directory: str | Path, max_file_bytes: int, max_file_seconds: float,
                 retention_bytes: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_file_bytes = max_file_bytes
        self.max_file_seconds = max_file_seconds
        self.retention_bytes = retention_bytes
        self._handle = None
        self._path: Path | None = None
        self._opened_at = 0.0
        self._size = 0
        self._counter = 0

    def write(self, lines: list[str]) -> None:
        # Names that were not UTF-8 on the wire carry lone surrogates; inside
        # a JSON string "\udcXX" is a valid escape, so the line stays JSON.
        data = "".join(lines).encode("utf-8", "backslashreplace")
        handle = self._current(len(data))
        handle.write(data)
        handle.flush()
        self._size += len(data)

    def _current(self, incoming: int):
        now = time.time()
        if self._handle is not None and (
                self._size + incoming > self.max_file_bytes and self._size > 0
                or now - self._opened_at >= self.max_file_seconds):
            self._handle.close()
            self._handle = None
        if self._handle is None:
            self._counter += 1
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
            name = f"dead-letters-{stamp}-{os.getpid()}-{self._counter:06d}{SUFFIX}"
            self._path = self.directory / name
            self._handle = open(self._path, "ab")
            self._opened_at = now
            self._size = 0
            self._enforce_retention()
        return self._handle

    def _enforce_retention(self) -> None:
        files = sorted(self.directory.glob(f"*{SUFFIX}"))
        sizes = {path: path.stat().st_size for path in files}
        total = sum(sizes.values())
        for path in files:
            if total <= self.retention_bytes or path == self._path:
                break
            total -= sizes[path]
            path.unlink(missing_ok=True)
            log.info("dead-letter log retention: removed %s", path.name)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def write_batch(files: LogFiles, batch, body_limit: int, node: str, log_id: str) -> int:
    """Writes the batch's lines, each event (head, header, body, number)
    under the id `<log_id>-<number>`; `node` names the broker that
    dead-lettered them."""
    node_field = node_member(node)
    files.write([event_line(head, header, body, body_limit, node_field, f"{log_id}-{number}")
                 for head, header, body, number in batch])
    return len(batch)


def _writer_main(pipe, settings: tuple) -> None:
    directory, file_bytes, file_seconds, retention, body_limit, node, log_id = settings
    # Behind the broker and its clients for CPU: events wait in the pipe
    # during a burst and are written when the burst is over.
    os.nice(10)
    files = LogFiles(directory, file_bytes, file_seconds, retention)
    try:
        while True:
            try:
                data = pipe.recv_bytes()
            except EOFError:
                break
            batch = pickle.loads(data)
            if batch is None:
                break
            write_batch(files, batch, body_limit, node, log_id)
    finally:
        files.close()


# Write behind: the writer gets events once dead-lettering pauses for this
# long, or when this many are waiting, so a burst is not slowed by its own
# audit trail competing for the CPU.
QUIET_SECONDS = 0.05
MAX_WAITING = 200_000


def _send_batches(outbox: queue.SimpleQueue, pipe) -> None:
    waiting: list = []
    done = False
    while not done:
        batch = outbox.get() if not waiting else _get(outbox)
        if batch is None:
            done = True
        elif batch is not _QUIET:
            waiting.extend(batch)
            if len(waiting) < MAX_WAITING:
                continue
        if not waiting:
            continue
        try:
            pipe.send_bytes(pickle.dumps(waiting, protocol=pickle.HIGHEST_PROTOCOL))
        except (OSError, ValueError) as exc:
            # The audit trail must never stop dead-lettering; the loss is logged.
            log.error("dead-letter log writer gone, %d events lost: %s", len(waiting), exc)
        waiting = []
    try:
        pipe.send_bytes(pickle.dumps(None))
    except (OSError, ValueError):
        pass
    pipe.close()


_QUIET = object()


def _get(outbox: queue.SimpleQueue):
    try:
        return outbox.get(timeout=QUIET_SECONDS)
    except queue.Empty:
        return _QUIET


class DeadLetterLog:
    def __init__(self, directory: str | Path, max_file_bytes: int = 64 << 20,
                 max_file_seconds: float = 3600.0, retention_bytes: int = 1 << 30,
                 body_limit: int = 64 << 10, node: str | None = None) -> None:
        self.directory = Path(directory)
        self.body_limit = body_limit
        # The broker's node_name (the host name by default).
        self.node = node or socket.gethostname()
        self._files_settings = (str(directory), max_file_bytes, max_file_seconds,
                                retention_bytes)
        # Every event gets an id no other log gives: this log's random id
        # and the event's number in it.  A cluster's followers keep copies
        # of the leader's events under the same ids, so an audit over many
        # nodes' logs counts each event once.
        self.log_id = secrets.token_hex(6)
        self._batch: list[tuple[str, bytes, bytes, int]] = []
        self._loop = None
        self._scheduled = False
        self._process = None
        self._outbox: queue.SimpleQueue | None = None
        self._sender: threading.Thread | None = None
        self._files: LogFiles | None = None  # in-process writing, without a loop
        self.recorded = 0
        # A clustered leader ships each batch of events to its followers.
        self._ship: Callable[[list], None] | None = None

    def attach(self, loop) -> None:
        self._loop = loop

    def ship_to(self, ship: Callable[[list], None] | None) -> None:
        """From now on each batch of events also goes to `ship` (a clustered
        leader's replication); None: no more."""
        self._ship = ship

    def record(self, head: str, header: bytes, body: bytes) -> None:
        self._batch.append((head, header, body, self.recorded))
        self.recorded += 1
        if self._loop is None:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        if self._ship is not None:
            self._ship(batch)
        if self._loop is None:
            if self._files is None:
                self._files = LogFiles(*self._files_settings)
            write_batch(self._files, batch, self.body_limit, self.node, self.log_id)
            return
        self._start_writer()
        self._outbox.put(batch)

    def _start_writer(self) -> None:
        if self._process is not None and self._process.is_alive():
            return
        context = multiprocessing.get_context("spawn")
        receiver, pipe = context.Pipe(duplex=False)
        settings = (*self._files_settings, self.body_limit, self.node, self.log_id)
        self._process = context.Process(target=_writer_main, args=(receiver, settings),
                                        name="dead-letter-log", daemon=True)
        self._process.start()
        receiver.close()
        self._outbox = queue.SimpleQueue()
        # A thread feeds the pipe, so a writer busy with a burst never
        # blocks the event loop; batches wait in memory meanwhile.
        self._sender = threading.Thread(target=_send_batches, args=(self._outbox, pipe),
                                        name="dead-letter-log-sender", daemon=True)
        self._sender.start()

    def _stop_writer(self) -> None:
        if self._process is None:
            return
        self._outbox.put(None)
        self._sender.join(30)
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
        self._process = None

    def files(self) -> list[Path]:
        return sorted(self.directory.glob(f"*{SUFFIX}"))

    def close(self) -> None:
        self.flush()
        self._stop_writer()
        if self._files is not None:
            self._files.close()
