"""Real broker nodes of one cluster, as subprocesses on loopback, for the
cluster tests: each is `python -m amqp_server` with the cluster flags, its
own data directory and free ports, pointed at a real etcd (etcd_cluster.py).

    with EtcdCluster(3, ...) as etcd, BrokerCluster(etcd, 3, tmp_path) as nodes:
        leader = nodes.wait_for_leader()
        leader.kill()                    # SIGKILL
        nodes[1].stop(); nodes[1].cont() # SIGSTOP / SIGCONT
        nodes[2].wipe_and_restart()

Every wait is bounded; a node that does not come up says why from its log.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from interop.etcd_cluster import free_ports

SECRET = "cluster-test-secret"
START_TIMEOUT = 30.0


class BrokerNode:
    def __init__(self, name: str, etcd, data_dir: Path, config: Path) -> None:
        self.name = name
        self.etcd = etcd
        self.data_dir = data_dir
        self.config = config
        self.log_path = data_dir.parent / f"{name}.log"
        (self.amqp_port, self.management_port, self.cluster_port,
         self.prometheus_port) = free_ports(4)
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ, AMQP_SERVER_CLUSTER_SECRET=SECRET,
                   PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "amqp_server", "--host", "127.0.0.1",
             "--port", str(self.amqp_port), "--management-port", str(self.management_port),
             "--prometheus-port", str(self.prometheus_port),
             "--cluster-port", str(self.cluster_port),
             "--cluster-etcd", ",".join(self.etcd.endpoints), "--node-name", self.name,
             "--data-dir", str(self.data_dir), "--config", str(self.config),
             "--log-level", "info"],
            env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if "cluster port" in line:
                return
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"node {self.name} did not start: {self.log_tail()}")

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.running:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        if self.running:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def wipe_and_restart(self) -> None:
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.start()

    def api(self, path: str, timeout: float = 5.0, body: dict | None = None):
        """GET `path`, or POST `body` to it, as guest; the answer's JSON."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.management_port}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={} if body is None else {"Content-Type": "application/json"})
        request.add_header("Authorization",
                           "Basic " + base64.b64encode(b"guest:guest").decode())
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "".join(self.log_path.read_text().splitlines(True)[-lines:])
        except OSError:
            return "(no log)"


class BrokerCluster:
    def __init__(self, etcd, size: int, root: Path, *, lease_ttl: int = 2,
                 lag_timeout_ms: int = 1000, min_in_sync: int = 2) -> None:
        self.etcd = etcd
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / "cluster.toml"
        self.config.write_text(f"cluster_lease_ttl = {lease_ttl}\n"
                               f"cluster_lag_timeout = {lag_timeout_ms}\n"
                               f"min_in_sync = {min_in_sync}\n")
        self.nodes = [BrokerNode(f"node{i}", etcd, root / f"node{i}", self.config)
                      for i in range(size)]

    def __enter__(self) -> BrokerCluster:
        try:
            for node in self.nodes:
                node.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __getitem__(self, index: int) -> BrokerNode:
        return self.nodes[index]

    def close(self) -> None:
        for node in self.nodes:
            node.terminate()

    def describe(self, among: list[BrokerNode] | None = None) -> list[dict] | None:
        """/api/nodes as the first answering node (forwarded to the leader) says."""
        for node in among or self.nodes:
            if not node.running:
                continue
            try:
                return node.api("/api/nodes", timeout=2.0)
            except (OSError, urllib.error.URLError, ValueError):
                continue
        return None

    def wait_for_leader(self, among: list[BrokerNode] | None = None, in_sync: int = 2,
                        timeout: float = 30.0) -> BrokerNode:
        """The leading node once it leads with at least `in_sync` copies."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            listed = self.describe(among)
            last = listed
            if listed:
                leaders = [n["name"] for n in listed if n.get("role") == "leader"]
                synced = [n for n in listed if n.get("in_sync")]
                if len(leaders) == 1 and len(synced) >= in_sync:
                    return next(node for node in self.nodes if node.name == leaders[0])
            time.sleep(0.1)
        raise AssertionError(f"no leader with {in_sync} in-sync copies within {timeout} s; "
                             f"last /api/nodes: {last}; logs:\n" + "\n".join(
                                 f"--- {n.name}\n{n.log_tail()}" for n in self.nodes))
