"""Run a broker on an ephemeral loopback port in a background thread.

Tests and benchmarks use it to drive the real server with real clients over
TCP, blocking (pika) and asyncio (aio-pika) alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import threading

from .broker.broker import Broker
from .config import BrokerConfig
from .loops import new_event_loop
from .server import Server


class BrokerThread:
    """`data_dir` defaults to a fresh temporary directory, removed on stop;
    pass one to keep state across a restart."""

    def __init__(self, config: BrokerConfig | None = None, data_dir: str | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="amqp-test-")
        config = config or BrokerConfig()
        # Ephemeral ports only: a fixed one would meet a reference RabbitMQ
        # (5672, 15672) or another test's broker.
        config = dataclasses.replace(
            config, data_dir=self.data_dir,
            management_port=0 if config.management_port >= 0 else config.management_port)
        self.broker = Broker(config)
        self.server = Server(self.broker, host="127.0.0.1", port=0)
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name="amqp-broker", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def tls_port(self) -> int:
        return self.server.tls_port

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.server.management.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.start())
        except BaseException as exc:  # surfaced to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    def start(self) -> "BrokerThread":
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def call(self, func, *args):
        """Run `func` on the broker's loop and return its result."""
        async def run():
            return func(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.server.stop(grace=0.5), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "BrokerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
