"""The broker as a library, inside an application's own event loop:

    async with amqp_server.serve(port=0) as broker:
        connection = await aio_pika.connect(broker.url)

`serve()` listens on loopback on a free port by default, keeps its state in a
fresh temporary directory (removed when it stops) unless given one, and
stops like the command does: every client gets connection.close 320
CONNECTION_FORCED.  Errors at start name their cause: `ListenError` says
which address and port and why, `DataDirError` which directory, and
`ConfigError` which key or file.  Synchronous code runs the same broker in a
thread: `amqp_server.run_in_thread()` (`embed_thread.py`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from . import inspection
from .broker.broker import Broker
from .broker.permissions import Permission
from .config import BrokerConfig
from .inspection import PeekedMessage
from .server import ListenError, Server
from .wire.table import FieldTable

__all__ = ["ConfigSource", "EmbeddedBroker", "serve", "load_config"]

# A config object, a TOML file (as `amqp-server --config` reads), or config
# keys as the TOML file spells them (`message-expiry-scan-period = 100`).
ConfigSource = BrokerConfig | str | os.PathLike[str] | Mapping[str, Any] | None

DEFAULT_HOST = "127.0.0.1"

# How a caller sets each listener's port (Refusal.listener): an argument of
# serve(), or a config key.
_PORT_SETTINGS = {"AMQP": "port={}", "AMQPS": "config tls_port = {}",
                  "management": "management_port={}", "Prometheus": "config prometheus_port = {}"}


def _advice(error: ListenError) -> str:
    """The settings that start the broker beside whatever holds its ports,
    or on an address it can have."""
    listeners = [refusal.listener for refusal in error.ports_in_the_way]
    if not listeners:
        return ("host must be an address of this machine (127.0.0.1, the default, or "
                "0.0.0.0 for every interface)." if error.host_in_the_way else "")
    picks = "picks a free port" if len(listeners) == 1 else "pick free ports"
    advice = (f"{', '.join(_PORT_SETTINGS[name].format(0) for name in listeners)} {picks} "
              "instead (the broker's port attributes say which)")
    optional = [_PORT_SETTINGS[name].format(-1) for name in listeners if name != "AMQP"]
    if optional:
        advice += f"; {' or '.join(optional)} turns that listener off"
    return advice + "."


def load_config(config: ConfigSource = None, **keys: Any) -> BrokerConfig:
    """A BrokerConfig from any ConfigSource, with `keys` (TOML spelling,
    `-` or `_`) over it; ConfigError says what is wrong."""
    keys = _python_names(keys)
    if isinstance(config, BrokerConfig):
        return dataclasses.replace(config, **keys) if keys else config
    if isinstance(config, Mapping):
        return BrokerConfig.load(None, **{**_python_names(config), **keys})
    return BrokerConfig.load(None if config is None else os.fspath(config), **keys)


def _python_names(keys: Mapping[str, Any]) -> dict[str, Any]:
    return {name.replace("-", "_"): value for name, value in keys.items()}


class EmbeddedBroker:
    """A broker running (between `start()` and `stop()`, or inside `async
    with`) in the event loop that started it.

    `host`, `port`, `management_port` and `data_dir` replace those keys of
    the config: port 0 picks a free port; `management_port` None picks a
    free one too unless the config turns the API off (a negative port),
    -1 turns it off.  The Prometheus listener likewise gets a free port
    unless the config turns it off.  Without `data_dir` the broker keeps its
    state in a new temporary directory, removed at stop.

    The inspection helpers (`queue_depth`, `peek`, ...) read the broker's
    objects directly: call them from the loop's own thread.
    """

    def __init__(self, host: str = DEFAULT_HOST, port: int = 0, *,
                 config: ConfigSource = None, management_port: int | None = None,
                 data_dir: str | os.PathLike[str] | None = None,
                 stop_grace: float = 0.5) -> None:
        config = load_config(config)
        self._own_dir = data_dir is None
        self.data_dir = str(data_dir) if data_dir is not None else \
            tempfile.mkdtemp(prefix="amqp-server-")
        if management_port is None:
            management_port = 0 if config.management_port >= 0 else -1
        # Never RabbitMQ's fixed 15692: brokers in one process or on one
        # machine (tests) must not collide.
        prometheus_port = 0 if config.prometheus_port >= 0 else -1
        self.config = dataclasses.replace(config, host=host, port=port, data_dir=self.data_dir,
                                          management_port=management_port,
                                          prometheus_port=prometheus_port)
        self.broker = Broker(self.config)
        self.server = Server(self.broker, host=host, port=port)
        self.stop_grace = stop_grace
        self._state = "new"

    # ---- lifecycle -----------------------------------------------------

    async def start(self) -> EmbeddedBroker:
        """Open the data directory and listen; raises DataDirError,
        ListenError or ConfigError (a TLS file) and then holds nothing."""
        if self._state != "new":
            raise RuntimeError(f"this broker was started before (it is {self._state})")
        self._state = "starting"
        try:
            await self.server.start()
        except BaseException as exc:
            self._state = "stopped"
            self._remove_own_dir()
            if isinstance(exc, ListenError):
                raise exc.advised(_advice(exc)) from None
            raise
        self._state = "running"
        return self

    async def stop(self) -> None:
        """Close the listeners and every client connection (320
        CONNECTION_FORCED, then `stop_grace` seconds for clients to answer),
        flush the stores and give the data directory up.  A broker that
        never started only removes its temporary directory; stopping twice
        does nothing."""
        if self._state == "new":
            self._state = "stopped"
            self._remove_own_dir()
        if self._state != "running":
            return
        self._state = "stopped"
        try:
            await self.server.stop(grace=self.stop_grace)
        finally:
            self._remove_own_dir()

    async def __aenter__(self) -> EmbeddedBroker:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _remove_own_dir(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # ---- where it listens ----------------------------------------------

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        """The AMQP port (the one picked, once started with port 0)."""
        return self.server.port

    @property
    def tls_port(self) -> int:
        return self.server.tls_port

    @property
    def url(self) -> str:
        """amqp:// URL of the default vhost as the default user (guest)."""
        return self.url_for("/")

    def url_for(self, vhost: str = "/", user: str | None = None,
                password: str | None = None) -> str:
        user = self.config.default_user if user is None else user
        password = self.config.default_pass if password is None else password
        return (f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@"
                f"{_connect_host(self.host)}:{self.port}/{quote(vhost, safe='')}")

    @property
    def management_port(self) -> int:
        if self.server.management is None:
            raise RuntimeError("the management API is off (management_port=-1)")
        return self.server.management.port

    @property
    def management_url(self) -> str:
        """http://host:port of the management API (its paths start /api/)."""
        return f"http://{_connect_host(self.host)}:{self.management_port}"

    @property
    def prometheus_url(self) -> str:
        """http://host:port of the Prometheus listener (its paths start /metrics)."""
        if self.server.prometheus is None:
            raise RuntimeError("the Prometheus listener is off (prometheus_port=-1)")
        return f"http://{_connect_host(self.host)}:{self.server.prometheus.port}"

    # ---- inspection and set-up (on the loop's thread) -------------------

    def queue_depth(self, queue: str, vhost: str = "/") -> int:
        """Ready messages in `queue`; KeyError when there is no such queue."""
        return inspection.queue_depth(self.broker, queue, vhost)

    def peek(self, queue: str, vhost: str = "/",
             limit: int | None = None) -> list[PeekedMessage]:
        """The messages waiting in `queue`, head first, without consuming
        them: body, properties and parsed `x-death` of each."""
        return inspection.peek(self.broker, queue, vhost, limit)

    def open_connections(self, vhost: str | None = None) -> int:
        """How many client connections are open (on `vhost`, or at all)."""
        return len(inspection.open_connections(self.server, vhost))

    async def close_connections(self, vhost: str | None = None,
                                reason: str = "closed by the embedding application") -> list[str]:
        """Force the client connections still open closed; returns which
        they were (peer, client product and connection name)."""
        return await inspection.close_connections(self.server, vhost, reason)

    def declare_queue(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                      vhost: str = "/", durable: bool = False) -> None:
        """Declare a queue as queue.declare would (same validation; an
        AMQPError carries the reply code and text a client would get)."""
        host = inspection.find_vhost(self.broker, vhost)
        host.declare_queue(name, None, durable=durable, arguments=FieldTable(arguments or {}))

    def set_policy(self, name: str, pattern: str, definition: Mapping[str, Any], *,
                   vhost: str = "/", priority: int = 0, apply_to: str = "all") -> None:
        """As `amqpctl set_policy`; PolicyError says what is refused."""
        self.broker.set_policy(vhost, name, pattern, dict(definition), priority, apply_to)

    def add_vhost(self, name: str, rabbitmq_semantics: str | None = None) -> None:
        """A new vhost the default user may do everything in; it follows
        `rabbitmq_semantics` ("3.13" or "4.3"), or the broker's."""
        self.broker.add_vhost(name, rabbitmq_semantics)
        self.broker.set_permission(self.config.default_user, name, Permission())

    def delete_vhost(self, name: str) -> None:
        """The vhost goes with its queues, exchanges, permissions and policies."""
        self.broker.delete_vhost(name)


def serve(host: str = DEFAULT_HOST, port: int = 0, *, config: ConfigSource = None,
          management_port: int | None = None,
          data_dir: str | os.PathLike[str] | None = None) -> EmbeddedBroker:
    """A broker for `async with serve(...) as broker:` in the running loop;
    see EmbeddedBroker for the arguments."""
    return EmbeddedBroker(host, port, config=config, management_port=management_port,
                          data_dir=data_dir)


def _connect_host(host: str) -> str:
    """Where a client on this machine reaches a listener on `host`."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
