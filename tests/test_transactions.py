"""tx.commit in memory: publishes are routed when they arrive and queued at
commit; should anything fail part-way through a commit, the acks not yet
applied are put back with the channel, so no message is lost."""

from __future__ import annotations

from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.wire import frames
from amqp_server.wire.methods import make

from .sansio import call, methods, open_connection, publish


def gets(conn, queue: str, count: int) -> list[int]:
    tags = []
    for _ in range(count):
        conn.receive_data(frames.method_frame(1, make(spec.Basic.Get, queue=queue)))
        tags.extend(m.delivery_tag for m in methods(conn.data_to_send())
                    if isinstance(m, spec.Basic.GetOk))
    return tags


def ack(tag: int) -> bytes:
    return frames.method_frame(1, make(spec.Basic.Ack, delivery_tag=tag))


def test_a_commit_that_fails_part_way_puts_the_rest_back():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    vhost = broker.vhosts["/"]
    for queue in ("work", "results"):
        call(conn, 1, make(spec.Queue.Declare, queue=queue))
    conn.receive_data(b"".join(publish("work", b"job%d" % n) for n in range(3)))
    call(conn, 1, make(spec.Tx.Select))
    first, second, third = gets(conn, "work", 3)
    conn.receive_data(ack(first) + publish("results", b"r") + ack(second) + ack(third))
    assert methods(conn.data_to_send()) == []

    def broken(message):
        raise RuntimeError("a bug in the middle of a commit")
    vhost.queues["results"].enqueue = broken
    conn.receive_data(frames.method_frame(1, make(spec.Tx.Commit)))
    closed = methods(conn.data_to_send())
    assert [(type(m), m.reply_code) for m in closed] == [(spec.Connection.Close, 541)]
    work = vhost.queues["work"]
    # The first ack was applied; the two after the failure are back, in order.
    assert [e.message.body for e in work.ready] == [b"job1", b"job2"]
    assert work.unacked == 0 and all(e.redelivered for e in work.ready)


def test_publishes_go_to_the_queues_routed_when_they_arrived():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Exchange.Declare, exchange="out", exchange_type="fanout"))
    call(conn, 1, make(spec.Queue.Declare, queue="before"))
    call(conn, 1, make(spec.Queue.Bind, queue="before", exchange="out"))
    call(conn, 1, make(spec.Tx.Select))
    conn.receive_data(publish("", b"m", exchange="out"))
    other = open_connection(broker)
    call(other, 1, make(spec.Queue.Declare, queue="after"))
    call(other, 1, make(spec.Queue.Bind, queue="after", exchange="out"))
    call(other, 1, make(spec.Exchange.Delete, exchange="out"))
    assert [type(m) for m in call(conn, 1, make(spec.Tx.Commit))] == [spec.Tx.CommitOk]
    queues = broker.vhosts["/"].queues
    assert (queues["before"].message_count, queues["after"].message_count) == (1, 0)
