"""Fairness between connections on one event loop: a connection's input is
used a share at a time, one share per turn of the loop.

uvloop reads a socket in chunks of 256 KB, and as long as they come full
reads it again (up to 32 times) before it looks at any other socket or
runs anything scheduled: a publisher that writes faster than the broker
works would keep the loop to itself, and the consumers' acks and their
deliveries' flushes would wait behind whole megabytes of publishes.  Here
a connection is read one read at a time, at most READ_SHARE bytes of it
used per turn of the loop: the first share at once, the rest one share
per turn (`call_soon`), the socket not read meanwhile, so every other
connection's reads, flushes and timers come in between, as LavinMQ's
reader yields every 8,192 frames (client.cr, read_loop).

`ReadShares` stands between a connection's flow control (protocol/flow.py)
and its transport: the flow pauses and resumes reading through it (it has
the transport's pause_reading and resume_reading), and a resumed flow
goes on with the bytes held back before the socket is read again.  What a
share costs is bounded by its bytes; what it leaves behind (deliveries to
other connections) is bounded by their output limits.
"""

from __future__ import annotations

from collections.abc import Callable

# Bytes of input used in one turn of the loop: uvloop's read, a few
# hundred to a few thousand publishes (at most a few milliseconds).
# Measured against 64 and 128 KB with lavinmqperf's three shapes: the same
# for the consumer of a flood, and more for a publisher that waits for its
# confirms every 1,000 (the fewer turns such a burst takes, the fewer
# flushes of the store it waits for).
READ_SHARE = 256 << 10


class ReadShares:
    __slots__ = ("_transport", "_call_soon", "_use", "_held", "_waiting", "_scheduled",
                 "_flow_reading", "_socket_reading")

    def __init__(self, transport, call_soon: Callable, use: Callable[[bytes], None]) -> None:
        self._transport = transport
        self._call_soon = call_soon
        self._use = use  # what the bytes are for: the connection reads them
        self._held = b""  # read, waiting for their turn
        self._waiting = False  # a full share was used: the socket waits for the next turn
        self._scheduled = False
        self._flow_reading = True  # the connection's flow lets it be read
        self._socket_reading = True

    def received(self, data: bytes) -> None:
        """A read: its first share now, the rest in later turns."""
        if not self._waiting and len(data) < READ_SHARE:
            self._use(data)  # the usual read: nothing held, nothing to hold
            return
        if self._waiting:  # a transport that delivers a read after its pause (TLS)
            self._held += data
            return
        self._use(self._share(data))

    def _share(self, data: bytes) -> bytes:
        """What of `data` is used now; the rest is held.  A full share
        (uvloop's whole read buffer) means more is likely there: the
        socket then waits for the next turn as well."""
        if len(data) >= READ_SHARE:
            self._held = data[READ_SHARE:]
            data = data[:READ_SHARE]
            self._waiting = True
            self._schedule()
        else:
            self._held = b""
            self._waiting = False
        self._sync()
        return data

    # ---- what the flow calls (a transport's reading interface) ----------

    def pause_reading(self) -> None:
        self._flow_reading = False
        self._sync()

    def resume_reading(self) -> None:
        self._flow_reading = True
        if self._waiting:
            self._schedule()
        self._sync()

    # ---- turns ---------------------------------------------------------

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._call_soon(self._next_share)

    def _next_share(self) -> None:
        self._scheduled = False
        if not self._flow_reading or self._transport.is_closing():
            return  # the flow resumes it
        if self._held:
            self._use(self._share(self._held))
        else:
            self._waiting = False
            self._sync()

    def _sync(self) -> None:
        """The socket is read while the flow allows it and no share waits."""
        should = self._flow_reading and not self._waiting
        if should != self._socket_reading:
            self._socket_reading = should
            if should:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()
