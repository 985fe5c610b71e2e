"""The management API checks what the AMQP channel checks: a user's tags
decide what it sees, its vhost permissions what it may change, through the
one permission service (broker/access_control.py)."""

from __future__ import annotations

from urllib.parse import quote

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from policies.ctl import main as amqpctl

from .management_api import http
from .users import connect, ctl

PW = "pw"
MESSAGE = {"routing_key": "secret", "payload": "x", "payload_encoding": "string",
           "properties": {}}


def as_user(broker, user: str, method: str, path: str, body=None):
    return http(broker, method, path, body, auth=(user, PW))


def names(broker, user: str, path: str) -> set:
    status, items = as_user(broker, user, "GET", path)
    assert status == 200, items
    return {(item.get("vhost"), item["name"]) for item in items}


def depth(broker, queue: str, vhost: str = "%2F") -> int:
    return http(broker, "GET", f"/api/queues/{vhost}/{queue}")[1]["messages"]


@pytest.fixture
def users(broker):
    """Vhost `other`; `secret` (one message) in `/`, `theirs` in `other`;
    mandy (management) and monty (monitoring) with permissions on `other`
    only; lim (management) on `/` with names starting `lim.`; ada an
    administrator with permissions on `other` only."""
    assert ctl(broker, "add_vhost", "other") == 0
    for user, tags in (("mandy", "management"), ("monty", "monitoring"),
                       ("lim", "management"), ("ada", "administrator"),
                       ("polly", "policymaker")):
        assert ctl(broker, "add_user", user, PW) == 0
        assert ctl(broker, "set_user_tags", user, tags) == 0
    for user in ("mandy", "monty", "ada"):
        assert ctl(broker, "set_permissions", "-p", "other", user, ".*", ".*", ".*") == 0
    assert ctl(broker, "set_permissions", "lim", r"^lim\.", r"^lim\.|^amq\.default$",
               r"^lim\.") == 0
    assert ctl(broker, "set_permissions", "polly", ".*", ".*", ".*") == 0
    assert http(broker, "PUT", "/api/queues/%2F/secret", {})[0] == 201
    assert http(broker, "PUT", "/api/queues/other/theirs", {})[0] == 201
    assert http(broker, "POST", "/api/exchanges/%2F/amq.default/publish", MESSAGE) == (
        200, {"routed": True})
    return broker


def test_a_management_user_sees_and_touches_only_its_vhosts(users):
    broker = users
    assert names(broker, "mandy", "/api/queues") == {("other", "theirs")}
    assert {v for v, _ in names(broker, "mandy", "/api/exchanges")} == {"other"}
    assert {item["vhost"] for item in as_user(broker, "mandy", "GET", "/api/bindings")[1]} == {
        "other"}
    assert [v["name"] for v in as_user(broker, "mandy", "GET", "/api/vhosts")[1]] == ["other"]
    refused = (401, {"error": "not_authorised",
                     "reason": "User not authorised to access virtual host"})
    assert as_user(broker, "mandy", "GET", "/api/queues/%2F") == refused
    assert as_user(broker, "mandy", "GET", "/api/queues/%2F/secret") == refused
    assert as_user(broker, "mandy", "POST", "/api/queues/%2F/secret/get",
                   {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}) == refused
    assert as_user(broker, "mandy", "POST", "/api/exchanges/%2F/amq.default/publish",
                   MESSAGE) == refused
    assert as_user(broker, "mandy", "DELETE", "/api/queues/%2F/secret/contents") == refused
    assert as_user(broker, "mandy", "DELETE", "/api/queues/%2F/secret") == refused
    assert depth(broker, "secret") == 1  # neither taken nor doubled
    overview = as_user(broker, "mandy", "GET", "/api/overview")[1]
    assert overview["object_totals"]["queues"] == 1
    assert overview["queue_totals"]["messages"] == 0 and "listeners" not in overview
    assert as_user(broker, "mandy", "PUT", "/api/queues/other/mine", {})[0] == 201
    assert as_user(broker, "mandy", "GET", "/api/queues/nowhere/q")[0] == 404


def test_monitoring_reads_every_vhost_but_changes_nothing_there(users):
    broker = users
    assert names(broker, "monty", "/api/queues") == {("/", "secret"), ("other", "theirs")}
    assert as_user(broker, "monty", "GET", "/api/queues/%2F/secret")[1]["messages"] == 1
    assert "listeners" in as_user(broker, "monty", "GET", "/api/overview")[1]
    for method, path, body in (
            ("DELETE", "/api/queues/%2F/secret", None),
            ("DELETE", "/api/queues/%2F/secret/contents", None),
            ("PUT", "/api/queues/%2F/new", {}),
            ("PUT", "/api/exchanges/%2F/new", {"type": "fanout"}),
            ("POST", "/api/queues/%2F/secret/get",
             {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}),
            ("POST", "/api/exchanges/%2F/amq.default/publish", MESSAGE),
            ("POST", "/api/bindings/%2F/e/amq.direct/q/secret", {"routing_key": "k"}),
            ("PUT", "/api/policies/%2F/p", {"pattern": ".", "definition": {"message-ttl": 1}})):
        assert as_user(broker, "monty", method, path, body)[0] == 401, (method, path)
    assert depth(broker, "secret") == 1
    assert http(broker, "GET", "/api/queues/%2F/new")[0] == 404
    # Where it has permissions, it acts like any management user.
    assert as_user(broker, "monty", "PUT", "/api/queues/other/monty.q", {})[0] == 201


def test_permission_regexes_apply_over_http_as_over_amqp(users):
    """lim may configure, write and read only names starting `lim.`: each
    refusal over HTTP carries the text the AMQP channel closes with."""
    broker = users
    conn = connect(broker, "lim", PW)

    def amqp_refusal(action) -> str:
        with pytest.raises(ChannelClosedByBroker) as info:
            action(conn.channel())
        assert info.value.reply_code == 403
        return info.value.reply_text

    def http_refusal(method, path, body=None) -> str:
        status, answer = as_user(broker, "lim", method, path, body)
        assert (status, answer["error"]) == (401, "not_authorised"), answer
        return answer["reason"]

    assert as_user(broker, "lim", "PUT", "/api/queues/%2F/lim.q", {})[0] == 201
    assert http_refusal("PUT", "/api/queues/%2F/other.q", {}) == amqp_refusal(
        lambda ch: ch.queue_declare("other.q")) == (
        "ACCESS_REFUSED - access to queue 'other.q' in vhost '/' refused for user 'lim'")
    dlx = {"x-dead-letter-exchange": "amq.fanout"}
    assert http_refusal("PUT", "/api/queues/%2F/lim.dl", {"arguments": dlx}) == amqp_refusal(
        lambda ch: ch.queue_declare("lim.dl", arguments=dlx)) == (
        "ACCESS_REFUSED - access to exchange 'amq.fanout' in vhost '/' refused for user 'lim'")
    assert as_user(broker, "lim", "PUT", "/api/exchanges/%2F/lim.dlx", {"type": "fanout"})[0] \
        == 201
    assert as_user(broker, "lim", "PUT", "/api/queues/%2F/lim.dl",
                   {"arguments": {"x-dead-letter-exchange": "lim.dlx"}})[0] == 201
    assert http_refusal("DELETE", "/api/queues/%2F/secret") == amqp_refusal(
        lambda ch: ch.queue_delete("secret"))
    assert http_refusal("DELETE", "/api/queues/%2F/secret/contents") == amqp_refusal(
        lambda ch: ch.queue_purge("secret"))
    assert http_refusal("POST", "/api/queues/%2F/secret/get",
                        {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}) == \
        amqp_refusal(lambda ch: ch.basic_get("secret"))
    assert http_refusal("POST", "/api/bindings/%2F/e/amq.topic/q/lim.q",
                        {"routing_key": "k"}) == amqp_refusal(
        lambda ch: ch.queue_bind("lim.q", "amq.topic", "k"))
    assert as_user(broker, "lim", "POST", "/api/bindings/%2F/e/lim.dlx/q/lim.q",
                   {"routing_key": "k"})[0] == 201
    assert http_refusal("DELETE", "/api/exchanges/%2F/amq.direct") == amqp_refusal(
        lambda ch: ch.exchange_delete("amq.direct"))
    # An alternate exchange is where unroutable messages get published.
    alternate = {"alternate-exchange": "amq.fanout"}
    assert http_refusal("PUT", "/api/exchanges/%2F/lim.ae",
                        {"type": "direct", "arguments": alternate}) == amqp_refusal(
        lambda ch: ch.exchange_declare("lim.ae", "direct", arguments=alternate)) == (
        "ACCESS_REFUSED - access to exchange 'amq.fanout' in vhost '/' refused for user 'lim'")
    # A refused publish is a 400 carrying the channel's 403, as RabbitMQ's.
    status, answer = as_user(broker, "lim", "POST", "/api/exchanges/%2F/amq.fanout/publish",
                             MESSAGE)
    assert (status, answer["reason"]) == (400, "403 ACCESS_REFUSED - access to exchange "
                                               "'amq.fanout' in vhost '/' refused for user 'lim'")
    assert depth(broker, "secret") == 1
    conn.close()


def test_an_administrator_acts_only_where_it_has_permissions(users):
    broker = users
    assert names(broker, "ada", "/api/queues") == {("/", "secret"), ("other", "theirs")}
    assert as_user(broker, "ada", "DELETE", "/api/queues/%2F/secret") == (
        401, {"error": "not_authorised", "reason": "Access refused."})
    assert as_user(broker, "ada", "DELETE", "/api/queues/%2F/missing")[0] == 404
    assert as_user(broker, "ada", "DELETE", "/api/queues/other/theirs")[0] == 204


def test_policymakers_set_policies_where_they_may_log_in(users):
    broker = users
    policy = {"pattern": "^zz", "definition": {"message-ttl": 1000}}
    assert as_user(broker, "polly", "PUT", "/api/policies/%2F/ttl", policy)[0] == 201
    assert as_user(broker, "polly", "PUT", "/api/policies/other/ttl", policy)[0] == 401
    assert as_user(broker, "mandy", "PUT", "/api/policies/other/ttl", policy)[0] == 401
    assert [p["name"] for p in as_user(broker, "polly", "GET", "/api/policies")[1]] == ["ttl"]
    assert as_user(broker, "mandy", "GET", "/api/policies")[1] == []


def test_connections_channels_and_consumers_are_each_users_own(users):
    broker = users
    guest = pika.BlockingConnection(pika.URLParameters(broker.url))
    guest.channel().basic_consume("secret", lambda *a: None)
    mine = connect(broker, "mandy", PW, "other")
    mine.channel().basic_consume("theirs", lambda *a: None)
    seen = {c["user"]: c["name"] for c in as_user(broker, "ada", "GET", "/api/connections")[1]}
    assert set(seen) == {"guest", "mandy"}
    for path in ("/api/connections", "/api/channels"):
        assert {c["user"] for c in as_user(broker, "mandy", "GET", path)[1]} == {"mandy"}
        assert {c["user"] for c in as_user(broker, "monty", "GET", path)[1]} == {"guest",
                                                                                 "mandy"}
    assert [c["queue"]["name"] for c in as_user(broker, "mandy", "GET", "/api/consumers")[1]] \
        == ["theirs"]
    assert len(as_user(broker, "monty", "GET", "/api/consumers")[1]) == 2
    guest_path = "/api/connections/" + quote(seen["guest"], safe="")
    mandy_path = "/api/connections/" + quote(seen["mandy"], safe="")
    assert as_user(broker, "mandy", "GET", guest_path)[0] == 401
    assert as_user(broker, "monty", "GET", guest_path)[0] == 200
    assert as_user(broker, "mandy", "DELETE", guest_path)[0] == 401
    assert as_user(broker, "monty", "DELETE", guest_path)[0] == 401
    assert guest.is_open
    assert as_user(broker, "mandy", "DELETE", mandy_path)[0] == 204
    with pytest.raises(ConnectionClosedByBroker) as info:
        mine.process_data_events(time_limit=2)
    assert (info.value.reply_code, info.value.reply_text) == (
        320, "CONNECTION_FORCED - Closed via management plugin")
    guest.close()


def test_amqpctl_reports_what_the_user_may_not_do(users, capsys):
    broker = users
    port = broker.management_url.rsplit(":", 1)[1]
    as_mandy = ["--port", port, "--username", "mandy", "--password", PW]
    assert amqpctl([*as_mandy, "list_queues", "-p", "/"]) == 77
    assert "access refused: User not authorised to access virtual host" in \
        capsys.readouterr().err
    assert amqpctl([*as_mandy, "list_queues", "-p", "other"]) == 0
    assert "theirs" in capsys.readouterr().out
    assert amqpctl([*as_mandy, "delete_queue", "secret"]) == 77
    assert depth(broker, "secret") == 1
