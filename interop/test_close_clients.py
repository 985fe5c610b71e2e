"""A close with a reason ends cleanly with pika and aio-pika: the client
hears it as its own close (never as a lost connection), pending calls are
cancelled, and the client closes the socket the broker left it, which the
broker sees at once (not after its close timeout).  The shapes are those of
aio-pika's own suite (a close with a reason awaited on the closing future,
a close that cancels an RPC's pending calls, a queue iterator cancelled
before the close)."""

from __future__ import annotations

import asyncio

import aio_pika
import aiormq
import pika
import pytest
from aio_pika.patterns import RPC
from pika.exceptions import ConnectionClosedByClient

from .waiting import wait_for


async def no_connections_left(broker, seconds: float = 5.0) -> bool:
    """The broker has seen every client socket closed, within `seconds`
    (its close timeout is 30 s: a client left waiting would show)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while broker.server.protocols and loop.time() < deadline:
        await asyncio.sleep(0.02)
    return not broker.server.protocols


# ---- pika -----------------------------------------------------------------

def test_pika_hears_the_reason_it_closed_with(broker):
    seen = []

    def on_open(connection):
        connection.close(reply_code=200, reply_text="worker done")

    def on_close(connection, reason):
        seen.append(reason)
        connection.ioloop.stop()

    connection = pika.SelectConnection(pika.URLParameters(broker.url),
                                       on_open_callback=on_open, on_close_callback=on_close)
    connection.ioloop.call_later(10, connection.ioloop.stop)
    connection.ioloop.start()
    (reason,) = seen
    assert isinstance(reason, ConnectionClosedByClient)
    assert (reason.reply_code, reason.reply_text) == (200, "worker done")
    assert wait_for(lambda: not broker.server.protocols)


def test_pika_blocking_close_with_a_reason_ends_cleanly(broker):
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare("", exclusive=True)
    channel.close(reply_code=200, reply_text="channel done")
    assert channel.is_closed and connection.is_open
    connection.channel().queue_declare("", exclusive=True)  # the connection goes on
    connection.close(reply_code=200, reply_text="worker done")
    assert connection.is_closed
    assert wait_for(lambda: not broker.server.protocols)


# ---- aio-pika -------------------------------------------------------------

class WorkerDone(Exception):
    pass


# aiormq's close with a reason (aio-pika's close(exc)) settles its closing
# future twice over, once with the reason and once with None when its reader
# ends on close-ok; which comes first is a race inside the client (a close-ok
# read before its writer has drained the close loses the reason: against
# RabbitMQ 3.10.8 too, in about a fifth of the closes).  A lost connection
# is never a way for such a close to end.
ENDINGS = (None, WorkerDone)


async def test_aio_pika_close_with_a_reason_ends_cleanly(broker):
    connection = await aio_pika.connect(broker.url)
    await connection.channel()
    heard = []
    connection.close_callbacks.add(lambda _, exc: heard.append(exc))
    await connection.close(WorkerDone("worker done"))
    await asyncio.wait_for(connection.closed(), 5)
    (exc,) = heard
    assert exc is None or isinstance(exc, WorkerDone), exc
    assert await no_connections_left(broker)


async def test_aiormq_closing_future_settles_without_a_lost_connection(broker):
    connection = await aiormq.connect(broker.url)
    channel = await connection.channel()
    await channel.queue_declare(exclusive=True)
    closing = connection.closing
    connection.set_close_reason(200, "worker done")
    await connection.close(WorkerDone("worker done"))
    try:
        ending = await asyncio.wait_for(closing, 5)
    except WorkerDone:
        ending = WorkerDone
    assert ending in ENDINGS
    assert await no_connections_left(broker)


async def test_aio_pika_close_cancels_pending_calls_and_ends_cleanly(broker):
    connection = await aio_pika.connect(broker.url)
    channel = await connection.channel()
    rpc = await RPC.create(channel, auto_delete=True)

    async def sleeper():
        await asyncio.sleep(60)

    await rpc.register("close.sleeper", sleeper, auto_delete=True)
    calls = [asyncio.create_task(rpc.call("close.sleeper")) for _ in range(10)]
    await asyncio.sleep(0.2)  # the calls are out, their replies pending
    await rpc.close()
    for call in calls:
        with pytest.raises(asyncio.CancelledError):
            await call
    await connection.close()
    await asyncio.wait_for(connection.closed(), 5)
    assert await no_connections_left(broker)


async def test_aio_pika_iterator_cancelled_then_connection_closed(broker):
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("", exclusive=True)
        iterator = queue.iterator()
        task = asyncio.create_task(iterator.__anext__())
        done, _ = await asyncio.wait({task}, timeout=0.5)
        assert not done
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await asyncio.wait_for(connection.closed(), 5)
    assert await no_connections_left(broker)
