"""The workbench's actions as tasks with progress: redrive (each message to
where it came from), move (to a chosen exchange here or on another broker)
and delete, over messages chosen when the task starts.

A message is never removed before its copy is safe: a batch is withdrawn
from the dead-letter queue (out of consumers' reach, still in the store),
published, and only once the targets hold it durably (the message store
flushed the copies of persistent messages on durable queues, or the other
broker sent its publisher confirms) are the originals removed.  A copy
that no queue takes (unroutable, refused by a length limit, nacked) leaves
its original where it was.  A crash mid-batch brings the originals back
from the store: a message is then at most duplicated, never lost.  Copies
made that were not counted as moved (a copy taken by some target queues
but refused by another, a task stopped while its batch waited for
confirms) are counted as duplicates and reported.

Rate limits bound how fast a redrive pushes messages back at a service
that was failing on them a moment ago.  The limit holds from the first
message: batches are as small as a tenth of a second of the rate, and each
waits until the rate allows its last message, so a slow task is never
more than one message ahead of rate x elapsed, and can be stopped while
most of its messages are still where they were.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from dlx.redrive import origin_of, redriven_headers

from ..broker.message import HEADER_PREFIX, Message
from ..broker.publishing import exchange_for
from ..errors import AMQPError
from ..remote_publisher import CONFIRMED, RETURNED, AmqpUri, RemoteError, RemotePublisher
from ..wire.properties import encode_properties

log = logging.getLogger("amqp_server.workbench")

REDRIVE, MOVE, DELETE = "redrive", "move", "delete"
RUNNING, COMPLETED, FAILED, CANCELLED = "running", "completed", "failed", "cancelled"
BATCH = 100            # messages at most per batch
BATCH_SECONDS = 0.1    # a rate-limited batch holds this long's worth of the rate
DEFAULT_RATE = 1000    # messages per second; 0: as fast as the targets take them
KEPT_FINISHED = 100    # finished tasks still answered at /api/tasks
CONFIRM_TIMEOUT = 60.0

# Why a message stayed where it was.
UNROUTABLE = "unroutable"
NO_ORIGIN = "no origin recorded"
REFUSED = "refused by a target queue"
NACKED = "not confirmed by the target broker"


@dataclass
class Task:
    id: str
    kind: str
    vhost: str
    queue: str
    user: str
    seqs: list[int]
    rate: float
    target: dict
    state: str = RUNNING
    moved: int = 0          # published, confirmed and removed (deleted, for delete)
    not_found: int = 0      # chosen, but gone when their batch came (consumed, expired)
    duplicates: int = 0
    failures: Counter = field(default_factory=Counter)
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None
    missing: list = field(default_factory=list)  # replay candidates not in the queue
    cancel_requested: bool = False

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def as_json(self) -> dict:
        done = self.moved + self.not_found + self.failed
        elapsed = (self.finished or time.time()) - self.started
        return {
            "id": self.id, "kind": self.kind, "vhost": self.vhost, "queue": self.queue,
            "user": self.user, "state": self.state, "target": self.target,
            "total": len(self.seqs), "done": done, "moved": self.moved,
            "not_found": self.not_found, "failed": self.failed,
            "failures": dict(self.failures), "duplicates": self.duplicates,
            "rate_limit": self.rate,
            "rate": round(self.moved / elapsed, 1) if elapsed > 0 else None,
            "error": self.error, "started": int(self.started * 1000),
            "finished": int(self.finished * 1000) if self.finished else None,
            "missing": self.missing,
        }


@dataclass
class Outcome:
    """What became of one batch: entries whose copies are safe, and the
    others by why."""

    safe: list = field(default_factory=list)
    kept: list = field(default_factory=list)   # (entry, reason)
    duplicates: int = 0
    error: str | None = None  # the target broke off: no further batch


class LocalTarget:
    """Publishes into a vhost of this broker through its publish path
    (`republish`: write on the exchange, not an internal one, counted as a
    publish), and waits until what it published is on disk: a publisher
    confirm without the channel."""

    def __init__(self, broker, vhost, grant, exchange: str | None,
                 routing_key: str | None) -> None:
        self.broker = broker
        self.vhost = vhost
        self.grant = grant
        self.exchange = exchange          # None: each message's origin (redrive)
        self.routing_key = routing_key    # None: the message's own key (move)

    def check(self) -> None:
        """A move's target, checked before anything is withdrawn."""
        if self.exchange is not None:
            exchange_for(self.vhost, self.exchange, self.grant)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _route(self, entry) -> tuple[str, tuple[str, ...]] | str:
        message = entry.message
        if self.exchange is not None:
            key = self.routing_key if self.routing_key is not None else message.routing_key
            return self.exchange, (key,)
        origin = origin_of(message.headers, message.routing_key, self.vhost.exchanges)
        if origin is None:
            return NO_ORIGIN
        return origin.exchange, origin.routing_keys

    async def send(self, entries: list) -> Outcome:
        outcome = Outcome()
        generation = None
        for entry in entries:
            route = self._route(entry)
            if isinstance(route, str):
                outcome.kept.append((entry, route))
                continue
            try:
                copy, gen = self._publish(entry.message, *route)
            except AMQPError as exc:
                outcome.kept.append((entry, exc.reply_text))
                continue
            if isinstance(copy, str):
                outcome.kept.append((entry, copy))
                if gen:
                    outcome.duplicates += 1
                continue
            outcome.safe.append(entry)
            if gen is not None:
                generation = gen if generation is None else max(generation, gen)
        if generation is not None:
            await wait_until_stored(self.broker.store, generation)
        return outcome

    def _publish(self, original: Message, exchange_name: str, keys: tuple[str, ...]):
        """(the copy, the store generation making it durable) or (why not,
        whether some queue took it anyway)."""
        header = original.header
        if self.exchange is None:  # a redrive: the copy counts it (dlx/redrive.py)
            props = original.properties
            header = header[:HEADER_PREFIX] + encode_properties(
                replace(props, headers=redriven_headers(props.headers)))
        copy = Message.to(exchange_name, keys[0], header, original.body)
        # The broker's own move: what it knows of the message goes along
        # (its x-death stays its death history under 4.x).
        copy.annotations = original.annotations
        holding = self.vhost.delayed.accepted
        published = self.vhost.republish(copy, self.grant, keys)
        if not published.routed:
            if self.vhost.delayed.accepted != holding:
                # A delayed exchange holds it (x-delay): moved, routed when
                # due, as the dead letterer counts it.
                return copy, copy.stored_gen
            return UNROUTABLE, False
        if published.refused:
            return REFUSED, published.taken
        return copy, copy.stored_gen


class _StoreWaiter:
    """What the message store tells when a flush is on disk."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def durable_progress(self) -> None:
        self.event.set()


async def wait_until_stored(store, generation: int) -> None:
    waiter = _StoreWaiter()
    deadline = time.monotonic() + CONFIRM_TIMEOUT
    while store.synced < generation:
        waiter.event.clear()
        store.wait(waiter)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the message store did not flush in time")
        try:
            await asyncio.wait_for(waiter.event.wait(), left)
        except TimeoutError:
            pass


class RemoteTarget:
    """Another broker, by AMQP URI: published with confirms, as a shovel."""

    def __init__(self, uri: AmqpUri, exchange: str, routing_key: str | None) -> None:
        self.uri = uri
        self.exchange = exchange
        self.routing_key = routing_key
        self.publisher = RemotePublisher(uri)

    def check(self) -> None:
        pass

    async def open(self) -> None:
        await self.publisher.connect()

    async def close(self) -> None:
        await self.publisher.close()

    async def send(self, entries: list) -> Outcome:
        outcome = Outcome()
        sent = []
        for entry in entries:
            message = entry.message
            key = self.routing_key if self.routing_key is not None else message.routing_key
            sent.append((entry, self.publisher.publish(self.exchange, key, message.header,
                                                       message.body)))
        await self.publisher.drain()
        futures = [future for _, future in sent]
        try:
            await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True),
                                   CONFIRM_TIMEOUT)
        except TimeoutError:
            pass
        for entry, future in sent:
            settled = future.result() if future.done() and not future.cancelled() \
                and future.exception() is None else None
            if settled == CONFIRMED:
                outcome.safe.append(entry)
            else:
                outcome.kept.append((entry, UNROUTABLE if settled == RETURNED else NACKED))
        unconfirmed = sum(1 for f in futures if not f.done())
        if unconfirmed or any(f.exception() is not None for f in futures if f.done()):
            # Confirms that never came: the broker may have taken them.
            outcome.duplicates += unconfirmed
            outcome.error = self.publisher.failure or "the target broker stopped confirming"
        return outcome


def batch_size(rate: float) -> int:
    """Messages per batch: BATCH without a limit, else a tenth of a second
    of the rate (at least one), so the first batch does not outrun it."""
    if rate <= 0:
        return BATCH
    return max(1, min(BATCH, int(rate * BATCH_SECONDS)))


class TaskRegistry:
    """Tasks of the management app: started, answered while they run and
    for a while after, and stopped when the app stops."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.tasks: dict[str, Task] = {}
        self._running: dict[str, asyncio.Task] = {}
        self._ids = itertools.count(1)

    def start(self, kind: str, vhost, queue, user: str, seqs: list[int], rate: float,
              target, described: dict, missing: list | None = None) -> Task:
        task = Task(f"{int(time.time())}-{next(self._ids)}", kind, vhost.name, queue.name,
                    user, seqs, rate, described, missing=missing or [])
        self.tasks[task.id] = task
        self._forget_old()
        self._running[task.id] = asyncio.get_running_loop().create_task(
            self._run(task, queue, target))
        return task

    def cancel(self, task: Task) -> None:
        task.cancel_requested = True

    async def stop(self) -> None:
        """The app is stopping: running tasks end after their batch."""
        for task in self.tasks.values():
            task.cancel_requested = True
        running = list(self._running.values())
        if running:
            await asyncio.wait(running, timeout=CONFIRM_TIMEOUT)

    def _forget_old(self) -> None:
        finished = [t for t in self.tasks.values() if t.state != RUNNING]
        for task in finished[:max(0, len(finished) - KEPT_FINISHED)]:
            del self.tasks[task.id]

    async def _run(self, task: Task, queue, target) -> None:
        try:
            if target is not None:
                await target.open()
            try:
                await self._batches(task, queue, target)
            finally:
                if target is not None:
                    await target.close()
            task.state = CANCELLED if task.cancel_requested else COMPLETED
        except (RemoteError, AMQPError, TimeoutError, OSError) as exc:
            task.state = FAILED
            task.error = exc.reply_text if isinstance(exc, AMQPError) else str(exc)
        except Exception as exc:  # reported on the task, never lost in the loop
            log.exception("workbench task %s failed", task.id)
            task.state = FAILED
            task.error = f"internal error: {exc}"
        finally:
            task.finished = time.time()
            self._running.pop(task.id, None)
            log.info("workbench %s of %s in vhost %s by %s: %s", task.kind, task.queue,
                     task.vhost, task.user, task.as_json())

    async def _batches(self, task: Task, queue, target) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        size = batch_size(task.rate)
        handled = 0
        for start in range(0, len(task.seqs), size):
            chosen = task.seqs[start:start + size]
            if task.rate > 0:
                # Never ahead of the rate: the batch waits until the rate
                # allows its last message (the first goes at once).
                due = began + (handled + len(chosen) - 1) / task.rate
                while due > loop.time() and not task.cancel_requested:
                    # In short naps, so a stop is heard while waiting.
                    await asyncio.sleep(min(due - loop.time(), BATCH_SECONDS))
            if task.cancel_requested:
                return
            if queue.deleted:
                raise AMQPError(404, f"queue '{task.queue}' was deleted")
            handled += len(chosen)
            entries = queue.withdraw(chosen)
            task.not_found += len(chosen) - len(entries)
            if not entries:
                continue
            if target is None:  # delete
                queue.discard_withdrawn(entries)
                task.moved += len(entries)
                continue
            try:
                outcome = await target.send(entries)
            except BaseException:
                # Stopped before the copies were confirmed: the originals
                # stay, and copies the targets may hold are duplicates.
                queue.restore_withdrawn(entries)
                task.duplicates += len(entries) if isinstance(target, LocalTarget) else 0
                raise
            queue.discard_withdrawn(outcome.safe)
            queue.restore_withdrawn([entry for entry, _ in outcome.kept])
            task.moved += len(outcome.safe)
            task.duplicates += outcome.duplicates
            for _entry, reason in outcome.kept:
                task.failures[reason] += 1
            if outcome.error is not None:
                raise RemoteError(outcome.error)
            await asyncio.sleep(0)  # let consumers and publishers in between batches
