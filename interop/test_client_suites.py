"""kombu's and py-amqp's own integration suites, from the release archives
of the installed versions (downloaded by scripts/env.sh at install time,
never at test time), run against this broker and against the reference
RabbitMQ: every test that passes there passes here.

py-amqp's TLS tests run against this broker with certificates made for
the run (the reference RabbitMQ has no TLS listener); its two tests that
need badssl.com on the internet are left out."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pika
import pytest
import trustme

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .conftest import RABBITMQ_URL

ROOT = Path(__file__).resolve().parent.parent
ARCHIVES = Path(sys.prefix) / "client-suites"
SUITES = {
    # archive name prefix: (-E environment, test paths, -k expression)
    "kombu": ("py-amqp", ["t/integration/test_py_amqp.py"], None),
    "amqp": ("rabbitmq", ["t/integration"], "not default_certs"),
}
# Queues the suites leave behind on the reference broker (durable, so a
# second run there would start with old messages).
LEFTOVERS = ["priority_requeue_test"]


def unpacked(name: str, into: Path) -> Path:
    archives = sorted(ARCHIVES.glob(f"{name}-*.tar.gz"))
    if not archives:
        message = (f"no {name} release archive in {ARCHIVES}: scripts/env.sh downloads it "
                   "when it installs the test dependencies (delete .venv to reinstall)")
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with tarfile.open(archives[-1]) as archive:
        top = archive.getnames()[0].split("/")[0]
        members = [m for m in archive.getmembers()
                   if m.name.startswith(f"{top}/t/") and "/unit/" not in m.name]
        archive.extractall(into, members=members, filter="data")
    return into / top


def run_suite(name: str, folder: Path, port: int, tls_port: int | None,
              exclude_tls: bool) -> dict[str, str]:
    """Each test's outcome: passed, failed, error or skipped."""
    env_name, paths, keyword = SUITES[name]
    if exclude_tls:
        keyword = f"({keyword}) and not tls" if keyword else "not tls"
    report = folder / f"report-{port}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "interop.client_suites.env_option", "--rootdir", str(folder),
               # their setup.cfg's: test classes are named test_*
               "-o", "python_classes=test_*",
               "-E", env_name, f"--junitxml={report}", *paths]
    if keyword:
        command += ["-k", keyword]
    environment = dict(os.environ, PYTHONPATH=str(ROOT), RABBITMQ_HOST="127.0.0.1",
                       RABBITMQ_5672_TCP=str(port), RABBITMQ_5671_TCP=str(tls_port or 1))
    subprocess.run(command, cwd=folder, env=environment, capture_output=True, timeout=600,
                   check=False)
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcomes[test] = next((kind for kind in ("failure", "error", "skipped")
                               if kind in kinds), "passed")
    return outcomes


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> dict[str, str]:
    """py-amqp's TLS tests read t/certs/ (left out of its archive)."""
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    files = {name: str(folder / f"{name}.pem") for name in ("ca_certificate", "server")}
    ca.cert_pem.write_to_path(files["ca_certificate"])
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        files["server"])
    for suffix, issuer in (("", ca), ("_broken", trustme.CA())):  # another CA: refused
        client = issuer.issue_cert("client@example")
        files[f"client_certificate{suffix}"] = str(folder / f"client_certificate{suffix}.pem")
        files[f"client_key{suffix}"] = str(folder / f"client_key{suffix}.pem")
        client.cert_chain_pems[0].write_to_path(files[f"client_certificate{suffix}"])
        client.private_key_pem.write_to_path(files[f"client_key{suffix}"])
    return files


def clear_leftovers(url: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    for queue in LEFTOVERS:
        conn.channel().queue_delete(queue)
    conn.close()


@pytest.mark.parametrize("name", sorted(SUITES))
def test_client_suite_passes_as_against_rabbitmq(name, tmp_path, tls_files, rabbitmq_url):
    folder = unpacked(name, tmp_path)
    certs = folder / "t" / "certs"
    certs.mkdir(exist_ok=True)
    for file, path in tls_files.items():
        if file != "server":
            (certs / f"{file}.pem").write_bytes(Path(path).read_bytes())
    config = BrokerConfig(tls_port=0, tls_certfile=tls_files["server"],
                          tls_keyfile=tls_files["server"],
                          tls_cacertfile=tls_files["ca_certificate"], tls_verify_peer=True,
                          tls_fail_if_no_peer_cert=True)
    with BrokerThread(config) as broker:
        ours = run_suite(name, folder, broker.port, broker.tls_port, exclude_tls=False)
    clear_leftovers(rabbitmq_url)
    reference = run_suite(name, folder, pika.URLParameters(RABBITMQ_URL).port, None,
                          exclude_tls=True)
    clear_leftovers(rabbitmq_url)
    assert ours and reference
    assert [test for test, outcome in ours.items() if outcome in ("failure", "error")] == []
    passed_there = {test for test, outcome in reference.items() if outcome == "passed"}
    assert passed_there <= {test for test, outcome in ours.items() if outcome == "passed"}
