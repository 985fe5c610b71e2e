"""The management HTTP API and amqpctl against a running broker, with pika
observing the effect on real queues."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request

import pika
import pytest

from amqp_server.testing import BrokerThread
from policies import ctl

from .management_api import amqpctl, http
from .waiting import wait_get


def test_queue_lifecycle_and_errors(broker):
    assert http(broker, "PUT", "/api/queues/%2F/work", {"durable": "true", "arguments":
                                                         {"x-max-length": 3}})[0] == 201
    assert http(broker, "PUT", "/api/queues/%2F/work", {"durable": True, "arguments":
                                                         {"x-max-length": 3}})[0] == 204
    status, body = http(broker, "PUT", "/api/queues/%2F/work", {"durable": False})
    assert status == 400 and "inequivalent arg 'durable'" in body["reason"]
    status, queue = http(broker, "GET", "/api/queues/%2F/work")
    assert queue["arguments"] == {"x-max-length": 3} and queue["type"] == "classic"
    assert queue["dead_lettered"] == {"rejected": 0, "expired": 0, "maxlen": 0,
                                      "delivery_limit": 0}
    assert http(broker, "GET", "/api/queues/%2F/missing") == (
        404, {"error": "Object Not Found", "reason": "Not Found"})
    assert http(broker, "GET", "/api/queues", auth=("guest", "bad"))[0] == 401
    assert http(broker, "DELETE", "/api/queues/%2F/work")[0] == 204
    assert http(broker, "GET", "/api/vhosts/%2F")[1]["name"] == "/"


def test_publish_get_and_dead_letter_over_http(broker):
    http(broker, "PUT", "/api/exchanges/%2F/dlx", {"type": "fanout"})
    http(broker, "PUT", "/api/queues/%2F/dlq", {})
    assert http(broker, "POST", "/api/bindings/%2F/e/dlx/q/dlq", {"routing_key": ""})[0] == 201
    http(broker, "PUT", "/api/queues/%2F/work", {"arguments": {"x-dead-letter-exchange": "dlx"}})
    status, reply = http(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
        "routing_key": "work", "payload": "poison", "payload_encoding": "string",
        "properties": {"headers": {"trace": "t1"}, "delivery_mode": 2}})
    assert status == 200 and reply == {"routed": True}
    peeked = http(broker, "POST", "/api/queues/%2F/work/get",
                  {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})[1]
    assert peeked[0]["payload"] == "poison"
    assert peeked[0]["properties"]["headers"] == {"trace": "t1"}
    http(broker, "POST", "/api/queues/%2F/work/get",
         {"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
    (dead,) = http(broker, "POST", "/api/queues/%2F/dlq/get",
                   {"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto"})[1]
    assert dead["redelivered"] is False
    assert dead["properties"]["headers"]["x-death"][0]["reason"] == "rejected"
    assert http(broker, "GET", "/api/queues/%2F/work")[1]["dead_lettered"]["rejected"] == 1
    metrics = http(broker, "GET", "/metrics")[1]
    assert 'amqp_queue_messages_dead_lettered_total{vhost="/",queue="work",reason="rejected"} 1' \
        in metrics


def test_bindings_of_a_queue_and_an_exchange_are_listed_and_deleted_by_key(broker):
    http(broker, "PUT", "/api/queues/%2F/bq", {"durable": False})
    http(broker, "PUT", "/api/exchanges/%2F/bx", {"type": "topic", "durable": False})
    http(broker, "PUT", "/api/exchanges/%2F/by", {"type": "fanout", "durable": False})
    for body in ({"routing_key": "b.#", "arguments": {"z": 1}}, {"routing_key": "a.#"}):
        assert http(broker, "POST", "/api/bindings/%2F/e/bx/q/bq", body)[0] == 201
    assert http(broker, "POST", "/api/bindings/%2F/e/by/e/bx", {"routing_key": ""})[0] == 201
    status, listed = http(broker, "GET", "/api/queues/%2F/bq/bindings")
    assert status == 200
    assert [(b["source"], b["routing_key"], b["properties_key"][:5]) for b in listed] == [
        ("", "bq", "bq"), ("bx", "a.#", "a.%23"), ("bx", "b.#", "b.%23")]
    assert [b["destination"] for b in http(
        broker, "GET", "/api/exchanges/%2F/bx/bindings/source")[1]] == ["bq", "bq"]
    assert [(b["source"], b["destination_type"]) for b in http(
        broker, "GET", "/api/exchanges/%2F/bx/bindings/destination")[1]] == [("by", "exchange")]
    # The key as listed, quoted again into the URL, or as it was listed.
    with_args = listed[2]["properties_key"]
    assert http(broker, "DELETE", "/api/bindings/%2F/e/bx/q/bq/"
                + with_args.replace("%", "%25"))[0] == 204
    assert http(broker, "DELETE", "/api/bindings/%2F/e/bx/q/bq/a.%23")[0] == 204
    assert http(broker, "GET", "/api/bindings/%2F/e/bx/q/bq") == (200, [])


def test_a_single_queue_lists_its_consumers_with_their_connection(broker, connection):
    channel = connection.channel()
    channel.queue_declare("cq")
    channel.basic_consume("cq", lambda *args: None, consumer_tag="ct")
    (shown,) = http(broker, "GET", "/api/queues/%2F/cq")[1]["consumer_details"]
    (conn,) = http(broker, "GET", "/api/connections")[1]
    assert shown["consumer_tag"] == "ct"
    assert shown["channel_details"]["connection_name"] == conn["name"]
    assert "consumer_details" not in http(broker, "GET", "/api/queues/%2F")[1][0]


def test_a_get_without_ackmode_is_refused_not_requeued(broker, channel):
    channel.queue_declare("gq")
    channel.basic_publish("", "gq", b"m")
    assert http(broker, "POST", "/api/queues/%2F/gq/get", {
        "count": 1, "requeue": False, "encoding": "auto"}) == (
        400, {"error": "bad_request", "reason": "[{key_missing,ackmode}]"})
    assert http(broker, "POST", "/api/queues/%2F/gq/get", {
        "count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})[1][0]["payload"] == "m"


def test_bad_policy_and_definitions_round_trip(broker):
    status, body = http(broker, "PUT", "/api/policies/%2F/bad",
                        {"pattern": ".*", "definition": {"message-ttl": "soon"}})
    assert status == 400 and '<<"soon">> is not a valid message TTL' in body["reason"]
    http(broker, "PUT", "/api/policies/%2F/ttl", {"pattern": "^q", "definition":
                                                   {"message-ttl": 500}, "apply-to": "queues"})
    http(broker, "PUT", "/api/queues/%2F/q1", {"arguments": {"x-max-length": 2}})
    exported = http(broker, "GET", "/api/definitions")[1]
    assert {"name": "ttl", "pattern": "^q", "apply-to": "queues", "definition":
            {"message-ttl": 500}, "priority": 0, "vhost": "/"} in exported["policies"]
    with BrokerThread() as other:
        assert http(other, "POST", "/api/definitions", exported)[0] == 204
        queue = http(other, "GET", "/api/queues/%2F/q1")[1]
        assert queue["policy"] == "ttl" and queue["arguments"] == {"x-max-length": 2}


def test_connections_are_listed_and_closable(broker, connection):
    (listed,) = http(broker, "GET", "/api/connections")[1]
    assert listed["user"] == "guest" and listed["vhost"] == "/"
    name = urllib.request.quote(listed["name"], safe="")
    assert http(broker, "DELETE", f"/api/connections/{name}")[0] == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().queue_declare("", exclusive=True)
        connection.process_data_events(time_limit=1)
    assert info.value.reply_code == 320


# ---- amqpctl ----------------------------------------------------------------

def test_policy_through_amqpctl_drives_live_dead_lettering(broker, channel, capsys):
    channel.exchange_declare("policy-dlx", "fanout")
    channel.queue_declare("dlq")
    channel.queue_bind("dlq", "policy-dlx")
    channel.exchange_declare("arg-dlx", "fanout")
    channel.queue_declare("arg-dlq")
    channel.queue_bind("arg-dlq", "arg-dlx")
    channel.queue_declare("work")
    channel.queue_declare("pinned", arguments={"x-dead-letter-exchange": "arg-dlx"})
    assert amqpctl(broker, "set_policy", "--apply-to", "queues", "DLX", "^(work|pinned)$",
                   '{"dead-letter-exchange": "policy-dlx"}') == 0
    for queue in ("work", "pinned"):
        channel.basic_publish("", queue, queue.encode())
        method, _, _ = channel.basic_get(queue)
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert wait_get(channel, "dlq")[2] == b"work"        # the policy applies
    assert wait_get(channel, "arg-dlq")[2] == b"pinned"  # the argument wins
    capsys.readouterr()
    assert amqpctl(broker, "list_queues", "name", "policy", "messages", "-q") == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "name\tpolicy\tmessages"
    assert "work\tDLX\t0" in rows
    assert amqpctl(broker, "clear_policy", "DLX") == 0
    channel.basic_publish("", "work", b"after")
    method, _, _ = channel.basic_get("work")
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert wait_get(channel, "dlq", timeout=0.3)[0] is None  # argument-only again: dropped


def test_amqpctl_errors(broker, capsys):
    assert amqpctl(broker, "set_policy", "p", ".*", "{not json") == ctl.EX_DATAERR
    assert "the definition is not valid JSON" in capsys.readouterr().err
    assert amqpctl(broker, "set_policy", "p", ".*", '{"message-ttl": -5}') == ctl.EX_DATAERR
    assert "message-ttl must be a whole number of milliseconds, 0 or more, got -5" \
        in capsys.readouterr().err
    assert amqpctl(broker, "clear_policy", "never") == ctl.EX_DATAERR
    assert "policy 'never' not found in vhost '/'" in capsys.readouterr().err
    assert ctl.main(["--port", str(broker.server.management.port), "--password", "wrong",
                     "list_queues"]) == ctl.EX_NOPERM
    assert ctl.main(["--port", "1", "list_queues"]) == ctl.EX_UNAVAILABLE
    assert "unable to reach the management API" in capsys.readouterr().err
    assert ctl.main(["list_queues", "--bogus-flag"]) == ctl.EX_USAGE
    assert ctl.main(["no_such_verb"]) == ctl.EX_USAGE


def test_policies_survive_a_restart(capsys):
    data_dir = tempfile.mkdtemp(prefix="amqp-restart-")
    try:
        with BrokerThread(data_dir=data_dir) as first:
            assert amqpctl(first, "set_policy", "--priority", "3", "limit", "^q",
                           '{"max-length": 7}') == 0
        with BrokerThread(data_dir=data_dir) as second:
            capsys.readouterr()
            assert amqpctl(second, "list_policies", "--formatter", "json") == 0
            (policy,) = json.loads(capsys.readouterr().out)
            assert policy["name"] == "limit" and policy["priority"] == 3
            assert http(second, "PUT", "/api/queues/%2F/q", {})[0] == 201
            assert http(second, "GET", "/api/queues/%2F/q")[1]["policy"] == "limit"
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


# ---- the real rabbitmqadmin -------------------------------------------------

RABBITMQADMIN = shutil.which("rabbitmqadmin")


@pytest.mark.skipif(RABBITMQADMIN is None, reason="rabbitmqadmin not installed (it ships in "
                    "Debian's rabbitmq-server package)")
def test_rabbitmqadmin_works_unchanged(broker):
    port = str(broker.server.management.port)

    def admin(*args: str) -> str:
        done = subprocess.run([RABBITMQADMIN, "-P", port, "-f", "tsv", *args],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    admin("declare", "exchange", "name=ex", "type=direct")
    admin("declare", "queue", "name=rq", "durable=false", 'arguments={"x-max-length": 5}')
    admin("declare", "binding", "source=ex", "destination=rq", "routing_key=k")
    admin("declare", "policy", "name=pol", "pattern=^rq$", 'definition={"message-ttl": 60000}',
          "apply-to=queues")
    admin("publish", "exchange=ex", "routing_key=k", "payload=hello")
    assert "rq\t1" in admin("list", "queues", "name", "messages")
    assert "ex\tdirect" in admin("list", "exchanges", "name", "type")
    assert "ex\trq\tk" in admin("list", "bindings", "source", "destination", "routing_key")
    assert "pol" in admin("list", "policies")
    assert "hello" in admin("get", "queue=rq", "ackmode=ack_requeue_false")
    admin("delete", "binding", "source=ex", "destination_type=queue", "destination=rq",
          "properties_key=k")
    admin("delete", "policy", "name=pol")
    admin("delete", "queue", "name=rq")
    assert "rq" not in admin("list", "queues", "name")
    done = subprocess.run([RABBITMQADMIN, "-P", port, "delete", "queue", "name=rq"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "Not found" in done.stdout + done.stderr
