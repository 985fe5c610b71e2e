"""The health checks, aliveness test and node view against a real RabbitMQ's
management plugin: the same status code for every route and user tag, the
same JSON where it does not name the node, its ports or its machine.  Both
brokers are set up the same way over their own HTTP API.

Known differences, kept on purpose: /api/nodes/{unknown} is 404 here and a
500 (a crash) in RabbitMQ 3.10; a node here lists only the keys it can
fill honestly (no Erlang process, mnesia or I/O statistics)."""

from __future__ import annotations

import time

import pytest

from .management_api import call
from .waiting import wait_for

PASSWORD = "pw-health-diff"
VHOST = "hd.other"
# user -> (tags, {vhost: (configure, write, read)})
USERS = {
    "hd.mandy": ("management", {VHOST: (".*", ".*", ".*")}),
    "hd.monty": ("monitoring", {VHOST: (".*", ".*", ".*")}),
    "hd.polly": ("policymaker", {}),
    "hd.ada": ("administrator", {VHOST: (".*", ".*", ".*")}),
    "hd.nobody": ("", {"/": (".*", ".*", ".*")}),
    # Each one refused a different step of the aliveness test.
    "hd.noconf": ("management", {VHOST: ("^other$", ".*", ".*")}),
    "hd.nowrite": ("management", {VHOST: (".*", "^other$", ".*")}),
    "hd.noread": ("management", {VHOST: (".*", ".*", "^other$")}),
}
PATHS = (
    "/api/health/checks/alarms",
    "/api/health/checks/local-alarms",
    "/api/health/checks/virtual-hosts",
    "/api/health/checks/port-listener/{amqp}",
    "/api/health/checks/port-listener/1",
    "/api/health/checks/port-listener/not-a-port",
    "/api/aliveness-test/%2F",
    f"/api/aliveness-test/{VHOST}",
    "/api/aliveness-test/hd.nowhere",
    "/api/nodes",
    "/api/nodes/{node}",
)
# Keys of a port-listener answer that name this machine's ports.
PORTS = "ports"
MACHINE_KEYS = {PORTS, "port"}


def tear_down(base: str) -> None:
    for user in USERS:
        call(base, "DELETE", f"/api/users/{user}")
    call(base, "DELETE", f"/api/vhosts/{VHOST}")


def set_up(base: str) -> None:
    tear_down(base)
    # RabbitMQ answered 500 to the vhost's creation right after its
    # deletion once (a parallel run on a busy machine): the set-up tries
    # again for a while; what is compared comes after.
    assert wait_for(lambda: call(base, "PUT", f"/api/vhosts/{VHOST}")[0] in (201, 204), 10,
                    step=lambda: time.sleep(0.2))
    for user, (tags, permissions) in USERS.items():
        assert call(base, "PUT", f"/api/users/{user}",
                    {"password": PASSWORD, "tags": tags})[0] in (201, 204)
        for vhost, (configure, write, read) in permissions.items():
            path = f"/api/permissions/{vhost.replace('/', '%2F')}/{user}"
            assert call(base, "PUT", path, {"configure": configure, "write": write,
                                            "read": read})[0] in (201, 204)


def node_name(base: str) -> str:
    status, nodes = call(base, "GET", "/api/nodes")
    assert status == 200
    return nodes[0]["name"]


def comparable(path: str, status: int, body):
    """What must match: errors whole, health answers without the machine's
    own ports, and of a node only that it was answered (its keys are
    compared below)."""
    if path.startswith("/api/nodes") and status == 200:
        return "nodes"
    if isinstance(body, dict):
        return {k: v for k, v in body.items() if k not in MACHINE_KEYS}
    return body


def observe(base: str, amqp_port: int) -> dict:
    node = node_name(base)
    seen = {}
    for user in ("guest", *USERS):
        auth = ("guest", "guest") if user == "guest" else (user, PASSWORD)
        for template in PATHS:
            path = template.format(amqp=amqp_port, node=node)
            status, body = call(base, "GET", path, auth=auth)
            seen[(user, template)] = (status, comparable(path, status, body))
    return seen


@pytest.fixture
def both(broker, rabbitmq_management_url):
    bases = ((broker.management_url, broker.port), (rabbitmq_management_url, 5672))
    for base, _ in bases:
        set_up(base)
    yield bases
    for base, _ in bases:
        tear_down(base)
        call(base, "DELETE", "/api/queues/%2F/aliveness-test")


def test_status_codes_and_bodies_for_every_tag_match_rabbitmq(both):
    (ours_base, ours_port), (theirs_base, theirs_port) = both
    ours, theirs = observe(ours_base, ours_port), observe(theirs_base, theirs_port)
    differences = {key: (ours[key], theirs[key]) for key in ours if ours[key] != theirs[key]}
    assert differences == {}
    # Not trivial: every verdict the routes can give was met.
    statuses = {status for status, _ in theirs.values()}
    assert {200, 401, 404, 400, 503} <= statuses


def test_port_listener_lists_the_listening_ports(both):
    (ours_base, ours_port), (theirs_base, theirs_port) = both
    for base, port in both:
        status, body = call(base, "GET", "/api/health/checks/port-listener/1")
        assert status == 503 and port in body[PORTS]


def test_node_keys_are_rabbitmqs(both):
    (ours_base, _), (theirs_base, _) = both
    ours, theirs = (call(base, "GET", "/api/nodes")[1][0] for base in (ours_base, theirs_base))
    own = {"python_version"}
    assert set(ours) - own <= set(theirs)
    for key in ("type", "running", "partitions", "cluster_links", "mem_calculation_strategy",
                "disk_free_limit", "mem_alarm", "disk_free_alarm"):
        assert ours[key] == theirs[key], key
    for key in ("mem_used", "mem_limit", "disk_free", "fd_used", "fd_total", "sockets_total",
                "uptime", "processors"):
        assert type(ours[key]) is type(theirs[key]), key
    # x-delayed-message is the delayed-message plugin's, which Debian's
    # RabbitMQ does not ship; a node with the plugin lists it.
    assert {x["name"] for x in ours["exchange_types"]} == {
        x["name"] for x in theirs["exchange_types"]} | {"x-delayed-message"}
    assert {m["name"] for m in ours["auth_mechanisms"]} == {
        m["name"] for m in theirs["auth_mechanisms"] if m["enabled"]}
