"""The permission service without a socket: what each tag may see and do,
the checks a grant makes, and the user_id rule on every publish path."""

from __future__ import annotations

import pytest
from pamqp import commands as spec

from amqp_server.broker.access_control import AccessControl, Grant, NotAuthorised
from amqp_server.broker.broker import Broker
from amqp_server.broker.permissions import CONFIGURE, READ, WRITE, Permission
from amqp_server.broker.users import User
from amqp_server.config import BrokerConfig
from amqp_server.errors import AMQPError
from amqp_server.protocol.connection import Connection
from amqp_server.wire import frames
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties
from amqp_server.wire.table import FieldTable

from .sansio import call, methods, open_connection, publish

VHOSTS = {"/": None, "other": None}


def service(**permissions) -> AccessControl:
    table = {(user, vhost): perm for user, (vhost, perm) in permissions.items()}
    return AccessControl({}, table, VHOSTS)


def user(name: str, *tags: str) -> User:
    return User(name, "", tags)


FULL = Permission()


@pytest.mark.parametrize("tags, sees", [
    ((), {"other"}),
    (("management",), {"other"}),
    (("policymaker",), {"other"}),
    (("monitoring",), {"/", "other"}),
    (("administrator",), {"/", "other"}),
])
def test_which_vhosts_each_tag_sees(tags, sees):
    access = service(u=("other", FULL))
    assert set(access.visible_vhosts(user("u", *tags))) == sees


def test_only_login_or_administrator_may_change_a_vhost():
    access = service(m=("other", FULL), mon=("other", FULL), adm=("other", FULL))
    with pytest.raises(NotAuthorised, match="User not authorised to access virtual host"):
        access.require_vhost(user("m", "management"), "/")
    with pytest.raises(NotAuthorised, match="User not authorised to access virtual host"):
        access.require_vhost(user("mon", "monitoring"), "/")
    access.require_vhost(user("adm", "administrator"), "/")
    access.require_vhost(user("m", "management"), "missing")  # the route says 404
    # ... but acting still needs a login there, administrators included.
    with pytest.raises(NotAuthorised, match="Access refused."):
        access.grant(user("adm", "administrator"), "/")
    assert access.grant(user("m", "management"), "other").permission is FULL


def test_policymakers_need_a_login_in_the_vhost():
    access = service(p=("/", FULL))
    access.require_policymaker(user("p", "policymaker"), "/")
    access.require_policymaker(user("a", "administrator"), "other")
    for who, vhost in ((user("p", "policymaker"), "other"), (user("p", "management"), "/")):
        with pytest.raises(NotAuthorised, match="User not authorised to access object"):
            access.require_policymaker(who, vhost)


def test_connections_are_seen_by_their_user_and_monitors_and_closed_by_admins():
    access = service()
    assert access.sees_owned(user("m", "management"), "m")
    assert not access.sees_owned(user("m", "management"), "other")
    assert access.sees_owned(user("mon", "monitoring"), "other")
    access.require_may_close(user("m", "management"), "m")
    access.require_may_close(user("a", "administrator"), "other")
    with pytest.raises(NotAuthorised):
        access.require_may_close(user("mon", "monitoring"), "other")


def test_a_grant_checks_regexes_with_rabbitmqs_words():
    grant = Grant(user("lim"), "/", Permission(r"^lim\.", r"^lim\.", r"^lim\."))
    grant.check(CONFIGURE, "queue", "lim.q")
    with pytest.raises(AMQPError) as info:
        grant.check(READ, "queue", "q")
    assert info.value.code == 403 and info.value.reply_text == (
        "ACCESS_REFUSED - access to queue 'q' in vhost '/' refused for user 'lim'")
    with pytest.raises(AMQPError, match="exchange 'amq.default'"):
        grant.check(WRITE, "exchange", "")


def test_creating_a_queue_with_a_dead_letter_target_needs_write_on_it():
    grant = Grant(user("lim"), "/", Permission(r"^lim\.", r"^lim\.", r"^lim\."))
    grant.check_queue_declare("lim.q", {"x-dead-letter-exchange": "lim.dlx"}, exists=False)
    for key in ("x-dead-letter-exchange", "x-dead-letter-address", "x-expiry-address"):
        with pytest.raises(AMQPError, match="exchange 'dlx' in vhost '/'"):
            grant.check_queue_declare("lim.q", {key: "dlx"}, exists=False)
    # As RabbitMQ: only when the queue is created, read on it comes first.
    grant.check_queue_declare("lim.q", {"x-dead-letter-exchange": "dlx"}, exists=True)
    reader = Grant(user("w"), "/", Permission(".*", ".*", r"^lim\."))
    with pytest.raises(AMQPError, match="queue 'q'"):
        reader.check_queue_declare("q", {"x-dead-letter-exchange": "nope"}, exists=False)
    with pytest.raises(AMQPError, match="queue 'amq.gen-'"):
        grant.check_queue_declare("", None, exists=False)


def test_creating_an_exchange_with_an_alternate_needs_write_on_the_alternate():
    grant = Grant(user("lim"), "/", Permission(r"^lim\.", r"^lim\.", r"^lim\."))
    grant.check_exchange_declare("lim.x", {"alternate-exchange": "lim.ae"}, exists=False)
    with pytest.raises(AMQPError, match="exchange 'amq.fanout'"):
        grant.check_exchange_declare("lim.x", {"alternate-exchange": "amq.fanout"},
                                     exists=False)
    grant.check_exchange_declare("lim.x", {"alternate-exchange": "amq.fanout"}, exists=True)


def test_user_id_must_name_the_user_unless_impersonating():
    grant = Grant(user("bob"), "/", FULL)
    grant.check_user_id(None)
    grant.check_user_id("bob")
    with pytest.raises(AMQPError) as info:
        grant.check_user_id("alice")
    assert (info.value.code, info.value.reply_text) == (
        406, "PRECONDITION_FAILED - user_id property set to 'alice' but authenticated user "
             "was 'bob'")
    Grant(user("svc", "impersonator"), "/", FULL).check_user_id("alice")


def channel_close(conn) -> tuple | None:
    for method in methods(conn.data_to_send()):
        if isinstance(method, spec.Channel.Close):
            return method.reply_code, method.reply_text
    return None


def test_a_run_of_publishes_claiming_another_user_is_refused_whole():
    """Identical publishes read in one go take the run path (once a publish
    with the same properties has been seen); the user_id rule holds there
    as for a single publish, and none is queued."""
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue="q"))
    claimed = Properties(user_id="mallory")
    conn.receive_data(publish("q", b"x", claimed))  # refused: channel 1 closes
    assert channel_close(conn) == (
        406, "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated "
             "user was 'guest'")
    call(conn, 1, make(spec.Channel.CloseOk))
    call(conn, 2, make(spec.Channel.Open))
    conn.receive_data(b"".join(publish("q", b"x", claimed, channel=2) for _ in range(20)))
    assert channel_close(conn)[0] == 406
    assert broker.vhosts["/"].queues["q"].message_count == 0
    call(conn, 3, make(spec.Channel.Open))
    conn.receive_data(b"".join(publish("q", b"x", Properties(user_id="guest"), channel=3)
                               for _ in range(20)))
    assert broker.vhosts["/"].queues["q"].message_count == 20


def test_a_transactional_publish_is_checked_when_it_arrives():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue="q"))
    call(conn, 1, make(spec.Tx.Select))
    conn.receive_data(publish("q", b"x", Properties(user_id="mallory")))
    assert channel_close(conn)[0] == 406


def test_guest_logs_in_from_loopback_only_even_after_a_restart(tmp_path):
    """The loopback rule follows the user's name (RabbitMQ's loopback_users),
    not a flag that a restart could lose."""
    first = Broker(BrokerConfig(data_dir=str(tmp_path)))
    first.open_data_dir()
    first.close_data_dir()
    again = Broker(BrokerConfig(data_dir=str(tmp_path)))
    again.open_data_dir()
    for host, loopback in (("203.0.113.9", False), ("127.0.0.1", True)):
        conn = Connection(again, host, is_loopback=loopback)
        conn.receive_data(frames.PROTOCOL_HEADER)
        conn.receive_data(frames.method_frame(0, make(
            spec.Connection.StartOk, client_properties=FieldTable(), mechanism="PLAIN",
            response=b"\x00guest\x00guest", locale="en_US")))
        assert (conn.login_refusal is None) == loopback
    again.close_data_dir()
