"""The management API's answers to users of every tag, against this broker
and a real RabbitMQ's management plugin: the same status code for every
route and user, with one deliberate difference (monitoring reads every
vhost's objects here; RabbitMQ 3.10 answers 401 for vhosts it cannot log in
to).  Both brokers are set up the same way over their own HTTP API."""

from __future__ import annotations

import pika
import pytest

from .management_api import call

PASSWORD = "pw-mgmt-diff"
# user -> (tags, {vhost: (configure, write, read)})
USERS = {
    "md.mandy": ("management", {"md.other": (".*", ".*", ".*")}),
    "md.monty": ("monitoring", {"md.other": (".*", ".*", ".*")}),
    "md.polly": ("policymaker", {"/": ("^md\\.", "^md\\.|^amq\\.default$", "^md\\.")}),
    "md.ada": ("administrator", {"md.other": (".*", ".*", ".*")}),
    "md.lim": ("management", {"/": ("^md\\.lim", "^md\\.lim|^amq\\.default$", "^md\\.lim")}),
    "md.nobody": ("", {"/": (".*", ".*", ".*")}),
}
MESSAGE = {"routing_key": "md.secret", "payload": "x", "payload_encoding": "string",
           "properties": {}}
# Run in this order by every user (md.polly may delete md.secret, so the
# users after it meet a missing queue).
REQUESTS = (
    ("GET", "/api/whoami", None),
    ("GET", "/api/overview", None),
    ("GET", "/api/vhosts", None),
    ("GET", "/api/vhosts/%2F", None),
    ("GET", "/api/queues", None),
    ("GET", "/api/queues/%2F", None),
    ("GET", "/api/queues/%2F/md.secret", None),
    ("GET", "/api/queues/%2F/md.missing", None),
    ("GET", "/api/queues/md.nowhere/q", None),
    ("GET", "/api/queues/%2F/md.secret/bindings", None),
    ("GET", "/api/queues/md.other/md.q/bindings", None),
    ("PUT", "/api/queues/%2F/md.lim.q", {}),
    ("PUT", "/api/queues/%2F/md.polly.q", {}),
    ("PUT", "/api/queues/%2F/md.lim.dl", {"arguments": {"x-dead-letter-exchange": "amq.fanout"}}),
    ("PUT", "/api/queues/md.other/md.q", {}),
    ("DELETE", "/api/queues/%2F/md.missing", None),
    ("DELETE", "/api/queues/%2F/md.secret", None),
    ("DELETE", "/api/queues/%2F/md.secret/contents", None),
    ("POST", "/api/queues/%2F/md.secret/get",
     {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    ("POST", "/api/exchanges/%2F/amq.default/publish", MESSAGE),
    ("POST", "/api/exchanges/%2F/amq.fanout/publish", MESSAGE),
    ("GET", "/api/exchanges", None),
    ("GET", "/api/exchanges/%2F", None),
    ("GET", "/api/exchanges/%2F/md.x", None),
    ("GET", "/api/exchanges/%2F/md.x/bindings/source", None),
    ("GET", "/api/exchanges/%2F/md.x/bindings/destination", None),
    ("PUT", "/api/exchanges/%2F/md.lim.x", {"type": "fanout"}),
    ("DELETE", "/api/exchanges/%2F/md.x", None),
    ("GET", "/api/bindings", None),
    ("GET", "/api/bindings/%2F", None),
    ("POST", "/api/bindings/%2F/e/amq.topic/q/md.lim.q", {"routing_key": "k"}),
    ("POST", "/api/bindings/%2F/e/md.lim.x/q/md.lim.q", {"routing_key": "k"}),
    ("GET", "/api/policies", None),
    ("GET", "/api/policies/%2F", None),
    ("PUT", "/api/policies/%2F/md.p", {"pattern": "^md\\.zz", "definition": {"message-ttl": 1}}),
    ("PUT", "/api/policies/md.other/md.p", {"pattern": "^md\\.zz",
                                            "definition": {"message-ttl": 1}}),
    ("GET", "/api/connections", None),
    ("GET", "/api/channels", None),
    ("GET", "/api/consumers", None),
    ("GET", "/api/definitions", None),
    ("GET", "/api/users", None),
    ("GET", "/api/permissions", None),
    ("GET", "/api/users/md.missing/permissions", None),
)
# Routes that read the objects of vhost "/", where the monitoring user has
# no permissions: the model lets monitoring read every vhost.
MONITORING_READS = {
    ("GET", "/api/queues/%2F"), ("GET", "/api/queues/%2F/md.secret"),
    ("GET", "/api/queues/%2F/md.missing"), ("GET", "/api/exchanges/%2F"),
    ("GET", "/api/exchanges/%2F/md.x"), ("GET", "/api/bindings/%2F"),
    ("GET", "/api/queues/%2F/md.secret/bindings"),
    ("GET", "/api/exchanges/%2F/md.x/bindings/source"),
    ("GET", "/api/exchanges/%2F/md.x/bindings/destination"),
    ("GET", "/api/policies/%2F"),
}


def _admin(base: str, method: str, path: str, body=None) -> int:
    return call(base, method, path, body)[0]


def tear_down(base: str) -> None:
    for user in USERS:
        _admin(base, "DELETE", f"/api/users/{user}")
    _admin(base, "DELETE", "/api/vhosts/md.other")
    for queue in ("md.secret", "md.lim.q", "md.polly.q", "md.lim.dl"):
        _admin(base, "DELETE", f"/api/queues/%2F/{queue}")
    for exchange in ("md.x", "md.lim.x"):
        _admin(base, "DELETE", f"/api/exchanges/%2F/{exchange}")
    _admin(base, "DELETE", "/api/policies/%2F/md.p")


def set_up(base: str) -> None:
    tear_down(base)
    assert _admin(base, "PUT", "/api/vhosts/md.other") in (201, 204)
    for user, (tags, permissions) in USERS.items():
        assert _admin(base, "PUT", f"/api/users/{user}",
                      {"password": PASSWORD, "tags": tags}) in (201, 204)
        for vhost, (configure, write, read) in permissions.items():
            path = f"/api/permissions/{vhost.replace('/', '%2F')}/{user}"
            assert _admin(base, "PUT", path, {"configure": configure, "write": write,
                                              "read": read}) in (201, 204)
    assert _admin(base, "PUT", "/api/queues/%2F/md.secret", {"durable": False}) in (201, 204)
    assert _admin(base, "PUT", "/api/exchanges/%2F/md.x", {"type": "direct",
                                                          "durable": False}) in (201, 204)
    assert call(base, "POST", "/api/exchanges/%2F/amq.default/publish", MESSAGE)[1] == {
        "routed": True}


def observe(base: str) -> dict:
    seen = {}
    for user in USERS:
        for method, path, body in REQUESTS:
            seen[(user, method, path)] = call(base, method, path, body, (user, PASSWORD))[0]
    return seen


@pytest.fixture
def both(broker, rabbitmq_management_url):
    bases = (broker.management_url, rabbitmq_management_url)
    for base in bases:
        set_up(base)
    yield bases
    for base in bases:
        tear_down(base)


def test_status_codes_for_every_tag_match_rabbitmq(both):
    ours, theirs = (observe(base) for base in both)
    differences = {key: (ours[key], theirs[key]) for key in ours if ours[key] != theirs[key]}
    expected = {("md.monty", method, path): (200 if "missing" not in path else 404, 401)
                for method, path in MONITORING_READS}
    assert differences == expected
    # The set-up is not trivial: every tag met both answers somewhere.
    for user in USERS:
        codes = {code for (who, _, _), code in theirs.items() if who == user}
        assert 401 in codes, user
        if user != "md.nobody":
            assert codes & {200, 201, 204}, user


def exclusive_binding(base: str, amqp_url: str) -> tuple[int, int]:
    """Statuses of binding, then unbinding, another connection's exclusive
    queue over HTTP as an administrator."""
    owner = pika.BlockingConnection(pika.URLParameters(amqp_url))
    name = owner.channel().queue_declare("", exclusive=True).method.queue
    path = f"/api/bindings/%2F/e/amq.direct/q/{name}"
    try:
        return (call(base, "POST", path, {"routing_key": "k"})[0],
                call(base, "DELETE", path + "/k")[0])
    finally:
        owner.close()


def test_another_connections_exclusive_queue_cannot_be_bound_over_http(broker, rabbitmq_url,
                                                                      rabbitmq_management_url):
    ours = exclusive_binding(broker.management_url, broker.url)
    assert ours == exclusive_binding(rabbitmq_management_url, rabbitmq_url) == (400, 404)
