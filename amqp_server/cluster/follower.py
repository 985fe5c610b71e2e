"""The follower's side of replication: connect to the leader's cluster
port, prove membership, say what this copy holds, then write what comes.

Frames are applied on a worker thread in batches: while one batch is
written and fsynced, the next is read from the socket, and each batch is
acknowledged once it is on disk (the follower's group commit).  A full
copy is written the same way, piece by piece.

`follow` returns when the connection ends, for whatever reason (the leader
went away, a frame out of order, this node is told to stop); the caller
decides whether to follow again, and whom.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
from collections import deque
from collections.abc import Callable

from . import frames as f, handshake
from .replica import Replica

log = logging.getLogger("amqp_server.cluster")

# Frames read ahead of the disk at most; past it the socket is not read.
MAX_QUEUED = 4096


class Following:
    """One connection to one leader."""

    def __init__(self, replica: Replica, node: str, cluster: str, secret: bytes,
                 tls=None, *, on_copy: Callable[[bool], None] = lambda whole: None,
                 quiet: bool = False) -> None:
        self.replica = replica
        # Told when a full copy starts (False: this copy is not whole now)
        # and when the copy is whole (a copy completed, or the stream resumed).
        self.on_copy = on_copy
        self.quiet = quiet  # an earlier try already said the leader is unreachable
        self.tls = tls
        self.node = node
        self.cluster = cluster
        self.secret = secret
        self.leader: str | None = None
        self.streaming = False  # past the copy: frames are being applied
        self.was_streaming = False  # it was, at some point of this connection
        self.link_broke = False  # the connection ended without being asked to
        self.refused = False  # nothing listened at the leader's cluster port
        self._writer: asyncio.StreamWriter | None = None
        self._stopping = False

    async def follow(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        replica = self.replica
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=1 << 22, ssl=self.tls),
                handshake.TIMEOUT)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            self.refused = isinstance(exc, ConnectionRefusedError)
            if not self.quiet:
                log.info("cannot reach the leader's cluster port %s:%d: %s", host, port,
                         str(exc) or type(exc).__name__)
            return
        keep_alive(writer)
        self._writer = writer
        frames = f.FrameStream(reader)
        try:
            self.leader = await handshake.connect(frames, writer, self.secret, self.cluster,
                                                  self.node)
            writer.write(f.encode([f.FOLLOW, replica.epoch, replica.lsn]))
            await self._receive(frames, writer, loop)
            if not self._stopping:
                self.link_broke = True
        except (handshake.HandshakeError, f.FrameError, OSError, TimeoutError,
                asyncio.IncompleteReadError) as exc:
            if not self._stopping:
                self.link_broke = True
                log.info("replication from %s:%d ended: %s", host, port, exc)
        finally:
            self.streaming = False
            writer.close()
            self._writer = None

    async def _receive(self, frames: f.FrameStream, writer, loop) -> None:
        """Read frames into a queue that one applier works through in order,
        so reading the next frames overlaps with writing the last ones."""
        queue: deque[list] = deque()
        wake = asyncio.Event()
        applier = asyncio.ensure_future(self._apply(queue, wake, writer, loop))
        try:
            while not self._stopping and not applier.done():
                frame = await frames.next()
                if frame is None:
                    return
                queue.append(frame)
                queue.extend(frames.ready())
                wake.set()
                while len(queue) > MAX_QUEUED and not applier.done():
                    await asyncio.sleep(0.001)  # the disk is behind: stop reading
        finally:
            if applier.done():
                applier.result()  # raise what stopped it
            else:
                applier.cancel()

    async def _apply(self, queue: deque, wake: asyncio.Event, writer, loop) -> None:
        replica = self.replica
        generation = replica.generation

        def run(method, *args):
            return loop.run_in_executor(None, functools.partial(method, *args,
                                                                generation=generation))
        while True:
            await wake.wait()
            wake.clear()
            while queue:
                if queue[0][0] in f.DATA_KINDS:
                    batch = []
                    while queue and queue[0][0] in f.DATA_KINDS:
                        batch.append(queue.popleft())
                    lsn = await run(replica.apply, batch)
                    writer.write(f.encode([f.ACK, lsn]))
                    continue
                frame = queue.popleft()
                kind = frame[0]
                if kind == f.SNAPSHOT:
                    self.streaming = False
                    self.on_copy(False)
                    await run(replica.start_copy, frame[1])
                    log.info("taking a copy from leader %s", self.leader)
                elif kind == f.FILE:
                    await run(replica.copy_piece, frame[1], frame[2], frame[3])
                elif kind == f.READY:
                    await run(replica.finish_copy, frame[1])
                    writer.write(f.encode([f.ACK, frame[1]]))
                    self.streaming = self.was_streaming = True
                    self.on_copy(True)
                    log.info("copy from leader %s complete at %d", self.leader, frame[1])
                elif kind == f.RESUME:
                    replica.resume(frame[1], frame[2], frame[3], generation=generation)
                    self.streaming = self.was_streaming = True
                    self.on_copy(True)
                    log.info("following leader %s from %d", self.leader, frame[2])
                else:
                    raise f.FrameError(f"unexpected {kind!r} from the leader")

    def stop(self) -> None:
        self._stopping = True
        if self._writer is not None:
            self._writer.close()


def keep_alive(writer: asyncio.StreamWriter) -> None:
    """TCP keepalive on a replication link, so that a link whose other end
    went silent (a partition, not a reset) is found dead in seconds by the
    kernel, not after the default two hours; and a bound on data left
    unacknowledged (TCP_USER_TIMEOUT), so that a copy or a stream written
    to a peer cut off mid-way fails in seconds rather than after the
    kernel's fifteen minutes of retransmissions."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 2)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 10_000)
    except OSError:
        pass
