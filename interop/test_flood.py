"""A publisher faster than the broker: its consumers still get their
deliveries, and credit flow holds the publisher back while the queues it
feeds grow faster than they drain (broker/queue/credit.py).  The floods
are written by a raw-socket publisher, pre-encoded frames in large writes,
as a native load tool (lavinmqperf) sends them; consumers are pika's.
Nothing here times anything: the assertions are on counts and states."""

from __future__ import annotations

import threading
import time

import pika
from pamqp import commands as spec

from amqp_server.config import BrokerConfig
from amqp_server.read_shares import READ_SHARE
from amqp_server.testing import BrokerThread
from amqp_server.wire import frames
from amqp_server.wire.methods import make

from .management_api import http
from .metrics import scrape, value
from .rawclient import RawClient
from .waiting import wait_for


def publishes(queue: str, count: int, body: bytes = b"x" * 16, channel: int = 1) -> bytes:
    """`count` basic.publish frames with their content, to `queue` through
    the default exchange, as one buffer."""
    one = (frames.method_frame(channel, make(spec.Basic.Publish, exchange="",
                                             routing_key=queue))
           + frames.frame(frames.FRAME_HEADER, channel, frames.content_header(
               len(body), b"\x00\x00"))
           + frames.frame(frames.FRAME_BODY, channel, body))
    return one * count


def test_a_no_ack_consumer_gets_a_run_longer_than_one_batch(broker):
    publisher = RawClient.opened(broker.port, queue="runs")
    consumer = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = consumer.channel()
    got = []
    channel.basic_consume("runs", lambda ch, method, props, body: got.append(body),
                          auto_ack=True)
    consumer.process_data_events(time_limit=0.1)
    # Thousands of publishes in one write: read as runs of more than the
    # 1,000 a consumer without prefetch takes at a time.
    publisher.send(publishes("runs", 5000))
    assert wait_for(lambda: len(got) >= 5000,
                    step=lambda: consumer.process_data_events(time_limit=0.05))
    assert broker.queue_depth("runs") == 0
    publisher.close()
    consumer.close()


class Flood(threading.Thread):
    """Writes pre-encoded publishes as fast as the broker reads them (a
    native load tool's pace), a megabyte per write."""

    def __init__(self, client: RawClient, data: bytes) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.data = data
        self.error: BaseException | None = None

    def run(self) -> None:
        view = memoryview(self.data)
        try:
            for start in range(0, len(view), 1 << 20):
                self.client.sock.sendall(view[start:start + (1 << 20)])
        except OSError as exc:  # the test closed the socket: it failed already
            self.error = exc


def flooding(broker, queue: str, count: int, body: bytes = b"x" * 1000) -> tuple[Flood, int]:
    """A raw publisher writing `count` publishes to `queue`; (the flood,
    the publisher's port as the broker's connection names it)."""
    client = RawClient.opened(broker.port, queue=queue)
    client.sock.settimeout(None)
    flood = Flood(client, publishes(queue, count, body))
    return flood, client.sock.getsockname()[1]


def connection_state(broker, peer_port: int) -> str:
    status, connections = http(broker, "GET", "/api/connections")
    assert status == 200
    return next(c["state"] for c in connections if c["peer_port"] == peer_port)


class Acker:
    """A pika consumer acknowledging each delivery, as applications do."""

    def __init__(self, broker, queue: str, prefetch: int, ack: bool = True) -> None:
        self.connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        self.channel = self.connection.channel()
        self.channel.queue_declare(queue)
        self.channel.basic_qos(prefetch_count=prefetch)
        self.got = 0
        self.ack = ack
        self.channel.basic_consume(queue, self._on)

    def _on(self, channel, method, properties, body) -> None:
        self.got += 1
        if self.ack:
            channel.basic_ack(method.delivery_tag)

    def run(self, seconds: float = 0.05) -> None:
        self.connection.process_data_events(time_limit=seconds)


BACKLOG = 1000
# Publishes read after a queue withheld credit, before the connection
# stops being read: at most the rest of one read share (of 1 KB messages).
SHARE_SLACK = READ_SHARE // 1000


def config(**overrides) -> BrokerConfig:
    return BrokerConfig(port=0, management_port=0, prometheus_port=0,
                        credit_flow_backlog=BACKLOG, **overrides)


def test_a_consumer_keeps_getting_deliveries_while_a_publisher_floods():
    with BrokerThread(config()) as broker:
        consumer = Acker(broker, "flood", prefetch=50)
        flood, port = flooding(broker, "flood", 20_000)
        flood.start()
        depths, states = [], set()
        deadline = time.monotonic() + 120
        while flood.is_alive() and time.monotonic() < deadline:
            consumer.run()
            depths.append(broker.queue_depth("flood"))
            states.add(connection_state(broker, port))
        got_while_flooding = consumer.got
        assert not flood.is_alive() and flood.error is None
        assert got_while_flooding > 0
        # The queue never grew far past the backlog credit allows, and the
        # publisher showed why it was read no faster.
        assert max(depths) <= BACKLOG + SHARE_SLACK
        assert "flow" in states
        assert wait_for(lambda: consumer.got == 20_000, seconds=60, step=consumer.run)
        assert broker.queue_depth("flood") == 0
        flood.client.close()
        consumer.connection.close()


def test_a_queue_without_consumers_fills_and_its_publisher_is_never_in_flow():
    with BrokerThread(config()) as broker:
        flood, port = flooding(broker, "idle", 20_000)
        flood.start()
        states = set()
        while flood.is_alive():
            states.add(connection_state(broker, port))
            flood.join(0.05)
        assert wait_for(lambda: broker.queue_depth("idle") == 20_000, seconds=30)
        states.add(connection_state(broker, port))
        assert states == {"running"}
        flood.client.close()


def test_a_stuck_consumer_holds_its_publisher_only_for_a_while():
    with BrokerThread(config()) as broker:
        consumer = Acker(broker, "stuck", prefetch=10, ack=False)  # never acks
        flood, port = flooding(broker, "stuck", 5000)
        flood.start()
        assert wait_for(lambda: broker.queue_depth("stuck") > BACKLOG, step=consumer.run)
        # Held (and shown so for a while after), then let go: a queue
        # whose consumers take nothing is not drained by waiting for them.
        assert connection_state(broker, port) == "flow"
        metrics = scrape(broker, "/metrics/per-object")
        name = next(c["name"] for c in http(broker, "GET", "/api/connections")[1]
                    if c["peer_port"] == port)
        assert value(metrics, "amqp_connection_in_flow", connection=name) == 1
        assert value(scrape(broker), "amqp_connection_in_flow") == 1
        assert wait_for(lambda: broker.queue_depth("stuck") == 5000 - 10, seconds=30,
                        step=consumer.run)
        flood.join(10)
        assert not flood.is_alive()
        flood.client.close()
        consumer.connection.close()


def test_a_connection_consuming_the_queue_it_publishes_to_is_not_held_for_it():
    with BrokerThread(config()) as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("loop")
        channel.basic_qos(prefetch_count=10)
        got = []

        def on_message(ch, method, properties, body) -> None:
            got.append(body)
            ch.basic_ack(method.delivery_tag)

        channel.basic_consume("loop", on_message)
        for number in range(5000):
            channel.basic_publish("", "loop", b"%d" % number)
        assert wait_for(lambda: len(got) == 5000, seconds=60,
                        step=lambda: connection.process_data_events(time_limit=0.05))
        # Its acks come on the connection it publishes on: held, it would
        # have waited for itself.
        port = connection._impl._transport._sock.getsockname()[1]
        assert connection_state(broker, port) == "running"
        connection.close()
