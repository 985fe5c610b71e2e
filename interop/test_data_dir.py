"""One broker per data directory, and startup errors that name their cause.

Two brokers on one --data-dir used to both start; the second wiped the
first one's files and confirmed persistent messages were dropped at the
next start.  Now the running broker holds a lock naming its PID and a
second one exits at once saying so."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.loops import new_event_loop
from amqp_server.server import ListenError, Server
from amqp_server.storage.lock import DataDirError
from amqp_server.testing import BrokerThread

from .broker_process import BrokerProcess, drain

QUEUE = "durable-work"


def start_fails(data_dir: str, *flags: str) -> tuple[int, str]:
    """Exit code and stderr of a broker that must not start."""
    done = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--management-port", "-1",
         "--prometheus-port", "-1", "--data-dir", data_dir, *flags],
        capture_output=True, text=True, timeout=30)
    return done.returncode, done.stderr


def publish_confirmed(url: str, count: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.confirm_delivery()
    channel.queue_declare(QUEUE, durable=True)
    for n in range(count):
        channel.basic_publish("", QUEUE, f"m{n}".encode(), pika.BasicProperties(delivery_mode=2))
    conn.close()


def test_a_second_broker_on_the_same_data_dir_exits_and_loses_nothing(data_dir):
    first = BrokerProcess(data_dir)
    try:
        publish_confirmed(first.url, 200)
        code, err = start_fails(data_dir)
        assert code == 1
        lock = Path(data_dir).absolute() / "broker.lock"
        assert err.strip() == (
            f"amqp-server: data directory {Path(data_dir).absolute()} is in use by another "
            f"broker (process {first.proc.pid} holds {lock}); give this one its own --data-dir")
        publish_confirmed(first.url, 50)  # the first one carries on untouched
    finally:
        first.stop()
    again = BrokerProcess(data_dir)  # the lock went with the first broker
    try:
        assert [body for body, _ in drain(again.url)] == [
            f"m{n}".encode() for n in [*range(200), *range(50)]]
    finally:
        again.stop()


def test_a_killed_broker_leaves_no_lock_behind(data_dir):
    first = BrokerProcess(data_dir)
    publish_confirmed(first.url, 10)
    first.kill9()
    again = BrokerProcess(data_dir)
    try:
        assert len(drain(again.url)) == 10
    finally:
        again.stop()


def test_in_process_brokers_take_the_lock_too(data_dir):
    config = BrokerConfig(port=0, management_port=0)
    with BrokerThread(config, data_dir=data_dir):
        with pytest.raises(DataDirError, match="is in use by another broker"):
            BrokerThread(config, data_dir=data_dir).start()
    with BrokerThread(config, data_dir=data_dir):
        pass  # released on stop


def test_a_data_dir_that_is_a_file_is_named_as_the_cause(data_dir):
    path = Path(data_dir) / "a-file"
    path.write_text("not a directory")
    assert start_fails(str(path)) == (
        1, f"amqp-server: data directory {path} is not a directory\n")


def test_a_data_dir_that_cannot_be_created_is_named_as_the_cause(data_dir):
    blocked = Path(data_dir) / "a-file"
    blocked.write_text("")
    code, err = start_fails(str(blocked / "below"))
    assert code == 1
    assert err.startswith(f"amqp-server: cannot create data directory {blocked / 'below'}: ")


def test_a_busy_port_is_named_as_the_cause(data_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = start_fails(data_dir, "--port", str(port))
    assert code == 1
    assert err.startswith(f"amqp-server: cannot listen on 127.0.0.1:{port} (AMQP): ")
    # ... and the failed start gave the data directory back.
    BrokerProcess(data_dir).stop()


def test_a_start_that_fails_in_process_gives_the_data_dir_back(data_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = Broker(BrokerConfig(data_dir=data_dir, port=port, management_port=-1))
        loop = new_event_loop()
        try:
            with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port}"):
                loop.run_until_complete(Server(broker, "127.0.0.1", port).start())
        finally:
            loop.close()
    with BrokerThread(BrokerConfig(port=0, management_port=0), data_dir=data_dir):
        pass
