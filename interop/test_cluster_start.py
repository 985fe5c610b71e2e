"""A node that cannot take part in a cluster says why in one plain line and
exits, before it serves anyone: no etcd to reach, no shared secret, bad
cluster keys."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from interop.etcd_cluster import free_ports

pytestmark = pytest.mark.cluster


def start(tmp_path, *flags: str, secret: str | None = "s3cret") -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items()
           if key != "AMQP_SERVER_CLUSTER_SECRET"}
    if secret is not None:
        env["AMQP_SERVER_CLUSTER_SECRET"] = secret
    return subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--management-port", "-1",
         "--prometheus-port", "-1", "--cluster-port", "0", "--data-dir", str(tmp_path),
         *flags], capture_output=True, text=True, timeout=60, env=env)


def test_a_node_whose_etcd_is_down_says_so_in_one_line(tmp_path):
    dead = free_ports(2)
    urls = ",".join(f"http://127.0.0.1:{port}" for port in dead)
    done = start(tmp_path, "--cluster-etcd", urls)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines == [f"amqp-server: cannot join the cluster: etcd at "
                     f"{urls.replace(',', ', ')} is not reachable: connection refused"]
    assert done.stdout == ""


def test_a_cluster_without_a_shared_secret_is_refused(tmp_path):
    done = start(tmp_path, "--cluster-etcd", "http://127.0.0.1:2379", secret=None)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "amqp-server: a cluster needs a shared secret: set cluster_secret in the config "
        "file or AMQP_SERVER_CLUSTER_SECRET, the same on every node")


def test_bad_cluster_keys_are_named(tmp_path):
    config = tmp_path / "cluster.toml"
    config.write_text("min_in_sync = 0\n")
    done = start(tmp_path, "--cluster-etcd", "http://127.0.0.1:2379", "--config", str(config))
    assert done.returncode == 2
    assert "min_in_sync must be at least 1 (the leader), got 0" in done.stderr
    config.write_text('cluster_etcd = "http://127.0.0.1:2379"\nclusterport = 1\n')
    done = start(tmp_path, "--config", str(config))
    assert done.returncode == 2
    assert 'unknown key "clusterport"; did you mean "cluster_port"?' in done.stderr
