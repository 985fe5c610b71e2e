"""The leader's side of replication: one ordered stream of what its stores
write, shipped to every follower, and how far it is on every in-sync copy.

Storage hands each change to `ship` (storage/replication.py); the shipper
numbers it (its LSN), keeps it in a backlog and writes it to every follower
that is streaming.  Followers answer with the LSN they have on disk.
`replicated`, the LSN a confirm may rely on, is the lowest of those answers
over the in-sync followers, and moves only while

- the leader's lease is certainly still its own (`alive()`, checked right
  before it moves: a leader stopped past its lease confirms nothing after
  it resumes), and
- the in-sync set, leader included, has at least `min_in_sync` members.

The in-sync set lives in etcd and is changed only through `isr` (fenced
writes, cluster/leadership.py), always *before* the shipper acts on it: a
follower that lags past `lag_timeout` is counted out only once etcd says it
is out (so it can no longer be elected), and counted in only once etcd says
it is in.  The set never shrinks below `min_in_sync`; below it, confirms
wait and publishers are held (`on_hold`).

A follower that connects says what it holds.  If that is a prefix of this
leader's stream still in the backlog, the stream resumes there; otherwise
it gets a full copy: the definition log and the policies document as they
stand, every message segment and every stream's segment up to the size
of the last flush shipped (segments only grow, so that prefix is stable
while it is read), the dead-letter archive's files and ledger as shipped,
then the frames after that point.  The leader keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

from . import frames as f, in_sync as rules

log = logging.getLogger("amqp_server.cluster")

COPY_CHUNK = 1 << 20
# Frames kept for followers that reconnect, beyond what connected ones need.
BACKLOG_BYTES = 64 << 20
# A follower that needs more than this kept for it (or leaves this much
# unread in its socket) is dropped; it comes back and takes a copy.
FOLLOWER_LIMIT = 256 << 20
# Publishers are held while this much is shipped but not yet replicated.
HOLD_BYTES = 64 << 20


_FILE_KINDS = frozenset({f.STREAM, f.STREAM_DELETED, f.STREAM_REDRIVEN, f.ARCHIVE_FILE,
                         f.ARCHIVE_LEDGER})


class Sources:
    """What a copy is made of, read from the leader's stores."""

    def __init__(self, data_dir: Path, definitions: Callable[[], bytes],
                 policies: Callable[[], bytes], archive_dir: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.definitions = definitions
        self.policies = policies
        self.archive_dir = Path(archive_dir) if archive_dir else self.data_dir / f.ARCHIVE

    def local(self, path: str) -> Path:
        """A file of the copy on the leader's disk (the archive's in its archive)."""
        if path.startswith(f.ARCHIVE + "/"):
            return self.archive_dir / path[len(f.ARCHIVE) + 1:]
        return self.data_dir / path

    def files(self) -> dict[str, int]:
        """Streams' files and the archive's as they are on disk now, by
        their path in a copy."""
        found: dict[str, int] = {}
        candidates = [(path.relative_to(self.data_dir).as_posix(), path)
                      for path in (self.data_dir / "streams").glob("*/*/*")]
        if self.archive_dir.is_dir():
            candidates += [(f"{f.ARCHIVE}/{path.relative_to(self.archive_dir).as_posix()}", path)
                           for path in self.archive_dir.glob("node=*/day=*/*")]
            candidates.append((f"{f.ARCHIVE}/{f.ARCHIVE_LEDGER_NAME}",
                               self.archive_dir / f.ARCHIVE_LEDGER_NAME))
        for name, path in candidates:
            if f.copy_path_allowed(name):
                try:
                    found[name] = path.stat().st_size
                except OSError:
                    continue
        return found


class Link:
    """One connected follower, as the leader sees it."""

    COPYING, STREAMING = "copying", "streaming"

    def __init__(self, node: str, writer: asyncio.StreamWriter) -> None:
        self.node = node
        self.writer = writer
        self.state = Link.COPYING
        self.acked = -1      # the LSN it has on disk (-1: nothing of this stream yet)
        self.sent = -1       # the last LSN written to it
        self.connected_at = time.monotonic()

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def unread(self) -> int:
        transport = self.writer.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def close(self) -> None:
        self.writer.close()


class Shipper:
    def __init__(self, node: str, epoch: int, sources: Sources, *, min_in_sync: int = 2,
                 lag_timeout: float = 2.0, in_sync: tuple[str, ...] = (),
                 isr: Callable[[tuple[str, ...]], Awaitable[None]] | None = None,
                 alive: Callable[[], bool] = lambda: True,
                 on_hold: Callable[[bool], None] = lambda held: None,
                 base: tuple[int | None, int] = (None, 0)) -> None:
        self.node = node
        self.epoch = epoch
        self.sources = sources
        self.min_in_sync = min_in_sync
        self.lag_timeout = lag_timeout
        # The followers etcd counts in sync (the leader itself aside).
        self.in_sync: set[str] = {name for name in in_sync if name != node}
        self._write_isr = isr
        self._isr_changing = False
        self.alive = alive
        self.on_hold = on_hold
        self.held = False
        # This term's stream continues the copy the leader was elected with:
        # `base` is (the term it came from, its last frame), and a follower
        # holding exactly that copy resumes without a new one.
        self.base = base
        self.lsn = self.replicated = base[1]
        self.links: dict[str, Link] = {}
        # What each follower has on disk of this stream, kept when its
        # connection drops: it is still on its disk (-1: nothing yet).
        self.acked: dict[str, int] = {}
        # When each follower was last connected (this term's start for one
        # not connected yet): its absence counts from there.
        started = time.monotonic()
        self._seen: dict[str, float] = dict.fromkeys(self.in_sync, started)
        # When `replicated` last moved (the stall's start once frames are gone).
        self._moved_at = started
        # Told after each in-sync check (the node's control plane reads
        # whether confirms stall).
        self.on_check: Callable[[], object] = lambda: None
        # (lsn, when shipped, encoded frame, bytes shipped up to and with it)
        self._backlog: deque[tuple[int, float, bytes, int]] = deque()
        self._backlog_bytes = 0
        self._shipped_bytes = 0
        self._watchers: list = []
        self._waiting: deque[tuple[int, asyncio.Future]] = deque()  # (lsn, future)
        self.segment_sizes: dict[int, int] = {}
        for path in sorted((self.sources.data_dir / "messages").glob("*.seg")):
            try:
                self.segment_sizes[int(path.stem)] = path.stat().st_size
            except (ValueError, OSError):
                continue
        # Streams' files and the archive's, by their path in a copy: how
        # much of each is shipped (a copy takes that much, no more).
        self.file_sizes: dict[str, int] = self.sources.files()
        self._loop = asyncio.get_running_loop()
        self._checker: asyncio.Task | None = None
        # Told of each follower that connects (the node records its members).
        self.on_follower: Callable[[str], object] = lambda node: None
        self.stopped = False

    # ---- storage's side (storage/replication.py: Shipping) ---------------

    def ship(self, frame: list) -> int:
        self.lsn += 1
        lsn = frame[1] = self.lsn
        if frame[0] == f.MESSAGES:
            sizes = self.segment_sizes
            for number, data in frame[2]:
                sizes[number] = sizes.get(number, 0) + len(data)
            for number in frame[3]:
                sizes.pop(number, None)
        elif frame[0] in _FILE_KINDS:
            self._shipped_file(frame)
        data = f.encode(frame)
        self._shipped_bytes += len(data)
        self._backlog.append((lsn, time.monotonic(), data, self._shipped_bytes))
        self._backlog_bytes += len(data)
        for link in list(self.links.values()):
            if link.state == Link.STREAMING:
                link.send(data)
                link.sent = lsn
                if link.unread() > FOLLOWER_LIMIT:
                    # A follower that stopped reading (paused, cut off) would
                    # have this process hold everything for it: it comes
                    # back and resumes or takes a copy.
                    log.warning("follower %s is not reading; dropping it", link.node)
                    self._forget(link)
        self._trim()
        self._advance()
        return lsn

    def _shipped_file(self, frame: list) -> None:
        """What a copy takes of the file a frame wrote."""
        sizes = self.file_sizes
        kind = frame[0]
        if kind == f.STREAM:
            stream = frame[2]
            for number, data in frame[3]:
                path = f.stream_segment_path(stream, number)
                sizes[path] = sizes.get(path, 0) + len(data)
            for number in frame[4]:
                sizes.pop(f.stream_segment_path(stream, number), None)
        elif kind == f.STREAM_DELETED:
            prefix = frame[2] + "/"
            for path in [path for path in sizes if path.startswith(prefix)]:
                del sizes[path]
        elif kind == f.STREAM_REDRIVEN:
            path = f"{frame[2]}/redriven"
            sizes[path] = sizes.get(path, 0) + len(frame[3])
        elif kind == f.ARCHIVE_FILE:
            if frame[3] + len(frame[4]) >= frame[5]:  # whole: a copy takes it
                sizes[f"{f.ARCHIVE}/{frame[2]}"] = frame[5]
        else:
            sizes[f"{f.ARCHIVE}/{f.ARCHIVE_LEDGER_NAME}"] = frame[2] + len(frame[3])

    def ship_from_thread(self, frame: list, shipped) -> None:
        self._loop.call_soon_threadsafe(self._ship_then, frame, shipped)

    def _ship_then(self, frame: list, shipped) -> None:
        shipped(self.ship(frame))

    def watch(self, owner) -> None:
        self._watchers.append(owner)

    async def settled(self, timeout: float = 60.0) -> None:
        """Until everything shipped so far is on every in-sync copy
        (TimeoutError past `timeout`: the answer must not claim it)."""
        lsn = self.lsn
        if self.replicated >= lsn:
            return
        if self.stopped:
            raise TimeoutError("leadership ended")
        future = self._loop.create_future()
        self._waiting.append((lsn, future))
        await asyncio.wait_for(future, timeout)

    # ---- the frontier ----------------------------------------------------

    def poke(self) -> None:
        """The lease is beyond doubt again: confirm what waited meanwhile."""
        self._advance()

    def _advance(self) -> None:
        if self.stopped:
            return
        frontier = rules.frontier(self.lsn, self.in_sync, self.acked, self.min_in_sync)
        outstanding = self._bytes_after(self.replicated)
        alive = self.alive()
        # Publishers are held while nothing can be confirmed (the set is too
        # small, the lease is in doubt) or too much waits for the followers.
        self._hold(frontier is None or not alive or outstanding > HOLD_BYTES)
        if frontier is None or frontier <= self.replicated or not alive:
            return
        self.replicated = frontier
        self._moved_at = time.monotonic()
        for owner in self._watchers:
            owner.replication_progress()
        waiting = self._waiting
        while waiting and waiting[0][0] <= frontier:
            future = waiting.popleft()[1]
            if not future.done():
                future.set_result(None)

    def stalled_since(self) -> float | None:
        """Since when confirms have waited for the in-sync copies (None: they
        do not wait)."""
        return rules.stalled_since(self.replicated, self.lsn, self._shipped_at, self._moved_at)

    def _hold(self, held: bool) -> None:
        if held != self.held:
            self.held = held
            self.on_hold(held)

    def _bytes_after(self, lsn: int) -> int:
        backlog = self._backlog
        if not backlog or backlog[-1][0] <= lsn:
            return 0
        index = lsn - backlog[0][0]
        if index < 0:
            return self._backlog_bytes
        return self._shipped_bytes - backlog[index][3]

    def _shipped_at(self, lsn: int) -> float | None:
        """When frame `lsn` was shipped, if it is still in the backlog."""
        if not self._backlog:
            return None
        index = lsn - self._backlog[0][0]
        if 0 <= index < len(self._backlog):
            return self._backlog[index][1]
        return None

    def _trim(self) -> None:
        """Forget frames every connected follower has, past BACKLOG_BYTES."""
        backlog = self._backlog
        if self._backlog_bytes <= BACKLOG_BYTES:
            return
        if self._backlog_bytes > FOLLOWER_LIMIT:
            for link in list(self.links.values()):
                if link.acked < backlog[0][0] + (len(backlog) >> 1):
                    log.warning("follower %s is too far behind; dropping it", link.node)
                    self._forget(link)
        needed = min((link.acked for link in self.links.values()), default=self.lsn)
        while backlog and self._backlog_bytes > BACKLOG_BYTES and backlog[0][0] <= needed:
            self._backlog_bytes -= len(backlog.popleft()[2])

    # ---- the in-sync set -------------------------------------------------

    def start(self) -> None:
        self._checker = asyncio.ensure_future(self._check_forever())
        self._advance()  # held from the start while the in-sync set is too small

    async def _check_forever(self) -> None:
        failing = ""
        while not self.stopped:
            await asyncio.sleep(min(0.1, self.lag_timeout / 4))
            try:
                await self.check()
            except Exception as exc:  # noqa: BLE001 - the checker must outlive any one failure
                # etcd unreachable, the set changed meanwhile: said once, tried again.
                if str(exc) != failing:
                    log.warning("cannot change the in-sync set now: %s", exc)
                failing = str(exc)
            else:
                failing = ""

    def followers(self) -> dict[str, rules.Follower]:
        """Every follower of this term as the in-sync rules see it."""
        views = {}
        for name in {*self.in_sync, *self.links, *self.acked}:
            link = self.links.get(name)
            views[name] = rules.Follower(
                acked=self.acked.get(name, -1),
                streaming=link is not None and link.state == Link.STREAMING,
                linked=link is not None, seen=self._seen.get(name, 0.0))
        return views

    def lagging(self, now: float | None = None) -> list[str]:
        """In-sync followers behind by more than the lag timeout, or not
        connected for that long."""
        now = time.monotonic() if now is None else now
        return rules.lagging(now, self.lsn, self.base[1], self.in_sync, self.followers(),
                             self._shipped_at, self.lag_timeout)

    def caught_up(self) -> list[str]:
        return rules.caught_up(self.lsn, self.in_sync, self.followers())

    async def check(self) -> None:
        """Count lagging followers out and caught-up ones in, through etcd."""
        if self._isr_changing or self._write_isr is None or self.stopped:
            return
        out, joining = rules.change(self.in_sync, self.lagging(), self.caught_up(),
                                    self.min_in_sync)
        if out or joining:
            wanted = (self.in_sync - set(out)) | set(joining)
            self._isr_changing = True
            try:
                await self._write_isr(tuple(sorted({self.node, *wanted})))
            finally:
                self._isr_changing = False
            if out:
                log.warning("followers %s left the in-sync set (behind or away for more "
                            "than %.1f s)", ", ".join(out), self.lag_timeout)
            if joining:
                log.info("followers %s joined the in-sync set", ", ".join(joining))
            self.in_sync = wanted
            self._advance()
        self.on_check()

    # ---- followers ---------------------------------------------------------

    async def serve(self, node: str, frames: f.FrameStream, writer: asyncio.StreamWriter
                    ) -> None:
        """One follower's connection, after the handshake, until it ends."""
        old = self.links.get(node)
        if old is not None:
            self._forget(old)
        link = Link(node, writer)
        self.links[node] = link
        self._seen[node] = time.monotonic()
        self.on_follower(node)
        try:
            hello = await frames.next()
            if not hello or hello[0] != f.FOLLOW or len(hello) != 3:
                raise f.FrameError("expected follow")
            await self._start_stream(link, hello[1], hello[2])
            while not self.stopped:
                frame = await frames.next()
                if frame is None:
                    break
                if frame[0] != f.ACK or len(frame) != 2 or not isinstance(frame[1], int):
                    raise f.FrameError(f"unexpected {frame[0]!r} from a follower")
                if frame[1] > link.sent:
                    raise f.FrameError("acknowledged a frame never sent")
                if frame[1] > link.acked:
                    link.acked = self.acked[node] = frame[1]
                    self._advance()
                if link.unread() > FOLLOWER_LIMIT:
                    raise f.FrameError("not reading what it is sent")
        except (f.FrameError, OSError, asyncio.IncompleteReadError) as exc:
            log.info("replication link to follower %s ended: %s", node, exc)
        finally:
            self._forget(link)

    async def _start_stream(self, link: Link, epoch, lsn) -> None:
        backlog = self._backlog
        first = backlog[0][0] if backlog else self.lsn + 1
        if (epoch == self.epoch and isinstance(lsn, int) and first - 1 <= lsn <= self.lsn):
            link.send(f.encode([f.RESUME, self.epoch, lsn, epoch]))
            link.acked = self.acked[link.node] = start = lsn  # on its disk, it says
        elif (epoch is not None and (epoch, lsn) == self.base
              and (not backlog or first == self.base[1] + 1)):
            # The same copy this leader started from: nothing is missing.
            link.send(f.encode([f.RESUME, self.epoch, lsn, epoch]))
            link.acked = self.acked[link.node] = start = lsn
        else:
            # The follower forgets its copy before it takes this one: what
            # it acknowledged before is on its disk no more, and the copy
            # counts only once it acknowledges it (after making it whole
            # and durable): a confirm waiting for it waits until then.
            self.acked[link.node] = -1
            start = await self._copy(link)
        link.sent = start
        # The frames shipped since that point, then the live stream.
        for frame_lsn, _, data, _ in list(self._backlog):
            if frame_lsn > start:
                link.send(data)
                link.sent = frame_lsn
        link.state = Link.STREAMING
        self._advance()

    async def _copy(self, link: Link) -> int:
        """Send the whole data directory as of now; returns its LSN."""
        lsn = self.lsn
        sizes = dict(self.segment_sizes)
        files = dict(self.file_sizes)
        definitions = self.sources.definitions()
        policies = self.sources.policies()
        writer = link.writer
        writer.write(f.encode([f.SNAPSHOT, self.epoch, lsn]))
        for path, content in ((f.DEFINITIONS_FILE, definitions),
                              (f.POLICIES_FILE, policies)):
            for offset in range(0, len(content), COPY_CHUNK):  # none: no file
                writer.write(f.encode([f.FILE, path, offset,
                                       content[offset:offset + COPY_CHUNK]]))
                await writer.drain()
        for number, size in sorted(sizes.items()):
            await self._copy_file(writer, f.segment_path(number), size)
        for path, size in sorted(files.items()):
            await self._copy_file(writer, path, size)
        writer.write(f.encode([f.READY, lsn]))
        await writer.drain()
        log.info("follower %s: sent a copy up to %d", link.node, lsn)
        return lsn

    async def _copy_file(self, writer: asyncio.StreamWriter, path: str, size: int) -> None:
        """The first `size` bytes of a file (files only grow or go whole)."""
        offset = 0
        try:
            handle = open(self.sources.local(path), "rb")
        except FileNotFoundError:
            return  # deleted since (a segment nothing lived in, a stream deleted)
        with handle:
            while offset < size:
                piece = await self._loop.run_in_executor(
                    None, handle.read, min(COPY_CHUNK, size - offset))
                if not piece:
                    break
                writer.write(f.encode([f.FILE, path, offset, piece]))
                offset += len(piece)
                await writer.drain()

    def _forget(self, link: Link) -> None:
        if self.links.get(link.node) is link:
            del self.links[link.node]
            self._seen[link.node] = time.monotonic()
        link.close()

    def stop(self) -> None:
        """Leadership ended: ship nothing more, confirm nothing more."""
        self.stopped = True
        if self._checker is not None:
            self._checker.cancel()
        for link in list(self.links.values()):
            link.close()
        self.links.clear()
        # Whoever waits for a copy (a management answer, an archive batch)
        # hears now that none is coming, not when its wait runs out.
        while self._waiting:
            future = self._waiting.popleft()[1]
            if not future.done():
                future.set_exception(TimeoutError("leadership ended"))
