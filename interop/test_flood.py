"""A publisher faster than the broker: its consumers still get their
deliveries.  The floods are written by a raw-socket publisher, pre-encoded
frames in large writes, as a native load tool (lavinmqperf) sends them;
consumers are pika's."""

from __future__ import annotations

import pika
from pamqp import commands as spec

from amqp_server.wire import frames
from amqp_server.wire.methods import make

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
