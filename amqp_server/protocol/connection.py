"""An AMQP 0-9-1 connection as a state machine: bytes in, bytes out.

`receive_data` hands the bytes to the connection's `FrameReader`
(`wire/reader.py`), which parses them and reports what they hold to the
`on_*` methods below, which act on it.  Whatever the broker has to say
accumulates in an output buffer that `data_to_send` drains.  Deliveries
caused by other connections land in the same buffer and call the `wakeup`
hook so the I/O shell knows to flush.  Nothing here touches a socket or a
clock: the shell in `server.py` owns those and calls `heartbeat_tick`.

Handshake states, in order: the protocol header, connection.start-ok,
connection.tune-ok, connection.open, then `open`.

Closing is RabbitMQ 3.10's (rabbit_reader.erl): whoever closes, the broker's
last word is connection.close or the close-ok answering the client's, and
the connection then waits in CLOSING (rabbit_reader's `closed` state) for
the client to finish: its close-ok (to our close) ends the connection at
once, and so does the end of its socket, which the shell sees; a
connection.close (both ends closed at once) gets close-ok and the wait goes
on; everything else is dropped unread, as the spec asks.  The socket is the
client's to close (spec: close-ok "tells the recipient that it is safe to
release resources for the connection and close the socket"); the wait is
bounded by `close_timeout` seconds, which the shell keeps.  Heartbeats go
on meanwhile, as RabbitMQ's do.
"""

from __future__ import annotations

import logging
import struct
import time
from itertools import repeat

from pamqp import commands as spec

from dlx.text import as_text

from .. import __version__
from ..broker.message import Message
from ..errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    INTERNAL_ERROR,
    SYNTAX_ERROR,
    AMQPError,
    channel_error,
    command_invalid,
    not_allowed,
)
from ..wire import frames
from ..wire.methods import MethodDecodeError, UnknownMethod, decode_method, make
from ..wire.properties import Layout
from ..wire.reader import FrameReader, PublishFields, publish_fields, settle_payload
from ..wire.table import FieldTable, decode_table_body
from .channel import Channel
from .channel.publishing import out_of_place
from .closing_channel import ClosingChannel
from .flow import Flow

log = logging.getLogger("amqp_server.connection")

_PUBLISH_IDS = struct.pack(">HH", frames.BASIC_CLASS, 40)
_MIN_FRAME_MAX = 4096
# rabbit_reader's timeout before tune-ok has negotiated a heartbeat
# (?NORMAL_TIMEOUT, seconds): what a connection closed then waits at most.
_UNTUNED_TIMEOUT = 3
# What rabbit_reader's fatal_frame_error waits, reading nothing, before it
# drops a connection whose frames it can no longer tell apart
# (?SILENT_CLOSE_DELAY, seconds).
_SILENT_CLOSE_DELAY = 3

AWAIT_HEADER = "header"
AWAIT_START_OK = "start-ok"
AWAIT_TUNE_OK = "tune-ok"
AWAIT_OPEN = "open"
OPEN = "opened"
CLOSING = "closing"
CLOSED = "closed"

SERVER_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "direct_reply_to": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}


class Connection:
    def __init__(self, broker, peer_host: str = "127.0.0.1", is_loopback: bool = True,
                 wakeup=None) -> None:
        self.broker = broker
        self.config = broker.config
        self.peer_host = peer_host
        # Both ends of the socket and the transport, filled by the server:
        # what list_connections and the management API show.
        self.peer_port = 0
        self.local_host = ""
        self.local_port = 0
        self.tls = False
        self.connected_at = int(time.time() * 1000)
        self.is_loopback = is_loopback
        self._wakeup = wakeup or (lambda: None)
        self.state = AWAIT_HEADER
        self.channels: dict[int, Channel] = {}
        # Channels the broker has closed, until the client's close-ok.
        self.closing_channels: dict[int, ClosingChannel] = {}
        self.exclusive_queues: set = set()
        self.capabilities: dict = {}
        self.client_properties: dict = {}
        self.name = peer_host
        self.user = None
        self.grant = None  # the user's rights in the open vhost (access_control.Grant)
        self.vhost = None
        self.frame_max = self.config.frame_max
        self.channel_max = self.config.channel_max
        self.heartbeat = 0
        self._tuned = False
        # Seconds a CLOSING connection waits for the client, set as it closes.
        self.close_timeout = 0.0
        self.close_after_flush = False
        self._reader = FrameReader(self, self.frame_max, self.config.max_message_size)
        # Whether the peer is read and how much more may be written to it:
        # the shell attaches the transport, channels and consumers ask it.
        self.flow = Flow(broker, self._announce_blocked)
        self._out: list[bytes] = []
        self._in_receive = False
        self._confirming: list[Channel] = []
        self._received_since_tick = True
        self._sent_since_tick = False
        self._silent_ticks = 0
        self.mechanism = ""
        self.login_refusal: bytes | None = None

    # ---- output --------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.state == CLOSED:
            return
        if not self._out and not self._in_receive:
            self._wakeup()
        self._out.append(data)
        self.flow.buffered += len(data)

    @property
    def publishing(self) -> bool:
        """Has published (what a resource alarm blocks)."""
        return self.flow.publishing

    def confirms_due(self, channel: Channel) -> None:
        if not self._confirming and not self._in_receive:
            self._wakeup()
        self._confirming.append(channel)

    def data_to_send(self) -> bytes:
        """Everything queued for the peer since the last call."""
        if self._confirming:
            confirming, self._confirming = self._confirming, []
            for channel in confirming:
                channel.flush_confirms()
        if not self._out:
            return b""
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out = []
        self.flow.buffered = 0
        self._sent_since_tick = True
        return data

    def flushed(self) -> None:
        """The shell wrote our output; deliveries held back may go on."""
        if self.state == OPEN and self.flow.drained():
            self.redispatch()

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()
        if self.state == OPEN:
            self.redispatch()

    def redispatch(self) -> None:
        for channel in list(self.channels.values()):
            channel.redispatch()

    def _send_method(self, channel: int, method) -> None:
        self.write(frames.method_frame(channel, method))

    # ---- input ---------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        if self.state == CLOSED:
            return
        self._received_since_tick = True
        self._in_receive = True
        try:
            self._reader.read(data)
        except AMQPError as error:
            self.connection_error(error)
        except Exception:
            # A bug must cost this connection, never the broker.
            log.exception("internal error on connection from %s", self.peer_host)
            self.connection_error(AMQPError(INTERNAL_ERROR, "internal error"))
        finally:
            self._in_receive = False

    # ---- what the reader reports (wire.reader.FrameHandler) --------------

    def on_protocol_header(self, raw: bytes) -> None:
        self._protocol_header(raw)

    def on_heartbeat(self) -> None:
        pass  # any read is a sign of life (receive_data)

    def on_publish(self, number: int, fields: PublishFields, header: bytes,
                   layout: Layout | None, body: bytes) -> None:
        channel = self.channels.get(number)
        if channel is None or channel.closing:
            self._publishes_one_frame_at_a_time(number, fields, (header,), (body,))
            return
        self.flow.publishing = True
        if fields.immediate or not channel.takes_whole_publishes():
            self._publishes_one_frame_at_a_time(number, fields, (header,), (body,))
            return
        try:
            channel.publish(Message(fields.exchange, fields.routing_key, fields.route, header,
                                    body, fields.routing_keys), fields.mandatory, layout)
        except AMQPError as error:
            if error.closes_connection:
                raise
            self.channel_error(channel, error.for_method(60, 40))

    def on_publish_run(self, number: int, fields: PublishFields, headers: list[bytes],
                       layouts: list[Layout | None] | None, bodies: list[bytes]) -> None:
        channel = self.channels.get(number)
        if channel is None or channel.closing:
            self._publishes_one_frame_at_a_time(number, fields, headers, bodies)
            return
        self.flow.publishing = True
        if fields.immediate or not channel.takes_whole_publishes():
            self._publishes_one_frame_at_a_time(number, fields, headers, bodies)
            return
        exchange, routing_key, route, mandatory, _, routing_keys, _ = fields
        try:
            channel.publish_run(list(map(Message, repeat(exchange), repeat(routing_key),
                                         repeat(route), headers, bodies,
                                         repeat(routing_keys))), mandatory, layouts)
        except AMQPError as error:
            if error.closes_connection:
                raise
            self.channel_error(channel, error.for_method(60, 40))

    def _publishes_one_frame_at_a_time(self, number: int, fields: PublishFields,
                                       headers, bodies) -> None:
        """Publishes read whole that the channel must take as frames: it is
        closed or unknown, within other content, in a transaction, or they
        ask for `immediate` (refused, 540)."""
        for header, body in zip(headers, bodies):
            self.on_method(number, fields.method)
            if self.state != CLOSED:
                self.on_content_header(number, header)
            if body and self.state != CLOSED:
                self.on_content_body(number, body)
            if self.state == CLOSED:
                return

    def on_settle(self, number: int, method_id: int, tags: list[int], multiple: bool,
                  requeue: bool) -> None:
        channel = self.channels.get(number)
        if channel is None or channel.closing:
            for tag in tags:
                self.on_method(number, settle_payload(method_id, tag, multiple, requeue))
                if self.state == CLOSED:
                    return
        elif multiple:
            self._on_channel(channel, channel.ack_multiples, tags, ids=(60, 80))
        else:
            self._on_channel(channel, channel.settle_each, method_id, tags, requeue)

    def on_content_header(self, number: int, payload: bytes) -> None:
        channel = self.channels.get(number)
        if channel is None:
            self._closed_channel(number).content_header(payload)
        elif not channel.closing:
            self._on_channel(channel, channel.content_header, payload)

    def on_content_body(self, number: int, payload: bytes) -> None:
        channel = self.channels.get(number)
        if channel is None:
            self._closed_channel(number).content_body(payload)
        elif not channel.closing:
            self._on_channel(channel, channel.content_body, payload)

    def _closed_channel(self, number: int) -> ClosingChannel:
        """The channel `number` the broker has closed, whose frames are
        followed until close-ok; a channel never opened is a connection
        error."""
        closed = self.closing_channels.get(number)
        if closed is None:
            raise channel_error("expected 'channel.open'")
        return closed

    def on_method(self, number: int, payload: bytes) -> None:
        if self.state == CLOSING:
            self._while_closing(payload)
            return
        channel = self.channels.get(number)
        if channel is not None and not channel.closing and payload.startswith(_PUBLISH_IDS):
            self._publish(channel, payload)
            return
        try:
            method = decode_method(payload)
        except UnknownMethod as exc:
            raise AMQPError(COMMAND_INVALID, str(exc), exc.class_id, exc.method_id) from None
        except MethodDecodeError as exc:
            raise AMQPError(SYNTAX_ERROR, str(exc)) from None
        if number == 0:
            self._connection_method(method)
            return
        if self.state != OPEN:
            raise AMQPError(CHANNEL_ERROR, "channel methods before connection.open")
        if channel is None:
            self._on_channel_not_open(number, method, payload)
            return
        if isinstance(method, (spec.Channel.Open, spec.Channel.Close, spec.Channel.CloseOk)):
            due = channel.content_due()
            if due is not None:
                raise out_of_place(due)  # amid a publish's content, as any method
            if isinstance(method, spec.Channel.Open):
                raise channel_error("second 'channel.open' seen").for_method(20, 10)
            if isinstance(method, spec.Channel.Close):
                channel.release()
                del self.channels[number]
                self._send_method(number, make(spec.Channel.CloseOk))
            return  # a close-ok on an open channel: nothing to do
        try:
            channel.handle_method(method)
        except AMQPError as error:
            error.for_method(*_ids(method))
            if error.closes_connection:
                raise
            self.channel_error(channel, error)

    def _on_channel_not_open(self, number: int, method, payload: bytes) -> None:
        """A method on a channel that is not open: channel.open, or one the
        broker has closed and waits for close-ok on (closing_channel.py)."""
        closed = self.closing_channels.get(number)
        if closed is None:
            if isinstance(method, spec.Channel.Open):
                # RabbitMQ counts open channels; their numbers may be any.
                if len(self.channels) >= self.channel_max:
                    raise not_allowed(
                        f"number of channels opened ({len(self.channels)}) has reached the "
                        f"negotiated channel_max ({self.channel_max})")
                self.channels[number] = Channel(self, number)
                self.broker.counters.channels_opened += 1
                self._send_method(number, make(spec.Channel.OpenOk))
            elif not isinstance(method, spec.Channel.CloseOk):
                raise channel_error("expected 'channel.open'")
            return
        closed.method(payload)
        if isinstance(method, spec.Channel.CloseOk):
            del self.closing_channels[number]
        elif isinstance(method, spec.Channel.Close):
            # Both ends closed the channel at once: RabbitMQ answers and
            # still waits for its own close-ok.
            self._send_method(number, make(spec.Channel.CloseOk))
        elif isinstance(method, spec.Channel.Open):
            raise channel_error("second 'channel.open' seen").for_method(20, 10)

    def _publish(self, channel: Channel, payload: bytes) -> None:
        """basic.publish not read whole with its content."""
        fields = publish_fields(payload)
        if fields is None:
            raise AMQPError(SYNTAX_ERROR, "malformed basic.publish")
        self.flow.publishing = True
        self._on_channel(channel, channel.start_publish, fields.exchange, fields.routing_key,
                         fields.route, fields.mandatory, fields.immediate, ids=(60, 40))

    def _announce_blocked(self, reason: str | None) -> None:
        """The flow blocked the connection for a resource alarm (`reason`)
        or unblocked it (None): the client hears of it if it asked to."""
        if self.capabilities.get("connection.blocked") and self.state == OPEN:
            self._send_method(0, make(spec.Connection.Blocked, reason=reason)
                              if reason is not None else make(spec.Connection.Unblocked))

    def _on_channel(self, channel: Channel, handler, *args, ids: tuple = (0, 0)) -> None:
        """Run a channel's handler; its error closes the channel (or the
        connection), naming the method `ids` when the error does not."""
        try:
            handler(*args)
        except AMQPError as error:
            error.for_method(*ids)
            if error.closes_connection:
                raise
            self.channel_error(channel, error)

    def channel_error(self, channel: Channel, error: AMQPError) -> None:
        """Close one channel with a soft error; the connection carries on."""
        if self.channels.get(channel.number) is not channel:
            return
        due = channel.content_due()
        channel.release()
        del self.channels[channel.number]
        self.closing_channels[channel.number] = ClosingChannel(due)
        self._send_method(channel.number, make(
            spec.Channel.Close, reply_code=error.code, reply_text=error.reply_text,
            class_id=error.class_id, method_id=error.method_id))

    def connection_error(self, error: AMQPError) -> None:
        """Send connection.close and wait for close-ok, dropping all else."""
        if self.state in (CLOSING, CLOSED):
            return
        if self.state in (AWAIT_HEADER,):
            self.close_transport()
            return
        self._release_all()
        self._send_method(0, make(
            spec.Connection.Close, reply_code=error.code, reply_text=error.reply_text,
            class_id=error.class_id, method_id=error.method_id))
        self._start_closing()

    def _start_closing(self) -> None:
        """The broker has said its last word: wait for the client (module
        docstring), at most its heartbeat timeout and never more than
        `close_timeout` (rabbit_reader's close_connection: the heartbeat
        when it is below ?CLOSING_TIMEOUT, 30 s, else 30 s; 3 s before
        tune-ok).  A reader that lost the frames' boundaries reads nothing
        more: no close-ok can come, the socket goes after 3 s."""
        if self._reader.stopped:
            waited = _SILENT_CLOSE_DELAY
        else:
            waited = self.heartbeat if self._tuned else _UNTUNED_TIMEOUT
        limit = self.config.close_timeout
        self.close_timeout = waited if 0 < waited < limit else limit
        self.state = CLOSING
        self._reader.start_closing()
        self.flow.closing()

    def _while_closing(self, payload: bytes) -> None:
        """A method on channel 0 while CLOSING (the reader yields no other
        frame then)."""
        try:
            method = decode_method(payload)
        except MethodDecodeError:
            return
        if isinstance(method, spec.Connection.CloseOk):
            self.close_transport()
        elif isinstance(method, spec.Connection.Close):
            self._send_method(0, make(spec.Connection.CloseOk))

    # ---- handshake and channel 0 ----------------------------------------

    def _protocol_header(self, header: bytes) -> None:
        if header != frames.PROTOCOL_HEADER:
            # Spec 4.2.2: answer with the version we speak, then close.
            self.write(frames.PROTOCOL_HEADER)
            self.close_transport()
            return
        self.state = AWAIT_START_OK
        properties = FieldTable({
            "product": "amqp-server",
            "version": __version__,
            "platform": "Python",
            "copyright": "amqp-server contributors",
            "information": "An AMQP 0-9-1 broker for messages that cannot be delivered",
            "cluster_name": "amqp-server@localhost",
            "capabilities": FieldTable(SERVER_CAPABILITIES),
        })
        self._send_method(0, make(spec.Connection.Start, version_major=0, version_minor=9,
                                  server_properties=properties,
                                  mechanisms=b"PLAIN AMQPLAIN", locales=b"en_US"))

    def _connection_method(self, method) -> None:
        state = self.state
        if isinstance(method, spec.Connection.Close):
            # Exclusive queues are gone before close-ok goes, as in RabbitMQ.
            self._release_all()
            self._send_method(0, make(spec.Connection.CloseOk))
            self._start_closing()
            return
        if isinstance(method, spec.Connection.CloseOk):
            self.close_transport()
            return
        if state == AWAIT_START_OK and isinstance(method, spec.Connection.StartOk):
            self._start_ok(method)
        elif state == AWAIT_TUNE_OK and isinstance(method, spec.Connection.TuneOk):
            self._tune_ok(method)
        elif state == AWAIT_OPEN and isinstance(method, spec.Connection.Open):
            self._open(method)
        elif state == OPEN and isinstance(method, (spec.Connection.Blocked,
                                                   spec.Connection.Unblocked)):
            return
        elif state == OPEN and isinstance(method, spec.Connection.UpdateSecret):
            self._send_method(0, make(spec.Connection.UpdateSecretOk))
        else:
            raise command_invalid(f"unexpected {method.name} on channel 0").for_method(
                *_ids(method))

    def _start_ok(self, method) -> None:
        self.client_properties = method.client_properties or {}
        capabilities = self.client_properties.get("capabilities")
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        mechanism = method.mechanism
        self.mechanism = mechanism
        response = bytes(method.response or b"")
        if mechanism == "PLAIN":
            parts = response.split(b"\x00")
            if len(parts) != 3:
                raise AMQPError(SYNTAX_ERROR, "response in wrong format for PLAIN")
            username, password = parts[1], parts[2]
        elif mechanism == "AMQPLAIN":
            try:
                table = decode_table_body(response)
            except ValueError:
                raise AMQPError(SYNTAX_ERROR, "AMQPLAIN response is not a field table") from None
            username, password = table.get("LOGIN"), table.get("PASSWORD")
            if username is None or password is None:
                raise AMQPError(SYNTAX_ERROR, "AMQPLAIN response lacks LOGIN or PASSWORD")
        else:
            raise command_invalid(f"unknown authentication mechanism '{mechanism}'")
        username = as_text(username)
        password = as_text(password)
        user = self.broker.authenticate(username, password)
        if user is None:
            self._refuse_login(mechanism, f"user '{username}' - invalid credentials")
            return
        if not self.broker.access.may_connect_from(user, self.is_loopback):
            self._refuse_login(mechanism, f"user '{username}' can only connect via localhost")
            return
        self.user = user
        self.state = AWAIT_TUNE_OK
        self._send_method(0, make(spec.Connection.Tune, channel_max=self.config.channel_max,
                                  frame_max=self.config.frame_max,
                                  heartbeat=self.config.heartbeat))

    def _refuse_login(self, mechanism: str, reason: str) -> None:
        """The answer (connection.close 403 when the client asked for it, else
        nothing) waits in `login_refusal` for the shell to send after
        `login_failure_delay`; nothing the client sends meanwhile is read."""
        log.warning("%s login refused from %s: %s", mechanism, self.peer_host, reason)
        refusal = b""
        if self.capabilities.get("authentication_failure_close"):
            text = (f"Login was refused using authentication mechanism {mechanism}. "
                    "For details see the broker logfile.")
            refusal = frames.method_frame(0, make(
                spec.Connection.Close, reply_code=ACCESS_REFUSED,
                reply_text=f"ACCESS_REFUSED - {text}"))
        self.login_refusal = refusal
        self.state = CLOSED
        self._reader.stop()
        self.flow.refuse_login()

    def _tune_ok(self, method) -> None:
        frame_max = method.frame_max
        server_max = self.config.frame_max
        if frame_max and frame_max < _MIN_FRAME_MAX:
            raise not_allowed(f"negotiated frame_max = {frame_max} is lower than the "
                              f"minimum allowed value ({_MIN_FRAME_MAX})").for_method(10, 31)
        if frame_max == 0 or frame_max > server_max:
            raise not_allowed(f"negotiated frame_max = {frame_max} is higher than the "
                              f"maximum allowed value ({server_max})").for_method(10, 31)
        channel_max = method.channel_max
        if channel_max == 0 or channel_max > self.config.channel_max:
            raise not_allowed(
                f"negotiated channel_max = {channel_max} is higher than the maximum "
                f"allowed value ({self.config.channel_max})").for_method(10, 31)
        self.frame_max = frame_max
        self._reader.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat
        self._tuned = True
        self.state = AWAIT_OPEN

    def _open(self, method) -> None:
        vhost = self.broker.vhosts.get(method.virtual_host)
        if vhost is None:
            raise not_allowed(f"vhost {method.virtual_host} not found").for_method(10, 40)
        limit = self.config.connection_max
        if 0 <= limit <= len(self.broker.connections):
            raise not_allowed("connection refused: node connection limit "
                              f"({limit}) is reached").for_method(10, 40)
        grant = self.broker.access.login(self.user, vhost.name)
        if grant is None:
            raise not_allowed(f"access to vhost '{vhost.name}' refused for user "
                              f"'{self.user.name}'").for_method(10, 40)
        self.grant = grant
        self.vhost = vhost
        self.state = OPEN
        self.broker.connections.add(self)
        self.broker.counters.connections_opened += 1
        self._send_method(0, make(spec.Connection.OpenOk))

    # ---- heartbeats and shutdown ---------------------------------------

    def check_ack_deadlines(self, now_ms: float) -> None:
        """Close the channels whose oldest delivery is past its consumer
        timeout (called every second by the broker)."""
        if self.state != OPEN:
            return
        for channel in list(self.channels.values()):
            error = channel.overdue(now_ms)
            if error is not None:
                log.warning("closing channel %d of %s: %s", channel.number, self.name,
                            error.reply_text)
                self.channel_error(channel, error)

    def heartbeat_tick(self) -> None:
        """Called every heartbeat/2 seconds by the shell."""
        if self.state == CLOSED or not self.heartbeat:
            return
        if self._received_since_tick or not self.flow.reading:
            # A connection we do not read from (blocked, paused): its
            # silence is ours.
            self._silent_ticks = 0
        else:
            self._silent_ticks += 1
            # Two whole intervals without a byte from the peer: it is gone.
            if self._silent_ticks >= 4:
                self._release_all()
                self.close_transport()
                return
        self._received_since_tick = False
        if not self._sent_since_tick:
            self.write(frames.HEARTBEAT_FRAME)
        self._sent_since_tick = False

    def shutdown(self, code: int, text: str) -> None:
        """Broker-initiated close, e.g. 320 CONNECTION_FORCED on SIGTERM."""
        if self.state == OPEN:
            self.connection_error(AMQPError(code, text))
        elif self.state != CLOSED:
            self.close_transport()

    def close_transport(self) -> None:
        if self.state != CLOSED:
            self._release_all()
        self.state = CLOSED
        self._reader.stop()
        self.close_after_flush = True

    def connection_lost(self) -> None:
        self._release_all()
        self.state = CLOSED
        self._reader.stop()

    def _release_all(self) -> None:
        self.flow.forget_credit()
        channels = list(self.channels.values())
        self.channels.clear()
        for channel in channels:
            channel.release()
        if self.vhost is not None:
            for queue in list(self.exclusive_queues):
                self.vhost.remove_queue(queue)
        self.exclusive_queues.clear()
        self.broker.connections.discard(self)


def _ids(method) -> tuple[int, int]:
    return method.index >> 16, method.index & 0xFFFF

