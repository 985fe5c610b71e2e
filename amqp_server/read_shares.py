"""Fairness between connections on one event loop: a connection's input is
used a share at a time, one share per turn of the loop.

uvloop reads a socket in chunks of 256 KB, and as long as they come full
reads it again (up to 32 times) before it looks at any other socket or
runs anything scheduled: a publisher that writes faster than the broker
works would keep the loop to itself, and the consumers' acks and their
deliveries' flushes would wait behind whole megabytes of publishes.  Here
a read is used READ_SHARE bytes at a time: the first share at once, the
rest one share per turn (`call_soon`), the socket not read meanwhile, so
every other connection's reads, flushes and timers come in between, as
LavinMQ's reader yields every 8,192 frames (client.cr, read_loop).

`ReadShares` stands between a connection's flow control (protocol/flow.py)
and its transport: the flow pauses and resumes reading through it (it has
the transport's pause_reading and resume_reading), and a resumed flow
goes on with the bytes held back before the socket is read again.  What a
share costs is bounded by its bytes; what it leaves behind (deliveries to
other connections) is bounded by their output limits.
"""

from __future__ import annotations

from collections.abc import Callable

# Bytes of input used in one turn of the loop: a few hundred to a few
# thousand publishes.
READ_SHARE = 64 << 10


class ReadShares:
    __slots__ = ("_transport", "_call_soon", "_use", "_held", "_scheduled",
                 "_flow_reading", "_socket_reading")

    def __init__(self, transport, call_soon: Callable, use: Callable[[bytes], None]) -> None:
        self._transport = transport
        self._call_soon = call_soon
        self._use = use  # what the bytes are for: the connection reads them
        self._held = b""  # read, waiting for their turn
        self._scheduled = False
        self._flow_reading = True  # the connection's flow lets it be read
        self._socket_reading = True

    def received(self, data: bytes) -> None:
        """A read: its first share now, the rest in later turns."""
        if self._held:  # a transport that delivers a read after its pause (TLS)
            self._held += data
            return
        if len(data) > READ_SHARE:
            self._held = data[READ_SHARE:]
            data = data[:READ_SHARE]
            self._schedule()
            self._sync()
        self._use(data)

    # ---- what the flow calls (a transport's reading interface) ----------

    def pause_reading(self) -> None:
        self._flow_reading = False
        self._sync()

    def resume_reading(self) -> None:
        self._flow_reading = True
        if self._held:
            self._schedule()
        self._sync()

    # ---- turns ---------------------------------------------------------

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._call_soon(self._next_share)

    def _next_share(self) -> None:
        self._scheduled = False
        if not self._flow_reading or not self._held or self._transport.is_closing():
            return  # the flow resumes it, or nothing is left
        data = self._held
        if len(data) > READ_SHARE:
            self._held = data[READ_SHARE:]
            data = data[:READ_SHARE]
            self._schedule()
        else:
            self._held = b""
            self._sync()
        self._use(data)

    def _sync(self) -> None:
        """The socket is read while the flow allows it and nothing is held."""
        should = self._flow_reading and not self._held
        if should != self._socket_reading:
            self._socket_reading = should
            if should:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()
