"""Closing, driven in memory: a connection closed by either end waits for
the client (its close-ok, or the end of its socket, which the shell sees),
as RabbitMQ 3.10's rabbit_reader does in its `closed` state, and a channel
the broker closed follows its frames until close-ok, as rabbit_channel's
`closing` state and the command assembler do."""

from __future__ import annotations

from pamqp import commands as spec

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.protocol.connection import CLOSED, CLOSING, OPEN, Connection
from amqp_server.wire import frames
from amqp_server.wire.methods import decode_method, make

from .sansio import Resources, Transport, methods, open_connection, split_frames

CLIENT_CLOSE = frames.method_frame(0, make(spec.Connection.Close, reply_code=200,
                                           reply_text="done"))
CLOSE_OK = frames.method_frame(0, make(spec.Connection.CloseOk))


def closed_by_client(heartbeat: int = 0, config: BrokerConfig | None = None) -> Connection:
    conn = open_connection(Broker(config or BrokerConfig()), heartbeat)
    conn.receive_data(CLIENT_CLOSE)
    assert [type(m) for m in methods(conn.data_to_send())] == [spec.Connection.CloseOk]
    return conn


def closed_by_broker() -> Connection:
    """Closed with 504 for a method on a channel never opened."""
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(frames.method_frame(7, make(spec.Queue.Declare, queue="q")))
    (close,) = methods(conn.data_to_send())
    assert isinstance(close, spec.Connection.Close) and close.reply_code == 504
    return conn


# ---- the client closes ----------------------------------------------------

def test_close_ok_leaves_the_socket_for_the_client_to_close():
    conn = closed_by_client()
    assert conn.state == CLOSING and not conn.close_after_flush


def test_exclusive_queues_are_gone_when_close_ok_goes():
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    conn.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="mine",
                                                  exclusive=True)))
    conn.data_to_send()
    conn.receive_data(CLIENT_CLOSE)
    assert broker.vhosts["/"].queues.get("mine") is None
    assert conn not in broker.connections


def test_a_closing_connection_drops_all_but_the_clients_close():
    conn = closed_by_client()
    conn.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="q"))
                      + frames.method_frame(2, make(spec.Channel.Open))
                      + frames.HEARTBEAT_FRAME
                      + frames.method_frame(0, make(spec.Connection.Open, virtual_host="/")))
    assert conn.data_to_send() == b"" and conn.state == CLOSING


def test_a_second_close_gets_close_ok_and_the_wait_goes_on():
    conn = closed_by_client()
    conn.receive_data(CLIENT_CLOSE)
    assert [type(m) for m in methods(conn.data_to_send())] == [spec.Connection.CloseOk]
    assert conn.state == CLOSING and not conn.close_after_flush


def test_a_close_ok_from_the_client_ends_the_connection_at_once():
    conn = closed_by_client()
    conn.receive_data(CLOSE_OK)
    assert conn.state == CLOSED and conn.close_after_flush


def test_the_wait_is_the_heartbeat_below_30_seconds():
    """rabbit_reader's close_connection: the negotiated heartbeat when it is
    between 0 and ?CLOSING_TIMEOUT (30 s), else 30 s."""
    assert closed_by_client(heartbeat=0).close_timeout == 30
    assert closed_by_client(heartbeat=5).close_timeout == 5
    assert closed_by_client(heartbeat=60).close_timeout == 30


def test_close_timeout_caps_the_wait():
    config = BrokerConfig(close_timeout=2.0)
    assert closed_by_client(heartbeat=0, config=config).close_timeout == 2.0
    assert closed_by_client(heartbeat=5, config=config).close_timeout == 2.0
    assert closed_by_client(heartbeat=1, config=config).close_timeout == 1


def test_a_close_before_tune_ok_waits_3_seconds():
    conn = Connection(Broker(BrokerConfig()))
    conn.receive_data(frames.PROTOCOL_HEADER)
    conn.receive_data(CLIENT_CLOSE)
    assert [type(m) for m in methods(conn.data_to_send())] == [
        spec.Connection.Start, spec.Connection.CloseOk]
    assert (conn.state, conn.close_timeout) == (CLOSING, 3)


def test_heartbeats_go_on_while_closing():
    conn = closed_by_client(heartbeat=10)
    conn.heartbeat_tick()  # the close-ok went out since the last tick
    conn.heartbeat_tick()
    assert conn.data_to_send() == frames.HEARTBEAT_FRAME


# ---- the broker closes ----------------------------------------------------

def test_the_brokers_close_waits_for_close_ok():
    conn = closed_by_broker()
    assert conn.state == CLOSING and not conn.close_after_flush
    assert conn.close_timeout == 30
    conn.receive_data(CLOSE_OK)
    assert conn.close_after_flush


def test_a_close_crossing_the_brokers_gets_close_ok_and_the_wait_goes_on():
    conn = closed_by_broker()
    conn.receive_data(CLIENT_CLOSE)
    assert [type(m) for m in methods(conn.data_to_send())] == [spec.Connection.CloseOk]
    assert conn.state == CLOSING and not conn.close_after_flush
    conn.receive_data(CLOSE_OK)
    assert conn.close_after_flush


def test_frames_no_longer_told_apart_are_not_read_and_the_wait_is_3_seconds():
    """A frame-end octet missing: rabbit_reader's fatal_frame_error reads
    nothing more and drops the socket after ?SILENT_CLOSE_DELAY (3 s)."""
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="q"))[:-1] + b"!")
    (close,) = methods(conn.data_to_send())
    assert close.reply_code == 501
    conn.receive_data(CLOSE_OK)
    assert (conn.state, conn.close_timeout, conn.close_after_flush) == (CLOSING, 3, False)


def test_shutdown_ends_a_connection_waiting_for_its_client():
    conn = closed_by_client()
    conn.shutdown(320, "broker forced connection closure with reason 'shutdown'")
    assert conn.close_after_flush and conn.data_to_send() == b""


def test_a_blocked_publisher_is_read_again_once_closing():
    """Its close-ok must be read (rabbit_reader leaves `blocked` when it
    closes); nothing else it sends is taken."""
    broker = Broker(BrokerConfig())
    conn = open_connection(broker)
    transport = Transport()
    conn.flow = type(conn.flow)(Resources(alarms={"memory"}), lambda reason: None)
    conn.flow.attach(transport)
    conn.flow.publishing = True
    conn.flow.after_read()
    assert transport.calls == ["pause"]
    conn.shutdown(320, "broker forced connection closure with reason 'shutdown'")
    assert transport.calls == ["pause", "resume"] and conn.flow.reading


# ---- a channel the broker closed ------------------------------------------

def channel_closed_by_broker() -> Connection:
    """Channel 1 closed with 404 for a passive declare of a missing queue."""
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="ghost",
                                                  passive=True)))
    (close,) = methods(conn.data_to_send())
    assert isinstance(close, spec.Channel.Close) and close.reply_code == 404
    return conn


def publish(channel: int = 1, body: bytes = b"hi") -> bytes:
    return (frames.method_frame(channel, make(spec.Basic.Publish, routing_key="q"))
            + frames.frame(2, channel, frames.content_header(len(body), b"\x00\x00"))
            + frames.frame(3, channel, body))


def test_a_closing_channel_drops_commands_until_close_ok():
    conn = channel_closed_by_broker()
    conn.receive_data(frames.method_frame(1, make(spec.Queue.Declare, queue="x"))
                      + publish() + frames.method_frame(1, make(spec.Basic.Ack, delivery_tag=9))
                      + frames.method_frame(1, make(spec.Channel.CloseOk))
                      + frames.method_frame(1, make(spec.Channel.Open)))
    assert [type(m) for m in methods(conn.data_to_send())] == [spec.Channel.OpenOk]
    assert conn.state == OPEN


def channel_methods(data: bytes):
    return [(number, decode_method(payload)) for kind, number, payload in split_frames(data)
            if kind == frames.FRAME_METHOD]


def test_a_close_crossing_the_channels_gets_close_ok_and_the_wait_goes_on():
    conn = channel_closed_by_broker()
    conn.receive_data(frames.method_frame(1, make(spec.Channel.Close, reply_code=200,
                                                  reply_text="")))
    assert [(number, type(m)) for number, m in channel_methods(conn.data_to_send())] == [
        (1, spec.Channel.CloseOk)]
    assert 1 in conn.closing_channels


def test_channel_open_on_a_closing_channel_is_504():
    conn = channel_closed_by_broker()
    conn.receive_data(frames.method_frame(1, make(spec.Channel.Open)))
    (close,) = methods(conn.data_to_send())
    assert (type(close), close.reply_code) == (spec.Connection.Close, 504)


def test_content_out_of_place_on_a_closing_channel_is_a_connection_error():
    """The command assembler runs before the channel: a body with no publish,
    a method amid a publish's content."""
    cases = {
        "a body with no publish": frames.frame(3, 1, b"x"),
        "a method amid the content": publish()[:-(len(frames.frame(3, 1, b"hi")))]
        + frames.method_frame(1, make(spec.Channel.CloseOk)),
    }
    seen = {}
    for name, data in cases.items():
        conn = channel_closed_by_broker()
        conn.receive_data(data)
        (close,) = methods(conn.data_to_send())
        seen[name] = (close.reply_code, close.class_id, close.method_id)
    assert seen == {"a body with no publish": (505, 0, 0),
                    "a method amid the content": (505, 60, 40)}


def test_a_channel_closed_at_an_oversized_header_follows_its_body_frames():
    """The 406 comes at the content header; the body frames the client
    sends after it are read past, not taken for frames out of place."""
    conn = open_connection(Broker(BrokerConfig(max_message_size=4)))
    conn.receive_data(frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
                      + frames.frame(2, 1, frames.content_header(10, b"\x00\x00")))
    (close,) = methods(conn.data_to_send())
    assert (close.reply_code, close.class_id, close.method_id) == (406, 60, 40)
    conn.receive_data(frames.frame(3, 1, b"12345") + frames.frame(3, 1, b"67890")
                      + frames.method_frame(1, make(spec.Channel.CloseOk)))
    assert conn.data_to_send() == b"" and conn.state == OPEN and not conn.closing_channels


def test_channel_close_amid_content_is_505_naming_basic_publish():
    conn = open_connection(Broker(BrokerConfig()))
    conn.receive_data(frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))
                      + frames.method_frame(1, make(spec.Channel.Close, reply_code=200,
                                                    reply_text="")))
    (close,) = methods(conn.data_to_send())
    assert (type(close), close.reply_code, close.class_id, close.method_id) == (
        spec.Connection.Close, 505, 60, 40)
