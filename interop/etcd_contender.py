"""A contender for a group's leadership, as a process the tests can kill.

    python -m interop.etcd_contender --endpoints URLS --cluster C --group G --node N
        [--ttl 4] [--revoke-on-link-reset]

It campaigns (again, on a new session, each time its session is lost) and
prints one JSON object per line on stdout, each with `event` and `t`
(time.monotonic(), comparable across processes on Linux):

    ready {lease, ttl}      a session started
    waiting {reason}        why it does not lead yet
    leader {key, revision}  it leads
    lost {reason}           its term ended
    session-lost {reason}   its session ended (a new one starts)
    link-reset {leader}     the leader's link closed (--revoke-on-link-reset)
    revoked {ok}            the outcome of revoke_leader after that
    isr {ok | error}        the outcome of a write-isr command
    error {message}

Commands on stdin, one per line: `write-isr A,B` (with its last term, also
after it lost it: the write must then fail in etcd), `resign`, `quit`.

The "link" stands for the replication link: every contender listens on a
port it advertises in its election value, and with --revoke-on-link-reset a
follower keeps a connection to the leader's port and deposes the leader
(Leadership.revoke_leader) when that connection closes, as a follower will
when the leader's replication stream resets.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from amqp_server.cluster import (
    EtcdClient,
    EtcdError,
    Leadership,
    LeadershipLost,
    NotLeader,
    Session,
)
from amqp_server.cluster.leadership import Leader, Term

from .etcd_cluster import stop_process


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.monotonic(), **fields}) + "\n")
    sys.stdout.flush()


class Contender:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.client = EtcdClient(args.endpoints, timeout=args.timeout)
        self.leadership: Leadership | None = None
        self.last_term: Term | None = None
        self.link_port = 0

    async def run(self) -> None:
        server = await asyncio.start_server(self._link_accepted, "127.0.0.1", 0)
        self.link_port = server.sockets[0].getsockname()[1]
        commands = asyncio.ensure_future(self._commands())
        campaigns = asyncio.ensure_future(self._campaigns())
        try:
            await asyncio.wait([commands, campaigns], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (commands, campaigns):
                task.cancel()
            await asyncio.gather(commands, campaigns, return_exceptions=True)
            server.close()
            await self.client.close()

    async def _campaigns(self) -> None:
        while True:
            session = Session(self.client, self.args.ttl)
            try:
                await session.start()
            except EtcdError as exc:
                emit("error", message=str(exc))
                await asyncio.sleep(0.5)
                continue
            emit("ready", lease=session.lease, ttl=session.ttl)
            leadership = Leadership(session, self.args.cluster, self.args.group, self.args.node,
                                    addresses={"link": f"127.0.0.1:{self.link_port}"})
            leadership.on_lost(lambda reason: emit("lost", reason=reason))
            self.leadership = leadership
            follower = (asyncio.ensure_future(self._follow(leadership))
                        if self.args.revoke_on_link_reset else None)
            try:
                term = await leadership.campaign(lambda reason: emit("waiting", reason=reason))
                self.last_term = term
                emit("leader", key=term.key, revision=term.revision)
                await session.lost.wait()
            except LeadershipLost:
                pass
            finally:
                emit("session-lost", reason=session.reason)
                if follower is not None:
                    follower.cancel()
                    await asyncio.gather(follower, return_exceptions=True)

    async def _follow(self, leadership: Leadership) -> None:
        link: asyncio.Task[None] | None = None
        try:
            async for leader in leadership.observe():
                if link is not None:
                    link.cancel()
                    link = None
                if leader is not None and leader.lease != leadership.session.lease:
                    link = asyncio.ensure_future(self._link(leadership, leader))
        finally:
            if link is not None:
                link.cancel()

    async def _link(self, leadership: Leadership, leader: Leader) -> None:
        host, _, port = leader.addresses.get("link", "").rpartition(":")
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except (OSError, ValueError):
            pass  # nobody listens: the leader's process is gone
        else:
            try:
                while await reader.read(4096):
                    pass
            except OSError:
                pass
            writer.close()
        emit("link-reset", leader=leader.node)
        # Shielded: the new leader's appearance must not cut the revoke short.
        await asyncio.shield(self._revoke(leadership, leader))

    async def _revoke(self, leadership: Leadership, leader: Leader) -> None:
        try:
            ok = await leadership.revoke_leader(leader)
        except EtcdError as exc:
            emit("revoked", ok=False, error=str(exc))
        else:
            emit("revoked", ok=ok)

    async def _link_accepted(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while await reader.read(4096):
                pass
        writer.close()

    async def _commands(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().strip():
            command, _, argument = line.partition(" ")
            if command == "quit":
                return
            if command == "write-isr":
                await self._write_isr(argument.split(","))
            elif command == "resign" and self.leadership is not None:
                await self.leadership.resign()
            else:
                emit("error", message=f"unknown command {line!r}")

    async def _write_isr(self, nodes: list[str]) -> None:
        if self.leadership is None or self.last_term is None:
            emit("isr", ok=False, error="never led")
            return
        try:
            ok = await self.leadership.write_isr(nodes, term=self.last_term)
        except (EtcdError, NotLeader, ValueError) as exc:
            emit("isr", ok=False, error=str(exc))
        else:
            emit("isr", ok=ok)


class ContenderProcess:
    """The test's handle on a contender process: its events as they come,
    commands, and real signals."""

    def __init__(self, endpoints: str, cluster: str, group: str, node: str, *, ttl: int = 4,
                 revoke_on_link_reset: bool = False) -> None:
        self.node = node
        command = [sys.executable, "-m", "interop.etcd_contender", "--endpoints", endpoints,
                   "--cluster", cluster, "--group", group, "--node", node, "--ttl", str(ttl)]
        if revoke_on_link_reset:
            command.append("--revoke-on-link-reset")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.process = subprocess.Popen(command, cwd=root, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.events: list[dict[str, Any]] = []
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._changed = threading.Condition()
        self._ended = False  # stdout is closed: no more events
        for stream, target in ((self.process.stdout, self._event), (self.process.stderr,
                                                                      self.stderr.append)):
            threading.Thread(target=self._read, args=(stream, target), daemon=True).start()

    def _read(self, stream: Any, target: Any) -> None:
        with contextlib.suppress(ValueError, OSError):  # closed by close()
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip()
                with self._changed:
                    target(line)
                    self._changed.notify_all()
        with self._changed:
            if stream is self.process.stdout:
                self._ended = True
            self._changed.notify_all()

    def _event(self, line: str) -> None:
        try:
            self.events.append(json.loads(line))
        except ValueError:
            self.stderr.append(line)

    def wait(self, event: str, timeout: float, after: float = 0.0, **match: Any
             ) -> dict[str, Any]:
        """The first `event` (with fields equal to `match`) stamped after
        `after`; AssertionError with what came instead after `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for seen in self.events:
                    if (seen["event"] == event and seen["t"] > after
                            and all(seen.get(k) == v for k, v in match.items())):
                        return seen
                left = deadline - time.monotonic()
                if left <= 0 or self._ended:
                    raise AssertionError(
                        f"{self.node}: no {event!r} {match or ''} within {timeout} s"
                        f"{' (it exited)' if self._ended else ''}; events: "
                        f"{[e['event'] for e in self.events]}; stderr: {list(self.stderr)}")
                self._changed.wait(min(left, 0.5))

    def seen(self, event: str, after: float = 0.0) -> list[dict[str, Any]]:
        with self._changed:
            return [e for e in self.events if e["event"] == event and e["t"] > after]

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def kill(self) -> float:
        """SIGKILL; the time.monotonic() it was sent at."""
        sent = time.monotonic()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        return sent

    def stop(self) -> None:
        stop_process(self.process)

    def cont(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--ttl", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--revoke-on-link-reset", action="store_true")
    args = parser.parse_args(argv)
    asyncio.run(Contender(args).run())


if __name__ == "__main__":
    main()
