"""A confirmed persistent message survives `kill -9`: publishers on several
connections, the broker killed at random moments, restarted on the same data
directory, every confirmed message found exactly once, in order, with the
right redelivered flag.  Bounded: a few kill points, each a second or two."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pika
import pytest

from .broker_process import QUEUE, BrokerProcess, drain


def publisher(url: str, name: str, confirmed: list, stop: threading.Event) -> None:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        channel = conn.channel()
        channel.confirm_delivery()
        n = 0
        while not stop.is_set():
            body = f"{name}:{n}".encode()
            channel.basic_publish("", QUEUE, body, pika.BasicProperties(delivery_mode=2))
            confirmed.append(body)  # basic_publish returned: the broker confirmed it
            n += 1
    except Exception:
        return  # the broker died under us: expected


@pytest.mark.parametrize("round_", range(4))
def test_confirmed_messages_survive_kill_9(data_dir, round_):
    crash_round(data_dir, random.Random(round_))


@pytest.mark.parametrize("round_", range(2))
def test_confirmed_messages_survive_kill_9_while_paged(data_dir, round_):
    """The same with a queue mostly paged out (threshold 50 messages),
    before the crash and again while it is recovered."""
    config = Path(data_dir, "paging.toml")
    config.write_text("paging_threshold = 50\n")
    crash_round(data_dir, random.Random(100 + round_), str(config))


def crash_round(data_dir: str, rng: random.Random, config: str | None = None) -> None:
    broker = BrokerProcess(data_dir, config)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.queue_declare(QUEUE, durable=True)
    stop = threading.Event()
    confirmed: dict[str, list] = {f"p{i}": [] for i in range(3)}
    threads = [threading.Thread(target=publisher, args=(broker.url, name, seen, stop))
               for name, seen in confirmed.items()]
    for thread in threads:
        thread.start()
    # Some confirmed before the crash, however slow the machine is today.
    deadline = time.monotonic() + 20
    while not all(confirmed.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0.2, 0.6))
    # Some messages delivered and never acknowledged before the crash.
    delivered = []
    for _ in range(3):
        method, _, body = channel.basic_get(QUEUE)
        if method is not None:
            delivered.append(body)
    # Delivery marks go to disk with the next flush: a confirm proves one.
    channel.confirm_delivery()
    channel.queue_declare("flush-proof", durable=True)
    channel.basic_publish("", "flush-proof", b"", pika.BasicProperties(delivery_mode=2))
    time.sleep(rng.uniform(0.05, 0.4))
    broker.kill9()
    stop.set()
    for thread in threads:
        thread.join(10)

    broker = BrokerProcess(data_dir, config)
    try:
        got = drain(broker.url)
    finally:
        broker.stop()
    bodies = [body for body, _ in got]
    assert len(bodies) == len(set(bodies)), "a message came back twice"
    for name, sent in confirmed.items():
        mine = [b for b in bodies if b.startswith(f"{name}:".encode())]
        assert mine[:len(sent)] == sent, f"{name}: confirmed messages missing or out of order"
        assert len(mine) <= len(sent) + 1  # at most the one in flight at the kill
    assert sum(len(s) for s in confirmed.values()) > 0
    redelivered = {body for body, flag in got if flag}
    assert redelivered == set(delivered)


def test_names_that_are_not_utf8_are_stored(data_dir):
    """A durable queue named with bytes that are not UTF-8 keeps its
    persistent messages across a restart (found by the fuzz harness: such a
    name made the store's write fail, taking its whole batch)."""
    from pamqp import commands as spec

    from amqp_server.testing import BrokerThread
    from amqp_server.wire import frames
    from amqp_server.wire.methods import make
    from interop.rawclient import RawClient

    name = b"bad\xff".decode("utf-8", "surrogateescape")
    with BrokerThread(data_dir=data_dir) as broker:
        client = RawClient.for_url(broker.url)
        client.send_method(1, make(spec.Confirm.Select))
        client.read_method()
        for queue in (name, "good"):
            client.send_method(1, make(spec.Queue.Declare, queue=queue, durable=True))
            client.read_method()
            client.publish(1, "", queue, frames.content_header(4, b"\x10\x00\x02"), b"kept")
            _, ack = client.read_method()
            assert isinstance(ack, spec.Basic.Ack)
        client.close()
    with BrokerThread(data_dir=data_dir) as broker:
        queues = broker.broker.vhosts["/"].queues
        assert (queues[name].message_count, queues["good"].message_count) == (1, 1)


def test_declared_queues_and_bindings_survive_kill_9(data_dir):
    """Each change is written before its reply goes out: a broker killed
    right after declares and binds comes back with every one of them."""
    broker = BrokerProcess(data_dir)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.exchange_declare("routes", "direct", durable=True)
    for n in range(300):
        channel.queue_declare(f"declared-{n}", durable=True,
                              arguments={"x-dead-letter-exchange": "dlx"})
        channel.queue_bind(f"declared-{n}", "routes", f"key-{n}")
    broker.kill9()
    broker = BrokerProcess(data_dir)
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        channel.confirm_delivery()
        for n in (0, 150, 299):
            channel.queue_declare(f"declared-{n}", passive=True)
            channel.basic_publish("routes", f"key-{n}", b"routed")
            assert channel.queue_declare(f"declared-{n}", passive=True).method.message_count == 1
        conn.close()
    finally:
        broker.stop()
