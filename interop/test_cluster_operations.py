"""What operators and clients see of a three-node cluster: every node is
an address (AMQP and HTTP forwarded to the leader with the client's own
address), /api/nodes, the per-node health checks and metrics, and a
forged forwarding line refused."""

from __future__ import annotations

import socket
import struct
import urllib.error
import urllib.request
from time import time as real_time

import pika
import pytest
from pamqp import commands, frame as pamqp_frame

from amqp_server.cluster import forwarding
from interop.cluster_nodes import SECRET, BrokerCluster
from interop.etcd_cluster import EtcdCluster, etcd_binary

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(etcd_binary() is None,
                                 reason="etcd is not installed (Debian's etcd-server)")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EtcdCluster(3, heartbeat_ms=100, election_ms=1000) as etcd:
        with BrokerCluster(etcd, 3, tmp_path_factory.mktemp("cluster")) as nodes:
            nodes.wait_for_leader(in_sync=3)
            yield nodes


def followers(cluster):
    leader = cluster.wait_for_leader(in_sync=3)
    return leader, [node for node in cluster.nodes if node is not leader]


def test_every_node_lists_every_member_with_role_in_sync_and_lag(cluster):
    leader, others = followers(cluster)
    for asked in cluster.nodes:
        listed = {node["name"]: node for node in asked.api("/api/nodes")}
        assert set(listed) == {node.name for node in cluster.nodes}
        assert listed[leader.name]["role"] == "leader"
        assert [listed[node.name]["role"] for node in others] == ["follower", "follower"]
        assert all(node["in_sync"] for node in listed.values())
        assert all(isinstance(node["replication_lag"], int) for node in listed.values())


def test_a_client_of_a_follower_is_served_by_the_leader(cluster):
    leader, others = followers(cluster)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                                   others[0].amqp_port))
    channel = connection.channel()
    channel.queue_declare("through-a-follower", durable=True)
    client_port = connection._impl._transport._sock.getsockname()[1]
    names = [c["name"] for c in leader.api("/api/connections")]
    connection.close()
    # The leader lists the client's own address, not the follower's.
    assert any(name.startswith(f"127.0.0.1:{client_port} ->") for name in names), names
    queues = [q["name"] for q in others[1].api("/api/queues/%2F")]
    assert "through-a-follower" in queues


def test_health_checks_answer_for_the_node_asked(cluster):
    leader, others = followers(cluster)
    for node in cluster.nodes:
        assert node.api("/api/health/checks/node-is-in-sync")["status"] == "ok"
    # Three in sync, two needed: no single node is critical.
    assert others[0].api("/api/health/checks/node-is-quorum-critical")["status"] == "ok"


def test_each_node_exports_its_own_role(cluster):
    leader, others = followers(cluster)
    for node in cluster.nodes:
        url = f"http://127.0.0.1:{node.prometheus_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        role = 1 if node is leader else 0
        assert f'amqp_cluster_node_leader{{node="{node.name}"}} {role}' in text
        if node is leader:
            assert f'amqp_cluster_in_sync_members{{node="{node.name}"}} 3' in text
            for follower in others:
                assert f'follower="{follower.name}"' in text
            assert "rabbitmq_queues" in text  # the broker's own families too
        else:
            assert f'amqp_cluster_replica_lsn{{node="{node.name}"}}' in text


def _amqp_login(sock: socket.socket, preamble: bytes) -> object:
    """Send `preamble`, then the protocol header and a PLAIN guest login;
    returns the first method the broker answers after start-ok (or None
    when it closed the socket)."""
    sock.sendall(preamble + b"AMQP\x00\x00\x09\x01")
    buffer = b""

    def read_frame():
        nonlocal buffer
        while True:
            if len(buffer) >= 7:
                size = struct.unpack_from(">I", buffer, 3)[0]
                if len(buffer) >= size + 8:
                    consumed, _, value = pamqp_frame.unmarshal(buffer)
                    buffer = buffer[consumed:]
                    return value
            data = sock.recv(65536)
            if not data:
                return None
            buffer += data

    start = read_frame()
    if start is None:
        return None
    sock.sendall(pamqp_frame.marshal(commands.Connection.StartOk(
        client_properties={"capabilities": {"authentication_failure_close": True}},
        mechanism="PLAIN", response="\x00guest\x00guest"), 0))
    return read_frame()


def test_a_forwarded_client_is_judged_by_its_own_address(cluster):
    leader, _ = followers(cluster)
    # Signed with the cluster's secret: the leader believes the address,
    # and guest may only log in from loopback.
    line = forwarding.preamble(SECRET.encode(), "192.0.2.7", 40000, "node-x")
    with socket.create_connection(("127.0.0.1", leader.amqp_port), timeout=10) as sock:
        answer = _amqp_login(sock, line)
    assert isinstance(answer, commands.Connection.Close)
    assert answer.reply_code == 403
    line = forwarding.preamble(SECRET.encode(), "127.0.0.1", 40000, "node-x")
    with socket.create_connection(("127.0.0.1", leader.amqp_port), timeout=10) as sock:
        assert isinstance(_amqp_login(sock, line), commands.Connection.Tune)


def test_a_forwarding_line_without_the_secret_is_refused(cluster):
    leader, _ = followers(cluster)
    line = forwarding.preamble(b"not the secret", "127.0.0.1", 40000, "node-x")
    with socket.create_connection(("127.0.0.1", leader.amqp_port), timeout=10) as sock:
        assert _amqp_login(sock, line) is None
    # Nor does the cluster port talk to a stranger.
    with socket.create_connection(("127.0.0.1", leader.cluster_port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert sock.recv(100) == b""


def test_a_forwarding_line_is_believed_once(cluster):
    leader, _ = followers(cluster)
    line = forwarding.preamble(SECRET.encode(), "127.0.0.1", 40000, "node-x")
    with socket.create_connection(("127.0.0.1", leader.amqp_port), timeout=10) as sock:
        assert isinstance(_amqp_login(sock, line), commands.Connection.Tune)
    with socket.create_connection(("127.0.0.1", leader.amqp_port), timeout=10) as sock:
        assert _amqp_login(sock, line) is None  # replayed


def test_a_forwarding_line_from_a_clock_minutes_off_is_believed(cluster, monkeypatch):
    # A follower whose wall clock was stepped by five minutes (NTP) still
    # forwards: the nonce, not the clock, stops a replay.
    leader, _ = followers(cluster)
    monkeypatch.setattr(forwarding.time, "time", lambda: real_time() + 300)
    line = forwarding.preamble(SECRET.encode(), "127.0.0.1", 40000, "node-x")
    monkeypatch.undo()
    with socket.create_connection(("127.0.0.1", leader.amqp_port), timeout=10) as sock:
        assert isinstance(_amqp_login(sock, line), commands.Connection.Tune)


def test_the_management_api_forwarded_by_a_follower_checks_the_user(cluster):
    _, others = followers(cluster)
    request = urllib.request.Request(
        f"http://127.0.0.1:{others[0].management_port}/api/queues")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401


def test_amqpctl_cluster_status_through_any_node(cluster):
    import json
    import subprocess
    import sys
    leader, others = followers(cluster)
    done = subprocess.run(
        [sys.executable, "-m", "policies.ctl", "--port", str(others[0].management_port),
         "cluster_status", "--formatter", "json"],
        capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cluster_name"] == "amqp-server"
    assert report["leader"] == leader.name
    assert sorted((n["name"], n["role"], n["in_sync"]) for n in report["nodes"]) == sorted(
        (node.name, "leader" if node is leader else "follower", True)
        for node in cluster.nodes)
