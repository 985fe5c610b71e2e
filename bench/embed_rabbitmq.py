"""Start Debian's `rabbitmq-server` the way pytest-rabbitmq does, as a node
of its own beside any RabbitMQ already running: its own node name, AMQP
and distribution ports, database, log directory, cookie (a private HOME)
and no plugins.  Used by `bench.embed` to time a start against the
in-process fixture; the node is stopped and its directory removed after.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pika

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"


def available() -> bool:
    return os.access(SERVER, os.X_OK) and os.access(CTL, os.X_OK)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RabbitMQNode:
    """One throw-away RabbitMQ node; `start()` returns once a publish on it
    is confirmed, `stop()` halts it (rabbitmqctl stop) and cleans up."""

    def __init__(self, start_timeout: float = 120.0) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="bench-rabbitmq-"))
        self.port = free_port()
        self.name = f"bench-embed-{os.getpid()}-{self.port}@localhost"
        self.start_timeout = start_timeout
        (self.directory / "enabled_plugins").write_text("[].\n")
        self.env = {
            **os.environ,
            "HOME": str(self.directory),  # a cookie of its own
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.directory / "pid"),
        }
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self) -> float:
        """Seconds from launching rabbitmq-server to a confirmed publish."""
        began = time.perf_counter()
        self.process = subprocess.Popen(
            [SERVER], env=self.env, cwd=self.directory, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = began + self.start_timeout
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.process.returncode}; "
                                   f"logs in {self.directory / 'log'}")
            try:
                first_publish(self.url)
            except (pika.exceptions.AMQPError, OSError):
                time.sleep(0.05)
                continue
            return time.perf_counter() - began
        raise TimeoutError(f"rabbitmq-server did not take a publish in {self.start_timeout} s")

    def stop(self) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                subprocess.run([CTL, "-n", self.name, "stop"], env=self.env, timeout=60,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    self.process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, 9)
                    self.process.wait(10)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def first_publish(url: str) -> None:
    """Connect, declare a queue and publish one message with a confirm."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("first")
        channel.basic_publish("", "first", b"hello")
    finally:
        connection.close()
