"""Clients that try to tie the broker up: a handshake a byte at a time,
password guessing, and connections that never read what they are sent."""

from __future__ import annotations

import socket
import time

import pika
import pytest
from pamqp import commands as spec
from pika.exceptions import ProbableAuthenticationError

from amqp_server.broker import resources
from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread
from amqp_server.wire import frames
from amqp_server.wire.methods import make
from interop.rawclient import RawClient, other_connections_still_work
from interop.waiting import wait_for


def dribble(sock: socket.socket, data: bytes, interval: float, seconds: float) -> bool:
    """Send `data` a byte per `interval` for at most `seconds`; True when the
    broker closed the socket on us first."""
    deadline = time.monotonic() + seconds
    sock.settimeout(interval)
    for byte in data:
        if time.monotonic() > deadline:
            return False
        try:
            sock.send(bytes([byte]))
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


@pytest.mark.parametrize("stage", ["protocol header", "start-ok"])
def test_slowloris_handshake_is_dropped(stage):
    config = BrokerConfig(port=0, management_port=0, handshake_timeout=1000)
    with BrokerThread(config) as broker:
        started = time.monotonic()
        sock = socket.create_connection(("127.0.0.1", broker.port))
        if stage == "start-ok":
            sock.sendall(frames.PROTOCOL_HEADER)  # the header at once, then a trickle
            data = frames.method_frame(0, make(
                spec.Connection.StartOk, mechanism="PLAIN", response=b"\x00guest\x00guest",
                locale="en_US"))
        else:
            data = frames.PROTOCOL_HEADER * 8
        assert dribble(sock, data, interval=0.2, seconds=10)
        assert time.monotonic() - started >= 0.9  # dropped by the timeout, not at once
        other_connections_still_work(broker)  # meanwhile and after, as usual
        sock.close()
        assert wait_for(lambda: not broker.server.protocols)


def test_refused_login_is_answered_after_a_delay():
    config = BrokerConfig(port=0, management_port=0, login_failure_delay=0.5)
    with BrokerThread(config) as broker:
        bad = pika.URLParameters(f"amqp://guest:wrong@127.0.0.1:{broker.port}/%2F")
        started = time.monotonic()
        with pytest.raises(ProbableAuthenticationError) as info:
            pika.BlockingConnection(bad)
        assert time.monotonic() - started >= 0.5
        assert "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN" in \
            str(info.value)
        other_connections_still_work(broker)


def test_refused_login_without_the_capability_is_a_silent_close():
    config = BrokerConfig(port=0, management_port=0, login_failure_delay=0.2)
    with BrokerThread(config) as broker:
        client = RawClient(broker.port)
        client.send(frames.PROTOCOL_HEADER)
        client.read_method()
        client.send_method(0, make(spec.Connection.StartOk, mechanism="PLAIN",
                                   response=b"\x00guest\x00nope", locale="en_US"))
        # pipelined requests are not read while the refusal waits
        client.send_method(0, make(spec.Connection.TuneOk, channel_max=10, frame_max=4096))
        client.sock.settimeout(5)
        assert client.closed_by_peer() and client.buffer == b""


def test_connections_that_never_read_do_not_grow_memory_without_bound():
    """100 consumers that never read their sockets, 64 MiB of bodies fanned out
    to all of them (6.4 GiB of deliveries): delivery stops at each
    connection's write buffer limit, and the rest waits in the queues, which
    share the bodies."""
    with BrokerThread() as broker:
        clients = []
        for number in range(100):
            client = RawClient(broker.port)
            client.handshake()
            client.open_channel()
            client.send_method(1, make(spec.Queue.Declare, queue=f"stuck-{number}"))
            client.read_method()
            client.send_method(1, make(spec.Queue.Bind, queue=f"stuck-{number}",
                                       exchange="amq.fanout"))
            client.read_method()
            client.send_method(1, make(spec.Basic.Consume, queue=f"stuck-{number}",
                                       no_ack=True))
            client.read_method()
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            clients.append(client)
        before = resources.resident_memory()
        publisher = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = publisher.channel()
        body = b"x" * (64 << 10)
        for _ in range(1024):
            channel.basic_publish("amq.fanout", "", body)
        queues = broker.broker.vhosts["/"].queues
        # every delivery the sockets could take has been made
        settled = []

        def undelivered() -> bool:
            settled.append(sum(queues[f"stuck-{n}"].message_count for n in range(100)))
            return len(settled) > 5 and settled[-1] == settled[-5]

        assert wait_for(undelivered, seconds=30, step=lambda: time.sleep(0.2))
        grown = resources.resident_memory() - before
        delivered = 100 * 1024 - settled[-1]
        print(f"RSS grew by {grown >> 20} MiB; {delivered} of {100 * 1024} deliveries made")
        assert delivered < 100 * 1024 / 2, "most deliveries must be held back"
        # 64 MiB of shared bodies plus about 1 MiB of write buffer per peer
        assert grown < 400 << 20, f"RSS grew by {grown >> 20} MiB"
        other_connections_still_work(broker)
        publisher.close()
        for client in clients:
            client.close()
        assert wait_for(lambda: len(broker.server.protocols) == 0, seconds=10)
