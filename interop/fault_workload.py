"""What runs against a cluster while faults are made, and the check at the
end (Jepsen's shape, as RabbitMQ's own runs of it):

- publishers with confirms write persistent messages, each with an id of
  its own, to a quorum queue, one publish at a time, connected to any node
  and reconnecting to the next one when their connection fails;
- a second publisher writes to a quorum work queue whose consumer rejects
  every message without requeueing, into a quorum dead-letter queue
  (at-least-once dead-lettering);
- a watcher asks every node, ten times a second, whether it could confirm
  a publish at that moment (amqp_cluster_node_confirming): two at once is
  two leaders.

At the end every queue is drained and every message counted: each
confirmed message present exactly once (in the work queue or, with its
`x-death`, in the dead-letter queue), nothing present twice, nothing
present that was never published.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pika
import pika.exceptions

QUEUE = "faults.confirmed"
WORK = "faults.work"
DEAD = "faults.dead"
DLX = "faults.dlx"

# Every client gives up on a silent node quickly: a partition must not hold
# the workload for pika's default minute.
CLIENT = dict(heartbeat=2, blocked_connection_timeout=15, connection_attempts=1,
              socket_timeout=2.0, stack_timeout=4.0)
FAILURES = (pika.exceptions.AMQPError, OSError, AssertionError)


def parameters(url: str) -> pika.URLParameters:
    params = pika.URLParameters(url)
    for name, value in CLIENT.items():
        setattr(params, name, value)
    return params


def connect(urls: Sequence[str], start: int, stop: threading.Event | None = None
            ) -> tuple[pika.BlockingConnection, int]:
    """A connection to the first node of `urls` (from `start` round) that
    takes one; bounded by `stop` (or a minute)."""
    deadline = time.monotonic() + 60
    index = start
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        url = urls[index % len(urls)]
        index += 1
        try:
            return pika.BlockingConnection(parameters(url)), index
        except Exception:  # noqa: BLE001 - any way a connection fails: the next node
            time.sleep(0.2)
    raise ConnectionError("no node took a connection")


def declare(urls: Sequence[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            connection, _ = connect(urls, 0)
            try:
                channel = connection.channel()
                quorum = {"x-queue-type": "quorum"}
                channel.queue_declare(QUEUE, durable=True, arguments=quorum)
                channel.exchange_declare(DLX, "fanout", durable=True)
                channel.queue_declare(DEAD, durable=True, arguments=quorum)
                channel.queue_bind(DEAD, DLX)
                channel.queue_declare(WORK, durable=True, arguments={
                    **quorum, "x-dead-letter-exchange": DLX,
                    "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
                return
            finally:
                connection.close()
        except FAILURES:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@dataclass
class Publisher:
    """Publishes ids `prefix-0`, `prefix-1`, ... to `queue`, each once."""

    name: str
    queue: str
    urls: Sequence[str]
    start: int = 0
    confirmed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)      # the connection went first
    nacked: list[str] = field(default_factory=list)
    confirm_times: list[float] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        sequence = 0
        node = self.start
        while not stop.is_set():
            try:
                connection, node = connect(self.urls, node, stop)
            except ConnectionError:
                continue
            try:
                channel = connection.channel()
                channel.confirm_delivery()
                while not stop.is_set():
                    message_id = f"{self.name}-{sequence}"
                    sequence += 1
                    try:
                        channel.basic_publish("", self.queue, message_id.encode(),
                                              pika.BasicProperties(delivery_mode=2,
                                                                   message_id=message_id))
                    except pika.exceptions.NackError:
                        self.nacked.append(message_id)
                        continue
                    except FAILURES:
                        self.unknown.append(message_id)
                        raise
                    self.confirmed.append(message_id)
                    self.confirm_times.append(time.monotonic())
            except FAILURES:
                time.sleep(0.1)
            finally:
                try:
                    connection.close()
                except FAILURES:
                    pass

    def attempted(self) -> set[str]:
        return {*self.confirmed, *self.unknown, *self.nacked}


@dataclass
class Rejector:
    """Consumes the work queue and rejects every delivery, requeue=false."""

    urls: Sequence[str]
    start: int = 1
    rejected: int = 0

    def run(self, stop: threading.Event) -> None:
        node = self.start
        while not stop.is_set():
            try:
                connection, node = connect(self.urls, node, stop)
            except ConnectionError:
                continue
            try:
                channel = connection.channel()
                channel.basic_qos(prefetch_count=20)
                for method, _, _ in channel.consume(WORK, inactivity_timeout=0.3):
                    if stop.is_set():
                        break
                    if method is not None:
                        channel.basic_reject(method.delivery_tag, requeue=False)
                        self.rejected += 1
            except FAILURES:
                time.sleep(0.1)
            finally:
                try:
                    connection.close()
                except FAILURES:
                    pass


@dataclass
class Watcher:
    """Asks every node whether it could confirm, ten times a second."""

    confirming: Sequence[Callable[[], bool | None]]
    two_leaders: list[tuple[float, list[int]]] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            began = time.monotonic()
            answers = [ask() for ask in self.confirming]
            both = [index for index, answer in enumerate(answers) if answer]
            if len(both) > 1:
                self.two_leaders.append((began, both))
            stop.wait(max(0.0, 0.1 - (time.monotonic() - began)))


class Workload:
    def __init__(self, urls: Sequence[str], confirming: Sequence[Callable[[], bool | None]],
                 round_name: str) -> None:
        self.urls = list(urls)
        self.publishers = [Publisher(f"{round_name}.p{i}", QUEUE, self.urls, start=i)
                           for i in range(2)]
        self.work = Publisher(f"{round_name}.w", WORK, self.urls, start=2)
        self.rejector = Rejector(self.urls)
        self.watcher = Watcher(confirming)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Workload:
        declare(self.urls)
        for runner in (*self.publishers, self.work, self.rejector, self.watcher):
            thread = threading.Thread(target=runner.run, args=(self._stop,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def wait_flowing(self, confirms: int = 20, timeout: float = 60.0) -> bool:
        """Until `confirms` publishes were confirmed (bounded): the workload
        runs before a fault is made."""
        deadline = time.monotonic() + timeout
        while self.confirms_since(0.0) < confirms and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.confirms_since(0.0) >= confirms

    def confirms_since(self, moment: float) -> int:
        return sum(1 for p in (*self.publishers, self.work)
                   for t in p.confirm_times if t >= moment)

    def longest_gap(self, begin: float, end: float) -> float:
        """The longest time without a confirm between `begin` and `end`."""
        times = sorted(t for p in self.publishers for t in p.confirm_times if begin <= t <= end)
        points = [begin, *times, end]
        return max(b - a for a, b in zip(points, points[1:]))


@dataclass
class Verdict:
    confirmed: int
    lost: list[str]
    duplicated: list[str]
    phantom: list[str]
    dead_letters: int
    bad_dead_letters: list[str]
    two_leaders: list[tuple[float, list[int]]]

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.phantom or self.bad_dead_letters
                    or self.two_leaders)

    def summary(self) -> str:
        return (f"{self.confirmed} confirmed, {self.dead_letters} dead letters; lost "
                f"{len(self.lost)} {self.lost[:5]}, duplicated {len(self.duplicated)} "
                f"{self.duplicated[:5]}, phantom {len(self.phantom)} {self.phantom[:5]}, "
                f"bad dead letters {self.bad_dead_letters[:5]}, two leaders "
                f"{self.two_leaders[:3]}")


def drain(urls: Sequence[str], queue: str) -> list[tuple[str, dict]]:
    """Every message of `queue`: (message id, headers), consumed."""
    deadline = time.monotonic() + 120
    while True:
        try:
            connection, _ = connect(urls, 0)
            try:
                channel = connection.channel()
                left = channel.queue_declare(queue, passive=True).method.message_count
                found: list[tuple[str, dict]] = []
                channel.basic_qos(prefetch_count=1000)
                for method, properties, body in channel.consume(queue, auto_ack=True,
                                                                inactivity_timeout=2.0):
                    if method is None:
                        break
                    found.append((properties.message_id or body.decode(),
                                  dict(properties.headers or {})))
                if len(found) < left:
                    raise AssertionError(f"{queue}: drained {len(found)} of {left}")
                return found
            finally:
                connection.close()
        except FAILURES:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def check(workload: Workload) -> Verdict:
    urls = workload.urls
    kept = collections.Counter(message_id for message_id, _ in drain(urls, QUEUE))
    work = drain(urls, WORK)
    dead = drain(urls, DEAD)
    counted = kept + collections.Counter(m for m, _ in work) + collections.Counter(
        m for m, _ in dead)
    confirmed = [m for p in (*workload.publishers, workload.work) for m in p.confirmed]
    attempted = set().union(*(p.attempted() for p in (*workload.publishers, workload.work)))
    bad = []
    for message_id, headers in dead:
        deaths = headers.get("x-death") or []
        if (not deaths or deaths[0].get("reason") != "rejected"
                or deaths[0].get("queue") != WORK or deaths[0].get("count") != 1):
            bad.append(f"{message_id}: {deaths}")
    return Verdict(
        confirmed=len(confirmed),
        lost=sorted(m for m in confirmed if counted[m] == 0),
        duplicated=sorted(m for m, n in counted.items() if n > 1),
        phantom=sorted(m for m in counted if m not in attempted),
        dead_letters=len(dead), bad_dead_letters=bad,
        two_leaders=list(workload.watcher.two_leaders))
