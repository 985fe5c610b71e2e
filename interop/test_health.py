"""RabbitMQ's health checks, aliveness test and node view on this broker's
management API: what a Kubernetes probe or a monitor reads, with alarms
raised for real on the broker."""

from __future__ import annotations

import pika

from .management_api import call

PASSWORD = "pw-health"


def get(broker, path: str, auth=("guest", "guest")):
    return call(broker.management_url, "GET", path, auth=auth)


def add_user(broker, name: str, tags: str, vhosts=()) -> None:
    base = broker.management_url
    assert call(base, "PUT", f"/api/users/{name}", {"password": PASSWORD, "tags": tags})[0] == 201
    for vhost in vhosts:
        assert call(base, "PUT", f"/api/permissions/{vhost.replace('/', '%2F')}/{name}",
                    {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201


def test_alarm_checks_pass_without_alarms(broker):
    for path in ("/api/health/checks/alarms", "/api/health/checks/local-alarms"):
        assert get(broker, path) == (200, {"status": "ok"})


def test_alarm_checks_fail_with_503_naming_each_alarm(broker):
    broker.call(broker.broker.set_alarm, "memory", True)
    broker.call(broker.broker.set_alarm, "disk", True)
    try:
        status, body = get(broker, "/api/health/checks/alarms")
        assert status == 503
        assert body == {"status": "failed",
                        "reason": "There are alarms in effect in the cluster",
                        "alarms": [{"resource": "disk space", "node": "amqp-server@localhost"},
                                   {"resource": "memory", "node": "amqp-server@localhost"}]}
        status, body = get(broker, "/api/health/checks/local-alarms")
        assert status == 503 and body["reason"] == "There are alarms in effect on the node"
    finally:
        broker.call(broker.broker.set_alarm, "memory", False)
        broker.call(broker.broker.set_alarm, "disk", False)
    assert get(broker, "/api/health/checks/alarms") == (200, {"status": "ok"})


def test_port_listener_knows_every_listener(broker):
    management = broker.management_port
    prometheus = int(broker.prometheus_url.rsplit(":", 1)[1])
    for port in (broker.port, management, prometheus):
        assert get(broker, f"/api/health/checks/port-listener/{port}") == (
            200, {"status": "ok", "port": port})
    status, body = get(broker, "/api/health/checks/port-listener/1")
    assert status == 503
    assert body == {"status": "failed", "reason": "No active listener", "missing": 1,
                    "ports": [broker.port, management, prometheus]}
    assert get(broker, "/api/health/checks/port-listener/five") == (
        400, {"error": "bad_request", "reason": "Invalid port"})


def test_virtual_hosts_check(broker):
    assert get(broker, "/api/health/checks/virtual-hosts") == (200, {"status": "ok"})


def test_aliveness_test_declares_publishes_and_gets_back(broker):
    assert get(broker, "/api/aliveness-test/%2F") == (200, {"status": "ok"})
    # The queue stays, empty, as RabbitMQ leaves it; a second test reuses it.
    assert broker.queue_depth("aliveness-test") == 0
    assert get(broker, "/api/aliveness-test/%2F") == (200, {"status": "ok"})
    assert broker.queue_depth("aliveness-test") == 0
    assert get(broker, "/api/aliveness-test/nowhere") == (
        404, {"error": "Object Not Found", "reason": "Not Found"})


def test_aliveness_test_fails_while_a_consumer_takes_the_message(broker):
    """A consumer on aliveness-test gets the message before basic.get can:
    the check says so instead of claiming the broker alive."""
    get(broker, "/api/aliveness-test/%2F")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        conn.channel().basic_consume("aliveness-test", lambda *a: None, auto_ack=True)
        status, body = get(broker, "/api/aliveness-test/%2F")
        assert status == 503 and body["status"] == "failed"
    finally:
        conn.close()


def test_aliveness_test_runs_with_the_users_permissions(broker):
    add_user(broker, "hc.mgmt", "management", ["/"])
    base = broker.management_url
    assert call(base, "PUT", "/api/permissions/%2F/hc.mgmt",
                {"configure": "^other$", "write": ".*", "read": ".*"})[0] == 204
    status, body = get(broker, "/api/aliveness-test/%2F", ("hc.mgmt", PASSWORD))
    assert status == 401
    assert body["reason"] == ("ACCESS_REFUSED - access to queue 'aliveness-test' in vhost '/' "
                              "refused for user 'hc.mgmt'")


def test_nodes_need_monitoring_or_administrator(broker):
    add_user(broker, "hc.watch", "monitoring")
    add_user(broker, "hc.plain", "management")
    for user in (("guest", "guest"), ("hc.watch", PASSWORD)):
        status, nodes = get(broker, "/api/nodes", user)
        assert status == 200 and [n["name"] for n in nodes] == ["amqp-server@localhost"]
    assert get(broker, "/api/nodes", ("hc.plain", PASSWORD)) == (
        401, {"error": "not_authorised", "reason": "Not monitor user"})
    assert get(broker, "/api/health/checks/alarms", ("hc.plain", PASSWORD))[0] == 200


def test_node_reports_alarms_limits_and_listeners(broker):
    broker.call(broker.broker.set_alarm, "memory", True)
    try:
        status, node = get(broker, "/api/nodes/amqp-server@localhost")
    finally:
        broker.call(broker.broker.set_alarm, "memory", False)
    assert status == 200
    assert node["mem_alarm"] is True and node["disk_free_alarm"] is False
    assert node["running"] is True and node["type"] == "disc"
    assert node["disk_free_limit"] == broker.broker.config.disk_free_limit
    assert node["mem_used"] > 0 and node["mem_limit"] > 0 and node["fd_total"] > 0
    assert node["contexts"] == [{"description": "RabbitMQ Management", "path": "/",
                                 "port": str(broker.management_port)}]
    assert get(broker, "/api/nodes/rabbit@elsewhere")[0] == 404


def test_overview_lists_every_listener(broker):
    status, overview = get(broker, "/api/overview")
    assert status == 200
    assert [(each["protocol"], each["port"]) for each in overview["listeners"]] == [
        ("amqp", broker.port), ("http", broker.management_port),
        ("http/prometheus", int(broker.prometheus_url.rsplit(":", 1)[1]))]
