"""A virtual host chooses whose semantics it follows in its metadata, over
the management API and with amqpctl (docs/choosing-semantics.md)."""

from __future__ import annotations

import json

from .management_api import amqpctl, http


def test_a_vhost_made_over_http_chooses_4_3(broker):
    assert http(broker, "PUT", "/api/vhosts/new", {"rabbitmq_semantics": "4.3"})[0] == 201
    status, vhost = http(broker, "GET", "/api/vhosts/new")
    assert status == 200
    assert (vhost["rabbitmq_semantics"], vhost["metadata"]) == (
        "4.3", {"rabbitmq_semantics": "4.3"})
    assert http(broker, "GET", "/api/vhosts/%2F")[1]["rabbitmq_semantics"] == "3.13"


def test_a_vhost_keeps_its_semantics_once_made(broker):
    http(broker, "PUT", "/api/vhosts/new", {"rabbitmq_semantics": "4.3"})
    assert http(broker, "PUT", "/api/vhosts/new", {"rabbitmq_semantics": "4.3"})[0] == 204
    status, body = http(broker, "PUT", "/api/vhosts/new", {"rabbitmq_semantics": "3.13"})
    assert status == 400
    assert body["reason"].startswith("vhost 'new' follows RabbitMQ 4.3's semantics")


def test_an_unknown_version_is_a_bad_request(broker):
    status, body = http(broker, "PUT", "/api/vhosts/new", {"rabbitmq_semantics": "4.0"})
    assert (status, body["reason"]) == (
        400, 'rabbitmq_semantics must be "3.13" or "4.3", got "4.0"')
    assert http(broker, "GET", "/api/vhosts/new")[0] == 404


def test_amqpctl_adds_a_vhost_with_its_semantics_and_lists_them(broker, capsys):
    assert amqpctl(broker, "add_vhost", "new", "--rabbitmq-semantics", "4.3") == 0
    capsys.readouterr()
    assert amqpctl(broker, "list_vhosts", "name", "rabbitmq_semantics",
                   "--formatter", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(rows, key=lambda row: row["name"]) == [
        {"name": "/", "rabbitmq_semantics": "3.13"},
        {"name": "new", "rabbitmq_semantics": "4.3"}]
