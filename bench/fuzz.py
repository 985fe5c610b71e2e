"""python -m bench.fuzz: random and mutated frames into the connection state machine.

    python -m bench.fuzz --inputs 1000000            # seeded mutations, sans-IO
    python -m bench.fuzz --inputs 20000 --socket     # the same over real TCP
    python -m bench.fuzz --atheris -- -runs=1000000  # coverage-guided, when installed
    python -m bench.fuzz --keep problems/            # each failing input saved whole

An input is a string of valid frames (every method a client sends, content
with every property, dead-letter and quorum arguments) that is then bit-
flipped, overwritten, cut, spliced and re-sized, and fed in random-sized reads
to a connection that has finished the handshake (or, for a share of
inputs, to one that has not).  After each input, it must hold that:

  - no exception escaped the connection, and its catch-all for bugs
    (internal error, 541) was never taken;
  - everything the broker wrote parses as whole AMQP frames;
  - the connection released all it held, and every 1000 inputs a polite
    client on the same broker still publishes and gets its message.

With --socket the inputs go to a broker on a loopback port; afterwards its
connection and task counts must be back where they started and a pika
client must still publish and get.  The run stops after --inputs or
--seconds, whichever comes first, and prints how many inputs it ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

from pamqp import commands as spec, frame as pamqp_frame
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.protocol.connection import Connection
from amqp_server.wire import frames
from amqp_server.wire.methods import make
from amqp_server.wire.table import FieldTable

# The broker is rebuilt after this many inputs, so what fuzzed inputs declare
# does not pile up over a million of them.
BROKER_LIFETIME = 2000
INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xCE, 0xFE, 0xFF)


def _m(channel: int, method) -> bytes:
    return pamqp_frame.marshal(method, channel)


def _content(channel: int, body: bytes, **properties) -> bytes:
    header = ContentHeader(0, len(body), spec.Basic.Properties(**properties))
    return pamqp_frame.marshal(header, channel) + frames.frame(3, channel, body)


def handshake(capabilities: bool = True) -> bytes:
    props = FieldTable({"capabilities": FieldTable(
        {"authentication_failure_close": True, "publisher_confirms": True,
         "consumer_cancel_notify": True, "connection.blocked": True})} if capabilities else {})
    return (frames.PROTOCOL_HEADER
            + frames.method_frame(0, make(spec.Connection.StartOk, client_properties=props,
                                          mechanism="PLAIN", response=b"\x00guest\x00guest",
                                          locale="en_US"))
            + frames.method_frame(0, make(spec.Connection.TuneOk, channel_max=8,
                                          frame_max=8192, heartbeat=0))
            + frames.method_frame(0, make(spec.Connection.Open, virtual_host="/")))


OPENED = handshake() + _m(1, spec.Channel.Open())

# Valid frames a client sends once the connection is open, channel 1 open.
SEEDS: list[bytes] = [
    _m(1, spec.Queue.Declare(queue="q")),
    _m(1, spec.Queue.Declare(queue="dl", arguments={
        "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead",
        "x-message-ttl": 1, "x-max-length": 2, "x-overflow": "reject-publish-dlx"})),
    _m(1, spec.Queue.Declare(queue="qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 1,
        "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
        "x-dead-letter-exchange": ""})),
    _m(1, spec.Queue.Declare(queue="art", arguments={
        "x-max-delivery-attempts": 2, "x-redelivery-delay": 10,
        "x-redelivery-delay-multiplier": 2, "x-expiry-address": "EXP",
        "x-qpid-maximum-delivery-count": 1, "x-qpid-dlq-enabled": True})),
    _m(1, spec.Queue.Declare(queue="", exclusive=True, auto_delete=True)),
    _m(1, spec.Queue.Declare(queue="q", passive=True)),
    _m(1, spec.Exchange.Declare(exchange="dlx", exchange_type="topic")),
    _m(1, spec.Exchange.Declare(exchange="h", exchange_type="headers",
                                arguments={"alternate-exchange": "dlx"})),
    _m(1, spec.Queue.Bind(queue="q", exchange="dlx", routing_key="#")),
    _m(1, spec.Queue.Bind(queue="q", exchange="h", arguments={"x-match": "any", "a": 1})),
    _m(1, spec.Exchange.Bind(destination="dlx", source="amq.fanout")),
    _m(1, spec.Queue.Unbind(queue="q", exchange="dlx", routing_key="#")),
    _m(1, spec.Queue.Purge(queue="q")),
    _m(1, spec.Queue.Delete(queue="q", if_unused=True)),
    _m(1, spec.Exchange.Delete(exchange="h")),
    _m(1, spec.Basic.Publish(exchange="", routing_key="q", mandatory=True))
    + _content(1, b"body", content_type="text/plain", delivery_mode=2, priority=3,
               expiration="5", message_id="m1",
               headers={"x-death": [{"count": 1, "reason": "rejected", "queue": "q"}],
                        "CC": ["dl"], "BCC": ["art"], "n": 1, "f": 1.5}),
    # A run: the same publish and properties, bodies of two sizes.
    b"".join(_m(1, spec.Basic.Publish(exchange="", routing_key="q"))
             + _content(1, body, content_type="text/plain") for body in (b"a", b"bb", b"a", b"a")),
    _m(1, spec.Basic.Publish(exchange="dlx", routing_key="dead")) + _content(1, b""),
    _m(1, spec.Basic.Publish(exchange="", routing_key="dl")) + _content(1, b"x" * 9000),
    _m(1, spec.Basic.Qos(prefetch_count=1)),
    _m(1, spec.Basic.Consume(queue="q", consumer_tag="c")),
    _m(1, spec.Basic.Consume(queue="dl", no_ack=True, exclusive=True)),
    _m(1, spec.Basic.Cancel(consumer_tag="c")),
    _m(1, spec.Basic.Get(queue="q")),
    _m(1, spec.Basic.Ack(delivery_tag=1)),
    _m(1, spec.Basic.Ack(delivery_tag=0, multiple=True)),
    _m(1, spec.Basic.Nack(delivery_tag=1, requeue=False)),
    _m(1, spec.Basic.Reject(delivery_tag=2, requeue=True)),
    _m(1, spec.Basic.Recover(requeue=True)),
    _m(1, spec.Confirm.Select()),
    _m(1, spec.Tx.Select()),
    _m(1, spec.Tx.Commit()),
    _m(1, spec.Tx.Rollback()),
    _m(1, spec.Channel.Flow(active=False)),
    _m(1, spec.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)),
    _m(1, spec.Channel.CloseOk()),
    _m(2, spec.Channel.Open()),
    _m(0, spec.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)),
    _m(0, spec.Connection.CloseOk()),
    pamqp_frame.marshal(Heartbeat(), 0),
]

# A polite client's turn: its own queue, a publish and a get that must
# return the body "bystander".
BYSTANDER = (_m(1, spec.Queue.Declare(queue="bystander.q", exclusive=True))
             + _m(1, spec.Basic.Publish(exchange="", routing_key="bystander.q"))
             + _content(1, b"bystander")
             + _m(1, spec.Basic.Get(queue="bystander.q", no_ack=True)))

PRE_HANDSHAKE_SEEDS: list[bytes] = [
    frames.PROTOCOL_HEADER,
    handshake(),
    handshake(capabilities=False),
    frames.PROTOCOL_HEADER + frames.method_frame(0, make(
        spec.Connection.StartOk, mechanism="AMQPLAIN", response=b"\x00\x00\x00\x05\x05LOGIN",
        locale="en_US")),
    frames.PROTOCOL_HEADER + frames.method_frame(0, make(
        spec.Connection.StartOk, mechanism="PLAIN", response=b"\x00guest\x00bad",
        locale="en_US")),
]


# ---- mutation -------------------------------------------------------------------------

def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to six random edits of `data`."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(8)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip a bit
            pos = min(pos, len(buf) - 1)
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # an interesting byte
            buf[min(pos, len(buf) - 1)] = rng.choice(INTERESTING_BYTES)
        elif op == 2:  # insert random bytes
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 3:  # delete a run
            del buf[pos:pos + rng.randint(1, 16)]
        elif op == 4:  # cut the tail
            del buf[pos:]
        elif op == 5 and len(buf) >= 7:  # a frame header's size field set to anything
            at = min(pos, len(buf) - 7)
            buf[at + 3:at + 7] = struct.pack(">I", rng.choice(
                (0, 1, 7, 4096, 8192, 131072, 2**31, 2**32 - 1, rng.randrange(2**32))))
        elif op == 6:  # a 16/32/64-bit field set to an edge value
            width = rng.choice((2, 4, 8))
            at = min(pos, max(0, len(buf) - width))
            buf[at:at + width] = rng.choice((b"\x00", b"\xff", b"\x7f", b"\x80")) * width
        else:  # splice in another seed
            buf[pos:pos] = rng.choice(SEEDS)
    return bytes(buf)


def make_input(rng: random.Random) -> tuple[bool, bytes]:
    """(starts with the handshake done?, the bytes)."""
    if rng.random() < 0.1:
        return False, mutate(rng.choice(PRE_HANDSHAKE_SEEDS), rng)
    if rng.random() < 0.05:
        return True, rng.randbytes(rng.randint(1, 256))
    data = b"".join(rng.choice(SEEDS) for _ in range(rng.randint(1, 8)))
    return True, mutate(data, rng) if rng.random() < 0.9 else data


def chunks(data: bytes, rng: random.Random) -> list[bytes]:
    """The bytes as the socket might hand them over: in pieces."""
    if rng.random() < 0.5:
        return [data]
    pieces, pos = [], 0
    while pos < len(data):
        size = rng.randint(1, 64)
        pieces.append(data[pos:pos + size])
        pos += size
    return pieces


# ---- the checks -----------------------------------------------------------------------

class InternalErrors(logging.Handler):
    """Counts the connection's catch-all (a bug that cost a connection) while
    attached; everything else the broker logs is silenced, since a million
    refusals are not worth printing."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)[-3:])
        self.records.append(record)

    def attach(self) -> InternalErrors:
        watched = logging.getLogger("amqp_server.connection")
        watched.addHandler(self)
        watched.setLevel(logging.ERROR)  # the catch-all logs at ERROR; refusals below
        watched.propagate = False
        logging.getLogger("amqp_server").setLevel(logging.CRITICAL)
        return self

    def detach(self) -> None:
        watched = logging.getLogger("amqp_server.connection")
        watched.removeHandler(self)
        watched.setLevel(logging.NOTSET)
        watched.propagate = True
        logging.getLogger("amqp_server").setLevel(logging.NOTSET)

    def problems(self) -> list[str]:
        """The catch-all's records since the last call, as problem texts."""
        found = [f"internal error: {record.getMessage()} {record.exc_text or ''}"
                 for record in self.records]
        self.records.clear()
        return found


def frames_problem(out: bytes) -> str | None:
    """Why `out` is not a sequence of whole frames, or None."""
    pos = 0
    if out.startswith(b"AMQP"):
        pos = 8
    while pos < len(out):
        if len(out) - pos < 8:
            return f"trailing {len(out) - pos} bytes"
        frame_type, _, size = struct.unpack_from(">BHI", out, pos)
        end = pos + 7 + size
        if frame_type not in (1, 2, 3, 8) or end >= len(out) or out[end] != 0xCE:
            return f"malformed output frame at {pos}"
        pos = end + 1
    return None


class SansIOFuzzer:
    """Feeds inputs to fresh connections on one broker; `run_one` returns
    what went wrong, or None."""

    def __init__(self) -> None:
        self.errors = InternalErrors().attach()
        self.broker = Broker(BrokerConfig(login_failure_delay=0))
        self.inputs = 0

    def close(self) -> None:
        self.errors.detach()

    def bystander_problem(self) -> str | None:
        """A well-behaved client on the same broker still declares, publishes
        and gets its message back after whatever the inputs did."""
        conn = Connection(self.broker)
        conn.receive_data(OPENED + BYSTANDER)
        out = conn.data_to_send()
        conn.connection_lost()
        return None if out.endswith(b"bystander" + frames.FRAME_END_BYTE) else (
            f"a bystander's publish and get failed: {out[-200:]!r}")

    def run_one(self, opened: bool, pieces: list[bytes]) -> str | None:
        self.inputs += 1
        if self.inputs % BROKER_LIFETIME == 0:
            self.broker = Broker(BrokerConfig(login_failure_delay=0))
        conn = Connection(self.broker)
        out = []
        try:
            if opened:
                conn.receive_data(OPENED)
            for piece in pieces:
                conn.receive_data(piece)
                out.append(conn.data_to_send())
                conn.flushed()
            conn.heartbeat_tick()
            out.append(conn.data_to_send())
            conn.connection_lost()
        except Exception as exc:  # the property under test: nothing escapes
            return f"{type(exc).__name__} escaped: {exc}"
        internal = self.errors.problems()
        if internal:
            return internal[-1]
        problem = frames_problem(b"".join(out))
        if problem:
            return problem
        if conn in self.broker.connections:
            return "connection still registered after connection_lost"
        return None


# ---- over real sockets ----------------------------------------------------------------

def socket_round(port: int, inputs: list[tuple[bool, bytes]]) -> None:
    """Send each input on its own connection; read what comes back until the
    broker closes or goes quiet."""
    for opened, data in inputs:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            try:
                if opened:
                    sock.sendall(OPENED)
                sock.sendall(data)
                sock.settimeout(0.02)
                while sock.recv(65536):
                    pass
            except OSError:
                pass  # closed by the broker, or quiet: both fine


def run_sockets(count: int, seconds: float, seed: int) -> tuple[int, list[str]]:
    import pika

    from amqp_server.testing import BrokerThread

    rng = random.Random(seed)
    config = BrokerConfig(port=0, management_port=0, login_failure_delay=0,
                          handshake_timeout=2000)
    errors = InternalErrors().attach()
    done, problems = 0, []
    deadline = time.monotonic() + seconds
    try:
        with BrokerThread(config) as broker:
            tasks_before = broker.call(lambda: len(asyncio.all_tasks(broker.loop)))
            while done < count and time.monotonic() < deadline:
                batch = [make_input(rng) for _ in range(min(200, count - done))]
                socket_round(broker.port, batch)
                done += len(batch)
            settle = time.monotonic() + 10
            while broker.server.protocols and time.monotonic() < settle:
                time.sleep(0.05)
            if broker.server.protocols:
                problems.append(f"{len(broker.server.protocols)} connections never closed")
            tasks_after = broker.call(lambda: len(asyncio.all_tasks(broker.loop)))
            if tasks_after > tasks_before:
                problems.append(f"tasks leaked: {tasks_before} -> {tasks_after}")
            conn = pika.BlockingConnection(pika.URLParameters(broker.url))
            channel = conn.channel()
            channel.queue_declare("after-fuzz")
            channel.basic_publish("", "after-fuzz", b"alive")
            if channel.basic_get("after-fuzz", auto_ack=True)[2] != b"alive":
                problems.append("broker no longer delivers after the fuzz run")
            conn.close()
    finally:
        errors.detach()
    problems.extend(errors.problems())
    return done, problems


# ---- entry points ---------------------------------------------------------------------

def run_sansio(count: int, seconds: float, seed: int,
               keep: Path | None = None) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    fuzzer = SansIOFuzzer()
    problems = []
    deadline = time.monotonic() + seconds
    try:
        while fuzzer.inputs < count and time.monotonic() < deadline:
            opened, data = make_input(rng)
            pieces = chunks(data, rng)
            problem = fuzzer.run_one(opened, pieces)
            if problem is None and fuzzer.inputs % 1000 == 0:
                problem = fuzzer.bystander_problem()
            if problem:
                problems.append(f"input {fuzzer.inputs}: {problem} for input {data[:500]!r} "
                                f"(opened={opened})")
                if keep is not None:
                    keep_input(keep, seed, fuzzer.inputs, opened, pieces, problem)
                if len(problems) >= 10:
                    break
    finally:
        fuzzer.close()
    return fuzzer.inputs, problems


def keep_input(folder: Path, seed: int, number: int, opened: bool, pieces: list[bytes],
               problem: str) -> None:
    """A failing input whole, as the reads it was fed in, to become a test:
    `json.load`, then `bytes.fromhex` each read.  (What earlier inputs
    declared on the same broker may matter too; the problem text says what
    went wrong.)"""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"seed{seed}-input{number}.json").write_text(json.dumps({
        "seed": seed, "input": number, "opened": opened,
        "reads": [piece.hex() for piece in pieces], "problem": problem}, indent=1))


def run_atheris(argv: list[str]) -> None:
    """libFuzzer's loop over the same target; the seeds form its starting
    corpus (in a temporary folder unless one is named)."""
    import tempfile

    import atheris

    fuzzer = SansIOFuzzer()

    def target(data: bytes) -> None:
        # The first byte says whether the handshake is done, the rest is input.
        if not data:
            return
        problem = fuzzer.run_one(data[0] % 8 != 0, [data[1:]])
        if problem:
            raise AssertionError(problem)

    if not any(not arg.startswith("-") for arg in argv):
        corpus = tempfile.mkdtemp(prefix="amqp-fuzz-corpus-")
        for number, seed in enumerate(SEEDS):
            Path(corpus, f"seed-{number}").write_bytes(b"\x01" + seed)
        for number, seed in enumerate(PRE_HANDSHAKE_SEEDS):
            Path(corpus, f"handshake-{number}").write_bytes(b"\x00" + seed)
        argv = [*argv, corpus]
    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *argv], target)
    atheris.Fuzz()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=3600.0,
                        help="stop after this long even if --inputs are not done")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--socket", action="store_true", help="over real TCP connections")
    parser.add_argument("--keep", type=Path, metavar="FOLDER",
                        help="save each failing input whole (sans-IO) in this folder")
    parser.add_argument("--atheris", action="store_true",
                        help="coverage-guided with atheris (arguments after -- go to it)")
    args, rest = parser.parse_known_args(argv)
    if args.atheris:
        run_atheris([arg for arg in rest if arg != "--"])
        return 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    started = time.monotonic()
    if args.socket:
        done, problems = run_sockets(args.inputs, args.seconds, args.seed)
    else:
        done, problems = run_sansio(args.inputs, args.seconds, args.seed, args.keep)
    elapsed = time.monotonic() - started
    print(f"{done} inputs in {elapsed:.0f} s ({done / elapsed:,.0f}/s), seed {args.seed}, "
          f"{'sockets' if args.socket else 'sans-IO'}: {len(problems)} problems")
    for problem in problems:
        print("  " + problem[:2000])
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
