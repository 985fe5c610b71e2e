"""A three-node RabbitMQ cluster on this machine, beside whatever RabbitMQ
already runs: Debian's rabbitmq-server started three times with their own
node names, AMQP and distribution ports, data and log directories and no
plugins, the second and third joined to the first with
`rabbitmqctl join_cluster`.

    with RabbitCluster(3) as nodes:
        urls = nodes.urls
        nodes.kill(1)     # kill -9 of the node's Erlang VM
        nodes.start(1)    # back, rejoins by itself

Runs as the `rabbitmq` user (as Debian's wrapper does) when started by
root, sharing that user's Erlang cookie.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from .procinfo import tree_rss_bytes

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
START_TIMEOUT = 180.0


def available() -> bool:
    return os.access(SERVER, os.X_OK) and os.access(CTL, os.X_OK)


class RabbitCluster:
    def __init__(self, size: int = 3, first_port: int = 5681, first_dist: int = 25681) -> None:
        self.size = size
        self.ports = [first_port + i for i in range(size)]
        self.dist_ports = [first_dist + i for i in range(size)]
        self.names = [f"bench{i + 1}@localhost" for i in range(size)]
        self.root = Path(tempfile.mkdtemp(prefix="rabbit-cluster-"))
        self.processes: list[subprocess.Popen | None] = [None] * size
        self._as_rabbitmq = os.geteuid() == 0 and _user_exists("rabbitmq")

    @property
    def urls(self) -> list[str]:
        return [f"amqp://guest:guest@127.0.0.1:{port}/%2F" for port in self.ports]

    def _env(self, index: int) -> dict:
        base = self.root / f"node{index + 1}"
        plugins = self.root / "enabled_plugins"
        return dict(os.environ,
                    RABBITMQ_NODENAME=self.names[index],
                    RABBITMQ_NODE_PORT=str(self.ports[index]),
                    RABBITMQ_DIST_PORT=str(self.dist_ports[index]),
                    RABBITMQ_MNESIA_BASE=str(base / "mnesia"),
                    RABBITMQ_LOG_BASE=str(base / "log"),
                    RABBITMQ_PID_FILE=str(base / "pid"),
                    RABBITMQ_ENABLED_PLUGINS_FILE=str(plugins),
                    RABBITMQ_CONFIG_FILE=str(self.root / "rabbitmq"),
                    HOME="/var/lib/rabbitmq" if self._as_rabbitmq else os.environ["HOME"])

    def _command(self, argv: list[str]) -> list[str]:
        if not self._as_rabbitmq:
            return argv
        return ["setpriv", "--reuid=rabbitmq", "--regid=rabbitmq", "--init-groups", *argv]

    def start(self, index: int) -> None:
        env = self._env(index)
        for key in ("RABBITMQ_MNESIA_BASE", "RABBITMQ_LOG_BASE"):
            Path(env[key]).mkdir(parents=True, exist_ok=True)
        if self._as_rabbitmq:
            subprocess.run(["chown", "-R", "rabbitmq:rabbitmq", str(self.root)], check=True)
        with open(self.root / f"node{index + 1}.out", "a") as log:
            self.processes[index] = subprocess.Popen(
                self._command(["sh", "-c", f"ulimit -n 20000; exec {SERVER}"]), env=env,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._ctl(index, "await_startup", timeout=START_TIMEOUT)

    def _ctl(self, index: int, *args: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(self._command([CTL, "-n", self.names[index], *args]),
                                  env=self._env(index), capture_output=True, text=True,
                                  timeout=timeout, check=False)
            if done.returncode == 0:
                return done.stdout
            if time.monotonic() > deadline:
                raise RuntimeError(f"rabbitmqctl {' '.join(args)} on {self.names[index]} "
                                   f"failed: {done.stderr.strip() or done.stdout.strip()}")
            time.sleep(1)

    def __enter__(self) -> Self:
        (self.root / "enabled_plugins").write_text("[].\n")
        (self.root / "rabbitmq.conf").write_text("loopback_users = none\n")
        try:
            for index in range(self.size):
                self.start(index)
            for index in range(1, self.size):
                self._ctl(index, "stop_app")
                self._ctl(index, "join_cluster", self.names[0])
                self._ctl(index, "start_app")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def os_pid(self, index: int) -> int | None:
        try:
            return int((self.root / f"node{index + 1}" / "pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def kill(self, index: int) -> None:
        """kill -9 of the node's Erlang VM (and its shell)."""
        pid = self.os_pid(index)
        process = self.processes[index]
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(30)
            self.processes[index] = None

    def rss_bytes(self) -> int:
        """Resident memory of every node's Erlang VM and its helper
        programs (erl_child_setup, inet_gethost)."""
        total = 0
        for index in range(self.size):
            pid = self.os_pid(index)
            if pid is None or self.processes[index] is None:
                continue
            try:
                total += tree_rss_bytes(pid)
            except OSError:
                continue
        return total

    def queue_status(self, queue: str) -> dict:
        """A quorum queue's `leader`, `members` and `online` members (node
        names), as a running node's `rabbitmqctl list_queues` says."""
        running = [i for i in range(self.size) if self.processes[i] is not None]
        if not running:
            raise RuntimeError("no node of the cluster is running")
        listed = json.loads(self._ctl(running[0], "list_queues", "name", "leader", "members",
                                      "online", "--quiet", "--formatter", "json"))
        for entry in listed:
            if entry.get("name") == queue:
                return entry
        raise RuntimeError(f"no queue {queue} on {self.names[running[0]]}")

    def close(self) -> None:
        for index in range(self.size):
            self.kill(index)
        # epmd stays for the reference node; only our files go.
        shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        import pwd
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False
