"""A cluster whose network can fail for real: each node in a network
namespace of its own, beside its etcd member, the namespaces joined by veth
pairs to one bridge; faults are nftables drop rules inside a namespace.

    with NetCluster(tmp_path) as cluster:      # 3 namespaces, 3 etcd, 3 brokers
        cluster.isolate(0)                      # node 0 and its etcd member alone
        cluster.cut(0, 1, keep_etcd=True)       # brokers 0 and 1 apart, etcd whole
        cluster.heal()
        cluster.nodes[1].kill(); cluster.nodes[1].start()

The test process stays in the root namespace, on the bridge (10.N.0.1), and
reaches every node and etcd member at its namespace's address
(10.N.0.11, .12, ...): faults are between the nodes, never between a node
and its clients, as in Jepsen's partitions.  Root only (CI runs as root):
`available()` says why not where namespaces or nftables cannot be used.
Every wait is bounded; `close()` kills every process and removes the
namespaces and the bridge, also after a failure.

etcd runs with the flags the clustering docs recommend: heartbeat 100 ms,
election timeout 1000 ms, pre-vote on.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

from interop.etcd_cluster import etcd_binary, stop_process

ETCD_CLIENT, ETCD_PEER = 2379, 2380
AMQP, MANAGEMENT, PROMETHEUS, CLUSTER = 5672, 15672, 15692, 5679
SECRET = "fault-suite-secret"
START_TIMEOUT = 40.0
FAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))), "")
ETCD_FLAGS = ["--heartbeat-interval", "100", "--election-timeout", "1000", "--pre-vote"]


def _run(*argv: str, check: bool = True, input: str | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def available() -> str | None:
    """None when namespaces, veth, bridges and nftables can be used here;
    otherwise why not, in one line."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian's iproute2 and nftables)"
    if etcd_binary() is None:
        return "etcd is not installed (Debian's etcd-server)"
    if shutil.which("etcdctl") is None:
        return "etcdctl is not installed (Debian's etcd-client)"
    if not FAKETIME:
        return "libfaketime is not installed (Debian's faketime)"
    probe = f"aqprobe{os.getpid() % 100000}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "nft", "list", "tables")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"network namespaces or nftables cannot be used here: {exc}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


class Network:
    """A bridge in the root namespace and one namespace per node on it."""

    def __init__(self, size: int) -> None:
        tag = f"{os.getpid() % 10000}{random.randrange(100)}"
        self.bridge = f"aqbr{tag}"
        self.namespaces = [f"aq{tag}n{i}" for i in range(size)]
        self.subnet = f"10.{random.randrange(100, 250)}.{random.randrange(0, 250)}"
        self.gateway = f"{self.subnet}.1"
        self.addresses = [f"{self.subnet}.{11 + i}" for i in range(size)]
        self._made: list[tuple[str, ...]] = []

    def create(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made.append(("ip", "link", "del", self.bridge))
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for index, (namespace, address) in enumerate(zip(self.namespaces, self.addresses)):
            outside = f"{self.bridge}v{index}"
            _run("ip", "netns", "add", namespace)
            self._made.append(("ip", "netns", "del", namespace))
            _run("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0",
                 "netns", namespace)
            _run("ip", "link", "set", outside, "master", self.bridge)
            _run("ip", "link", "set", outside, "up")
            _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", namespace, "link", "set", "eth0", "up")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
            _run("ip", "netns", "exec", namespace, "nft", "-f", "-", input=(
                "table inet fault {\n"
                "  chain input { type filter hook input priority 0; policy accept; }\n"
                "  chain output { type filter hook output priority 0; policy accept; }\n"
                "}\n"))

    def destroy(self) -> None:
        for command in reversed(self._made):
            _run(*command, check=False)
        self._made.clear()

    def exec(self, index: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[index], *argv]

    def drop(self, index: int, peer: int, keep_etcd: bool = False) -> None:
        """Drop what node `index` and node `peer` send each other (in
        `index`'s namespace, both ways); with `keep_etcd`, not etcd's own
        traffic (client and peer ports), only the brokers'."""
        other = self.addresses[peer]
        unless = (f"tcp dport != {{ {ETCD_CLIENT}, {ETCD_PEER} }} "
                  f"tcp sport != {{ {ETCD_CLIENT}, {ETCD_PEER} }} " if keep_etcd else "")
        for chain, direction in (("input", "saddr"), ("output", "daddr")):
            _run("ip", "netns", "exec", self.namespaces[index], "nft", "add", "rule", "inet",
                 "fault", chain, "ip", direction, other, *unless.split(), "drop")

    def heal(self) -> None:
        for namespace in self.namespaces:
            for chain in ("input", "output"):
                _run("ip", "netns", "exec", namespace, "nft", "flush", "chain", "inet",
                     "fault", chain, check=False)


class NetEtcd:
    def __init__(self, net: Network, index: int, root: Path) -> None:
        self.net = net
        self.index = index
        self.name = f"etcd{index}"
        self.address = net.addresses[index]
        self.data_dir = root / self.name
        self.log_path = root / f"{self.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://{self.address}:{ETCD_CLIENT}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.address}:{ETCD_PEER}"

    def start(self, initial_cluster: str) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.net.exec(self.index, [
                etcd_binary() or "etcd", "--name", self.name, "--data-dir", str(self.data_dir),
                "--listen-client-urls", self.client_url, "--advertise-client-urls",
                self.client_url, "--listen-peer-urls", self.peer_url,
                "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", "fault-suite", *ETCD_FLAGS]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)

    def status(self, timeout: float = 1.0) -> dict:
        request = urllib.request.Request(self.client_url + "/v3/maintenance/status", b"{}")
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.client_url + "/health", timeout=1.0) as answer:
                return json.loads(answer.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def member_id(self) -> int:
        return int(self.status()["header"]["member_id"])

    def leads(self) -> bool:
        try:
            status = self.status()
        except (OSError, ValueError):
            return False
        return status.get("leader") == status.get("header", {}).get("member_id")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)


class NetNode:
    """One broker node in namespace `index`."""

    def __init__(self, net: Network, index: int, root: Path, etcd_urls: list[str],
                 config: Path) -> None:
        self.net = net
        self.index = index
        self.name = f"n{index}"
        self.address = net.addresses[index]
        self.data_dir = root / self.name
        self.log_path = root / f"{self.name}.log"
        self.etcd_urls = etcd_urls
        self.config = config
        self.process: subprocess.Popen[str] | None = None
        # libfaketime's offset file: written to jump this node's wall clock.
        self.clock_file = root / f"{self.name}.faketime"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.address}:{AMQP}/"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.clock_file.write_text("+0\n")
        env = dict(os.environ, AMQP_SERVER_CLUSTER_SECRET=SECRET,
                   PYTHONPATH=str(Path(__file__).resolve().parent.parent),
                   # The wall clock only (an NTP step); time.monotonic() is
                   # what leases are timed by, and it never jumps.
                   LD_PRELOAD=FAKETIME, FAKETIME_TIMESTAMP_FILE=str(self.clock_file),
                   FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_NO_CACHE="0",
                   FAKETIME_CACHE_DURATION="1")
        # This node's own etcd member first: it talks to it while it can.
        urls = [self.etcd_urls[self.index]] + [u for i, u in enumerate(self.etcd_urls)
                                               if i != self.index]
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(self.net.exec(self.index, [
            sys.executable, "-m", "amqp_server", "--host", self.address, "--port", str(AMQP),
            "--management-port", str(MANAGEMENT), "--prometheus-port", str(PROMETHEUS),
            "--cluster-port", str(CLUSTER), "--cluster-etcd", ",".join(urls),
            "--node-name", self.name, "--data-dir", str(self.data_dir),
            "--config", str(self.config), "--log-level", "info"]),
            env=env, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if "cluster port" in line:
                return
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"node {self.name} did not start: {self.log_tail()}")

    def kill(self) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def pause(self) -> None:
        assert self.process is not None
        stop_process(self.process)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def jump_clock(self, seconds: float) -> None:
        """Step this node's wall clock by `seconds` (libfaketime re-reads
        the offset within a second)."""
        self.clock_file.write_text(f"{seconds:+.0f}\n")

    def api(self, path: str, timeout: float = 3.0):
        request = urllib.request.Request(f"http://{self.address}:{MANAGEMENT}{path}")
        request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())

    def metrics(self, timeout: float = 1.0) -> str:
        with urllib.request.urlopen(f"http://{self.address}:{PROMETHEUS}/metrics",
                                    timeout=timeout) as answer:
            return answer.read().decode()

    def confirming(self) -> bool | None:
        """Whether this node could confirm a publish at the moment it was
        asked (None: it did not answer)."""
        try:
            text = self.metrics()
        except (OSError, ValueError):
            return None
        for line in text.splitlines():
            if line.startswith("amqp_cluster_node_confirming{"):
                return line.rsplit(" ", 1)[1].strip() == "1"
        return None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "".join(self.log_path.read_text().splitlines(True)[-lines:])
        except OSError:
            return "(no log)"


class NetCluster:
    def __init__(self, root: Path, size: int = 3, config: str = "") -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        # etcd's data on tmpfs: fsync on a busy disk stalls its raft more
        # than any fault here does.
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.etcd_root = Path(tempfile.mkdtemp(prefix="amqp-faults-etcd-", dir=shm))
        self.net = Network(size)
        self.etcd = [NetEtcd(self.net, i, self.etcd_root) for i in range(size)]
        self.config = self.root / "cluster.toml"
        # The tests reach the nodes from the bridge's address, not loopback.
        self.config.write_text("loopback_users = []\n" + config)
        urls = [member.client_url for member in self.etcd]
        self.nodes = [NetNode(self.net, i, self.root, urls, self.config) for i in range(size)]

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        self.net.create()
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.etcd)
        for member in self.etcd:
            member.start(initial)
        deadline = time.monotonic() + START_TIMEOUT
        while not all(member.healthy() for member in self.etcd):
            if time.monotonic() > deadline:
                raise RuntimeError("etcd did not become healthy in the namespaces")
            time.sleep(0.1)
        for node in self.nodes:
            node.start()

    def close(self) -> None:
        for node in self.nodes:
            try:
                node.terminate()
            except (OSError, subprocess.SubprocessError):
                pass
        for member in self.etcd:
            member.kill()
        self.net.destroy()
        shutil.rmtree(self.etcd_root, ignore_errors=True)

    # ---- faults -------------------------------------------------------------

    def isolate(self, index: int) -> None:
        """Node `index` and its etcd member apart from every other node."""
        for peer in range(len(self.nodes)):
            if peer != index:
                self.net.drop(index, peer)

    def cut(self, a: int, b: int, keep_etcd: bool = False) -> None:
        self.net.drop(a, b, keep_etcd=keep_etcd)

    def heal(self) -> None:
        self.net.heal()

    def make_etcd_leader(self, index: int, timeout: float = 15.0) -> None:
        """Move etcd's raft leadership to node `index`'s member."""
        target = self.etcd[index].member_id()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.etcd[index].leads():
                return
            leader = next((m for m in self.etcd if m.leads()), None)
            if leader is not None:
                _run("etcdctl", "--endpoints", leader.client_url.removeprefix("http://"),
                     "move-leader", f"{target:x}", check=False)
            time.sleep(0.3)
        raise RuntimeError(f"etcd's leadership did not move to {self.etcd[index].name}")

    # ---- what the cluster says ---------------------------------------------------

    def describe(self) -> list[dict] | None:
        """/api/nodes as the first node that answers says."""
        for node in self.nodes:
            if not node.running:
                continue
            try:
                return node.api("/api/nodes", timeout=2.0)
            except (OSError, urllib.error.URLError, ValueError):
                continue
        return None

    def whole(self) -> int | None:
        """The leader's index once one node leads with every other node in
        sync and running; else None."""
        listed = self.describe()
        if not listed or len(listed) != len(self.nodes):
            return None
        leaders = [n["name"] for n in listed if n.get("role") == "leader"]
        if (len(leaders) != 1 or not all(n.get("in_sync") for n in listed)
                or not all(n.get("running") for n in listed)):
            return None
        return int(leaders[0][1:])

    def wait_whole(self, timeout: float = 60.0) -> tuple[int, float]:
        """(the leader's index, seconds waited) once the cluster is whole."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            leader = self.whole()
            if leader is not None:
                return leader, time.monotonic() - began
            time.sleep(0.2)
        raise AssertionError(f"the cluster was not whole within {timeout} s: "
                             f"{self.describe()}; logs:\n" + self.logs())

    def logs(self, lines: int = 25) -> str:
        return "\n".join(f"--- {node.name}\n{node.log_tail(lines)}" for node in self.nodes)
