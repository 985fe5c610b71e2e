"""A stream's confirmed messages survive `kill -9`: the broker runs in a
subprocess, is killed while a publisher is confirming, and a restart reads
back every confirmed message at its offset, in order (bounded: one kill)."""

from __future__ import annotations

import threading
import time

import pika

from .broker_process import BrokerProcess
from .stream_scenarios import STREAM, connect, consume, unique


def publisher(url: str, name: str, confirmed: list, stop: threading.Event) -> None:
    try:
        conn = connect(url)
        channel = conn.channel()
        channel.confirm_delivery()
        n = 0
        while not stop.is_set():
            channel.basic_publish("", name, b"m%d" % n, pika.BasicProperties(headers={"i": n}))
            confirmed.append(n)  # basic_publish returned: confirmed
            n += 1
    except Exception:
        return  # the broker died under us: expected


def test_confirmed_stream_messages_survive_kill_9(data_dir):
    name = unique()
    broker = BrokerProcess(data_dir)
    try:
        conn = connect(broker.url)
        conn.channel().queue_declare(name, durable=True,
                                     arguments={**STREAM, "x-stream-max-segment-size-bytes": 4096})
        conn.close()
        confirmed: list[int] = []
        stop = threading.Event()
        thread = threading.Thread(target=publisher, args=(broker.url, name, confirmed, stop))
        thread.start()
        deadline = time.monotonic() + 10
        while len(confirmed) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        broker.kill9()
        stop.set()
        thread.join(10)
    finally:
        broker.stop()
    assert len(confirmed) >= 300
    broker = BrokerProcess(data_dir)
    try:
        got = consume(broker.url, name, "first", expect=len(confirmed) + 1, seconds=10)
        # Every confirmed message is there, at its offset; at most the one in
        # flight at the kill besides.
        assert [item[0] for item in got] == list(range(len(got)))
        assert [item[1] for item in got][:len(confirmed)] == confirmed
        assert len(got) <= len(confirmed) + 1
        # The log goes on after them.
        conn = connect(broker.url)
        channel = conn.channel()
        channel.confirm_delivery()
        channel.basic_publish("", name, b"after")
        conn.close()
        last = consume(broker.url, name, "last", expect=1)
        assert last[0][0] == len(got) and last[0][2] == b"after"
    finally:
        broker.stop()


def test_a_stream_survives_a_clean_restart_and_goes_on_at_the_next_offset(data_dir):
    """A clean stop writes what is buffered; after a restart the stream
    holds every message and its arguments, and goes on at the next offset."""
    name = unique()
    broker = BrokerProcess(data_dir)
    try:
        conn = connect(broker.url)
        conn.channel().queue_declare(name, durable=True,
                                     arguments={**STREAM, "x-max-age": "7D"})
        channel = conn.channel()
        channel.confirm_delivery()
        for i in range(50):
            channel.basic_publish("", name, b"m%d" % i, pika.BasicProperties(headers={"i": i}))
        conn.close()
    finally:
        broker.stop()
    broker = BrokerProcess(data_dir)
    try:
        conn = connect(broker.url)
        ok = conn.channel().queue_declare(name, durable=True,
                                          arguments={**STREAM, "x-max-age": "7D"})
        assert ok.method.message_count == 50
        channel = conn.channel()
        channel.confirm_delivery()
        channel.basic_publish("", name, b"m50", pika.BasicProperties(headers={"i": 50}))
        conn.close()
        got = consume(broker.url, name, "first", expect=51)
        assert [item[0] for item in got] == list(range(51))
        assert [item[2] for item in got] == [b"m%d" % i for i in range(51)]
    finally:
        broker.stop()
