"""Publishes read back to back are taken as a run (routed once, queued and
delivered together); what a client observes must be exactly what one
publish at a time gives.  Driven in memory through the connection."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st
from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.wire import frames
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties
from amqp_server.wire.table import FieldTable

from .sansio import call, consuming, deliveries, methods, open_connection, publish, split_frames


def test_a_run_arrives_whole_and_in_order_after_frames_that_break_it():
    broker = Broker(BrokerConfig())
    consumer = consuming(broker, "q", no_ack=True)
    producer = open_connection(broker)
    bodies = [b"%03d" % i for i in range(40)]
    data = b"".join(publish("q", body) for body in bodies[:30])
    data += publish("q", b"longer body")  # another size: a new run
    data += publish("q", b"")  # no body frame at all
    data += b"".join(publish("q", body) for body in bodies[30:])
    # The last publish is cut in the middle of its body frame.
    producer.receive_data(data[:-3])
    producer.receive_data(data[-3:])
    got = deliveries(consumer.data_to_send())
    assert [body for _, _, _, body in got] == (
        bodies[:30] + [b"longer body", b""] + bodies[30:])
    assert [tag for tag, _, _, _ in got] == list(range(1, 43))


def test_a_run_carries_on_across_body_sizes():
    broker = Broker(BrokerConfig())
    producer = open_connection(broker)
    call(producer, 1, make(spec.Queue.Declare, queue="q"))
    props = Properties(content_type="application/json", delivery_mode=1)
    bodies = [b"{}" * (1 + i // 3 % 4) for i in range(48)]
    producer.receive_data(b"".join(publish("q", body, props) for body in bodies))
    ready = list(broker.vhosts["/"].queues["q"].ready)
    # Each header states its own body's size; messages of one size share one.
    sizes = [int.from_bytes(entry.message.header[4:12], "big") for entry in ready]
    assert sizes == list(map(len, bodies))
    assert len({id(entry.message.header) for entry in ready}) == 4
    assert broker.vhosts["/"].queues["q"].ready_bytes == sum(map(len, bodies))
    consumer = open_connection(broker)
    consumer.receive_data(frames.method_frame(1, make(spec.Basic.Consume, queue="q",
                                                      no_ack=True)))
    got = deliveries(consumer.data_to_send())
    assert [body for _, _, _, body in got] == bodies


def test_a_repeat_past_the_size_limits_gets_the_errors_of_one_publish_at_a_time():
    broker = Broker(BrokerConfig(max_message_size=100))
    consumer = consuming(broker, "q", no_ack=True)
    producer = open_connection(broker)
    producer.receive_data(publish("q", b"a" * 10) + publish("q", b"b" * 20)
                          + publish("q", b"c" * 101) + publish("q", b"d"))
    assert [body for _, _, _, body in deliveries(consumer.data_to_send())] == [
        b"a" * 10, b"b" * 20]
    close = methods(producer.data_to_send())[-1]
    assert (type(close), close.reply_code) == (spec.Channel.Close, 406)
    assert close.reply_text == (
        "PRECONDITION_FAILED - message size 101 is larger than configured max size 100")
    # A body frame over frame_max is a connection error, as it always was.
    producer = open_connection(broker)
    producer.receive_data(publish("q", b"e" * 10) + publish("q", b"f" * 131_073))
    close = methods(producer.data_to_send())[-1]
    assert (type(close), close.reply_code) == (spec.Connection.Close, 501)


def test_prefetch_bounds_a_run_and_acks_release_the_rest_in_batches():
    broker = Broker(BrokerConfig())
    consumer = consuming(broker, "q", prefetch=10)
    producer = open_connection(broker)
    producer.receive_data(b"".join(publish("q", b"m%d" % i) for i in range(25)))
    assert [b for _, _, _, b in deliveries(consumer.data_to_send())] == [
        b"m%d" % i for i in range(10)]
    consumer.receive_data(frames.method_frame(1, make(spec.Basic.Ack, delivery_tag=4,
                                                      multiple=True)))
    assert [(t, b) for t, _, _, b in deliveries(consumer.data_to_send())] == [
        (11, b"m10"), (12, b"m11"), (13, b"m12"), (14, b"m13")]
    # A single ack leaves a gap: the multiple ack after it must walk the tags.
    consumer.receive_data(frames.method_frame(1, make(spec.Basic.Ack, delivery_tag=7)))
    consumer.receive_data(frames.method_frame(1, make(spec.Basic.Ack, delivery_tag=12,
                                                      multiple=True)))
    assert [t for t, _, _, _ in deliveries(consumer.data_to_send())] == list(range(15, 23))
    queue = broker.vhosts["/"].queues["q"]
    assert (queue.unacked, len(queue.ready)) == (10, 3)
    assert sorted(consumer.channels[1].unacked) == [13, 14] + list(range(15, 23))


def test_global_prefetch_bounds_batches_across_consumers_of_a_channel():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    for name in ("a", "b"):
        call(conn, 1, make(spec.Queue.Declare, queue=name))
    call(conn, 1, make(spec.Basic.Qos, prefetch_count=6, global_=True))
    for name in ("a", "b"):
        call(conn, 1, make(spec.Basic.Consume, queue=name, consumer_tag=name))
    producer = open_connection(broker)
    producer.receive_data(b"".join(publish("a", b"x") for _ in range(5))
                          + b"".join(publish("b", b"y") for _ in range(5)))
    got = deliveries(conn.data_to_send())
    assert [key for _, key, _, _ in got] == ["a"] * 5 + ["b"]
    assert len(conn.channels[1].unacked) == 6


def test_a_run_is_shared_round_robin_by_several_consumers():
    broker = Broker(BrokerConfig())
    consumer = consuming(broker, "q", no_ack=True)
    call(consumer, 1, make(spec.Basic.Consume, queue="q", consumer_tag="d", no_ack=True))
    producer = open_connection(broker)
    producer.receive_data(b"".join(publish("q", b"%d" % i) for i in range(6)))
    tags = [frame for frame in methods(consumer.data_to_send())]
    assert [m.consumer_tag for m in tags] == ["c", "d"] * 3


def test_a_run_into_a_queue_with_a_limit_is_confirmed_one_by_one():
    """reject-publish refuses each message past max-length: those are
    nacked, the rest acked, as publishing one at a time would be."""
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue="q", arguments=FieldTable(
        {"x-max-length": 3, "x-overflow": "reject-publish"})))
    call(conn, 1, make(spec.Queue.Declare, queue="free"))
    call(conn, 1, make(spec.Queue.Bind, queue="q", exchange="amq.fanout"))
    call(conn, 1, make(spec.Queue.Bind, queue="free", exchange="amq.fanout"))
    call(conn, 1, make(spec.Confirm.Select))
    conn.receive_data(b"".join(publish("", b"m", exchange="amq.fanout") for _ in range(5)))
    confirms = [(type(m).__name__, m.delivery_tag, m.multiple)
                for m in methods(conn.data_to_send())]
    assert confirms == [("Ack", 3, True), ("Nack", 4, False), ("Nack", 5, False)]
    queues = broker.vhosts["/"].queues
    assert (queues["q"].message_count, queues["free"].message_count) == (3, 5)


def test_confirms_for_a_run_of_plain_publishes():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue="q"))
    call(conn, 1, make(spec.Confirm.Select))
    conn.receive_data(b"".join(publish("q", b"body") for _ in range(7)))
    acks = methods(conn.data_to_send())
    assert [(type(m), m.delivery_tag, m.multiple) for m in acks] == [(spec.Basic.Ack, 7, True)]
    assert broker.vhosts["/"].queues["q"].message_count == 7


def test_mandatory_run_with_no_route_returns_every_message():
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(b"".join(publish("nowhere", b"%d" % i, mandatory=True) for i in range(4)))
    out = conn.data_to_send()
    returns = [m for m in methods(out) if isinstance(m, spec.Basic.Return)]
    assert [(m.reply_code, m.routing_key) for m in returns] == [(312, "nowhere")] * 4
    bodies = [p for t, _, p in split_frames(out) if t == frames.FRAME_BODY]
    assert bodies == [b"0", b"1", b"2", b"3"]


def test_a_run_with_cc_headers_and_expiration_is_inspected_per_message():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    for name in ("q", "cc"):
        call(conn, 1, make(spec.Queue.Declare, queue=name))
    props = Properties(headers=FieldTable({"CC": ["cc"]}), expiration="60000")
    conn.receive_data(b"".join(publish("q", b"x", props) for _ in range(3)))
    queues = broker.vhosts["/"].queues
    assert (queues["q"].message_count, queues["cc"].message_count) == (3, 3)
    assert all(entry.deadline is not None for entry in queues["q"].ready)


def test_a_run_with_bcc_queues_every_copy_without_it():
    """Publishes repeating one header share what checking it found, the
    header without BCC included."""
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    for name in ("q", "bcc"):
        call(conn, 1, make(spec.Queue.Declare, queue=name))
    props = Properties(headers=FieldTable({"BCC": ["bcc"], "k": "v"}))
    conn.receive_data(b"".join(publish("q", b"x", props) for _ in range(5)))
    queues = broker.vhosts["/"].queues
    for name in ("q", "bcc"):
        assert [dict(entry.message.headers) for entry in queues[name].ready] == [{"k": "v"}] * 5


def test_a_run_to_a_missing_exchange_closes_the_channel_once():
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(b"".join(publish("k", b"x", exchange="missing") for _ in range(5)))
    out = methods(conn.data_to_send())
    assert [(type(m), m.reply_code) for m in out] == [(spec.Channel.Close, 404)]


def test_a_consumer_without_prefetch_takes_a_deep_queue_in_bounded_batches():
    broker = Broker(BrokerConfig())
    producer = open_connection(broker)
    call(producer, 1, make(spec.Queue.Declare, queue="q"))
    producer.receive_data(b"".join(publish("q", b"x" * 1000) for _ in range(3000)))
    consumer = open_connection(broker)
    consumer.receive_data(frames.method_frame(1, make(spec.Basic.Consume, queue="q",
                                                      no_ack=True)))
    first = consumer.data_to_send()
    # About the connection's 1 MiB output limit of bodies, not the 3 MB queued.
    assert 1 << 20 <= len(first) < 1.1 * (1 << 20)
    total = len(deliveries(first))
    for _ in range(10):
        consumer.flushed()  # the shell wrote it all: the next batch
        total += len(deliveries(consumer.data_to_send()))
    assert total == 3000


messages = st.lists(st.tuples(st.sampled_from(["a", "b"]),
                              st.sampled_from([b"", b"x", b"yy", b"z" * 300]),
                              st.booleans()), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(messages, st.lists(st.integers(1, 400), min_size=1, max_size=20))
def test_any_split_into_reads_gives_what_one_publish_at_a_time_gives(batch, cuts):
    broker = Broker(BrokerConfig())
    consumer = consuming(broker, "a", no_ack=True)
    call(consumer, 1, make(spec.Queue.Declare, queue="b"))
    call(consumer, 1, make(spec.Basic.Consume, queue="b", consumer_tag="cb", no_ack=True))
    producer = open_connection(broker)
    typed = Properties(content_type="text/plain")
    data = b"".join(publish(key, body, typed if flag else None) for key, body, flag in batch)
    pos = 0
    for cut in cuts:
        producer.receive_data(data[pos:pos + cut])
        pos += cut
    producer.receive_data(data[pos:])
    got = deliveries(consumer.data_to_send())
    assert [(key, body) for _, key, _, body in got] == [(key, body) for key, body, _ in batch]
    assert [tag for tag, _, _, _ in got] == list(range(1, len(batch) + 1))


distinct = st.lists(st.tuples(
    st.sampled_from([b"", b"x", b"yy", b"z" * 300]),
    st.sampled_from(["plain", "id", "cc", "ttl", "bad-ttl", "headers"])), min_size=1, max_size=40)


def distinct_props(n: int, kind: str) -> Properties | None:
    if kind == "plain":
        return None
    if kind == "cc":
        return Properties(message_id=f"m{n}", headers=FieldTable({"CC": ["k.b"]}))
    if kind == "ttl":
        return Properties(message_id=f"m{n}", expiration="60000")
    if kind == "bad-ttl":
        return Properties(expiration="soon")
    if kind == "headers":
        return Properties(message_id=f"m{n}", headers=FieldTable({"trace-id": f"t{n}"}))
    return Properties(message_id=f"m{n}", timestamp=n)


def routed_state(batch, split_into) -> tuple:
    """Publish `batch` to topic exchange t (k.a -> qa, k.* -> qall, k.b ->
    qb, and qa also has a TTL) through the reads `split_into` makes."""
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Exchange.Declare, exchange="t", exchange_type="topic"))
    for queue, key, arguments in (("qa", "k.a", {"x-max-length": 25}), ("qall", "k.*", {}),
                                  ("qb", "k.b", {})):
        call(conn, 1, make(spec.Queue.Declare, queue=queue, arguments=FieldTable(arguments)))
        call(conn, 1, make(spec.Queue.Bind, queue=queue, exchange="t", routing_key=key))
    call(conn, 1, make(spec.Confirm.Select))
    data = [publish("k.a", body, distinct_props(n, kind), exchange="t")
            for n, (body, kind) in enumerate(batch)]
    out = b""
    for chunk in split_into(b"".join(data), data):
        conn.receive_data(chunk)
        out += conn.data_to_send()
    queues = broker.vhosts["/"].queues
    replies = methods(out)
    # Confirms may be grouped differently; what they confirm may not differ
    # (unless the channel closed: confirms still due then are not sent).
    confirmed = max((m.delivery_tag for m in replies if isinstance(m, spec.Basic.Ack)),
                    default=0)
    others = [(type(m).__name__, getattr(m, "reply_code", None)) for m in replies
              if not isinstance(m, spec.Basic.Ack)]
    if others:
        confirmed = None
    return ({name: [(e.message.body, e.message.header) for e in queues[name].ready]
             for name in ("qa", "qall", "qb")}, confirmed, others)


@settings(max_examples=150, deadline=None)
@given(distinct, st.lists(st.integers(1, 500), max_size=8))
def test_publishes_with_their_own_properties_read_together_fare_as_one_by_one(batch, cuts):
    def one_by_one(data, pieces):
        return pieces

    def cut(data, pieces):
        chunks, pos = [], 0
        for size in cuts:
            chunks.append(data[pos:pos + size])
            pos += size
        return [*chunks, data[pos:]]

    assert routed_state(batch, cut) == routed_state(batch, one_by_one)


# ---- publishes read whole that the channel takes one frame at a time ---------------------

def test_publishes_read_together_in_a_transaction_wait_for_the_commit():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue="q"))
    call(conn, 1, make(spec.Tx.Select))
    conn.receive_data(b"".join(publish("q", b"m%d" % n) for n in range(3)))
    queue = broker.vhosts["/"].queues["q"]
    assert queue.message_count == 0
    assert [type(m) for m in call(conn, 1, make(spec.Tx.Commit))] == [spec.Tx.CommitOk]
    assert [entry.message.body for entry in queue.ready] == [b"m0", b"m1", b"m2"]


def test_an_immediate_publish_read_whole_is_not_implemented():
    conn = open_connection(Broker(BrokerConfig()))
    data = (frames.method_frame(1, make(spec.Basic.Publish, routing_key="q", immediate=True))
            + frames.frame(2, 1, frames.content_header(1, b"\x00\x00")) + frames.frame(3, 1, b"x"))
    conn.receive_data(data)
    close = methods(conn.data_to_send())[-1]
    assert (type(close), close.reply_code) == (spec.Connection.Close, 540)


def test_publishes_read_whole_on_a_channel_being_closed_are_dropped():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    call(conn, 1, make(spec.Queue.Declare, queue="q"))
    closed = call(conn, 1, make(spec.Queue.Declare, queue="missing", passive=True))
    assert [(type(m), m.reply_code) for m in closed] == [(spec.Channel.Close, 404)]
    conn.receive_data(b"".join(publish("q", b"x") for _ in range(3)))
    assert methods(conn.data_to_send()) == []
    assert broker.vhosts["/"].queues["q"].message_count == 0


def test_publishes_read_whole_on_a_channel_never_opened_are_a_channel_error():
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(b"".join(publish("q", b"x", channel=5) for _ in range(3)))
    close = methods(conn.data_to_send())[-1]
    assert (type(close), close.reply_code) == (spec.Connection.Close, 504)
