"""The connection state machine driven in memory: bytes in, bytes out, no socket."""

from __future__ import annotations

from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make
from amqp_server.wire.properties import Properties, encode_properties

from .sansio import methods, open_connection, split_frames


def test_handshake_and_publish_to_consumer_on_another_connection():
    broker = Broker(BrokerConfig())
    woken = []
    producer = open_connection(broker)
    consumer = open_connection(broker)
    consumer._wakeup = lambda: woken.append(True)
    consumer.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="q")))
    consumer.receive_data(frames.method_frame(1, make(spec.Basic.Consume, queue="q",
                                                      consumer_tag="c1", no_ack=True)))
    assert [type(m) for m in methods(consumer.data_to_send())] == [
        spec.Queue.DeclareOk, spec.Basic.ConsumeOk]
    header = frames.content_header(2, b"\x00\x00")
    producer.receive_data(frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
                          + frames.frame(2, 1, header) + frames.frame(3, 1, b"hi"))
    assert woken == [True]  # the consumer's shell is asked to flush once
    out = list(split_frames(consumer.data_to_send()))
    assert [t for t, _, _ in out] == [1, 2, 3]
    deliver = decode_method(out[0][2])
    assert (deliver.consumer_tag, deliver.routing_key) == ("c1", "q")
    assert out[1][2] == header and out[2][2] == b"hi"


def test_frames_split_across_reads_are_reassembled():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    data = frames.method_frame(1, make(spec.Queue.Declare, queue="split"))
    for byte in data:
        conn.receive_data(bytes([byte]))
    assert isinstance(methods(conn.data_to_send())[0], spec.Queue.DeclareOk)


def test_confirms_for_one_read_are_one_multiple_ack():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    conn.receive_data(frames.method_frame(1, make(spec.Confirm.Select)))
    conn.data_to_send()
    publish = (frames.method_frame(1, make(spec.Basic.Publish, routing_key="none"))
               + frames.frame(2, 1, frames.content_header(0, b"\x00\x00")))
    conn.receive_data(publish * 5)
    acks = methods(conn.data_to_send())
    assert len(acks) == 1 and isinstance(acks[0], spec.Basic.Ack)
    assert (acks[0].delivery_tag, acks[0].multiple) == (5, True)


def test_heartbeat_tick_sends_and_drops():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    conn.heartbeat = 10
    conn._sent_since_tick = False
    conn.heartbeat_tick()
    assert conn.data_to_send() == frames.HEARTBEAT_FRAME
    for _ in range(4):
        conn._sent_since_tick = True
        conn.heartbeat_tick()
    assert conn.close_after_flush


def test_silence_while_not_read_from_is_not_the_peers():
    """Reading paused (a busy store, a full write buffer): the peer's
    heartbeats wait in the socket, so its silence does not count."""
    conn = open_connection(Broker(BrokerConfig()))
    conn.heartbeat = 10
    conn.flow.attach(PausableTransport())
    conn.pause_writing()  # the peer does not read: neither do we
    for _ in range(10):
        conn.heartbeat_tick()
    assert not conn.close_after_flush


class PausableTransport:
    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_oversized_body_frame_in_one_read_is_a_frame_error():
    # publish, header and body in one read take the fused fast path, which
    # must still enforce frame_max
    conn = open_connection(Broker(BrokerConfig()))
    body = b"x" * 200_000
    conn.receive_data(frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
                      + frames.frame(2, 1, frames.content_header(len(body), b"\x00\x00"))
                      + frames.frame(3, 1, body))
    close = methods(conn.data_to_send())[-1]
    assert isinstance(close, spec.Connection.Close) and close.reply_code == 501


def test_tx_commit_ok_waits_for_the_persistent_messages_to_reach_disk(tmp_path):
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    broker.open_data_dir()
    conn = open_connection(broker)
    conn.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="q", durable=True))
                      + frames.method_frame(1, make(spec.Queue.Declare, queue="t"))
                      + frames.method_frame(1, make(spec.Tx.Select)))
    conn.data_to_send()

    def commit(queue: str, delivery_mode: int) -> list:
        header = frames.content_header(2, encode_properties(
            Properties(delivery_mode=delivery_mode)))
        conn.receive_data(frames.method_frame(1, make(spec.Basic.Publish, routing_key=queue))
                          + frames.frame(2, 1, header) + frames.frame(3, 1, b"hi")
                          + frames.method_frame(1, make(spec.Tx.Commit)))
        return methods(conn.data_to_send())

    assert commit("q", 2) == []  # on disk only after the next flush
    broker.store.flush_now()
    assert [type(m) for m in methods(conn.data_to_send())] == [spec.Tx.CommitOk]
    # Nothing to wait for: a transient message, or one on a transient queue.
    assert [type(m) for m in commit("q", 1)] == [spec.Tx.CommitOk]
    assert [type(m) for m in commit("t", 2)] == [spec.Tx.CommitOk]


def test_a_refused_publish_names_basic_publish_however_its_frames_arrive():
    """The close answering a publish to a missing exchange names class 60,
    method 40 whether the frames come in one read (the fused path), one
    read each, or with the body in two frames (the general path)."""
    header = frames.content_header(2, b"\x00\x00")
    publish = frames.method_frame(1, make(spec.Basic.Publish, exchange="missing"))
    arrivals = {
        "one read": [publish + frames.frame(2, 1, header) + frames.frame(3, 1, b"hi")],
        "a read per frame": [publish, frames.frame(2, 1, header), frames.frame(3, 1, b"hi")],
        "two body frames": [publish + frames.frame(2, 1, header) + frames.frame(3, 1, b"h")
                            + frames.frame(3, 1, b"i")],
    }
    for how, reads in arrivals.items():
        conn = open_connection(Broker(BrokerConfig()))
        for data in reads:
            conn.receive_data(data)
        (close,) = methods(conn.data_to_send())
        assert (type(close), close.reply_code, close.class_id, close.method_id) == (
            spec.Channel.Close, 404, 60, 40), how
