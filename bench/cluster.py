"""python -m bench.cluster: this broker's three-node cluster on etcd against a
three-node RabbitMQ cluster on the same machine, side by side.

    python -m bench.cluster [--scale S] [--repeat N] [--kills K]
                            [--ours-only | --rabbit-only] [--row ROW] [--seed N]
                            [--json FILE] [--logs DIR]

Ours: three etcd members (interop/etcd_cluster.py) started with
`--heartbeat-interval 100 --election-timeout 1000`, so that etcd grants the
nodes' 2 s lease TTL (its smallest TTL is 1.5 election timeouts rounded up
to whole seconds), and three broker nodes (interop/cluster_nodes.py).
RabbitMQ: Debian's rabbitmq-server started three times and joined
(bench/rabbitmq_cluster.py).  Both clusters stay up for the whole run; each
row runs on one broker and then on the other (the order alternating from
round to round), so both see the same machine over the same minutes.

Rows, every queue a quorum queue (`x-queue-type: quorum`,
`x-quorum-initial-group-size: 3`):

- `quorum-publish`: confirmed 1 KB persistent publishes, PUBLISHERS raw
  publishers (bench/persistent.py: a window of 1000 unconfirmed each)
  spread over the three nodes as a load balancer would.  The queue must hold
  every confirmed message at the end.
- `quorum-publish-leader`: the same with every publisher on the node that
  leads (ours: the cluster's leader; RabbitMQ: the queue's leader), the
  best case.
- `quorum-dead-letter`: a confirming publisher of distinct persistent
  messages (a message-id, trace-id header, content-type and timestamp
  each); a consumer rejecting each delivery with its own
  basic.reject(requeue=false) into a second quorum queue, whose consumer
  checks x-death and acks each dead letter with its own basic.ack.  The
  publisher, the rejecting and the draining consumer each on another node.
- `failover`: a pika publisher with confirms, one publish at a time,
  connected to a node that is not killed and reconnecting from the list of
  nodes; kill -9 of the leader (ours: the leader /api/nodes names;
  RabbitMQ: the queue's leader node, asked again right before the kill);
  the time from the kill to the first confirm of a publish sent after it.
  The killed node is started again and
  waited for (ours: every node in sync; RabbitMQ: the queue has its three
  members online), K times per round.  At the end of each round every
  confirmed message must be in the queue.
- `memory`: resident memory of the three nodes together (process trees),
  peak during `quorum-publish` and right after it; ours also shows etcd's.

A run that times out, loses a confirmed message or gets a nack is reported
as failed and gives no number; medians are over the runs that did not fail,
with the spread (min-max) beside them.  The exit status is 1 when any run
or kill failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import queue as queue_module
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Self

from pamqp import commands as spec

from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties
from amqp_server.wire.table import FieldTable

from .client import connect, encoded_publish
from .persistent import WINDOW, _publisher
from .procinfo import tree_rss_bytes
from .realistic import SettleEach
from .scenarios import _run

HEARTBEAT_MS = 100
ELECTION_MS = 1000
LEASE_TTL = 2
PUBLISHERS = 6
PUBLISH_COUNT = 120_000    # per quorum-publish run, at --scale 1
DEAD_LETTER_COUNT = 50_000  # per quorum-dead-letter run
BATCH = 100  # bench/persistent.py's publishers send in batches of 100
QUORUM = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}
KILL_WAIT = 30.0      # a kill with no confirm after it within this is failed
SYNC_WAIT = 180.0     # for the killed node to be back in sync
STEADY_CONFIRMS = 50  # confirms before a kill: the publisher is going

ROWS = ("quorum-publish", "quorum-publish-leader", "quorum-dead-letter", "failover")


class Failed(Exception):
    """A run that gives no number: it timed out, lost or had nacked messages."""


class Broken(Exception):
    """A cluster that cannot be made whole again: the runs stop."""


# ---- the two clusters --------------------------------------------------------

class OurCluster:
    label = "ours"

    def __init__(self) -> None:
        from interop.etcd_cluster import EtcdCluster

        self.root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
        self.etcd = EtcdCluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        self.nodes = None

    def __enter__(self) -> Self:
        from interop.cluster_nodes import BrokerCluster

        try:
            self.etcd.__enter__()
            # A killed node starts again on its ports, which the harness
            # takes outside the ephemeral range (interop/etcd_cluster.py).
            self.nodes = BrokerCluster(self.etcd, 3, self.root, lease_ttl=LEASE_TTL)
            self.nodes.__enter__()
            self.nodes.wait_for_leader(in_sync=3, timeout=60)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self.nodes is not None:
            self.nodes.close()
        self.etcd.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes.nodes]

    @property
    def ports(self) -> list[int]:
        return [node.amqp_port for node in self.nodes.nodes]

    def name(self, index: int) -> str:
        return self.nodes[index].name

    def leader(self, queue: str) -> int:
        return self.nodes.nodes.index(self.nodes.wait_for_leader(timeout=30))

    def kill(self, index: int) -> None:
        self.nodes[index].kill()

    def restart(self, index: int) -> None:
        self.nodes[index].start()

    def heal(self) -> None:
        """Every node running and in sync again, after a run that failed."""
        for node in self.nodes.nodes:
            if not node.running:
                node.start()
        self.wait_synced(None)

    def wait_synced(self, queue: str | None, timeout: float = SYNC_WAIT) -> None:
        try:
            self.nodes.wait_for_leader(in_sync=3, timeout=timeout)
        except AssertionError as error:
            raise Failed(f"not every node in sync within {timeout:.0f} s: {error}") from None

    def rss(self) -> dict:
        nodes = sum(_tree_rss(node.process.pid) for node in self.nodes.nodes if node.running)
        etcd = sum(_tree_rss(member.process.pid) for member in self.etcd.members
                   if member.running)
        return {"nodes": nodes, "etcd": etcd}

    def logs(self) -> str:
        return "\n".join(f"--- {node.name}\n{node.log_tail(40)}" for node in self.nodes.nodes)

    def keep_logs(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        for path in [node.log_path for node in self.nodes.nodes] + [
                Path(member.log_path) for member in self.etcd.members]:
            with contextlib.suppress(OSError):
                shutil.copy(path, where / f"ours-{path.name}")


class RabbitSide:
    label = "RabbitMQ"

    def __init__(self) -> None:
        from .rabbitmq_cluster import RabbitCluster

        self.cluster = RabbitCluster(3)

    def __enter__(self) -> Self:
        self.cluster.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.cluster.close()

    @property
    def urls(self) -> list[str]:
        return self.cluster.urls

    @property
    def ports(self) -> list[int]:
        return self.cluster.ports

    def name(self, index: int) -> str:
        return self.cluster.names[index]

    def leader(self, queue: str) -> int:
        leader = self.cluster.queue_status(queue)["leader"]
        return self.cluster.names.index(leader)

    def kill(self, index: int) -> None:
        self.cluster.kill(index)

    def restart(self, index: int) -> None:
        self.cluster.start(index)

    def heal(self) -> None:
        """Every node running again, after a run that failed."""
        for index in range(self.cluster.size):
            if self.cluster.processes[index] is None:
                self.cluster.start(index)

    def wait_synced(self, queue: str | None, timeout: float = SYNC_WAIT) -> None:
        if queue is None:
            return
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            status = self.cluster.queue_status(queue)
            if len(status.get("online", ())) == self.cluster.size:
                return
            time.sleep(0.5)
        raise Failed(f"queue {queue} not back on {self.cluster.size} members within "
                     f"{timeout:.0f} s: {status}")

    def rss(self) -> dict:
        return {"nodes": self.cluster.rss_bytes()}

    def logs(self) -> str:
        return f"(RabbitMQ logs under {self.cluster.root})"

    def keep_logs(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        for index in range(self.cluster.size):
            node = self.cluster.root / f"node{index + 1}"
            for path in [*node.glob("log/*.log"), self.cluster.root / f"node{index + 1}.out"]:
                with contextlib.suppress(OSError):
                    shutil.copy(path, where / f"rabbitmq-node{index + 1}-{path.name}")


def _tree_rss(pid: int) -> int:
    try:
        return tree_rss_bytes(pid)
    except OSError:
        return 0


class PeakRss(threading.Thread):
    """The largest resident memory of a cluster's nodes, sampled every
    quarter second while a row runs."""

    def __init__(self, side) -> None:
        super().__init__(daemon=True)
        self.side = side
        self.peak: dict = {}
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            sample = self.side.rss()
            for key, value in sample.items():
                self.peak[key] = max(self.peak.get(key, 0), value)
            if self.done.wait(0.25):
                return

    def stop(self) -> dict:
        self.done.set()
        self.join(5)
        return self.peak


def _mb(value: int | None) -> float | None:
    return round(value / 2**20, 1) if value else None


# ---- helpers on the wire -----------------------------------------------------

async def _declare_quorum(url: str, queue: str, arguments: dict | None = None) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Queue.Declare, queue=queue, durable=True, arguments=FieldTable(
        {**QUORUM, **(arguments or {})})), spec.Queue.DeclareOk)
    await conn.close()


async def _depth(url: str, queue: str) -> int:
    conn = await connect(url)
    await conn.open_channel(1)
    ok = await conn.call(1, make(spec.Queue.Declare, queue=queue, passive=True),
                         spec.Queue.DeclareOk)
    await conn.close()
    return ok.message_count


async def _delete(url: str, queues: list[str], exchange: str | None = None) -> None:
    conn = await connect(url)
    await conn.open_channel(1)
    for queue in queues:
        await conn.call(1, make(spec.Queue.Delete, queue=queue), spec.Queue.DeleteOk)
    if exchange:
        await conn.call(1, make(spec.Exchange.Delete, exchange=exchange), spec.Exchange.DeleteOk)
    await conn.close()


def _cleanup(side, queues: list[str], exchange: str | None = None) -> None:
    """Deletes what a row declared, through any node that answers."""
    for url in side.urls:
        try:
            _run(asyncio.wait_for(_delete(url, queues, exchange), 60))
            return
        except (OSError, RuntimeError, TimeoutError):
            continue


# ---- (a) confirmed 1 KB persistent publishes to a quorum queue ------------------

async def _publish_all(urls: list[str], queue: str, each: int, timeout: float) -> float:
    started = time.perf_counter()
    try:
        nacked = sum(await asyncio.wait_for(
            asyncio.gather(*(_publisher(url, queue, each) for url in urls)), timeout))
    except TimeoutError:
        raise Failed("timed out waiting for confirms") from None
    elapsed = time.perf_counter() - started
    if nacked:
        raise Failed(f"{nacked} publishes nacked")
    return elapsed


def quorum_publish(side, count: int, on_leader: bool) -> dict:
    queue = f"bench-{uuid.uuid4().hex[:8]}-quorum"
    each = max(BATCH, count // PUBLISHERS // BATCH * BATCH)
    total = each * PUBLISHERS
    _run(_declare_quorum(side.urls[0], queue))
    try:
        if on_leader:
            leader = side.leader(queue)
            urls = [side.urls[leader]] * PUBLISHERS
            placement = f"all on {side.name(leader)}"
        else:
            urls = [side.urls[i % len(side.urls)] for i in range(PUBLISHERS)]
            placement = f"{PUBLISHERS // len(side.urls)} on each node"
        memory = PeakRss(side)
        memory.start()
        try:
            elapsed = _run(_publish_all(urls, queue, each, 60 + total / 200))
        finally:
            peak = memory.stop()
        after = side.rss()
        for key, value in after.items():
            peak[key] = max(peak.get(key, 0), value)
        depth = _run(_depth(side.urls[0], queue))
        if depth != total:
            raise Failed(f"{total} publishes confirmed, the queue holds {depth}")
        result = {"confirmed": total, "publishers": PUBLISHERS, "placement": placement,
                  "seconds": round(elapsed, 3), "confirms_per_s": round(total / elapsed),
                  "peak_rss_mb": _mb(peak.get("nodes")), "rss_after_mb": _mb(after["nodes"])}
        if "etcd" in after:
            result["etcd_peak_rss_mb"] = _mb(peak.get("etcd"))
        return result
    finally:
        _cleanup(side, [queue])


# ---- (b) dead-lettering between two quorum queues ---------------------------------

def _persistent_app_properties(n: int, run: str) -> bytes:
    return encode_properties(Properties(
        content_type="application/json", delivery_mode=2, message_id=f"{run}-{n}",
        timestamp=int(time.time()), headers=FieldTable({"trace-id": uuid.uuid4().hex})))


async def _publish_distinct_confirmed(url: str, queue: str, count: int, start_at: float,
                                      run: str) -> int:
    """Publishes `count` distinct persistent messages with confirms, at most
    WINDOW unconfirmed; returns how many were nacked."""
    conn = await connect(url)
    await conn.open_channel(1)
    await conn.call(1, make(spec.Confirm.Select), spec.Confirm.SelectOk)
    body = b"x" * 100
    batches = [b"".join(encoded_publish(1, "", queue, body, 1, _persistent_app_properties(n, run))
                        for n in range(first, min(count, first + BATCH)))
               for first in range(0, count, BATCH)]
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    sent = 0
    for first, batch in zip(range(0, count, BATCH), batches):
        while sent - conn.confirmed >= WINDOW:
            conn.confirm_event.clear()
            await asyncio.wait_for(conn.confirm_event.wait(), 30)
        conn.transport.write(batch)
        sent = min(count, first + BATCH)
        await conn.drain()
    while conn.confirmed < sent:
        conn.confirm_event.clear()
        await asyncio.wait_for(conn.confirm_event.wait(), 30)
    await conn.close()
    return conn.nacked


def _dead_letter_publisher(*args) -> None:
    nacked = _run(_publish_distinct_confirmed(*args))
    sys.exit(3 if nacked else 0)


async def _reject_and_drain(reject_url: str, drain_url: str, work: str, dlq: str,
                            expected: int, prefetch: int, timeout: float) -> dict:
    rejecter = await connect(reject_url, lambda: SettleEach("reject"))
    drainer = await connect(drain_url, lambda: SettleEach("ack", check_death=True))
    done = asyncio.get_running_loop().create_future()
    first = [0.0]

    def rejected(count: int) -> None:
        if not first[0]:
            first[0] = time.perf_counter()

    def drained(count: int) -> None:
        if count >= expected and not done.done():
            done.set_result(time.perf_counter())

    rejecter.on_delivery_count = rejected
    drainer.on_delivery_count = drained
    for conn, queue in ((rejecter, work), (drainer, dlq)):
        await conn.open_channel(1)
        await conn.call(1, make(spec.Basic.Qos, prefetch_count=prefetch), spec.Basic.QosOk)
        await conn.call(1, make(spec.Basic.Consume, queue=queue), spec.Basic.ConsumeOk)
    try:
        finished = await asyncio.wait_for(asyncio.shield(done), timeout)
        timed_out = False
    except TimeoutError:
        finished, timed_out = time.perf_counter(), True
    result = {"rejected": rejecter.deliveries, "dead_letters": drainer.deliveries,
              "missing_x_death": drainer.missing_death,
              "seconds": round(finished - (first[0] or finished), 3)}
    await rejecter.close()
    await drainer.close()
    if timed_out:
        result["timed_out"] = True
    return result


def quorum_dead_letter(side, count: int, prefetch: int = 100) -> dict:
    tag = uuid.uuid4().hex[:8]
    work, dlx, dlq = f"bench-{tag}-work", f"bench-{tag}-dlx", f"bench-{tag}-dlq"
    timeout = 60 + count / 100

    async def declare() -> None:
        conn = await connect(side.urls[0])
        await conn.open_channel(1)
        await conn.call(1, make(spec.Exchange.Declare, exchange=dlx, exchange_type="fanout",
                                durable=True), spec.Exchange.DeclareOk)
        await conn.close()
        await _declare_quorum(side.urls[0], dlq)
        conn = await connect(side.urls[0])
        await conn.open_channel(1)
        await conn.call(1, make(spec.Queue.Bind, queue=dlq, exchange=dlx), spec.Queue.BindOk)
        await conn.close()
        await _declare_quorum(side.urls[0], work, {"x-dead-letter-exchange": dlx})

    _run(declare())
    try:
        publisher = mp.get_context("spawn").Process(
            target=_dead_letter_publisher,
            args=(side.urls[0], work, count, time.time() + 3.0, uuid.uuid4().hex[:6]))
        publisher.start()
        try:
            result = _run(_reject_and_drain(side.urls[1], side.urls[2], work, dlq, count,
                                            prefetch, timeout))
        finally:
            publisher.join(timeout)
            if publisher.is_alive():
                publisher.kill()
                publisher.join(10)
        result.update(messages=count, placement="publisher, rejecter, drainer on nodes 1, 2, 3")
        problems = []
        if publisher.exitcode == 3:
            problems.append("publishes nacked")
        elif publisher.exitcode != 0:
            problems.append(f"the publisher failed (exit code {publisher.exitcode})")
        if result["dead_letters"] < count:
            problems.append(f"{result['dead_letters']} of {count} dead letters arrived")
        if result["missing_x_death"]:
            problems.append(f"{result['missing_x_death']} dead letters without x-death")
        if problems:
            raise Failed("; ".join(problems) + f" ({json.dumps(result)})")
        result["dead_letters_per_s"] = round(count / result["seconds"])
        return result
    finally:
        _cleanup(side, [work, dlq], dlx)


# ---- (c) failover: kill -9 of the leader ---------------------------------------------

def logging_off() -> None:
    import logging
    logging.getLogger("pika").setLevel(logging.CRITICAL)


def _failover_publisher(ports: list[int], queue: str, prefix: str, reports, stop) -> None:
    """pika, confirms, one publish at a time, reconnecting from `ports` in
    order.  Reports ("confirm", message id, sent, confirmed) per confirm,
    ("connected", port, time) per connection and ("error", text, time) per
    lost one; a message whose confirm did not come is never sent again."""
    import pika
    import pika.exceptions

    logging_off()
    parameters = [pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1,
                                            socket_timeout=2, stack_timeout=3,
                                            blocked_connection_timeout=10)
                  for port in ports]
    body = b"x" * 1024
    number = 0
    while not stop.is_set():
        try:
            connection = pika.BlockingConnection(parameters)
        except (pika.exceptions.AMQPError, OSError):
            time.sleep(0.02)
            continue
        reports.put(("connected", getattr(getattr(connection._impl, "params", None), "port", 0),
                     time.monotonic()))
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            while not stop.is_set():
                message_id = f"{prefix}-{number}"
                number += 1
                sent = time.monotonic()
                channel.basic_publish("", queue, body, pika.BasicProperties(
                    delivery_mode=2, message_id=message_id), mandatory=True)
                reports.put(("confirm", message_id, sent, time.monotonic()))
        except (pika.exceptions.AMQPError, OSError) as error:
            reports.put(("error", f"{type(error).__name__}: {error}", time.monotonic()))
        finally:
            with contextlib.suppress(Exception):
                connection.close()


class FailoverPublisher:
    def __init__(self, ports: list[int], queue: str, prefix: str) -> None:
        context = mp.get_context("spawn")
        self.reports = context.Queue()
        self.stopping = context.Event()
        self.process = context.Process(target=_failover_publisher,
                                       args=(ports, queue, prefix, self.reports, self.stopping))
        self.confirms: list[tuple[str, float, float]] = []
        self.errors: list[tuple[str, float]] = []
        self.connections: list[tuple[int, float]] = []

    def start(self) -> None:
        self.process.start()

    def _take(self, timeout: float) -> bool:
        try:
            report = self.reports.get(timeout=timeout)
        except queue_module.Empty:
            return False
        if report[0] == "confirm":
            self.confirms.append(report[1:])
        elif report[0] == "connected":
            self.connections.append(report[1:])
        else:
            self.errors.append(report[1:])
        return True

    def outage(self, killed: float, names: dict[int, str]) -> dict:
        """What the publisher saw after the kill: when its connection broke,
        when and where it connected again (seconds after the kill)."""
        seen: dict = {}
        lost = [at for _, at in self.errors if at >= killed]
        if lost:
            seen.update(connection_lost_s=round(lost[0] - killed, 3),
                        connection_errors=len(lost),
                        error=next(text for text, at in self.errors if at >= killed))
        again = [(port, at) for port, at in self.connections if at >= killed]
        if again:
            seen.update(reconnected_s=round(again[0][1] - killed, 3),
                        reconnected_to=names.get(again[0][0], again[0][0]))
        return seen

    def wait_confirms(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.confirms) < count:
            if time.monotonic() > deadline or not self.process.is_alive():
                raise Failed(f"{len(self.confirms)} of {count} confirms within {timeout:.0f} s; "
                             f"errors: {self.errors[-3:]}")
            self._take(0.1)

    def first_confirm_sent_after(self, moment: float, timeout: float) -> float | None:
        """When the first publish sent at or after `moment` was confirmed."""
        deadline = moment + timeout
        seen = 0
        while True:
            for _, sent, confirmed in self.confirms[seen:]:
                if sent >= moment:
                    return confirmed
            seen = len(self.confirms)
            if time.monotonic() > deadline:
                return None
            self._take(0.05)

    def stop(self) -> None:
        self.stopping.set()
        deadline = time.monotonic() + 15
        while self.process.is_alive() and time.monotonic() < deadline:
            self._take(0.1)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        while self._take(0.05):
            pass


def _drain_ids(ports: list[int], queue: str, timeout: float = 120.0) -> list[str]:
    """Every message id in `queue` (consumed with auto-ack: the queue is
    deleted next)."""
    import pika

    parameters = [pika.ConnectionParameters("127.0.0.1", port, connection_attempts=3,
                                            retry_delay=1, socket_timeout=5)
                  for port in ports]
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        depth = channel.queue_declare(queue, passive=True).method.message_count
        channel.basic_qos(prefetch_count=1000)
        ids: list[str] = []
        deadline = time.monotonic() + timeout
        if depth:
            for method, properties, _ in channel.consume(queue, auto_ack=True,
                                                         inactivity_timeout=5):
                if method is None:
                    break
                ids.append(properties.message_id)
                if len(ids) >= depth or time.monotonic() > deadline:
                    break
            channel.cancel()
        return ids
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def one_kill(side, queue: str, number: int, prefix: str, rng: random.Random,
             confirmed_ids: list[str]) -> dict:
    """One kill of the leader; the ids of every confirmed publish go to
    `confirmed_ids`.  The leader is asked again right before the kill: when
    it moved meanwhile (the publisher may now be on it), the attempt is
    dropped and made again."""
    for attempt in range(3):
        victim = side.leader(queue)
        others = [index for index in range(len(side.ports)) if index != victim]
        if number % 2:
            others.reverse()
        publisher = FailoverPublisher([side.ports[i] for i in (*others, victim)], queue,
                                      f"{prefix}-{number}-{attempt}")
        publisher.start()
        result = {"killed": side.name(victim), "publisher_on": side.name(others[0])}
        killed = None
        try:
            publisher.wait_confirms(STEADY_CONFIRMS, 60)
            time.sleep(rng.uniform(0, 0.7))
            if side.leader(queue) != victim:
                continue
            killed = time.monotonic()
            side.kill(victim)
            confirmed = publisher.first_confirm_sent_after(killed, KILL_WAIT)
            if confirmed is None:
                result["failed"] = f"no confirm within {KILL_WAIT:.0f} s of the kill"
            else:
                result["seconds"] = round(confirmed - killed, 3)
                # publishing goes on: a few more confirms after the first
                try:
                    publisher.wait_confirms(len(publisher.confirms) + 10, 30)
                except Failed as error:
                    result["failed"] = f"confirms stopped again after the first: {error}"
        finally:
            publisher.stop()
            confirmed_ids.extend(message_id for message_id, _, _ in publisher.confirms)
            if killed is not None:
                result.update(publisher.outage(killed, dict(zip(side.ports, map(
                    side.name, range(len(side.ports)))))))
                started = time.monotonic()
                side.restart(victim)
                side.wait_synced(queue)
                result["resync_seconds"] = round(time.monotonic() - started, 1)
        if attempt:
            result["leader_moved_before_kill"] = attempt
        return result
    raise Failed("the leader moved before each of 3 kills")


def failover(side, kills: int, rng: random.Random, on_kill=None) -> dict:
    """`kills` kills of the leader under a confirming publisher; at the end,
    every confirmed message must be in the queue."""
    queue = f"bench-{uuid.uuid4().hex[:8]}-failover"
    prefix = uuid.uuid4().hex[:6]
    _run(_declare_quorum(side.urls[0], queue))
    side.wait_synced(queue)
    runs, confirmed = [], []
    try:
        for number in range(kills):
            run = one_kill(side, queue, number, prefix, rng, confirmed)
            runs.append(run)
            if on_kill:
                on_kill(run)
        got = _drain_ids(side.ports, queue)
    finally:
        _cleanup(side, [queue])
    lost = sorted(set(confirmed) - set(got))
    result = {"kills": runs, "confirmed": len(confirmed), "in_queue": len(got),
              "duplicates": len(got) - len(set(got))}
    if lost:
        result["failed"] = f"{len(lost)} confirmed messages lost, e.g. {lost[:5]}"
    return result


# ---- rounds, medians and the table -----------------------------------------------

def _attempt(side, what: str, run) -> dict:
    started = time.monotonic()
    try:
        result = run(side)
    except Failed as error:
        result = {"failed": str(error)}
    except (OSError, RuntimeError, AssertionError, TimeoutError, ValueError) as error:
        # a broken run is reported, and the next one goes on
        result = {"failed": f"{type(error).__name__}: {error}"}
    if "failed" in result:
        print(f"  {side.label} {what}: FAILED: {result['failed']}", file=sys.stderr, flush=True)
        if side.label == "ours":
            print(side.logs(), file=sys.stderr, flush=True)
        try:
            side.heal()
        except (Failed, OSError, RuntimeError, AssertionError) as error:
            raise Broken(f"{side.label}: the cluster could not be made whole again after "
                         f"a failed run ({error})") from None
    else:
        print(f"  {side.label} {what}: {json.dumps(_brief(result))} "
              f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    return result


def _brief(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "kills"}


def _spread(values: list[float]) -> dict:
    values = sorted(values)
    median = statistics.median(values)
    if all(isinstance(value, int) for value in values):
        median = round(median)  # a rate of the middle two: no fractions of a message
    return {"median": round(median, 1), "min": values[0], "max": values[-1],
            "runs": len(values)}


def summarize(raw: dict) -> dict:
    """Per row and broker: the median of the runs that did not fail, their
    spread, and how many failed; failover: the distribution of every kill
    of the runs that lost nothing."""
    summary: dict = {}
    for who, rows in raw.items():
        mine = summary.setdefault(who, {})
        for row, runs in rows.items():
            good = [run for run in runs if "failed" not in run]
            failed = len(runs) - len(good)
            if row == "failover":
                kills = [kill for run in good for kill in run["kills"]]
                seconds = [kill["seconds"] for kill in kills if "failed" not in kill]
                entry = {"kills": len(kills), "failed_kills": len(kills) - len(seconds),
                         "failed_runs": failed,
                         "duplicates": sum(run["duplicates"] for run in good)}
                if seconds:
                    ordered = sorted(seconds)
                    entry.update(median_s=round(statistics.median(ordered), 3),
                                 p90_s=ordered[math.ceil(0.9 * len(ordered)) - 1],
                                 max_s=ordered[-1], min_s=ordered[0])
                mine[row] = entry
                continue
            metric = {"quorum-dead-letter": "dead_letters_per_s"}.get(row, "confirms_per_s")
            entry = {"runs": len(good), "failed_runs": failed}
            if good:
                entry[metric] = _spread([run[metric] for run in good])
            if row == "quorum-publish" and good:
                entry["peak_rss_mb"] = _spread([run["peak_rss_mb"] for run in good])
                entry["rss_after_mb"] = _spread([run["rss_after_mb"] for run in good])
                if good[0].get("etcd_peak_rss_mb"):
                    entry["etcd_peak_rss_mb"] = _spread([run["etcd_peak_rss_mb"]
                                                         for run in good])
            if failed and not good:
                entry["failed"] = next(run["failed"] for run in runs if "failed" in run)
            mine[row] = entry
    return summary


def _cell(entry: dict | None, key: str, unit: str = "") -> str:
    if entry is None:
        return "-"
    value = entry.get(key)
    if value is None:
        return "failed" if entry.get("failed_runs") else "-"
    failed = f", {entry['failed_runs']} failed" if entry.get("failed_runs") else ""
    runs = f"{entry['runs']} run{'s' if entry['runs'] != 1 else ''}" + failed
    if value["min"] == value["max"]:
        return f"{value['median']:,}{unit} ({runs})"
    return f"{value['median']:,}{unit} ({value['min']:,}-{value['max']:,}; {runs})"


def _ratio(ours: dict | None, theirs: dict | None, key: str, suffix: str = "x") -> str:
    a = (ours or {}).get(key)
    b = (theirs or {}).get(key)
    if not a or not b:
        return "-"
    return f"{a['median'] / b['median']:.2f}{suffix}"


def _failover_cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    if "median_s" not in entry:
        return "failed"
    text = (f"median {entry['median_s']} s, p90 {entry['p90_s']} s, max {entry['max_s']} s "
            f"({entry['kills']} kills")
    if entry["failed_kills"]:
        text += f", {entry['failed_kills']} with no confirm in {KILL_WAIT:.0f} s"
    if entry["failed_runs"]:
        text += f", {entry['failed_runs']} runs lost messages"
    return text + ")"


def table(summary: dict) -> str:
    ours, theirs = summary.get("ours", {}), summary.get("RabbitMQ", {})
    lines = ["| row | this broker (3 nodes) | RabbitMQ (3 nodes) | ours / RabbitMQ | goal |",
             "|---|---:|---:|---:|---|"]
    for row, what, goal in (
            ("quorum-publish", (f"confirmed 1 KB persistent publishes/s, quorum queue, "
                                f"{PUBLISHERS} publishers spread over the nodes"), ">= 2x"),
            ("quorum-publish-leader", "the same, every publisher on the leader (best case)", ""),
            ("quorum-dead-letter", ("dead letters/s between two quorum queues, one "
                                    "basic.reject per delivery, one basic.ack per dead letter"),
             ">= 2x")):
        metric = "dead_letters_per_s" if row == "quorum-dead-letter" else "confirms_per_s"
        mine, their = ours.get(row), theirs.get(row)
        lines.append(f"| {row}: {what} | {_cell(mine, metric)} | {_cell(their, metric)} "
                     f"| {_ratio(mine, their, metric)} | {goal} |")
    mine, their = ours.get("failover"), theirs.get("failover")
    ratio = (f"{mine['median_s'] / their['median_s']:.2f}x (lower is better)"
             if mine and their and mine.get("median_s") and their.get("median_s") else "-")
    lines.append(f"| failover: kill -9 of the leader to the first confirm after it, publisher "
                 f"on another node | {_failover_cell(mine)} | {_failover_cell(their)} | {ratio} "
                 f"| median <= 2 s, max <= 5 s |")
    mine, their = ours.get("quorum-publish"), theirs.get("quorum-publish")
    for key, what in (("peak_rss_mb", "peak during quorum-publish"),
                      ("rss_after_mb", "right after quorum-publish")):
        lines.append(f"| memory: resident MB of the three nodes together, {what} "
                     f"| {_cell(mine, key)} | {_cell(their, key)} "
                     f"| {_ratio(mine, their, key, 'x (lower is better)')} | |")
    if mine and mine.get("etcd_peak_rss_mb"):
        lines.append(f"| memory: the three etcd members together (ours only), peak "
                     f"| {_cell(mine, 'etcd_peak_rss_mb')} | - | - | |")
    return "\n".join(lines)


def run_rounds(sides: list, rows: list[str], scale: float, repeat: int, kills: int,
               seed: int) -> tuple[dict, str | None]:
    raw: dict = {side.label: {row: [] for row in rows} for side in sides}
    rng = random.Random(seed)
    jobs = {
        "quorum-publish": lambda side: quorum_publish(side, int(PUBLISH_COUNT * scale), False),
        "quorum-publish-leader":
            lambda side: quorum_publish(side, int(PUBLISH_COUNT * scale), True),
        "quorum-dead-letter": lambda side: quorum_dead_letter(side, int(DEAD_LETTER_COUNT * scale)),
        "failover": lambda side: failover(side, kills, rng, on_kill=lambda run: print(
            f"    {side.label} kill: {json.dumps(run)}", file=sys.stderr, flush=True)),
    }
    try:
        for number in range(repeat):
            order = sides if number % 2 == 0 else sides[::-1]
            print(f"round {number + 1} of {repeat}", file=sys.stderr, flush=True)
            for row in rows:
                for side in order:
                    raw[side.label][row].append(_attempt(side, row, jobs[row]))
    except Broken as error:
        print(f"STOPPED: {error}", file=sys.stderr, flush=True)
        return raw, str(error)
    return raw, None


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cluster",
        description="This broker's three nodes on etcd against RabbitMQ's three, on this "
                    "machine, side by side (docs/clustering.md).")
    parser.add_argument("--scale", type=float, default=1.0,
                        help=f"multiply message counts (default 1.0: {PUBLISH_COUNT:,} "
                             f"publishes, {DEAD_LETTER_COUNT:,} dead letters per run)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--kills", type=int, default=10,
                        help="kills of the leader per round and broker (default 10)")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--ours-only", action="store_true", help="no RabbitMQ cluster")
    who.add_argument("--rabbit-only", action="store_true", help="no cluster of ours")
    parser.add_argument("--row", action="append", choices=ROWS,
                        help="rows to run (repeatable; default all)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the random delays before kills")
    parser.add_argument("--json", metavar="FILE", help="write the raw results here")
    parser.add_argument("--logs", metavar="DIR",
                        help="copy every node's and etcd member's log here at the end")
    args = parser.parse_args()
    rows = [row for row in ROWS if row in (args.row or ROWS)]
    seed = args.seed if args.seed is not None else random.randrange(2**32)

    from .rabbitmq_cluster import available
    if not args.ours_only and not available():
        parser.error("rabbitmq-server is not installed (Debian's package); try --ours-only")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    config = {"scale": args.scale, "repeat": args.repeat, "kills": args.kills, "rows": rows,
              "seed": seed, "publishers": PUBLISHERS, "etcd": {
                  "members": 3, "heartbeat_ms": HEARTBEAT_MS, "election_ms": ELECTION_MS},
              "lease_ttl_s": LEASE_TTL, "cpus": os.cpu_count(), "load": os.getloadavg()}
    print(f"etcd: 3 members, --heartbeat-interval {HEARTBEAT_MS} --election-timeout "
          f"{ELECTION_MS}, so that the nodes' lease TTL can be {LEASE_TTL} s (etcd's smallest "
          f"TTL is 1.5 election timeouts, rounded up to whole seconds)", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        sides = []
        if not args.rabbit_only:
            print("starting our three nodes ...", file=sys.stderr, flush=True)
            sides.append(stack.enter_context(OurCluster()))
        if not args.ours_only:
            print("starting RabbitMQ's three nodes (about a minute) ...", file=sys.stderr,
                  flush=True)
            sides.append(stack.enter_context(RabbitSide()))
        if args.logs:
            for side in sides:  # each copied before its cluster stops
                stack.callback(side.keep_logs, Path(args.logs))
        raw, stopped = run_rounds(sides, rows, args.scale, args.repeat, args.kills, seed)
    config["load_after"] = os.getloadavg()
    summary = summarize(raw)
    report = {"config": config, "summary": summary, "runs": raw}
    if stopped:
        report["stopped"] = stopped
    print(table(summary))
    if stopped:
        print(f"\nThe runs stopped early: {stopped}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nraw results: {args.json}")
    else:
        print("\n```json\n" + json.dumps(report, indent=2) + "\n```")
    failures = sum(entry.get("failed_runs", 0) + entry.get("failed_kills", 0)
                   for rows in summary.values() for entry in rows.values())
    if failures or stopped:
        print(f"{failures} runs or kills failed" + (", and the runs stopped early" if stopped
                                                   else ""), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
