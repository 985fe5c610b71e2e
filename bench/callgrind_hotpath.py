"""The hot path's CPU cost in instructions, for comparing two versions of
the code on a noisy shared machine (instruction counts do not depend on
what else runs).

    valgrind --tool=callgrind --callgrind-out-file=out.%p \\
        python -m bench.callgrind_hotpath broker --scenario deliver_ack --n 20000

runs the broker in this process (the one valgrind measures) and a client
in a child process (not measured: valgrind follows no children by
default), then stops.  Scenarios:

- idle: connect, declare a queue, close (what every other row includes);
- deliver_ack: a consumer (prefetch 200) acknowledging each delivery with
  its own basic.ack while a second channel publishes N transient messages;
- confirms: N transient messages published in confirm mode to a queue
  with no consumer, every confirm awaited;
- confirms_persistent: the same with persistent messages to a durable
  queue (confirms wait for the store's fsync: its group commits depend on
  timing, so this row varies more from run to run).

Subtract the idle row from the others to see the cost of N messages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys

from pamqp import commands as spec

_HEADER = struct.Struct(">BHI")
_IDS = struct.Struct(">HH")
_TAG = struct.Struct(">Q")
QUEUE = "callgrind-hotpath"
CHUNK = 500  # publishes written at once
BODY = b"x" * 100


async def _broker(scenario: str, count: int) -> int:
    from amqp_server.broker.timers import Timers
    from amqp_server.embed import EmbeddedBroker

    # The periodic work (resource checks, ack deadlines, the expiry reaper)
    # runs once a second of wall time, which valgrind stretches by some
    # 50 times and unevenly: off, so that the count depends on the work
    # done and not on how long it took.
    Timers.call_every = lambda self, seconds, callback: None  # type: ignore[method-assign]
    broker = EmbeddedBroker(port=0, management_port=-1)
    await broker.start()
    try:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.callgrind_hotpath", "client", "--scenario", scenario,
            "--n", str(count), "--port", str(broker.port),
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        return await asyncio.wait_for(child.wait(), 3600)
    finally:
        await broker.stop()


async def _client(scenario: str, count: int, port: int) -> None:
    from amqp_server.wire import frames
    from amqp_server.wire.methods import make
    from bench.client import BenchConnection, connect, encoded_publish

    class SingleAcks(BenchConnection):
        """Acknowledges every delivery with its own basic.ack, as a client
        acking in its callback does; one write per read."""

        def data_received(self, data: bytes) -> None:
            before = self.deliveries
            first = self.last_tag
            super().data_received(data)
            if self.deliveries > before and self.transport is not None:
                self.transport.write(b"".join(
                    frames.method_frame(1, make(spec.Basic.Ack, delivery_tag=tag))
                    for tag in range(first + 1, self.last_tag + 1)))
                self.acked_upto = self.last_tag
                if self.deliveries >= count:
                    done.set()

    done = asyncio.Event()
    conn = await connect(f"amqp://guest:guest@127.0.0.1:{port}/", SingleAcks)
    await conn.open_channel(1)
    durable = scenario == "confirms_persistent"
    await conn.call(1, make(spec.Queue.Declare, queue=QUEUE, durable=durable),
                    spec.Queue.DeclareOk)
    if scenario == "deliver_ack":
        await conn.open_channel(2)
        await conn.call(1, make(spec.Basic.Qos, prefetch_count=200), spec.Basic.QosOk)
        await conn.call(1, make(spec.Basic.Consume, queue=QUEUE), spec.Basic.ConsumeOk)
        chunk = encoded_publish(2, "", QUEUE, BODY, CHUNK)
        for _ in range(count // CHUNK):
            conn.transport.write(chunk)
            await conn.drain()
        await asyncio.wait_for(done.wait(), 3600)
    elif scenario in ("confirms", "confirms_persistent"):
        await conn.call(1, make(spec.Confirm.Select), spec.Confirm.SelectOk)
        # property flags with delivery-mode set, then delivery-mode 2
        properties = b"\x10\x00\x02" if durable else b"\x00\x00"
        chunk = encoded_publish(1, "", QUEUE, BODY, CHUNK, properties)
        for sent in range(CHUNK, count + 1, CHUNK):
            conn.transport.write(chunk)
            await conn.drain()
            while conn.confirmed < sent - 2 * CHUNK:
                conn.confirm_event.clear()
                await asyncio.wait_for(conn.confirm_event.wait(), 3600)
        while conn.confirmed < count:
            conn.confirm_event.clear()
            await asyncio.wait_for(conn.confirm_event.wait(), 3600)
    await conn.call(1, make(spec.Queue.Delete, queue=QUEUE), spec.Queue.DeleteOk)
    await conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=("broker", "client"))
    parser.add_argument("--scenario", default="deliver_ack",
                        choices=("idle", "deliver_ack", "confirms", "confirms_persistent"))
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    if args.role == "broker":
        return asyncio.run(_broker(args.scenario, args.n))
    asyncio.run(_client(args.scenario, args.n, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
