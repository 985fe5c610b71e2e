"""Single acks, rejects and nacks read back to back (one per delivery, as
pika, aio-pika and Celery send them), and multiple acks read back to back
(one per delivery, as lavinmqperf sends them), are settled in one step;
what a client observes must be what one frame at a time gives.  Driven in
memory."""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st
from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.protocol.connection import OPEN
from amqp_server.wire import frames
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties
from amqp_server.wire.table import FieldTable

from .sansio import call, deliveries, methods, open_connection, publish

SETTLES = {
    "ack": lambda tag: make(spec.Basic.Ack, delivery_tag=tag),
    "reject": lambda tag: make(spec.Basic.Reject, delivery_tag=tag, requeue=False),
    "requeue": lambda tag: make(spec.Basic.Reject, delivery_tag=tag, requeue=True),
    "nack": lambda tag: make(spec.Basic.Nack, delivery_tag=tag, requeue=False),
    "nack-requeue": lambda tag: make(spec.Basic.Nack, delivery_tag=tag, requeue=True),
}


def set_up(count: int):
    """`count` messages delivered to consumer `c` of work (dead letters go
    to dlq); each message has its own id and trace header."""
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Exchange.Declare, exchange="dlx", exchange_type="fanout"))
    call(conn, 1, make(spec.Queue.Declare, queue="dlq"))
    call(conn, 1, make(spec.Queue.Bind, queue="dlq", exchange="dlx"))
    call(conn, 1, make(spec.Queue.Declare, queue="work", arguments=FieldTable(
        {"x-dead-letter-exchange": "dlx"})))
    conn.receive_data(b"".join(
        publish("work", b"m%d" % n, Properties(message_id=f"id-{n}", headers=FieldTable(
            {"trace-id": f"t{n}"}))) for n in range(count)))
    conn.data_to_send()
    call(conn, 1, make(spec.Basic.Qos, prefetch_count=count))
    conn.receive_data(frames.method_frame(1, make(spec.Basic.Consume, queue="work",
                                                  consumer_tag="c")))
    assert len(deliveries(conn.data_to_send())) == count
    return broker, conn


def state(broker, conn) -> tuple:
    """The dead letters in order, and what is back in work or redelivered
    (requeued messages go straight out again to the consumer; in which
    order several do is timing, as in RabbitMQ)."""
    queues = broker.vhosts["/"].queues
    # x-death's time is the second it happened: not part of the comparison.
    dead = [(entry.message.body, re.sub(rb"\x04timeT.{8}", b"", entry.message.header,
                                        flags=re.DOTALL)) for entry in queues["dlq"].ready]
    back = sorted([entry.message.body for entry in queues["work"].ready]
                  + [record[1].message.body for record in conn.channels[1].unacked.values()])
    return dead, back, dict(queues["work"].stats["dead_lettered"])


def test_rejects_read_together_dead_letter_in_order_each_with_its_own_headers():
    broker, conn = set_up(20)
    conn.receive_data(b"".join(frames.method_frame(1, SETTLES["reject"](tag))
                               for tag in range(1, 21)))
    dead = [entry.message for entry in broker.vhosts["/"].queues["dlq"].ready]
    assert [m.body for m in dead] == [b"m%d" % n for n in range(20)]
    assert [m.properties.headers["trace-id"] for m in dead] == [f"t{n}" for n in range(20)]
    assert [m.properties.message_id for m in dead] == [f"id-{n}" for n in range(20)]
    assert all(m.properties.headers["x-death"][0]["reason"] == "rejected" for m in dead)


def test_an_unknown_tag_settles_those_before_it_and_closes_the_channel():
    broker, conn = set_up(5)
    conn.receive_data(b"".join(frames.method_frame(1, SETTLES["ack"](tag))
                               for tag in (1, 2, 99, 3)))
    closed = [m for m in methods(conn.data_to_send()) if isinstance(m, spec.Channel.Close)]
    assert [(m.reply_code, m.class_id, m.method_id) for m in closed] == [(406, 60, 80)]
    work = broker.vhosts["/"].queues["work"]
    assert [e.message.body for e in work.ready] == [b"m2", b"m3", b"m4"]  # back, unacked


def read_in_pieces(conn, data: bytes, cuts: list[int]) -> None:
    """`data` handed to the connection in reads of the sizes in `cuts`, the
    rest in one last read."""
    pos = 0
    for cut in cuts:
        conn.receive_data(data[pos:pos + cut])
        pos += cut
    conn.receive_data(data[pos:])


def multiple_ack(tag: int):
    return make(spec.Basic.Ack, delivery_tag=tag, multiple=True)


def test_multiple_acks_read_together_settle_what_the_last_one_names():
    broker, conn = set_up(10)
    conn.receive_data(b"".join(frames.method_frame(1, multiple_ack(tag)) for tag in (2, 3, 7)))
    assert sorted(conn.channels[1].unacked) == [8, 9, 10]
    assert methods(conn.data_to_send()) == []
    assert broker.vhosts["/"].queues["work"].unacked == 3


def test_a_multiple_ack_of_a_settled_tag_among_others_closes_the_channel_after_the_first():
    broker, conn = set_up(10)
    conn.receive_data(b"".join(frames.method_frame(1, multiple_ack(tag)) for tag in (4, 2, 7)))
    closed = [m for m in methods(conn.data_to_send()) if isinstance(m, spec.Channel.Close)]
    assert [(m.reply_code, m.class_id, m.method_id) for m in closed] == [(406, 60, 80)]
    work = broker.vhosts["/"].queues["work"]
    # 1-4 acknowledged; 5-10 back in the queue when the channel closed.
    assert [e.message.body for e in work.ready] == [b"m%d" % n for n in range(4, 10)]


def after_acks(broker, conn) -> tuple:
    """What is back in work, what is still outstanding (None: the channel
    was closed) and what the client was told."""
    channel = conn.channels.get(1)
    return (sorted(entry.message.body for entry in broker.vhosts["/"].queues["work"].ready),
            sorted(channel.unacked) if channel is not None else None,
            [(type(m).__name__, getattr(m, "reply_code", None))
             for m in methods(conn.data_to_send())])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=25),
       st.lists(st.integers(1, 200), max_size=12))
def test_multiple_acks_split_anyhow_give_what_one_frame_at_a_time_gives(tags, cuts):
    data = b"".join(frames.method_frame(1, multiple_ack(tag)) for tag in tags)
    broker, conn = set_up(40)
    for tag in tags:
        conn.receive_data(frames.method_frame(1, multiple_ack(tag)))
    one_by_one = after_acks(broker, conn)
    broker, conn = set_up(40)
    read_in_pieces(conn, data, cuts)
    assert after_acks(broker, conn) == one_by_one


@settings(max_examples=120, deadline=None)
@given(st.lists(st.sampled_from(sorted(SETTLES)), min_size=1, max_size=30),
       st.lists(st.integers(1, 200), max_size=12))
def test_any_split_into_reads_gives_what_one_frame_at_a_time_gives(kinds, cuts):
    data = b"".join(frames.method_frame(1, SETTLES[kind](tag))
                    for tag, kind in enumerate(kinds, start=1))
    broker, conn = set_up(len(kinds))
    for tag, kind in enumerate(kinds, start=1):
        conn.receive_data(frames.method_frame(1, SETTLES[kind](tag)))
    one_by_one = state(broker, conn)
    broker, conn = set_up(len(kinds))
    read_in_pieces(conn, data, cuts)
    assert state(broker, conn) == one_by_one


def test_acks_read_together_on_a_channel_being_closed_are_dropped():
    _, conn = set_up(3)
    conn.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="missing",
                                                  passive=True)))
    assert [m.reply_code for m in methods(conn.data_to_send())] == [404]
    conn.receive_data(b"".join(frames.method_frame(1, SETTLES["ack"](tag)) for tag in (1, 2)))
    assert methods(conn.data_to_send()) == []
    assert conn.state == OPEN


def test_acks_read_together_on_a_channel_never_opened_are_a_channel_error():
    _, conn = set_up(3)
    conn.receive_data(b"".join(frames.method_frame(7, SETTLES["ack"](tag)) for tag in (1, 2)))
    close = methods(conn.data_to_send())[-1]
    assert (type(close), close.reply_code) == (spec.Connection.Close, 504)


def test_a_multiple_ack_takes_deliveries_a_rollback_gave_back():
    broker, conn = set_up(6)
    call(conn, 1, make(spec.Tx.Select))
    conn.receive_data(frames.method_frame(1, multiple_ack(4)))
    call(conn, 1, make(spec.Tx.Rollback))
    assert sorted(conn.channels[1].unacked) == [1, 2, 3, 4, 5, 6]
    call(conn, 1, make(spec.Tx.Select))  # (still transactional; commit settles)
    conn.receive_data(frames.method_frame(1, multiple_ack(2)))
    call(conn, 1, make(spec.Tx.Commit))
    assert sorted(conn.channels[1].unacked) == [3, 4, 5, 6]
    assert broker.vhosts["/"].queues["work"].unacked == 4
