"""amqpctl's runtime verbs (list_connections, list_consumers,
close_connection, status), its global options on either side of the verb,
and its errors, driven through the CLI against a broker on a real port."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pika
import pytest
from pamqp import commands as spec

from policies import ctl
from policies.ctl.runtime import CONNECTION_COLUMNS, CONSUMER_COLUMNS

from .management_api import http
from .rawclient import RawClient

ROOT = Path(__file__).resolve().parent.parent


def run(broker, capsys, *argv: str) -> tuple[int, list[str], str]:
    """(exit code, stdout lines, stderr) of amqpctl against `broker`."""
    code = ctl.main(["--port", str(broker.management_port), *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def rows(lines: list[str]) -> list[list[str]]:
    return [line.split("\t") for line in lines]


@pytest.fixture
def client(broker):
    raw = RawClient.opened(broker.port, queue="rt.q")
    yield raw
    raw.close()


def test_list_connections_shows_rabbitmqctls_default_columns(broker, client, capsys):
    code, lines, _ = run(broker, capsys, "list_connections")
    assert code == 0
    peer_port = client.sock.getsockname()[1]
    assert lines == ["Listing connections ...", "user\tpeer_host\tpeer_port\tstate",
                     f"guest\t127.0.0.1\t{peer_port}\trunning"]


def test_list_connections_fills_every_column_it_accepts(broker, client, capsys):
    code, lines, _ = run(broker, capsys, "-q", "list_connections", "--formatter", "json",
                         *CONNECTION_COLUMNS)
    assert code == 0
    [row] = json.loads("\n".join(lines))
    assert list(row) == list(CONNECTION_COLUMNS)
    assert all(row[column] is not None for column in CONNECTION_COLUMNS), row
    assert row["port"] == broker.port and row["ssl"] is False and row["channels"] == 1
    assert row["name"] == (f"127.0.0.1:{client.sock.getsockname()[1]} -> "
                           f"127.0.0.1:{broker.port}")


def test_list_consumers_in_a_vhost(broker, capsys):
    broker.add_vhost("rt.v")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = conn.channel()
        channel.queue_declare("rt.work")
        channel.basic_qos(prefetch_count=7)
        channel.basic_consume("rt.work", lambda *a: None, consumer_tag="rt.tag")
        code, lines, _ = run(broker, capsys, "list_consumers")
        assert code == 0 and lines[:2] == [
            "Listing consumers in vhost / ...",
            "queue_name\tchannel_pid\tconsumer_tag\tack_required\tprefetch_count\tactive"
            "\targuments"]
        [row] = rows(lines[2:])
        assert row[0] == "rt.work" and row[2:] == ["rt.tag", "true", "7", "true", "{}"]
        assert row[1].endswith(" (1)")
        code, lines, _ = run(broker, capsys, "list_consumers", "-p", "rt.v", "-q")
        assert code == 0 and lines == [
            "queue_name\tchannel_pid\tconsumer_tag\tack_required\tprefetch_count\tactive"
            "\targuments"]
        code, lines, _ = run(broker, capsys, "list_consumers", "--formatter", "json",
                             *CONSUMER_COLUMNS)
        [consumer] = json.loads("\n".join(lines))
        assert all(consumer[column] is not None for column in CONSUMER_COLUMNS), consumer
    finally:
        conn.close()


def test_close_connection_by_name_tells_the_client_why(broker, client, capsys):
    code, lines, _ = run(broker, capsys, "-q", "list_connections", "name")
    [name] = lines[1:]
    code, lines, _ = run(broker, capsys, "close_connection", name, "maintenance window")
    assert code == 0 and lines == [f"Closing connection {name}, reason: maintenance window..."]
    _, close = client.read_method()
    assert isinstance(close, spec.Connection.Close)
    assert close.reply_code == 320
    assert close.reply_text == "CONNECTION_FORCED - maintenance window"
    code, _, err = run(broker, capsys, "close_connection", name, "again")
    assert code == ctl.EX_DATAERR
    assert err == (f"Error: connection '{name}' not found (list_connections name shows "
                   "the names)\n")


def test_close_connection_needs_the_right_to_close_it(broker, client, capsys):
    assert http(broker, "PUT", "/api/users/rt.mandy",
                {"password": "pw", "tags": "management"})[0] == 201
    assert http(broker, "PUT", "/api/permissions/%2F/rt.mandy",
                {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201
    name = broker.call(lambda: next(iter(broker.broker.connections)).name)
    code, _, err = run(broker, capsys, "--user", "rt.mandy", "--password", "pw",
                       "close_connection", name, "not yours")
    assert code == ctl.EX_NOPERM and err.startswith("Error: access refused: ")
    assert broker.call(lambda: len(broker.broker.connections)) == 1


def test_status_reports_the_node(broker, client, capsys):
    broker.call(broker.broker.set_alarm, "memory", True)
    try:
        code, lines, _ = run(broker, capsys, "status")
        assert code == 0
        assert lines[0] == "Status of node amqp-server@localhost ..."
        assert "memory alarm on node amqp-server@localhost" in lines
        assert "Connection count: 1" in lines and "Queue count: 1" in lines
        assert f"Interface: 127.0.0.1, port: {broker.port}, protocol: amqp" in lines
        code, lines, _ = run(broker, capsys, "status", "--formatter", "json")
    finally:
        broker.call(broker.broker.set_alarm, "memory", False)
    report = json.loads("\n".join(lines))
    assert report["alarms"] == [{"resource": "memory", "node": "amqp-server@localhost"}]
    assert report["pid"] == os.getpid()
    assert report["totals"] == {"virtual_host_count": 1, "connection_count": 1,
                                "queue_count": 1}
    assert report["disk_free_limit"] == broker.broker.config.disk_free_limit
    assert {entry["port"] for entry in report["listeners"]} >= {broker.port,
                                                               broker.management_port}


def test_cluster_status_of_a_single_broker_is_a_cluster_of_one(broker, capsys):
    code, lines, _ = run(broker, capsys, "cluster_status")
    assert code == 0
    assert lines[0] == "Cluster status of node amqp-server@localhost ..."
    assert "amqp-server@localhost: leader, in sync" in lines
    code, lines, _ = run(broker, capsys, "cluster_status", "--formatter", "json")
    report = json.loads("\n".join(lines))
    assert report["leader"] == "amqp-server@localhost"
    assert report["nodes"] == [{"name": "amqp-server@localhost", "role": "leader",
                                "in_sync": True, "replication_lag": 0}]


def test_status_needs_a_monitoring_tag(broker, capsys):
    assert http(broker, "PUT", "/api/users/rt.plain",
                {"password": "pw", "tags": "management"})[0] == 201
    code, _, err = run(broker, capsys, "status", "--user", "rt.plain", "--password", "pw")
    assert code == ctl.EX_NOPERM and err == "Error: access refused: Not monitor user\n"


@pytest.mark.parametrize("where", ["before", "after"])
def test_global_options_before_or_after_the_verb(broker, capsys, where):
    broker.add_vhost("rt.side")
    broker.declare_queue("rt.there", vhost="rt.side")
    options = ["--host", "127.0.0.1", "--port", str(broker.management_port),
               "--user", "guest", "--password", "guest", "-p", "rt.side", "--quiet",
               "--formatter", "json"]
    argv = ([*options, "list_queues", "name"] if where == "before"
            else ["list_queues", *options, "name"])
    assert ctl.main(argv) == 0
    assert json.loads(capsys.readouterr().out) == [{"name": "rt.there"}]
    argv = ([f"--port={broker.management_port}", "-prt.side", "-q", "list_queues"]
            if where == "before" else ["list_queues", f"--port={broker.management_port}",
                                       "-prt.side", "-q"])
    assert ctl.main(argv) == 0
    assert capsys.readouterr().out.splitlines() == ["name\tmessages", "rt.there\t0"]


@pytest.mark.parametrize("verb", ["list_queues", "list_exchanges", "list_bindings",
                                  "list_connections", "list_consumers"])
def test_an_unknown_column_is_refused_naming_it_and_the_valid_ones(broker, client, capsys,
                                                                  verb):
    code, lines, err = run(broker, capsys, verb, "bogus")
    assert code == ctl.EX_USAGE and lines == []
    assert err.startswith(f'Error: {verb}: unknown column "bogus"; valid columns: ')
    valid = err.split("valid columns: ", 1)[1].strip().split(", ")
    code, lines, _ = run(broker, capsys, verb, "--formatter", "json", *valid)
    assert code == 0
    assert len(json.loads("\n".join(lines))) == (0 if verb == "list_consumers" else 1
                                                  if verb != "list_exchanges" else 7)


def test_queue_columns_are_all_filled(broker, capsys):
    broker.declare_queue("rt.cols")
    broker.declare_queue("rt.stream", durable=True, arguments={"x-queue-type": "stream"})
    code, _, err = run(broker, capsys, "list_queues", "bogus")
    valid = err.split("valid columns: ", 1)[1].strip().split(", ")
    code, lines, _ = run(broker, capsys, "--formatter", "json", "list_queues", *valid)
    rows = json.loads("\n".join(lines))
    assert [list(row) for row in rows] == [valid, valid]
    # A stream's own columns are a stream's only, a 4.3 quorum queue's its
    # own (test_semantics_4_3_pika.py fills them).
    from policies.ctl.objects import QUORUM_4_3_COLUMNS, STREAM_COLUMNS
    assert http(broker, "GET", "/api/queues/%2F/rt.cols")[1].keys() \
        >= set(valid) - set(STREAM_COLUMNS) - set(QUORUM_4_3_COLUMNS)
    assert http(broker, "GET", "/api/queues/%2F/rt.stream")[1].keys() \
        >= set(valid) - set(QUORUM_4_3_COLUMNS)


def test_an_unknown_vhost_is_named(broker, capsys):
    for verb in ("list_queues", "list_exchanges", "list_bindings", "list_consumers",
                 "list_policies", "list_permissions"):
        code, _, err = run(broker, capsys, verb, "-p", "rt.nowhere")
        assert (code, err) == (ctl.EX_DATAERR,
                               "Error: virtual host 'rt.nowhere' does not exist\n"), verb


def test_delete_exchange_removes_it_and_its_bindings(broker, channel, capsys):
    channel.exchange_declare("rt.x", "direct")
    channel.queue_declare("rt.bound")
    channel.queue_bind("rt.bound", "rt.x", "k")
    code, out, err = run(broker, capsys, "delete_exchange", "rt.x")
    assert (code, out, err) == (0, ["Deleting exchange 'rt.x' on vhost '/' ..."], "")
    assert http(broker, "GET", "/api/exchanges/%2F/rt.x")[0] == 404
    bindings = http(broker, "GET", "/api/queues/%2F/rt.bound/bindings")[1]
    assert [b["source"] for b in bindings] == [""]  # the default exchange's alone


def test_delete_exchange_if_unused_keeps_one_in_use(broker, channel, capsys):
    channel.exchange_declare("rt.used", "fanout")
    channel.queue_declare("rt.bound")
    channel.queue_bind("rt.bound", "rt.used")
    code, _, err = run(broker, capsys, "delete_exchange", "--if-unused", "rt.used")
    assert (code, err) == (ctl.EX_DATAERR, "Error: 406 PRECONDITION_FAILED - exchange "
                                           "'rt.used' in vhost '/' in use\n")
    assert http(broker, "GET", "/api/exchanges/%2F/rt.used")[0] == 200


@pytest.mark.parametrize("argv, error", [
    (["delete_exchange", "rt.none"], "Error: exchange 'rt.none' not found in vhost '/'\n"),
    (["delete_exchange", "rt.none", "-p", "rt.nowhere"],
     "Error: virtual host 'rt.nowhere' does not exist\n"),
    (["delete_exchange", "amq.direct"], "Error: access refused: ACCESS_REFUSED - deletion of "
                                        "system exchange 'amq.direct' in vhost '/' not allowed\n"),
])
def test_delete_exchange_says_why_it_did_not(broker, capsys, argv, error):
    code, _, err = run(broker, capsys, *argv)
    assert err == error and code != 0


def test_the_amqp_port_is_refused_clearly(broker, capsys):
    code = ctl.main(["--port", str(broker.port), "list_queues"])
    out, err = capsys.readouterr()
    assert code == ctl.EX_UNAVAILABLE
    assert err == (f"Error: http://127.0.0.1:{broker.port}/api is not a management API: it "
                   "speaks AMQP, not HTTP: that is the AMQP port; --port must name the "
                   "management port (15672 by default)\n")


def test_the_prometheus_port_is_named_as_what_was_reached(broker, capsys):
    port = broker.prometheus_url.rsplit(":", 1)[1]
    assert ctl.main(["--port", port, "list_queues"]) == ctl.EX_UNAVAILABLE
    assert capsys.readouterr().err == (
        f"Error: http://127.0.0.1:{port}/api is not a management API: it has no such API "
        "(a 404 without JSON), and it serves Prometheus metrics at /metrics: that is a "
        "Prometheus port; --port must name the management port (15672 by default)\n")


def test_rabbitmqs_prometheus_port_is_not_said_to_lack_the_vhost(rabbitmq_prometheus_url,
                                                                 capsys):
    """RabbitMQ's Prometheus plugin answers every path with a JSON 404, as
    the management API answers a missing object: amqpctl said "virtual host
    '/' does not exist"."""
    port = rabbitmq_prometheus_url.rsplit(":", 1)[1]
    for argv in (["list_queues"], ["delete_queue", "rt.anything"]):
        assert ctl.main(["--port", port, *argv]) == ctl.EX_UNAVAILABLE
        assert capsys.readouterr().err == (
            f"Error: http://127.0.0.1:{port}/api is not a management API: it has no "
            "/api/overview, and it serves Prometheus metrics at /metrics: that is a "
            "Prometheus port; --port must name the management port (15672 by default)\n")


def test_another_http_server_is_refused_without_a_guess(capsys):
    with ThreadingHTTPServer(("127.0.0.1", 0), _NotFound) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            port = server.server_address[1]
            assert ctl.main(["--port", str(port), "list_queues"]) == ctl.EX_UNAVAILABLE
        finally:
            server.shutdown()
            thread.join(timeout=5)
    assert capsys.readouterr().err == (
        f"Error: http://127.0.0.1:{port}/api is not a management API: it has no such API "
        "(a 404 without JSON); --port must name the management port (15672 by default)\n")


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


def test_the_installed_command_runs(broker):
    """The real process: arguments, exit code and output as a shell sees them."""
    done = subprocess.run(
        [sys.executable, "-m", "policies.ctl", "list_connections", "-q",
         "--port", str(broker.management_port), "nope"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == ctl.EX_USAGE and done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith('Error: list_connections: unknown column "nope"; ')
    done = subprocess.run(
        [sys.executable, "-m", "policies.ctl", "--port", str(broker.port), "status"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == ctl.EX_UNAVAILABLE and "Traceback" not in done.stderr
    assert "it speaks AMQP, not HTTP" in done.stderr


RABBITMQCTL = shutil.which("rabbitmqctl")


def rabbitmqctl(*argv: str) -> tuple[int, list[str]]:
    done = subprocess.run([RABBITMQCTL, *argv], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout.splitlines()


@pytest.mark.skipif(RABBITMQCTL is None, reason="rabbitmqctl not installed")
def test_runtime_verbs_print_what_rabbitmqctl_prints(broker, rabbitmq_url, capsys):
    """The same consumer on both brokers: the same header rows, the same
    consumer row (but for the channel, a pid there), the same refusal of
    an unknown column."""
    queue, seen = f"rt.diff.{uuid.uuid4().hex[:8]}", {}
    for side, url in (("ours", broker.url), ("theirs", rabbitmq_url)):
        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            channel = conn.channel()
            channel.queue_declare(queue, exclusive=True)
            channel.basic_qos(prefetch_count=3)
            channel.basic_consume(queue, lambda *a: None, consumer_tag="rt.diff")
            if side == "ours":
                listed = [run(broker, capsys, "-q", verb)[1]
                          for verb in ("list_connections", "list_consumers")]
                refused = run(broker, capsys, "list_consumers", "bogus")[0]
            else:
                listed = [rabbitmqctl("-q", verb)[1]
                          for verb in ("list_connections", "list_consumers")]
                refused = rabbitmqctl("list_consumers", "bogus")[0]
        finally:
            conn.close()
        connections, consumers = listed
        mine = [row for row in rows(consumers[1:]) if row[0] == queue]
        seen[side] = (connections[0], consumers[0], [row[2:6] for row in mine], refused)
    assert seen["ours"] == seen["theirs"]
    assert seen["ours"][2] == [["rt.diff", "true", "3", "true"]]
