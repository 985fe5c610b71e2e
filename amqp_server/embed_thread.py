"""The broker for synchronous code: an `EmbeddedBroker` running in an event
loop of its own, on a background thread.

    with amqp_server.run_in_thread() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))

The helpers (`queue_depth`, `peek`, ...) are the EmbeddedBroker's, run on
the broker's thread and answered to the caller's; `call()` does the same for
any function that reads or changes the broker's objects.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from .broker.broker import Broker
from .embed import DEFAULT_HOST, ConfigSource, EmbeddedBroker
from .inspection import PeekedMessage
from .loops import new_event_loop
from .server import Server

__all__ = ["BrokerThread", "run_in_thread"]

T = TypeVar("T")


class BrokerThread:
    """A broker on a background thread: `start()`/`stop()` or `with`.
    Arguments as for EmbeddedBroker; `config` and `data_dir` come first so
    that `BrokerThread(config, data_dir=...)` keeps working."""

    def __init__(self, config: ConfigSource = None,
                 data_dir: str | os.PathLike[str] | None = None, *,
                 host: str = DEFAULT_HOST, port: int = 0, management_port: int | None = None,
                 start_timeout: float = 60.0, call_timeout: float = 10.0) -> None:
        self.embedded = EmbeddedBroker(host, port, config=config,
                                       management_port=management_port, data_dir=data_dir)
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name="amqp-broker", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # ---- what it is and where it listens -------------------------------

    @property
    def broker(self) -> Broker:
        return self.embedded.broker

    @property
    def server(self) -> Server:
        return self.embedded.server

    @property
    def data_dir(self) -> str:
        return self.embedded.data_dir

    @property
    def host(self) -> str:
        return self.embedded.host

    @property
    def port(self) -> int:
        return self.embedded.port

    @property
    def tls_port(self) -> int:
        return self.embedded.tls_port

    @property
    def url(self) -> str:
        return self.embedded.url

    def url_for(self, vhost: str = "/", user: str | None = None,
                password: str | None = None) -> str:
        return self.embedded.url_for(vhost, user, password)

    @property
    def management_port(self) -> int:
        return self.embedded.management_port

    @property
    def management_url(self) -> str:
        return self.embedded.management_url

    @property
    def prometheus_url(self) -> str:
        return self.embedded.prometheus_url

    # ---- lifecycle -----------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.embedded.start())
        except BaseException as exc:  # raised again in the starting thread
            self._error = exc
            return
        finally:
            self._ready.set()
        self.loop.run_forever()

    def start(self) -> BrokerThread:
        """Start and wait until the broker listens; raises what stopped it
        (ListenError, DataDirError, ConfigError), or TimeoutError."""
        self._thread.start()
        if not self._ready.wait(self.start_timeout):
            raise TimeoutError(f"the broker did not start within {self.start_timeout} s")
        if self._error is not None:
            self._thread.join()
            self.loop.close()
            raise self._error
        return self

    def stop(self) -> None:
        """Stop the broker and its thread (see EmbeddedBroker.stop); again
        it does nothing."""
        if self._thread.ident is None and not self.loop.is_closed():
            # Never started: the loop is free to run here, once.
            self.loop.run_until_complete(self.embedded.stop())
            self.loop.close()
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.embedded.stop(), self.loop).result(
                self.start_timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(self.call_timeout)
            if not self._thread.is_alive():
                self.loop.close()

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- on the broker's thread ----------------------------------------

    def call(self, func: Callable[..., T], *args: Any) -> T:
        """Run `func(*args)` on the broker's loop and return its result (or
        raise its exception) here."""
        async def run() -> T:
            return func(*args)
        return self.run_coroutine(run())

    def run_coroutine(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await `coroutine` on the broker's loop and return its result here."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(self.call_timeout)

    def queue_depth(self, queue: str, vhost: str = "/") -> int:
        """Ready messages in `queue`; KeyError when there is no such queue."""
        return self.call(self.embedded.queue_depth, queue, vhost)

    def peek(self, queue: str, vhost: str = "/",
             limit: int | None = None) -> list[PeekedMessage]:
        """The messages waiting in `queue`, head first, without consuming
        them: body, properties and parsed `x-death` of each."""
        return self.call(self.embedded.peek, queue, vhost, limit)

    def open_connections(self, vhost: str | None = None) -> int:
        return self.call(self.embedded.open_connections, vhost)

    def close_connections(self, vhost: str | None = None,
                          reason: str = "closed by the embedding application") -> list[str]:
        return self.run_coroutine(self.embedded.close_connections(vhost, reason))

    def declare_queue(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                      vhost: str = "/", durable: bool = False) -> None:
        self.call(lambda: self.embedded.declare_queue(name, arguments, vhost=vhost,
                                                      durable=durable))

    def set_policy(self, name: str, pattern: str, definition: Mapping[str, Any], *,
                   vhost: str = "/", priority: int = 0, apply_to: str = "all") -> None:
        self.call(lambda: self.embedded.set_policy(name, pattern, definition, vhost=vhost,
                                                   priority=priority, apply_to=apply_to))

    def add_vhost(self, name: str, rabbitmq_semantics: str | None = None) -> None:
        self.call(self.embedded.add_vhost, name, rabbitmq_semantics)

    def delete_vhost(self, name: str) -> None:
        self.call(self.embedded.delete_vhost, name)


def run_in_thread(host: str = DEFAULT_HOST, port: int = 0, *, config: ConfigSource = None,
                  management_port: int | None = None,
                  data_dir: str | os.PathLike[str] | None = None) -> BrokerThread:
    """A broker for `with run_in_thread(...) as broker:` in synchronous code
    (or `.start()` and `.stop()`); arguments as for `serve()`."""
    return BrokerThread(config, data_dir, host=host, port=port,
                        management_port=management_port)
