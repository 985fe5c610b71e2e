"""An AMQP 0-9-1 connection as a state machine: bytes in, bytes out.

`receive_data` parses frames and acts on them; whatever the broker has to
say accumulates in an output buffer that `data_to_send` drains.  Deliveries
caused by other connections land in the same buffer and call the `wakeup`
hook so the I/O shell knows to flush.  Nothing here touches a socket or a
clock: the shell in `server.py` owns those and calls `heartbeat_tick`.

Handshake states, in order: the protocol header, connection.start-ok,
connection.tune-ok, connection.open, then `open`.  Once the broker has sent
connection.close it waits for close-ok and ignores everything else, as the
spec requires.
"""

from __future__ import annotations

import logging
import struct
import time
from itertools import repeat

from pamqp import commands as spec

from ..errors import (
    AMQPError,
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    INTERNAL_ERROR,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
    channel_error,
    command_invalid,
    frame_error,
    not_allowed,
)
from ..wire import frames
from ..wire.methods import MethodDecodeError, UnknownMethod, decode_method, make
from ..wire.properties import scan_properties
from ..wire.table import FieldTable, decode_table_body
from ..broker.message import HEADER_PREFIX, Message
from .channel import Channel
from .repeats import following_publishes, repeated_publishes

log = logging.getLogger("amqp_server.connection")

_FRAME_HEADER = struct.Struct(">BHI")
_PUBLISH_PREFIX = struct.Struct(">I")
_ACK_BODY = struct.Struct(">QB")
_BODY_SIZE = struct.Struct(">Q")
_PUBLISH_INDEX = (60 << 16) | 40
_ACK_INDEX = (60 << 16) | 80
_REJECT_INDEX = (60 << 16) | 90
_NACK_INDEX = (60 << 16) | 120
_SETTLE_INDEXES = frozenset((_ACK_INDEX, _REJECT_INDEX, _NACK_INDEX))
_TAG = struct.Struct(">Q")
_MIN_FRAME_MAX = 4096
# Deliveries stop being queued into the output buffer past this many bytes,
# so a consumer without prefetch cannot pull a whole queue into memory.
OUTPUT_HIGH_WATER = 1 << 20

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
        self.closing_channels: set[int] = set()
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
        self.writable = True
        self.close_after_flush = False
        self._leftover = b""
        self._out: list[bytes] = []
        self._out_size = 0
        self._in_receive = False
        self._starved = False
        self._confirming: list[Channel] = []
        self._received_since_tick = True
        self._sent_since_tick = False
        self._silent_ticks = 0
        self.mechanism = ""
        self._last_publish = b""
        self._last_fields = None
        self._last_header = b""
        self._last_properties = b""
        self.publishing = False  # has published: a resource alarm blocks it
        self.login_refusal: bytes | None = None
        self.blocked = False

    # ---- output --------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.state == CLOSED:
            return
        if not self._out and not self._in_receive:
            self._wakeup()
        self._out.append(data)
        self._out_size += len(data)

    def can_write(self) -> bool:
        if self.writable and self._out_size < OUTPUT_HIGH_WATER:
            return True
        self._starved = True
        return False

    def output_room(self) -> int:
        """Bytes that may still be queued for the peer before deliveries wait."""
        return OUTPUT_HIGH_WATER - self._out_size

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
        self._out_size = 0
        self._sent_since_tick = True
        return data

    def flushed(self) -> None:
        """The shell wrote our output; deliveries held back may go on."""
        if self._starved and self.writable and self.state == OPEN:
            self._starved = False
            self.redispatch()

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
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
            self._receive(data)
        except AMQPError as error:
            self.connection_error(error)
        except Exception:
            # A bug must cost this connection, never the broker.
            log.exception("internal error on connection from %s", self.peer_host)
            self.connection_error(AMQPError(INTERNAL_ERROR, "internal error"))
        finally:
            self._in_receive = False

    def _receive(self, data: bytes) -> None:
        if self._leftover:
            data = self._leftover + data
            self._leftover = b""
        if self.state == AWAIT_HEADER:
            if len(data) < 8:
                self._leftover = data
                return
            self._protocol_header(data[:8])
            data = data[8:]
            if self.state == CLOSED:
                return
        size_limit = self.frame_max
        end_of_data = len(data)
        pos = 0
        unpack_header = _FRAME_HEADER.unpack_from
        channels = self.channels
        while end_of_data - pos >= 7:
            frame_type, channel_number, size = unpack_header(data, pos)
            if size > size_limit:
                raise frame_error(
                    f"type {frame_type}, frame of {size} octets exceeds frame_max "
                    f"{size_limit}")
            end = pos + 7 + size
            if end >= end_of_data:
                break
            if data[end] != 0xCE:
                raise frame_error(f"type {frame_type}, invalid frame end marker {data[end]}")
            payload = data[pos + 7 : end]
            pos = end + 1
            if self.state == CLOSING:
                self._while_closing(frame_type, channel_number, payload)
                if self.state == CLOSED:
                    return
                continue
            channel = channels.get(channel_number)
            if frame_type == 1:
                if len(payload) < 4:
                    raise frame_error("method frame shorter than its ids")
                (index,) = _PUBLISH_PREFIX.unpack_from(payload, 0)
                if channel is not None and not channel.closing:
                    # Hot path: publish and ack skip the generic decoder.
                    if index == _PUBLISH_INDEX:
                        fused_end = self._fused_publish(channel, payload, data, pos,
                                                        end_of_data)
                        if fused_end:
                            pos = fused_end
                        else:
                            self._publish(channel, payload)
                        continue
                    if index in _SETTLE_INDEXES and size == 13:
                        tag, bits = _ACK_BODY.unpack_from(payload, 4)
                        if index == _ACK_INDEX and bits & 1:  # a multiple ack
                            self._on_channel(channel, channel.ack, tag, True, ids=(60, 80))
                            continue
                        if not (index == _NACK_INDEX and bits & 1):
                            # Single acks, rejects or nacks as clients send
                            # them, one per delivery: those read back to back
                            # with the same method and flags go in one step.
                            head = data[pos - 21:pos - 10]
                            tags = [tag]
                            while (pos + 21 <= end_of_data and data[pos + 19] == bits
                                   and data[pos + 20] == 0xCE and data.startswith(head, pos)):
                                tags.append(_TAG.unpack_from(data, pos + 11)[0])
                                pos += 21
                            requeue = bool(bits & (1 if index == _REJECT_INDEX else 2))
                            self._on_channel(channel, channel.settle_each, index & 0xFFFF,
                                             tags, requeue)
                            continue
                self._method_frame(channel_number, channel, payload)
            elif frame_type == 2 or frame_type == 3:
                if channel_number == 0:
                    raise AMQPError(UNEXPECTED_FRAME, "content frame on channel 0")
                if channel is None:
                    if channel_number in self.closing_channels:
                        continue
                    raise channel_error("expected 'channel.open'")
                if channel.closing:
                    continue
                if frame_type == 2:
                    self._on_channel(channel, channel.content_header, payload)
                else:
                    self._on_channel(channel, channel.content_body, payload)
            elif frame_type == 8:
                if channel_number != 0:
                    raise AMQPError(UNEXPECTED_FRAME, "heartbeat frame on a non-zero channel")
            else:
                raise frame_error(f"unknown frame type {frame_type}")
            if self.state == CLOSED:
                return
        if pos < end_of_data:
            self._leftover = data[pos:]

    def _publish(self, channel: Channel, payload: bytes) -> None:
        fields = _publish_fields(payload)
        if fields is None:
            raise AMQPError(SYNTAX_ERROR, "malformed basic.publish")
        exchange, routing_key, route, bits, _ = fields
        self.publishing = True
        self._on_channel(channel, channel.start_publish, exchange, routing_key, route,
                         bool(bits & 1), bool(bits & 2), ids=(60, 40))

    def block(self, reason: str) -> None:
        """A resource alarm: tell the client (if it asked to know) that it is
        blocked; the shell stops reading from it."""
        self.blocked = True
        if self.capabilities.get("connection.blocked") and self.state == OPEN:
            self._send_method(0, make(spec.Connection.Blocked, reason=reason))

    def unblock(self) -> None:
        self.blocked = False
        if self.capabilities.get("connection.blocked") and self.state == OPEN:
            self._send_method(0, make(spec.Connection.Unblocked))

    def _fused_publish(self, channel: Channel, payload: bytes, data: bytes, pos: int,
                       end_of_data: int) -> int:
        """The common case in one step: publish, header and a single body frame
        all in this read, with the publishes right after it that repeat it
        but for their bodies.
        Returns where the next frame starts, or 0 to let the general path
        (which also reports every error) handle it."""
        self.publishing = True
        if channel._publish is not None or channel.tx is not None:
            return 0
        if pos + 7 > end_of_data:
            return 0
        frame_type, number, size = _FRAME_HEADER.unpack_from(data, pos)
        header_end = pos + 7 + size
        if (frame_type != 2 or number != channel.number or size < 14
                or header_end >= end_of_data or data[header_end] != 0xCE
                or size > self.frame_max):
            return 0
        (body_size,) = _BODY_SIZE.unpack_from(data, pos + 11)
        next_pos = header_end + 1
        if body_size:
            if next_pos + 7 > end_of_data:
                return 0
            frame_type, number, size = _FRAME_HEADER.unpack_from(data, next_pos)
            body_end = next_pos + 7 + size
            if (frame_type != 3 or number != channel.number or size != body_size
                    or size > self.frame_max or body_end >= end_of_data
                    or data[body_end] != 0xCE):
                return 0
            body = data[next_pos + 7 : body_end]
            next_pos = body_end + 1
        else:
            body = b""
        if payload == self._last_publish:
            # Same exchange and key as the previous publish: share its
            # strings, which also keeps queued messages small.
            fields = self._last_fields
        else:
            fields = _publish_fields(payload)
            self._last_publish = payload
            self._last_fields = fields
        if (fields is None or fields[3] & 2 or body_size > self.config.max_message_size
                or data[pos + 7 : pos + 9] != b"\x00\x3c"):
            return 0  # malformed, immediate, oversized or not class 60: the slow path says why
        exchange, routing_key, route, bits, routing_keys = fields
        header = data[pos + 7 : header_end]
        layout = None  # where its headers and expiration are, once scanned
        if header == self._last_header:
            # Same properties as the previous publish: queued messages share
            # one header object (about 50 bytes each for a deep queue), and
            # they have been checked already.
            header = self._last_header
            repeating = True
        else:
            properties = header[HEADER_PREFIX:]
            repeating = properties == self._last_properties  # another body size
            if not repeating:
                try:
                    layout = scan_properties(header, HEADER_PREFIX)
                except ValueError:
                    return 0  # the slow path says what is wrong
                self._last_properties = properties
            self._last_header = header
        message = Message(exchange, routing_key, route, header, body, routing_keys)
        run = None
        # The next frame repeats this basic.publish: a run.  Publishes that
        # repeat the properties too are found by one comparison each.
        if body_size and data.startswith(payload, next_pos + 7):
            largest = min(self.frame_max, self.config.max_message_size)
            start = pos - 8 - len(payload)
            layouts = None
            if repeating:
                headers, bodies, next_pos = repeated_publishes(
                    data, start, pos, header, next_pos, end_of_data, largest)
            else:
                headers, layouts, bodies, next_pos = following_publishes(
                    data, data[start:pos], header, layout, next_pos, end_of_data,
                    channel.number, largest)
                if headers:
                    self._last_header = headers[-1]
                    self._last_properties = headers[-1][HEADER_PREFIX:]
                    layouts.insert(0, layout)
            if bodies:
                run = [message, *map(Message, repeat(exchange), repeat(routing_key),
                                     repeat(route), headers, bodies, repeat(routing_keys))]
        try:
            if run is None:
                channel.publish(message, bool(bits & 1), layout)
            else:
                channel.publish_run(run, bool(bits & 1), layouts)
        except AMQPError as error:
            if error.closes_connection:
                raise
            self.channel_error(channel, error.for_method(60, 40))
        return next_pos

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

    def _method_frame(self, number: int, channel: Channel | None, payload: bytes) -> None:
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
        if isinstance(method, spec.Channel.Open):
            if channel is not None or number in self.closing_channels:
                raise channel_error("second 'channel.open' seen")
            # RabbitMQ counts open channels; their numbers may be any.
            if len(self.channels) >= self.channel_max:
                raise not_allowed(
                    f"number of channels opened ({len(self.channels)}) has reached the "
                    f"negotiated channel_max ({self.channel_max})")
            self.channels[number] = Channel(self, number)
            self.broker.counters.channels_opened += 1
            self._send_method(number, make(spec.Channel.OpenOk))
            return
        if isinstance(method, spec.Channel.CloseOk):
            self.closing_channels.discard(number)
            return
        if channel is None:
            if number in self.closing_channels:
                return  # discard everything until close-ok (spec 4.2.6)
            raise channel_error("expected 'channel.open'")
        if isinstance(method, spec.Channel.Close):
            channel.release()
            del self.channels[number]
            self._send_method(number, make(spec.Channel.CloseOk))
            return
        try:
            channel.handle_method(method)
        except AMQPError as error:
            error.for_method(*_ids(method))
            if error.closes_connection:
                raise
            self.channel_error(channel, error)

    def channel_error(self, channel: Channel, error: AMQPError) -> None:
        """Close one channel with a soft error; the connection carries on."""
        if self.channels.get(channel.number) is not channel:
            return
        channel.release()
        del self.channels[channel.number]
        self.closing_channels.add(channel.number)
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
        self.state = CLOSING
        self._send_method(0, make(
            spec.Connection.Close, reply_code=error.code, reply_text=error.reply_text,
            class_id=error.class_id, method_id=error.method_id))

    def _while_closing(self, frame_type: int, channel: int, payload: bytes) -> None:
        if frame_type != 1 or channel != 0:
            return
        try:
            method = decode_method(payload)
        except MethodDecodeError:
            return
        if isinstance(method, spec.Connection.CloseOk):
            self.close_transport()
        elif isinstance(method, spec.Connection.Close):
            self._send_method(0, make(spec.Connection.CloseOk))
            self.close_transport()

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
            "version": _version(),
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
            self._send_method(0, make(spec.Connection.CloseOk))
            self._release_all()
            self.close_transport()
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
        username = _text(username)
        password = _text(password)
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
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat
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

    def heartbeat_tick(self, reading: bool = True) -> None:
        """Called every heartbeat/2 seconds by the shell, which says whether
        it reads from the peer."""
        if self.state == CLOSED or not self.heartbeat:
            return
        if self._received_since_tick or not reading:
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
        self.close_after_flush = True

    def connection_lost(self) -> None:
        self._release_all()
        self.state = CLOSED

    def _release_all(self) -> None:
        channels = list(self.channels.values())
        self.channels.clear()
        for channel in channels:
            channel.release()
        if self.vhost is not None:
            for queue in list(self.exclusive_queues):
                self.vhost.remove_queue(queue)
        self.exclusive_queues.clear()
        self.broker.connections.discard(self)


def _publish_fields(payload: bytes) -> tuple[str, str, bytes, int, tuple] | None:
    """basic.publish read by hand: (exchange, routing key, the two encoded
    shortstrs as they stand, flag bits, the routing keys tuple), or None
    when truncated."""
    try:
        # ticket (2 octets), exchange and routing key shortstrs, bits
        ex_end = 7 + payload[6]
        rk_end = ex_end + 1 + payload[ex_end]
        bits = payload[rk_end]
    except IndexError:
        return None
    routing_key = payload[ex_end + 1 : rk_end].decode("utf-8", "surrogateescape")
    return (payload[7:ex_end].decode("utf-8", "surrogateescape"), routing_key,
            payload[6:rk_end], bits, (routing_key,))


def _ids(method) -> tuple[int, int]:
    return method.index >> 16, method.index & 0xFFFF


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _version() -> str:
    from .. import __version__
    return __version__

