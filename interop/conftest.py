"""Fixtures: a real broker on an ephemeral loopback port, real clients, and a
reference RabbitMQ for differential tests when one is reachable."""

from __future__ import annotations

import base64
import json
import os
import socket
import urllib.request

import pika
import pytest

from amqp_server.testing import BrokerThread

RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


@pytest.fixture
def broker():
    with BrokerThread() as running:
        yield running


@pytest.fixture
def connection(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection):
    return connection.channel()


RABBITMQ_MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
RABBITMQ_PROMETHEUS_URL = os.environ.get("RABBITMQ_PROMETHEUS_URL", "http://127.0.0.1:15692")
MISSING_HINT = ("install and start Debian's rabbitmq-server (`apt-get install -y "
                "rabbitmq-server`, `rabbitmq-server -detached`, as .ci/run does)")


def amqp_product(url: str) -> str | None:
    """The `product` a broker at `url` names in connection.start, or None
    when nothing answers there."""
    params = pika.URLParameters(url)
    try:
        with socket.create_connection((params.host, params.port), timeout=1):
            pass
        conn = pika.BlockingConnection(params)
    except Exception:
        return None
    try:
        product = (conn._impl.server_properties or {}).get("product")
    finally:
        conn.close()
    return product.decode() if isinstance(product, bytes) else product


def management_product(url: str, user: str = "guest", password: str = "guest") -> str | None:
    """`product_name` of the management API at `url`, or None without one."""
    request = urllib.request.Request(url + "/api/overview")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read()).get("product_name")
    except (OSError, ValueError):
        return None


def require_rabbitmq(product: str | None, where: str, hint: str) -> None:
    """Differential tests compare with RabbitMQ itself: anything else at
    `where` (this broker listens on RabbitMQ's ports too) or nothing at all
    skips them locally and fails them under CI."""
    if product == "RabbitMQ":
        return
    if product is None:
        message = f"no reference RabbitMQ reachable at {where}: {hint}"
    else:
        message = (f"the broker at {where} is {product!r}, not RabbitMQ: differential tests "
                   f"need a real RabbitMQ there ({hint})")
    missing(message)


def missing(message: str) -> None:
    """Something a test needs from the machine is not there: skip locally,
    fail under CI (which installs it)."""
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def rabbitmq_url():
    require_rabbitmq(amqp_product(RABBITMQ_URL), RABBITMQ_URL, MISSING_HINT)
    return RABBITMQ_URL


def require_plugin(product, url: str, plugin: str) -> str:
    """`url` once the reference answers there through its `plugin`."""
    require_rabbitmq(product(url), url, f"enable its {plugin} plugin: `rabbitmq-plugins "
                                        f"enable {plugin}`, as .ci/run does")
    return url


@pytest.fixture(scope="session")
def rabbitmq_management_url(rabbitmq_url):
    return require_plugin(management_product, RABBITMQ_MANAGEMENT_URL, "rabbitmq_management")


def prometheus_product(url: str) -> str | None:
    """"RabbitMQ" when the exporter at `url` is RabbitMQ's plugin: its build
    info names an Erlang release (this broker's, on the same port, does not)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
            text = response.read().decode()
    except (OSError, ValueError):
        return None
    build = [line for line in text.splitlines() if line.startswith("rabbitmq_build_info{")]
    if build and "erlang_version=" in build[0]:
        return "RabbitMQ"
    return "another exporter"


@pytest.fixture(scope="session")
def rabbitmq_prometheus_url(rabbitmq_url):
    return require_plugin(prometheus_product, RABBITMQ_PROMETHEUS_URL, "rabbitmq_prometheus")


@pytest.fixture
def etcd_cluster():
    """Three real etcd members on loopback ports (etcd_cluster.py), killed and
    their data removed after the test."""
    from .etcd_cluster import EtcdCluster, etcd_binary
    if etcd_binary() is None:
        missing("etcd is not installed: install Debian's etcd-server (`apt-get install -y "
                "etcd-server`, as .ci/run does)")
    with EtcdCluster(3) as cluster:
        yield cluster


@pytest.fixture
def cluster(tmp_path):
    """Three broker nodes on a three-member etcd (heartbeats every 100 ms, a
    1 s election timeout), yielded once one of them leads."""
    from .cluster_nodes import BrokerCluster
    from .etcd_cluster import EtcdCluster
    with EtcdCluster(3, heartbeat_ms=100, election_ms=1000) as etcd:
        with BrokerCluster(etcd, 3, tmp_path) as nodes:
            nodes.wait_for_leader()
            yield nodes


@pytest.fixture
def data_dir(tmp_path) -> str:
    """A data directory for a broker (pytest's tmp_path, as the path string
    the broker's flags and config take)."""
    return str(tmp_path)


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for every local audit run of a test process."""
    pytest.importorskip("pyspark")
    from spark.session import build_session
    session = build_session(conf={"spark.default.parallelism": "2"}, quick_jit=True)
    yield session
    session.stop()


@pytest.fixture
def connect_server(tmp_path):
    """A Spark Connect server on loopback: its sc:// URL."""
    pytest.importorskip("pyspark")
    from .spark_runs import spark_connect_server
    with spark_connect_server(tmp_path) as url:
        yield url


@pytest.fixture(scope="module")
def chromium():
    """A headless chromium for a module's browser tests."""
    from .browser import start_chromium
    driver = start_chromium()
    yield driver
    driver.quit()


@pytest.fixture
def console(broker, chromium):
    """The web console of `broker` in that chromium."""
    from .browser import Console
    return Console(chromium, broker.management_url)
