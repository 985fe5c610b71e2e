"""Handshake, authentication, heartbeats, shutdown and malformed input, over
real sockets (pika, and a raw client for bytes no real client sends)."""

from __future__ import annotations

import struct
import time

import pika
import pytest
from pamqp import commands as spec
from pika.exceptions import ProbableAccessDeniedError, ProbableAuthenticationError

from amqp_server.wire import frames
from amqp_server.wire.methods import make
from amqp_server.wire.table import FieldTable, encode_table
from interop.rawclient import RawClient

from .rawclient import other_connections_still_work


def expect_connection_close(client: RawClient, code: int) -> spec.Connection.Close:
    channel, close = client.read_method()
    assert channel == 0 and isinstance(close, spec.Connection.Close), close
    assert close.reply_code == code, close.reply_text
    client.send_method(0, make(spec.Connection.CloseOk))
    assert client.closed_by_peer()
    return close


def test_wrong_protocol_header_gets_ours_back(broker):
    client = RawClient(broker.port)
    client.send(b"AMQP\x00\x00\x08\x00")
    assert client.recv_exact(8) == frames.PROTOCOL_HEADER
    assert client.closed_by_peer()


def test_http_request_is_refused_with_header(broker):
    client = RawClient(broker.port)
    client.send(b"GET / HTTP/1.1\r\n\r\n")
    assert client.recv_exact(8) == frames.PROTOCOL_HEADER
    assert client.closed_by_peer()


def test_server_properties_advertise_rabbitmq_capabilities(broker):
    client = RawClient(broker.port)
    client.send(frames.PROTOCOL_HEADER)
    _, start = client.read_method()
    assert (start.version_major, start.version_minor) == (0, 9)
    assert set(start.mechanisms.split()) == {b"PLAIN", b"AMQPLAIN"}
    caps = start.server_properties["capabilities"]
    for name in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                 "consumer_cancel_notify", "connection.blocked",
                 "authentication_failure_close", "per_consumer_qos"):
        assert caps[name] is True
    client.close()


def test_amqplain_login(broker):
    client = RawClient(broker.port)
    client.send(frames.PROTOCOL_HEADER)
    client.read_method()
    response = encode_table(FieldTable({"LOGIN": "guest", "PASSWORD": "guest"}))[4:]
    client.send_method(0, make(spec.Connection.StartOk, client_properties=FieldTable(),
                               mechanism="AMQPLAIN", response=response, locale="en_US"))
    _, tune = client.read_method()
    assert isinstance(tune, spec.Connection.Tune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    client.close()


def test_bad_password_is_refused(broker):
    params = pika.URLParameters(f"amqp://guest:wrong@127.0.0.1:{broker.port}/%2F")
    with pytest.raises(ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    assert "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN" in str(
        info.value)


def test_unknown_vhost_is_not_allowed(broker):
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{broker.port}/nowhere")
    with pytest.raises(ProbableAccessDeniedError) as info:
        pika.BlockingConnection(params)
    assert "(530) 'NOT_ALLOWED - vhost nowhere not found'" in str(info.value)


def test_guest_is_refused_from_non_loopback(broker):
    from amqp_server.protocol.connection import Connection
    conn = Connection(broker.broker, peer_host="192.0.2.7", is_loopback=False)
    conn.receive_data(frames.PROTOCOL_HEADER)
    caps = FieldTable({"capabilities": FieldTable({"authentication_failure_close": True})})
    conn.data_to_send()
    conn.receive_data(frames.method_frame(0, make(
        spec.Connection.StartOk, client_properties=caps, mechanism="PLAIN",
        response=b"\x00guest\x00guest", locale="en_US")))
    assert b"ACCESS_REFUSED - Login was refused" in conn.login_refusal
    assert conn.data_to_send() == b""  # the shell sends it after the delay


def test_client_close_handshake(connection):
    connection.close()
    assert connection.is_closed


def test_heartbeats_keep_an_idle_connection_alive(broker):
    params = pika.URLParameters(broker.url + "?heartbeat=1")
    conn = pika.BlockingConnection(params)
    conn.sleep(3.5)  # pika answers heartbeats while it sleeps
    assert conn.is_open
    conn.channel().queue_declare("alive")
    conn.close()


def test_silent_peer_is_dropped_after_two_intervals(broker):
    client = RawClient(broker.port, timeout=6)
    client.handshake(heartbeat=1)
    started = time.monotonic()
    received_heartbeat = False
    while True:
        try:
            frame_type, _, _ = client.read_frame()
            received_heartbeat |= frame_type == frames.FRAME_HEARTBEAT
        except (EOFError, ConnectionResetError):
            break
    elapsed = time.monotonic() - started
    assert received_heartbeat
    assert 1.5 <= elapsed <= 5.0


def test_shutdown_sends_connection_forced(broker):
    client = RawClient.opened(broker.port)
    broker.stop()
    _, close = client.read_method()
    assert (close.reply_code, close.reply_text) == (
        320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")


def test_shutdown_closes_a_socket_its_client_has_not_closed_after_close_ok(broker):
    """The broker waits for a client to close its socket after close-ok
    (up to 30 s); a shutdown does not."""
    client = RawClient.opened(broker.port)
    client.send_method(0, make(spec.Connection.Close, reply_code=200, reply_text="done"))
    assert isinstance(client.read_method()[1], spec.Connection.CloseOk)
    client.sock.settimeout(0.3)
    assert not client.closed_by_peer()
    broker.stop()
    client.sock.settimeout(5)
    assert client.closed_by_peer() and client.buffer == b""


def test_tune_ok_frame_max_above_server_is_refused(broker):
    client = RawClient(broker.port)
    client.send(frames.PROTOCOL_HEADER)
    client.read_method()
    client.send_method(0, make(spec.Connection.StartOk, client_properties=FieldTable(),
                               mechanism="PLAIN", response=b"\x00guest\x00guest",
                               locale="en_US"))
    client.read_method()
    client.send_method(0, make(spec.Connection.TuneOk, channel_max=10,
                               frame_max=10_000_000, heartbeat=0))
    close = expect_connection_close(client, 530)
    assert "frame_max" in close.reply_text


# ---- malformed frames: each closes only its own connection ------------------

# Properties with a headers table (12 octets) whose CC array claims 2 GB.
CC_ARRAY_PAST_ITS_TABLE = (b"\x20\x00" + struct.pack(">I", 12) + b"\x02CCA"
                           + struct.pack(">I", 0x80000007) + b"S\x00\x04\x00")


@pytest.mark.parametrize("data,code", [
    (b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x0a\x00", 501),        # bad frame end
    (b"\x09\x00\x00\x00\x00\x00\x00\xce", 501),                        # unknown frame type
    (struct.pack(">BHI", 1, 1, 200_000) + b"\x00" * 200_001, 501),    # over frame_max
    (frames.frame(2, 1, b"\x00\x3c\x00\x00" + b"\x00" * 8 + b"\x00\x00"), 505),  # stray header
    (frames.frame(3, 1, b"stray body"), 505),                          # stray body
    (frames.frame(1, 1, b"\x00\x3c\x00\x28\x00"), 502),                # truncated publish
    (frames.frame(1, 1, b"\x00\x14"), 501),                            # method ids cut short
    (frames.frame(1, 1, b"\x00\x63\x00\x01"), 503),                    # unknown method
    (frames.frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x05ab"), 502),       # shortstr overruns
    (frames.method_frame(7, make(spec.Queue.Declare, queue="x")), 504),  # channel not open
    (frames.frame(1, 1, b"\x00\x14\x00\x0a\x00"), 504),                # second channel.open
    (frames.frame(8, 1, b""), 505),                                    # heartbeat off channel 0
    (frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))  # property flags
     + frames.frame(2, 1, b"\x00\x3c\x00\x00" + b"\x00" * 8 + b"\x7f\x7f"), 502),  # cut short
    (frames.method_frame(1, make(spec.Basic.Publish, routing_key="q"))  # a headers array
     + frames.frame(2, 1, frames.content_header(1, CC_ARRAY_PAST_ITS_TABLE))  # past its
     + frames.frame(3, 1, b"x"), 502),                                 # table (bench.fuzz)
])
def test_malformed_frames_close_the_connection_only(broker, data, code):
    client = RawClient.opened(broker.port)
    client.send(data)
    expect_connection_close(client, code)
    other_connections_still_work(broker)


def test_method_during_content_is_unexpected(broker):
    client = RawClient.opened(broker.port)
    client.send_method(1, make(spec.Basic.Publish, exchange="", routing_key="q"))
    client.send_method(1, make(spec.Queue.Declare, queue="q"))
    expect_connection_close(client, 505)


def test_body_longer_than_declared(broker):
    client = RawClient.opened(broker.port)
    client.publish(1, "", "q", frames.content_header(3, b"\x00\x00"), b"too long")
    expect_connection_close(client, 501)


def test_oversized_message_is_refused_with_406(broker):
    client = RawClient.opened(broker.port)
    client.send_method(1, make(spec.Basic.Publish, exchange="", routing_key="q"))
    client.send(frames.frame(2, 1, frames.content_header(200 * 1024 * 1024, b"\x00\x00")))
    channel, close = client.read_method()
    assert channel == 1 and close.reply_code == 406
    assert "is larger than configured max size 134217728" in close.reply_text


def test_garbage_in_field_table_is_a_syntax_error(broker):
    client = RawClient.opened(broker.port)
    # queue.declare whose arguments table holds an unknown field type 'Z'
    bad_table = struct.pack(">I", 4) + b"\x01kZ\x00"
    payload = (b"\x00\x32\x00\x0a" + b"\x00\x00" + b"\x01q" + b"\x00" + bad_table)
    client.send(frames.frame(1, 1, payload))
    expect_connection_close(client, 502)
    other_connections_still_work(broker)


def test_channel_error_leaves_connection_usable(broker):
    client = RawClient.opened(broker.port)
    client.send_method(1, make(spec.Queue.Declare, queue="ghost", passive=True))
    channel, close = client.read_method()
    assert (channel, close.reply_code) == (1, 404)
    # frames on a closing channel are dropped until close-ok
    client.send_method(1, make(spec.Queue.Declare, queue="x"))
    client.send_method(1, make(spec.Channel.CloseOk))
    client.open_channel(1)
    client.send_method(1, make(spec.Queue.Declare, queue="x"))
    _, ok = client.read_method()
    assert isinstance(ok, spec.Queue.DeclareOk)
    client.close()
