"""The asyncio shell: sockets, timers and flushing around `Connection`.

`data_received` feeds the sans-IO connection, a share of each read per
turn of the loop (read_shares.py), and writes what it produced in one
transport write; deliveries triggered by other connections schedule a
single flush per loop iteration.  Heartbeat, handshake and close timers live
here because they need a clock.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import ipaddress
import logging
import os
import ssl
from dataclasses import dataclass

from .broker.broker import Broker
from .cluster import forwarding
from .config import ConfigError
from .errors import CONNECTION_FORCED
from .management.api import ManagementServer
from .management.prometheus_listener import PrometheusServer
from .protocol.connection import CLOSING, OPEN, Connection
from .protocol.flow import WRITE_HIGH_WATER, WRITE_LOW_WATER
from .read_shares import ReadShares

log = logging.getLogger("amqp_server")



class AMQPProtocol(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.conn: Connection | None = None
        self._flush_scheduled = False
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._heartbeat_started = False
        # A cluster node's connections may start with a follower's line
        # naming the client it forwards (cluster/forwarding.py).
        config = server.broker.config
        self._secret = config.cluster_secret.encode() if config.cluster_etcd else None
        self._first: bytes | None = b"" if self._secret else None

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("127.0.0.1", 0)
        host = peer[0]
        self.conn = Connection(self.server.broker, host, _is_loopback(host),
                               wakeup=self._schedule_flush)
        local = transport.get_extra_info("sockname") or ("127.0.0.1", 0)
        # RabbitMQ's connection name, also the management API's key for it.
        self.conn.name = f"{host}:{peer[1]} -> {local[0]}:{local[1]}"
        self.conn.peer_port = peer[1]
        self.conn.local_host, self.conn.local_port = local[0], local[1]
        self.conn.tls = transport.get_extra_info("sslcontext") is not None
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        # Reading goes through the shares, a share of the loop per turn.
        self._shares = ReadShares(transport, self.loop.call_soon, self._read)
        self.conn.flow.attach(self._shares)
        self.server.protocols.add(self)
        self._timers["handshake"] = self.loop.call_later(
            self.server.broker.config.handshake_timeout / 1000, self._handshake_expired)

    def data_received(self, data: bytes) -> None:
        if self._first is not None:
            data = self._forwarded(data)
            if not data:
                return
        self._shares.received(data)

    def _read(self, data: bytes) -> None:
        """A share of what was read (read_shares.py): the connection reads it."""
        conn = self.conn
        conn.receive_data(data)
        conn.flow.after_read()  # a new publisher, or reading resumed meanwhile
        self.flush()

    def _forwarded(self, data: bytes) -> bytes:
        """Until the first line is known not to be a follower's forwarding
        line: read it, and take the client's address from it when it is
        signed with the cluster secret; a bad signature closes at once."""
        data = self._first + data
        if not data.startswith(forwarding.PREFIX[:len(data)]):
            self._first = None
            return data
        end = data.find(b"\n")
        if end < 0:
            if len(data) > forwarding.MAX_LINE:
                self.transport.close()
                self._first = None
                return b""
            self._first = data
            return b""
        self._first = None
        client = forwarding.verify(self._secret, data[len(forwarding.PREFIX):end].decode(
            "ascii", "replace"))
        if client is None:
            log.warning("connection from %s claimed to be forwarded by a cluster member "
                        "without the cluster's secret; closed", self.conn.peer_host)
            self.transport.close()
            return b""
        host, port, _node = client
        conn = self.conn
        conn.peer_host, conn.peer_port = host, port
        conn.is_loopback = _is_loopback(host)
        conn.name = f"{host}:{port} -> {conn.local_host}:{conn.local_port}"
        return data[end + 1:]

    def apply_alarm(self) -> None:
        """An alarm or the store's state changed: the connection's flow
        (protocol/flow.py) blocks or unblocks it and pauses or resumes
        reading; what it told the client goes out now."""
        if self.transport is None or self.conn is None:
            return
        self.conn.flow.resources_changed()
        self.flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what the connection has to send now (the server's shutdown
        calls it too, so the close reaches the client before the abort)."""
        self._flush_scheduled = False
        conn = self.conn
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        data = conn.data_to_send()
        if data:
            transport.write(data)
        if conn.close_after_flush:
            self._cancel_timers()
            transport.close()
            return
        if conn.login_refusal is not None and "refusal" not in self._timers:
            self._cancel_timers()
            self._timers["refusal"] = self.loop.call_later(
                self.server.broker.config.login_failure_delay, self._send_refusal)
            return
        if conn.state == OPEN and not self._heartbeat_started:
            self._heartbeat_started = True
            self._cancel("handshake")
            if conn.heartbeat:
                self._schedule_heartbeat()
        elif conn.state == CLOSING and "close" not in self._timers:
            # The client closes the socket (its end reaches eof_received's
            # default: the transport closes) or answers our close; past
            # the connection's bound it is dropped, unsent output and all,
            # whether the client reads or not (rabbit_reader's
            # terminate_connection timer; RabbitMQ resets the socket).
            self._timers["close"] = self.loop.call_later(conn.close_timeout, transport.abort)
        conn.flushed()

    def _schedule_heartbeat(self) -> None:
        self._timers["heartbeat"] = self.loop.call_later(self.conn.heartbeat / 2,
                                                         self._heartbeat)

    def _heartbeat(self) -> None:
        self.conn.heartbeat_tick()
        self.flush()
        if not self.conn.close_after_flush:
            self._schedule_heartbeat()
        else:
            log.info("connection from %s missed heartbeats; closed", self.conn.peer_host)

    def _send_refusal(self) -> None:
        self._timers.pop("refusal", None)
        if self.transport is not None:
            self.transport.write(self.conn.login_refusal)
            self.transport.close()

    def _handshake_expired(self) -> None:
        self._timers.pop("handshake", None)
        # A closing connection has its own bound (rabbit_reader ignores
        # handshake_timeout once stopping).
        if self.conn.state not in (OPEN, CLOSING) and self.transport is not None:
            log.info("connection from %s did not finish the handshake in time",
                     self.conn.peer_host)
            self.conn.connection_lost()
            self.transport.close()

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self.conn.connection_lost()
        self.server.protocols.discard(self)
        self.transport = None

    def _cancel(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _cancel_timers(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def tune_gc() -> None:
    """Queued messages and entries never form reference cycles, yet the
    cyclic collector would walk every one of them, over and over, as the
    broker allocates: collect the young generation every 100k allocations
    instead of every 700, and full collections rarely.  Measured: a mass
    expiry of 100k messages takes 0.45 s instead of 0.65 s.  For the
    broker's own process only (the command): an application embedding the
    broker keeps its own collector settings."""
    gc.set_threshold(100_000, 50, 1000)


def tls_context(config) -> ssl.SSLContext | None:
    """The amqps listener's context, or None when no certificate is set.
    Client certificates: asked for with tls_verify_peer, required with
    tls_fail_if_no_peer_cert (RabbitMQ's verify_peer / fail_if_no_peer_cert)."""
    if not config.tls_certfile:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.tls_certfile, config.tls_keyfile)
        if config.tls_cacertfile:
            context.load_verify_locations(config.tls_cacertfile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"TLS certificate, key or CA file cannot be used: {exc}") from None
    if config.tls_fail_if_no_peer_cert:
        context.verify_mode = ssl.CERT_REQUIRED
    elif config.tls_verify_peer:
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


# Errors a listener on another port would not meet: the port is taken, or
# (below 1024) reserved to privileged users.
_PORT_ERRORS = (errno.EADDRINUSE, errno.EACCES)


@dataclass(frozen=True)
class Refusal:
    """One listener the system would not open: which, where and why."""

    listener: str  # "AMQP", "AMQPS", "management" or "Prometheus"
    host: str
    port: int
    reason: str
    errno: int | None = None

    @classmethod
    def of(cls, listener: str, host: str, port: int, exc: OSError) -> Refusal:
        # asyncio words a bind error as "error while attempting to bind on
        # address ...": the system's own words are shorter.  A name that
        # does not resolve has a negative errno and its words in strerror.
        code = exc.errno
        reason = os.strerror(code) if code and code > 0 else exc.strerror or str(exc)
        return cls(listener, host, port, reason, code)

    @property
    def port_in_the_way(self) -> bool:
        """Another port would do: this one is taken or privileged."""
        return self.errno in _PORT_ERRORS

    @property
    def host_in_the_way(self) -> bool:
        """The host is no address of this machine, or no name that resolves."""
        return self.errno == errno.EADDRNOTAVAIL or (self.errno or 0) < 0

    def __str__(self) -> str:
        return f"cannot listen on {self.host}:{self.port} ({self.listener}): {self.reason}"


class ListenError(OSError):
    """Listeners could not be opened: every one that failed, a line each,
    then `advice` on what to change (other ports, another host), worded by
    whoever started the broker (the command's flags, the embedding API's
    arguments)."""

    def __init__(self, refusals: list[Refusal], advice: str = "") -> None:
        self.refusals = tuple(refusals)
        self.advice = advice
        super().__init__("\n".join([*map(str, self.refusals), *([advice] if advice else [])]))

    def advised(self, advice: str) -> ListenError:
        return ListenError(list(self.refusals), advice)

    @property
    def ports_in_the_way(self) -> list[Refusal]:
        return [refusal for refusal in self.refusals if refusal.port_in_the_way]

    @property
    def host_in_the_way(self) -> bool:
        return any(refusal.host_in_the_way for refusal in self.refusals)


class Server:
    """Listens for AMQP connections on behalf of one broker."""

    def __init__(self, broker: Broker | None = None, host: str | None = None,
                 port: int | None = None, tls_port: int | None = None,
                 data_dir_lock=None) -> None:
        self.broker = broker or Broker()
        # A cluster node's lock on its data directory, held across roles,
        # and what it does the moment the broker is booted, before anything
        # else can run: connect the stores to its replication stream.
        self.data_dir_lock = data_dir_lock
        self.on_booted = None
        self.host = host if host is not None else self.broker.config.host
        self.port = port if port is not None else self.broker.config.port
        self.tls_port = tls_port if tls_port is not None else self.broker.config.tls_port
        self.protocols: set[AMQPProtocol] = set()
        self._server: asyncio.base_events.Server | None = None
        self._tls_server: asyncio.base_events.Server | None = None
        self._reaper = None
        self._resource_check = None
        self._ack_deadlines = None
        self._credit_check = None
        self._address_scan = None
        self._dead_letter_watch = None
        self.management: ManagementServer | None = None
        self.prometheus: PrometheusServer | None = None
        self._storage_closed = False

    async def start(self) -> None:
        """Open the data directory (DataDirError), then listen (ListenError);
        a start that fails part-way gives the data directory back."""
        try:
            await self._start()
        except BaseException:
            await self._close_storage()
            raise

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        broker = self.broker
        broker.timers.attach(loop)
        for problem in broker.open_data_dir(self.data_dir_lock):
            log.warning("%s", problem)
        if self.on_booted is not None:
            self.on_booted(broker)
        if broker.store is not None:
            broker.store.attach(loop)
            broker.journal.attach(loop)
            broker.dead_letter_log.attach(loop)
        if broker.archiver is not None:
            broker.archiver.attach(loop)
        broker.on_alarm = self._alarm_changed
        period = broker.config.message_expiry_scan_period
        if period > 0:  # -1: no reaper, expired messages die at the head only
            self._reaper = broker.timers.call_every(period / 1000.0, broker.sweep)
        self._resource_check = broker.timers.call_every(1.0, broker.check_resources)
        self._ack_deadlines = broker.timers.call_every(1.0, broker.check_ack_deadlines)
        self._credit_check = broker.timers.call_every(1.0, broker.check_credit)
        self._dead_letter_watch = broker.timers.call_every(1.0, broker.watch_dead_letters)
        period = broker.config.address_queue_scan_period
        if period > 0:
            self._address_scan = broker.timers.call_every(period / 1000.0,
                                                          broker.scan_auto_created)
        await self._listen(loop)

    async def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open every listener, or none: each one the system refuses is
        tried all the same, so that one ListenError names them all (a
        machine where RabbitMQ runs has every default port taken)."""
        config = self.broker.config
        context = tls_context(config)  # a bad certificate is said before any port
        refusals: list[Refusal] = []

        async def attempt(listener: str, port: int, open_listener) -> None:
            try:
                await open_listener()
            except OSError as exc:
                refusals.append(Refusal.of(listener, self.host, port, exc))

        async def amqp() -> None:
            self._server = await loop.create_server(
                lambda: AMQPProtocol(self), self.host, self.port, reuse_address=True)

        async def amqps() -> None:
            self._tls_server = await loop.create_server(
                lambda: AMQPProtocol(self), self.host, self.tls_port, reuse_address=True,
                ssl=context, ssl_handshake_timeout=config.handshake_timeout / 1000)

        await attempt("AMQP", self.port, amqp)
        # -1 turns the amqps listener off even when a certificate is set.
        if context is not None and self.tls_port >= 0:
            await attempt("AMQPS", self.tls_port, amqps)
        if config.management_port >= 0:
            self.management = ManagementServer(self.broker, self.host, config.management_port,
                                               self.listeners)
            await attempt("management", config.management_port, self.management.start)
        if config.prometheus_port >= 0:
            self.prometheus = PrometheusServer(self.broker, self.host, config.prometheus_port)
            await attempt("Prometheus", config.prometheus_port, self.prometheus.start)
        if refusals:
            raise ListenError(refusals)  # start() closes what did open
        self.port = self._server.sockets[0].getsockname()[1]
        if self._tls_server is not None:
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
        log.info("AMQP 0-9-1 listening on %s:%d", self.host, self.port)
        if self._tls_server is not None:
            log.info("AMQP 0-9-1 over TLS listening on %s:%d", self.host, self.tls_port)
        if self.management is not None:
            log.info("management HTTP API listening on %s:%d", self.host,
                     self.management.port)
        if self.prometheus is not None:
            log.info("Prometheus metrics listening on %s:%d", self.host, self.prometheus.port)

    def listeners(self) -> list[dict]:
        """The active listeners, as RabbitMQ lists them (overview, status,
        the port-listener health check)."""
        active = [("amqp", self.port, self._server is not None),
                  ("amqp/ssl", self.tls_port, self._tls_server is not None),
                  ("http", self.management and self.management.port, self.management),
                  ("http/prometheus", self.prometheus and self.prometheus.port,
                   self.prometheus)]
        return [{"protocol": protocol, "port": port, "ip_address": self.host}
                for protocol, port, running in active if running]

    @property
    def tls_listening(self) -> bool:
        return self._tls_server is not None

    def _alarm_changed(self) -> None:
        for protocol in list(self.protocols):
            protocol.apply_alarm()

    async def stop(self, grace: float = 1.0) -> None:
        """Close the listener, send 320 CONNECTION_FORCED to every client."""
        for listener in (self._server, self._tls_server):
            if listener is not None:
                listener.close()
        for timer in (self._reaper, self._resource_check, self._ack_deadlines,
                      self._credit_check, self._address_scan, self._dead_letter_watch):
            if timer is not None:
                timer.cancel()
        for http in (self.management, self.prometheus):
            if http is not None:
                await http.stop()
        for protocol in list(self.protocols):
            protocol.conn.shutdown(CONNECTION_FORCED,
                                   "broker forced connection closure with reason 'shutdown'")
            protocol.flush()
        deadline = asyncio.get_running_loop().time() + grace
        while self.protocols and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        for protocol in list(self.protocols):
            if protocol.transport is not None:
                protocol.transport.abort()
        for listener in (self._server, self._tls_server):
            if listener is not None:
                await listener.wait_closed()
        await self._close_storage()

    async def _close_storage(self) -> None:
        """Flush and close the stores, then give the data directory up
        (once, whether the start failed or the broker stops)."""
        if self._storage_closed:
            return
        self._storage_closed = True
        for timer in (self._reaper, self._resource_check, self._ack_deadlines,
                      self._credit_check, self._address_scan, self._dead_letter_watch):
            if timer is not None:
                timer.cancel()
        for listener in (self._server, self._tls_server):
            if listener is not None:
                listener.close()
        broker = self.broker
        try:
            for http in (self.management, self.prometheus):
                if http is not None:
                    await http.stop()
            if broker.archiver is not None:
                await broker.archiver.stop()
            if broker.store is not None:
                await broker.store.shutdown()
            if broker.journal is not None:
                await broker.journal.shutdown()
        finally:
            try:
                if broker.dead_letter_log is not None:
                    broker.dead_letter_log.close()
            finally:
                broker.close_data_dir()
