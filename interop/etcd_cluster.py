"""Real etcd members as subprocesses on loopback, for the cluster tests.

    with EtcdCluster(3) as cluster:
        client = EtcdClient(cluster.endpoints)
        cluster.members[0].kill()       # SIGKILL
        cluster.members[1].stop()       # SIGSTOP; .cont() sends SIGCONT
        cluster.members[0].restart()    # same name, ports and data

Each member gets free loopback ports and a data dir of its own (on /dev/shm
when there is one: fsync on a busy disk stalls etcd's raft more than the
tests can wait), Debian's etcd-server 3.4 flags `--initial-cluster-state new
--heartbeat-interval 250 --election-timeout 2500`, and a log file whose tail
any start-up failure quotes.  Every wait is bounded.  etcd's smallest lease
TTL is 1.5 election timeouts rounded up to whole seconds: 4 s with these
flags, 2 s with `election_ms=1000`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from typing import Self

__all__ = ["EtcdCluster", "EtcdMember", "etcd_binary", "free_ports", "stop_process"]

HEALTHY_TIMEOUT = 30.0


def etcd_binary() -> str | None:
    return shutil.which("etcd") or (
        "/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)


# Every port free_ports handed out in this process: never handed out again.
# A port is only probed free; its member or node binds it later, so two
# calls (a cluster's nodes, its etcd members) could otherwise pick the same
# one before either binds it (a suite runs hundreds of them: it happened).
_HANDED_OUT: set[int] = set()


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now, below the ephemeral range (held at once,
    so they differ, and none handed out before by this process): a member
    or node restarted on its old port must not find it taken by some
    client's connection meanwhile, which a port from the ephemeral range
    can be."""
    own = _own_ports()
    sockets = []
    try:
        for candidate in random.sample(own, min(2000, len(own))):
            if candidate in _HANDED_OUT:
                continue
            probe = socket.socket()
            try:
                probe.bind(("127.0.0.1", candidate))
            except OSError:
                probe.close()
                continue
            sockets.append(probe)
            if len(sockets) == count:
                ports = [probe.getsockname()[1] for probe in sockets]
                _HANDED_OUT.update(ports)
                return ports
        raise RuntimeError(f"no {count} free ports between {own.start} and {own.stop}")
    finally:
        for probe in sockets:
            probe.close()


def _own_ports() -> range:
    """The ports from 10000 up to the ephemeral range, or under pytest-xdist
    this worker's slice of them: workers are processes of their own, which
    cannot see what another handed out (one worker's node could otherwise
    take the port another's etcd member was about to bind)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
            low = int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers < 2:
        return range(10_000, low)
    size = (low - 10_000) // workers
    start = 10_000 + int(worker[2:]) * size
    return range(start, start + size)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGSTOP, and return once every thread of it has stopped: the kernel
    stops the threads one by one, and on a busy machine one can still answer
    a request a few milliseconds after the signal was sent."""
    process.send_signal(signal.SIGSTOP)
    tasks = f"/proc/{process.pid}/task"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            states = [_state(f"{tasks}/{tid}/stat") for tid in os.listdir(tasks)]
        except OSError:
            time.sleep(0.05)  # no /proc (or it just exited): allow for it
            return
        if all(state in "tTZX" for state in states):
            return
        time.sleep(0.001)
    raise RuntimeError(f"process {process.pid} did not stop within {timeout} s of SIGSTOP")


def _state(stat_path: str) -> str:
    with open(stat_path) as stat:
        return stat.read().rpartition(")")[2].split()[0]


class EtcdMember:
    def __init__(self, name: str, client_port: int, peer_port: int, data_dir: str,
                 log_path: str, heartbeat_ms: int, election_ms: int) -> None:
        self.name = name
        self.client_port = client_port
        self.peer_port = peer_port
        self.data_dir = data_dir
        self.log_path = log_path
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped = False
        self._initial_cluster = ""

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, initial_cluster: str, state: str = "new") -> None:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed (Debian's etcd-server)")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [binary, "--name", self.name, "--data-dir", self.data_dir,
                 "--listen-client-urls", self.client_url,
                 "--advertise-client-urls", self.client_url,
                 "--listen-peer-urls", self.peer_url,
                 "--initial-advertise-peer-urls", self.peer_url,
                 "--initial-cluster", initial_cluster,
                 "--initial-cluster-state", state,
                 "--initial-cluster-token", "amqp-server-tests",
                 "--heartbeat-interval", str(self.heartbeat_ms),
                 "--election-timeout", str(self.election_ms)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        self.stopped = False
        self._initial_cluster = initial_cluster

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.stopped = False

    def stop(self) -> None:
        """SIGSTOP: it keeps its sockets open and answers nothing."""
        assert self.process is not None and self.running
        stop_process(self.process)
        self.stopped = True

    def cont(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.stopped = False

    def restart(self) -> None:
        """Start it again (killed first if it runs) with its data dir."""
        self.kill()
        self.start(self._initial_cluster, state="existing")

    def healthy(self, timeout: float = 1.0) -> bool:
        try:
            with urllib.request.urlopen(self.client_url + "/health", timeout=timeout) as answer:
                return json.loads(answer.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def is_raft_leader(self, timeout: float = 1.0) -> bool:
        """Whether this member leads etcd's own raft now."""
        request = urllib.request.Request(self.client_url + "/v3/maintenance/status", b"{}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status = json.loads(answer.read())
        except (OSError, ValueError):
            return False
        return status.get("leader") == status.get("header", {}).get("member_id")

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_path, "rb") as log:
                text = log.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])


class EtcdCluster:
    """`size` members forming one new cluster; `start()` (or `with`) returns
    once every member reports healthy, `close()` kills them and removes
    their data."""

    def __init__(self, size: int = 3, *, heartbeat_ms: int = 250, election_ms: int = 2500,
                 root: str | None = None) -> None:
        if root is None and os.access("/dev/shm", os.W_OK):
            root = "/dev/shm"
        self.root = tempfile.mkdtemp(prefix="amqp-server-etcd-", dir=root)
        ports = free_ports(2 * size)
        self.members = [
            EtcdMember(f"etcd{i}", ports[2 * i], ports[2 * i + 1],
                       os.path.join(self.root, f"etcd{i}"),
                       os.path.join(self.root, f"etcd{i}.log"), heartbeat_ms, election_ms)
            for i in range(size)]

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def endpoints(self) -> list[str]:
        return [m.client_url for m in self.members]

    @property
    def endpoints_arg(self) -> str:
        """As for `--cluster-etcd`: comma-separated."""
        return ",".join(self.endpoints)

    def raft_follower(self) -> EtcdMember:
        """A running member that does not lead etcd's raft: killing it leaves
        the others serving at once (killing the raft leader stops writes and
        linearizable reads for about one election timeout)."""
        running = [m for m in self.members if m.running and not m.stopped]
        return next((m for m in running if not m.is_raft_leader()), running[0])

    def start(self, timeout: float = HEALTHY_TIMEOUT) -> None:
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for member in self.members:
            member.start(initial)
        self.wait_healthy(timeout=timeout)

    def wait_healthy(self, members: list[EtcdMember] | None = None,
                     timeout: float = HEALTHY_TIMEOUT) -> None:
        """Until each of `members` (default: all) says it is healthy."""
        waiting = list(self.members if members is None else members)
        deadline = time.monotonic() + timeout
        while waiting:
            waiting = [m for m in waiting if not m.healthy()]
            if not waiting:
                return
            dead = [m for m in waiting if not m.running]
            if dead or time.monotonic() > deadline:
                problem = "exited" if dead else f"not healthy within {timeout:.0f} s"
                culprit = (dead or waiting)[0]
                raise RuntimeError(f"etcd member {culprit.name} {problem}; its log ends: "
                                   f"{culprit.log_tail()}")
            time.sleep(0.1)

    def close(self) -> None:
        for member in self.members:
            if member.stopped:
                member.cont()
            member.kill()
        shutil.rmtree(self.root, ignore_errors=True)
