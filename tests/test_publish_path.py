"""The one publish path of a virtual host (broker/publishing.py): what it
checks, where it routes, what it answers and counts, whether a publish
comes one at a time, in a run read back to back, or in a transaction.
Driven in memory through the connection."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings, strategies as st
from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.broker.message import Message
from amqp_server.broker.permissions import Permission
from amqp_server.broker.publishing import ENQUEUED, UNROUTED, Routed
from amqp_server.broker.users import User
from amqp_server.config import BrokerConfig
from amqp_server.errors import AMQPError
from amqp_server.management.tasks import LocalTarget
from amqp_server.wire import frames
from amqp_server.wire.frames import content_header
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable

from .sansio import call, methods, open_connection, publish


def message(key: str, body: bytes = b"x", exchange: str = "", **props) -> Message:
    header = content_header(len(body), encode_properties(Properties(**props)))
    return Message.to(exchange, key, header, body)


def grant(broker, user: str = "guest"):
    return broker.access.login(broker.users[user], "/")


def declare(broker, name: str, **arguments):
    return broker.vhosts["/"].declare_queue(name, None, arguments=FieldTable(arguments))


def counted(broker) -> dict:
    c = broker.counters
    return {name: getattr(c, name) for name in (
        "received", "received_confirm", "routed", "unroutable_returned",
        "unroutable_dropped", "confirmed")}


# ---- outcomes ----------------------------------------------------------

def test_a_publish_every_queue_takes_is_accepted():
    broker = Broker(BrokerConfig())
    declare(broker, "q")
    assert broker.vhosts["/"].publish(message("q"), grant(broker)) is ENQUEUED


def test_a_publish_no_queue_is_routed_to_is_unrouted():
    broker = Broker(BrokerConfig())
    assert broker.vhosts["/"].publish(message("nowhere"), grant(broker)) is UNROUTED


def test_a_publish_refused_by_one_queue_names_it_and_was_taken_by_the_other():
    broker = Broker(BrokerConfig())
    vhost = broker.vhosts["/"]
    full = declare(broker, "full", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    free = declare(broker, "free")
    for queue in ("full", "free"):
        vhost.bind("amq.fanout", vhost.queues[queue], "", None)
    outcome = vhost.publish(message("", exchange="amq.fanout"), grant(broker))
    assert (outcome.routed, outcome.taken, outcome.refused) == (True, True, (full,))
    assert (full.message_count, free.message_count) == (0, 1)


def test_a_publish_every_queue_refuses_was_taken_by_none():
    broker = Broker(BrokerConfig())
    full = declare(broker, "full", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    outcome = broker.vhosts["/"].publish(message("full"), grant(broker))
    assert (outcome.routed, outcome.taken, outcome.refused) == (True, False, (full,))


# ---- checks ------------------------------------------------------------

def test_a_publish_to_a_missing_exchange_is_404():
    broker = Broker(BrokerConfig())
    with pytest.raises(AMQPError) as refused:
        broker.vhosts["/"].publish(message("k", exchange="missing"), grant(broker))
    assert (refused.value.code, refused.value.reply_text) == (
        404, "NOT_FOUND - no exchange 'missing' in vhost '/'")


def test_a_publish_naming_direct_reply_to_without_a_reply_consumer_is_406():
    broker = Broker(BrokerConfig())
    declare(broker, "q")
    with pytest.raises(AMQPError) as refused:
        broker.vhosts["/"].publish(message("q", reply_to="amq.rabbitmq.reply-to"),
                                   grant(broker))
    assert (refused.value.code, refused.value.reply_text) == (
        406, "PRECONDITION_FAILED - fast reply consumer does not exist")
    assert broker.counters.received == 0


def test_a_publish_naming_direct_reply_to_carries_the_publishers_reply_name():
    broker = Broker(BrokerConfig())
    queue = declare(broker, "q")
    broker.vhosts["/"].publish(message("q", reply_to="amq.rabbitmq.reply-to"), grant(broker),
                               reply_name="amq.rabbitmq.reply-to.abc")
    assert queue.ready[0].message.properties.reply_to == "amq.rabbitmq.reply-to.abc"


def test_a_republished_message_keeps_a_user_id_naming_another_user():
    """A workbench move publishes a message the broker holds: its user_id
    named its publisher when it came in, not the user moving it."""
    broker = Broker(BrokerConfig())
    queue = declare(broker, "q")
    held = message("q", user_id="alice")
    outcome = broker.vhosts["/"].republish(held, grant(broker), ("q",))
    assert outcome is ENQUEUED and queue.ready[0].message.properties.user_id == "alice"


def test_a_republished_message_routes_by_the_keys_given_not_its_cc():
    broker = Broker(BrokerConfig())
    for name in ("q", "cc"):
        declare(broker, name)
    held = message("q", headers=FieldTable({"CC": ["cc"]}))
    broker.vhosts["/"].republish(held, grant(broker), ("q",))
    queues = broker.vhosts["/"].queues
    assert (queues["q"].message_count, queues["cc"].message_count) == (1, 0)


# ---- counting ----------------------------------------------------------

def test_a_refused_publish_in_confirm_mode_is_routed_but_not_confirmed():
    """As RabbitMQ counts a nacked publish (checked on 3.10)."""
    broker = Broker(BrokerConfig())
    declare(broker, "full", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    broker.vhosts["/"].publish(message("full"), grant(broker), True, True)
    assert counted(broker) == {"received": 1, "received_confirm": 1, "routed": 1,
                               "unroutable_returned": 0, "unroutable_dropped": 0,
                               "confirmed": 0}


def test_a_dead_letter_is_counted_as_a_death_not_as_a_publish():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue="dlq"))
    call(conn, 1, make(spec.Queue.Declare, queue="work", arguments=FieldTable(
        {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})))
    conn.receive_data(publish("work", b"x"))
    conn.receive_data(frames.method_frame(1, make(spec.Basic.Get, queue="work")))
    conn.receive_data(frames.method_frame(1, make(spec.Basic.Reject, delivery_tag=1,
                                                  requeue=False)))
    queues = broker.vhosts["/"].queues
    assert queues["dlq"].message_count == 1
    assert queues["work"].stats["dead_lettered"]["rejected"] == 1
    assert (broker.counters.received, broker.counters.routed) == (1, 1)


def test_a_dead_letter_one_of_two_targets_refuses_is_taken_by_the_other():
    broker = Broker(BrokerConfig())
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dlx", "fanout")
    declare(broker, "full", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    declare(broker, "free")
    for name in ("full", "free"):
        vhost.bind("dlx", vhost.queues[name], "", None)
    work = declare(broker, "work", **{"x-dead-letter-exchange": "dlx"})
    vhost.publish(message("work"), grant(broker))
    work.reject([work.take_one()])
    assert (vhost.queues["free"].message_count, vhost.queues["full"].message_count) == (1, 0)
    assert work.stats["dead_lettered"]["rejected"] == 1


# ---- workbench moves -----------------------------------------------------

def moved(broker, target_exchange: str, key: str, held: Message, user: str = "guest"):
    """A workbench move of `held` (from queue "held") to `target_exchange`
    with `key`, as the given user: the batch's outcome."""
    vhost = broker.vhosts["/"]
    source = vhost.queues.get("held") or declare(broker, "held")
    source.enqueue(held)
    entries = source.withdraw([entry.seq for entry in source.ready])
    target = LocalTarget(broker, vhost, grant(broker, user), target_exchange, key)
    return asyncio.run(target.send(entries))


def test_a_workbench_move_is_counted_as_a_mandatory_publish_in_confirm_mode():
    broker = Broker(BrokerConfig())
    declare(broker, "parking")
    outcome = moved(broker, "", "parking", message("held"))
    assert len(outcome.safe) == 1 and broker.vhosts["/"].queues["parking"].message_count == 1
    assert counted(broker) == {"received": 1, "received_confirm": 1, "routed": 1,
                               "unroutable_returned": 0, "unroutable_dropped": 0,
                               "confirmed": 1}


def test_a_workbench_move_no_queue_takes_stays_and_is_counted_as_returned():
    broker = Broker(BrokerConfig())
    outcome = moved(broker, "", "nowhere", message("held"))
    assert [reason for _, reason in outcome.kept] == ["unroutable"]
    assert counted(broker)["unroutable_returned"] == 1


def test_a_workbench_move_one_of_two_queues_refuses_stays_and_its_copy_is_a_duplicate():
    broker = Broker(BrokerConfig())
    vhost = broker.vhosts["/"]
    declare(broker, "full", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    declare(broker, "free")
    for name in ("full", "free"):
        vhost.bind("amq.fanout", vhost.queues[name], "", None)
    outcome = moved(broker, "amq.fanout", "", message("held"))
    assert [reason for _, reason in outcome.kept] == ["refused by a target queue"]
    assert outcome.duplicates == 1 and vhost.queues["free"].message_count == 1


def test_a_workbench_move_keeps_a_user_id_naming_another_user():
    broker = Broker(BrokerConfig())
    broker.put_user(User.with_password("bob", "pw", ("administrator",)))
    broker.set_permission("bob", "/", Permission())
    declare(broker, "parking")
    outcome = moved(broker, "", "parking", message("held", user_id="guest"), user="bob")
    assert len(outcome.safe) == 1


# ---- transactions ------------------------------------------------------

def test_a_transactional_publish_is_routed_at_arrival_and_counted_at_commit():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue="q"))
    call(conn, 1, make(spec.Tx.Select))
    conn.receive_data(publish("q", b"m"))
    (action,) = conn.channels[1].tx
    assert action[1] == Routed(action[1].message, ("q",))
    assert broker.counters.received == 0
    call(conn, 1, make(spec.Tx.Commit))
    assert (broker.counters.received, broker.vhosts["/"].queues["q"].message_count) == (1, 1)


def test_a_mandatory_transactional_publish_with_no_route_is_returned_at_commit():
    conn = open_connection(Broker(BrokerConfig()))
    call(conn, 1, make(spec.Tx.Select))
    conn.receive_data(publish("nowhere", b"m", mandatory=True))
    assert methods(conn.data_to_send()) == []
    conn.receive_data(frames.method_frame(1, make(spec.Tx.Commit)))
    replies = methods(conn.data_to_send())
    assert [type(m) for m in replies] == [spec.Basic.Return, spec.Tx.CommitOk]


# ---- a run fares as one publish at a time ------------------------------

KINDS = ("plain", "id", "cc", "ttl", "bad-ttl", "headers", "user", "foreign-user")
publishes = st.lists(st.tuples(
    st.sampled_from(["p", "k.a", "k.b", "k.c", "none"]),
    st.sampled_from([b"", b"x", b"yy"]),
    st.sampled_from(KINDS),
    st.booleans()), min_size=1, max_size=40)


def properties(n: int, kind: str) -> Properties | None:
    if kind == "plain":
        return None
    if kind == "cc":
        return Properties(message_id=f"m{n % 3}", headers=FieldTable({"CC": ["k.b"]}))
    if kind == "ttl":
        return Properties(expiration="60000")
    if kind == "bad-ttl":
        return Properties(expiration="soon")
    if kind == "headers":
        return Properties(headers=FieldTable({"trace-id": f"t{n % 2}"}))
    if kind == "user":
        return Properties(user_id="guest")
    if kind == "foreign-user":
        return Properties(user_id="mallory")
    return Properties(message_id=f"m{n}")


def answers(data: bytes) -> tuple:
    """(each publish's confirm by sequence number, returns in order, other
    methods): confirms may be grouped differently, not differ (unless the
    channel closed: confirms still due then are not sent)."""
    confirmed, returns, others = {}, [], []
    last = 0
    for method in methods(data):
        if isinstance(method, spec.Basic.Ack):
            first = last + 1 if method.multiple else method.delivery_tag
            for seq in range(first, method.delivery_tag + 1):
                confirmed.setdefault(seq, "ack")
            last = max(last, method.delivery_tag)
        elif isinstance(method, spec.Basic.Nack):
            confirmed[method.delivery_tag] = "nack"
            last = max(last, method.delivery_tag)
        elif isinstance(method, spec.Basic.Return):
            returns.append((method.reply_code, method.routing_key))
        else:
            others.append((type(method).__name__, getattr(method, "reply_code", None)))
    return None if others else confirmed, returns, others


def published_state(batch, confirm: bool, read_together: bool) -> tuple:
    """Publish `batch` to topic exchange t (p -> qp, plain: a run's fast
    path; k.a -> qa; k.* -> qall, which refuses past 3 messages; k.b -> qb,
    with a TTL), all read at once or one publish a read."""
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Exchange.Declare, exchange="t", exchange_type="topic"))
    for queue, key, arguments in (
            ("qp", "p", {}), ("qa", "k.a", {}), ("qall", "k.*", {"x-max-length": 3,
                                                 "x-overflow": "reject-publish"}),
            ("qb", "k.b", {"x-message-ttl": 60000})):
        call(conn, 1, make(spec.Queue.Declare, queue=queue, arguments=FieldTable(arguments)))
        call(conn, 1, make(spec.Queue.Bind, queue=queue, exchange="t", routing_key=key))
    if confirm:
        call(conn, 1, make(spec.Confirm.Select))
    data = [publish(key, body, properties(n, kind), exchange="t", mandatory=mandatory)
            for n, (key, body, kind, mandatory) in enumerate(batch)]
    out = b""
    for chunk in ([b"".join(data)] if read_together else data):
        conn.receive_data(chunk)
        out += conn.data_to_send()
    queues = broker.vhosts["/"].queues
    contents = {name: [(e.message.body, e.message.header, e.message.routing_keys)
                       for e in queues[name].ready] for name in ("qp", "qa", "qall", "qb")}
    return contents, counted(broker), answers(out)


@settings(max_examples=150, deadline=None)
@given(publishes, st.booleans())
def test_publishes_read_together_fare_as_one_publish_at_a_time(batch, confirm):
    """Same queues' contents, counters, confirms, returns and errors."""
    assert (published_state(batch, confirm, read_together=True)
            == published_state(batch, confirm, read_together=False))
