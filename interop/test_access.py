"""Users, vhosts and permissions: configure/write/read checked where
RabbitMQ checks them, with its reply codes and wording, managed with
amqpctl and the HTTP API, kept across restarts."""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.error
import urllib.request
from base64 import b64encode

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ProbableAccessDeniedError

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread
from policies.ctl import main as amqpctl

from .users import connect, ctl


@pytest.fixture
def bob(broker):
    """User bob: configure on ^bob\\., write on ^bob\\.|amq\\.default, read on ^bob\\."""
    assert ctl(broker, "add_user", "bob", "secret") == 0
    assert ctl(broker, "set_permissions", "bob", r"^bob\.", r"^bob\.|^amq\.default$",
               r"^bob\.") == 0
    conn = connect(broker)
    yield conn
    if conn.is_open:
        conn.close()


def refused(action) -> str:
    with pytest.raises(ChannelClosedByBroker) as info:
        action()
    assert info.value.reply_code == 403
    return info.value.reply_text


def test_vhost_without_permissions_is_refused(broker):
    assert ctl(broker, "add_user", "carol", "pw") == 0
    with pytest.raises(ProbableAccessDeniedError) as info:
        connect(broker, "carol", "pw")
    # pika's wording around the broker's connection.close 530
    assert "(530) \"NOT_ALLOWED - access to vhost '/' refused for user 'carol'\"" in str(
        info.value)


def test_configure_is_needed_to_declare_and_delete(bob):
    channel = bob.channel()
    channel.exchange_declare("bob.events", "fanout")
    channel.queue_declare("bob.work")
    text = refused(lambda: bob.channel().exchange_declare("orders", "fanout"))
    assert text == ("ACCESS_REFUSED - access to exchange 'orders' in vhost '/' "
                    "refused for user 'bob'")
    text = refused(lambda: bob.channel().queue_declare("orders"))
    assert text == "ACCESS_REFUSED - access to queue 'orders' in vhost '/' refused for user 'bob'"
    refused(lambda: bob.channel().queue_delete("orders"))
    refused(lambda: bob.channel().exchange_delete("amq.fanout"))
    channel.queue_delete("bob.work")


def test_passive_declare_needs_no_configure(broker, bob):
    guest = pika.BlockingConnection(pika.URLParameters(broker.url))
    guest.channel().queue_declare("shared")
    bob.channel().queue_declare("shared", passive=True)
    guest.close()


def test_write_is_needed_to_publish(broker, bob):
    channel = bob.channel()
    channel.queue_declare("bob.work")
    channel.basic_publish("", "bob.work", b"ok")  # the default exchange is amq.default
    channel.basic_publish("amq.fanout", "x", b"no")
    channel.connection.process_data_events(time_limit=0.2)
    assert channel.is_closed and channel._closing_reason.reply_code == 403
    assert "exchange 'amq.fanout'" in channel._closing_reason.reply_text
    assert bob.is_open  # a channel error: the connection stays


def test_read_is_needed_to_consume_get_and_purge(broker, bob):
    guest = pika.BlockingConnection(pika.URLParameters(broker.url))
    guest.channel().queue_declare("private")
    guest.close()
    text = refused(lambda: bob.channel().basic_get("private"))
    assert text == "ACCESS_REFUSED - access to queue 'private' in vhost '/' refused for user 'bob'"
    refused(lambda: bob.channel().basic_consume("private", lambda *a: None))
    refused(lambda: bob.channel().queue_purge("private"))
    channel = bob.channel()
    channel.queue_declare("bob.work")
    assert channel.basic_get("bob.work")[0] is None


def test_bind_needs_write_on_the_queue_and_read_on_the_exchange(broker, bob):
    channel = bob.channel()
    channel.exchange_declare("bob.events", "fanout")
    channel.queue_declare("bob.work")
    channel.queue_bind("bob.work", "bob.events")
    text = refused(lambda: bob.channel().queue_bind("bob.work", "amq.topic", "k"))
    assert "exchange 'amq.topic'" in text


def test_dead_letter_exchange_needs_write_at_declare(broker, bob):
    text = refused(lambda: bob.channel().queue_declare(
        "bob.work", arguments={"x-dead-letter-exchange": "amq.fanout"}))
    assert text == ("ACCESS_REFUSED - access to exchange 'amq.fanout' in vhost '/' refused "
                    "for user 'bob'")
    bob.channel().exchange_declare("bob.dlx", "fanout")
    bob.channel().queue_declare("bob.work", arguments={"x-dead-letter-exchange": "bob.dlx"})


def test_permission_changes_apply_to_open_connections(broker, bob):
    channel = bob.channel()
    channel.queue_declare("bob.work")
    assert ctl(broker, "clear_permissions", "bob") == 0
    refused(lambda: bob.channel().queue_declare("bob.other"))


def test_management_needs_administrator_for_users(broker, capsys):
    assert ctl(broker, "add_user", "mona", "pw") == 0
    assert ctl(broker, "set_user_tags", "mona", "monitoring") == 0
    request = urllib.request.Request(broker.management_url + "/api/users")
    request.add_header("Authorization", "Basic " + b64encode(b"mona:pw").decode())
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 401  # RabbitMQ's not_authorised
    port = broker.management_url.rsplit(":", 1)[1]
    assert amqpctl(["--port", port, "--username", "mona", "--password", "pw",
                    "list_users"]) == 77
    assert "Not administrator" in capsys.readouterr().err


def http(broker, method: str, path: str, user: str, body: dict | None = None) -> tuple:
    """(status, JSON reason or None) of one management request as `user`/pw."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(broker.management_url + path, data=data, method=method)
    request.add_header("Authorization", "Basic " + b64encode(f"{user}:pw".encode()).decode())
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}").get("reason")


def test_management_honours_user_tags(broker):
    """policymaker: policies in its vhosts; monitoring: neither policies
    nor definitions; operator policies and definitions: administrator."""
    for user, tags in (("pam", "policymaker"), ("mona", "monitoring"), ("ada", "administrator")):
        assert ctl(broker, "add_user", user, "pw") == 0
        assert ctl(broker, "set_user_tags", user, tags) == 0
    assert ctl(broker, "set_permissions", "pam", ".*", ".*", ".*") == 0
    policy = {"pattern": "^dl", "definition": {"message-ttl": 1000}}
    assert http(broker, "PUT", "/api/policies/%2F/ttl", "pam", policy) == (201, None)
    assert http(broker, "PUT", "/api/policies/%2F/ttl", "mona", policy) == (
        401, "User not authorised to access object")
    assert ctl(broker, "add_vhost", "other") == 0  # pam has no permissions there
    assert http(broker, "PUT", "/api/policies/other/ttl", "pam", policy) == (
        401, "User not authorised to access object")
    assert http(broker, "PUT", "/api/operator-policies/%2F/cap", "pam", policy) == (
        401, "Not administrator user")
    assert http(broker, "GET", "/api/definitions", "mona") == (401, "Not administrator user")
    assert http(broker, "GET", "/api/definitions", "ada") == (200, None)
    assert http(broker, "DELETE", "/api/policies/%2F/ttl", "ada") == (204, None)


def test_amqpctl_verbs_and_errors(broker, capsys):
    assert ctl(broker, "add_user", "dave", "pw") == 0
    assert ctl(broker, "add_user", "dave", "pw") == 65
    assert "user 'dave' already exists" in capsys.readouterr().err
    assert ctl(broker, "add_vhost", "staging") == 0
    assert ctl(broker, "set_permissions", "-p", "staging", "dave", ".*", ".*", ".*") == 0
    capsys.readouterr()
    assert ctl(broker, "list_permissions", "-p", "staging", "--formatter", "json") == 0
    # The API gives whoever creates a vhost full permissions there (RabbitMQ's).
    assert json.loads(capsys.readouterr().out) == [
        {"user": "dave", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "guest", "configure": ".*", "write": ".*", "read": ".*"}]
    assert ctl(broker, "list_user_permissions", "dave", "--formatter", "json") == 0
    assert json.loads(capsys.readouterr().out) == [
        {"vhost": "staging", "configure": ".*", "write": ".*", "read": ".*"}]
    # rabbitmqctl: exit 69 for a user that does not exist, not an empty list.
    assert ctl(broker, "list_user_permissions", "nobody") == 69
    assert "user 'nobody' does not exist" in capsys.readouterr().err
    conn = connect(broker, "dave", "pw", "staging")
    conn.channel().queue_declare("anything")
    conn.close()
    assert ctl(broker, "change_password", "dave", "new") == 0
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(broker, "dave", "pw", "staging")
    assert ctl(broker, "set_permissions", "dave", "(", ".*", ".*") == 65
    assert "not a valid regular expression" in capsys.readouterr().err
    assert ctl(broker, "set_permissions", "nobody", ".*", ".*", ".*") == 65
    assert ctl(broker, "delete_vhost", "staging") == 0
    assert ctl(broker, "delete_vhost", "staging") == 65
    assert ctl(broker, "delete_user", "dave") == 0
    assert ctl(broker, "delete_user", "dave") == 65
    assert "user 'dave' not found" in capsys.readouterr().err


def test_users_vhosts_and_permissions_survive_a_restart():
    data_dir = tempfile.mkdtemp(prefix="amqp-access-")
    try:
        config = BrokerConfig(port=0, management_port=0)
        with BrokerThread(config, data_dir=data_dir) as broker:
            assert ctl(broker, "add_user", "erin", "pw") == 0
            assert ctl(broker, "add_vhost", "prod") == 0
            assert ctl(broker, "set_permissions", "-p", "prod", "erin", "^e", "^e", "^e") == 0
        with BrokerThread(config, data_dir=data_dir) as broker:
            conn = connect(broker, "erin", "pw", "prod")
            conn.channel().queue_declare("e.q")
            refused(lambda: conn.channel().queue_declare("other"))
            conn.close()
            with pytest.raises(ProbableAccessDeniedError):
                connect(broker, "erin", "pw", "/")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_definitions_from_before_permissions_keep_full_access():
    from amqp_server.broker import definitions
    from amqp_server.broker.broker import Broker
    broker = Broker(BrokerConfig())
    document = {"vhosts": [{"name": "/"}, {"name": "v2"}],
                "users": [{"name": "old", "password_hash": broker.users["guest"].password_hash,
                           "tags": []}]}
    definitions.import_(broker, document)
    assert broker.permissions[("old", "v2")].unrestricted
