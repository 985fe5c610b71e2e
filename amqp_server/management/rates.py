"""Message rates and queue depths over the last minutes, in the shapes of
RabbitMQ's management API: next to each counter or length `X` an
`X_details` object with its `rate` per second, and when the request asks
for a range (`?lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5`,
seconds) the `samples` of that range, newest first, with `avg_rate` and
`avg` (rabbit_mgmt_stats:format_range).

A timer reads, every INTERVAL seconds on the wall clock's multiples, the
counters the broker keeps anyway: the broker-wide ones of counters.py
(what RabbitMQ's global statistics count: channel publishes, deliveries,
acks...), and each queue's own (messages enqueued, delivered and acked,
dead-lettered by reason, its depth).  Nothing is added per message; the
cost is one pass over the queues per tick.

Memory is fixed per object: the overview's history keeps the last
OVERVIEW_SAMPLES ticks (as every virtual host's), a queue's the last
QUEUE_SAMPLES, as RabbitMQ's `global` and `basic` sample retention
policies.  A queue whose readings have not changed over its window keeps
its last reading alone, so idle queues cost a tuple, not a ring.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from dlx.deaths import REASONS

INTERVAL = 5.0  # seconds, RabbitMQ's collect_statistics_interval
OVERVIEW_SAMPLES = 120  # ten minutes: the overview and each virtual host
QUEUE_SAMPLES = 60  # five minutes: each queue
MAX_RANGE = 500  # samples one answer may ask for (rabbit_mgmt_util ?MAX_RANGE)

# What a queue's reading holds, and a virtual host's (its queues summed):
# counters first, then lengths.
COUNTERS = ("publish", "deliver_get", "ack")
LENGTHS = ("messages", "messages_ready", "messages_unacknowledged")
QUEUE_FIELDS = COUNTERS + tuple(f"dead_lettered.{r}" for r in REASONS) + LENGTHS
QUEUE_COUNTED = len(COUNTERS) + len(REASONS)
# The broker's reading: RabbitMQ's global message_stats, then as above.
GLOBAL_STATS = ("publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
                "deliver_no_ack", "get", "get_no_ack", "get_empty", "redeliver", "ack",
                "deliver_get")
GLOBAL_FIELDS = GLOBAL_STATS + tuple(f"dead_lettered.{r}" for r in REASONS) + LENGTHS


class InvalidRange(ValueError):
    """RabbitMQ's 400 reason for an age or increment it will not serve."""


@dataclass(frozen=True)
class Range:
    """The points an answer samples, in ms: last, last - incr, ... >= first."""
    first: int
    last: int
    incr: int


def ranges(query, now_ms: float | None = None) -> dict[str, Range | None]:
    """`lengths` and `msg_rates` ranges from a request's query, as
    rabbit_mgmt_util:range_ceil/1 reads them: no range unless both age and
    increment are integers; lengths end at the next increment, rates at
    the last one."""
    now = int(time.time() * 1000 if now_ms is None else now_ms)
    found: dict[str, Range | None] = {}
    for prefix, round_up in (("lengths", True), ("msg_rates", False)):
        age, incr = _integer(query.get(prefix + "_age")), _integer(query.get(prefix + "_incr"))
        if age is None or incr is None:
            found[prefix] = None
            continue
        if age <= 0 or incr <= 0 or age // incr > MAX_RANGE:
            raise InvalidRange(f"Invalid range parameters: age {age}, incr {incr}")
        step = incr * 1000
        last = now // step * step
        if round_up and last != now:
            last += step
        found[prefix] = Range(last - age * 1000, last, step)
    return found


def _integer(text) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def queue_reading(queue) -> tuple:
    dead = queue.stats["dead_lettered"]
    ready, unacked = queue.message_count, queue.unacked
    return (queue.published, queue.delivered, queue.acked,
            *(dead.get(reason, 0) for reason in REASONS),
            ready + unacked + queue.delayed_count, ready, unacked)


class History:
    """One object's readings, one per tick since it was first seen (`born`;
    zeros before, as a new queue's counters are).  Until a reading differs
    from the one before, `last` alone stands for every tick; then a ring of
    the last `capacity` ticks, given up again once nothing has changed for
    a whole window."""

    __slots__ = ("born", "capacity", "changed", "last", "ring")

    def __init__(self, capacity: int, tick: int, reading: tuple) -> None:
        self.capacity = capacity
        self.born = tick
        self.last = reading
        self.ring: array | None = None
        self.changed = tick

    def record(self, tick: int, reading: tuple) -> None:
        if reading == self.last:
            if self.ring is not None:
                if tick - self.changed >= self.capacity:
                    self.ring = None
                else:
                    self._put(tick, reading)
            return
        if self.ring is None:
            self.ring = array("q", bytes(8 * len(reading) * self.capacity))
            for earlier in range(max(self.born, tick - self.capacity + 1), tick):
                self._put(earlier, self.last)
        self._put(tick, reading)
        self.last = reading
        self.changed = tick

    def _put(self, tick: int, reading: tuple) -> None:
        width = len(reading)
        at = tick % self.capacity * width
        self.ring[at:at + width] = array("q", reading)

    def at(self, tick: int) -> tuple:
        """The reading at a tick within the last `capacity`."""
        if tick < self.born:
            return (0,) * len(self.last)
        if self.ring is None:
            return self.last
        width = len(self.last)
        at = tick % self.capacity * width
        return tuple(self.ring[at:at + width])


class Rates:
    """The sampler and the answers drawn from it."""

    def __init__(self, broker, interval: float = INTERVAL, clock=time.time) -> None:
        self.broker = broker
        self.interval = interval
        self.clock = clock  # seconds, wall clock
        self.ticks = 0
        self.times = array("q", bytes(8 * OVERVIEW_SAMPLES))  # ms of each tick
        self.overall: History | None = None
        self.vhosts: dict[str, History] = {}
        # Counters of a virtual host's deleted queues, so its sums never go down.
        self.retired: dict[str, tuple] = {}
        self.queues: dict[object, tuple[str, History]] = {}
        self._loop = None
        self._handle = None

    # ---- the timer -------------------------------------------------------

    def start(self, loop) -> None:
        self._loop = loop
        self.sample()
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop = None

    def _schedule(self, last: float | None = None) -> None:
        """The next multiple of the interval after now, and after `last`:
        the loop's clock is not the wall clock, so a timer may fire a
        little before its multiple, which must not bring a second tick."""
        now = self.clock()
        due = (math.floor(now / self.interval) + 1) * self.interval
        if last is not None:
            due = max(due, last + self.interval)
        self._handle = self._loop.call_later(due - now, self._tick, due)

    def _tick(self, due: float) -> None:
        self._schedule(due)
        self.sample(due * 1000)

    # ---- one tick ----------------------------------------------------------

    def sample(self, now_ms: float | None = None) -> None:
        """Read every counter once (the timer's work; tests call it too)."""
        now = int(self.clock() * 1000 if now_ms is None else now_ms)
        if self.ticks and now <= self.times[(self.ticks - 1) % OVERVIEW_SAMPLES]:
            now = self.times[(self.ticks - 1) % OVERVIEW_SAMPLES] + 1
        tick = self.ticks
        self.times[tick % OVERVIEW_SAMPLES] = now
        vhosts = self.broker.vhosts
        for name in [n for n in self.vhosts if n not in vhosts]:
            del self.vhosts[name]
            self.retired.pop(name, None)
        known, seen = self.queues, {}
        for queue, (name, history) in known.items():
            if name in vhosts and vhosts[name].queues.get(queue.name) is not queue:
                # Deleted since the last tick: its counts stay in its vhost's.
                kept = self.retired.get(name, (0,) * QUEUE_COUNTED)
                self.retired[name] = tuple(a + b for a, b in
                                           zip(kept, history.last[:QUEUE_COUNTED]))
        totals = [0] * len(LENGTHS)
        for name, vhost in vhosts.items():
            summed = list(self.retired.get(name, (0,) * QUEUE_COUNTED)) + [0] * len(LENGTHS)
            for queue in vhost.queues.values():
                reading = queue_reading(queue)
                entry = known.get(queue)
                if entry is None:
                    entry = (name, History(QUEUE_SAMPLES, tick, reading))
                entry[1].record(tick, reading)
                seen[queue] = entry
                for i, value in enumerate(reading):
                    summed[i] += value
            _record(self.vhosts, name, OVERVIEW_SAMPLES, tick, tuple(summed))
            for i in range(len(LENGTHS)):
                totals[i] += summed[QUEUE_COUNTED + i]
        self.queues = seen
        reading = _global_stats(self.broker.counters) + _dead_letters(self.broker) + \
            tuple(totals)
        if self.overall is None:
            self.overall = History(OVERVIEW_SAMPLES, tick, reading)
        self.overall.record(tick, reading)
        self.ticks = tick + 1

    # ---- answers -------------------------------------------------------------

    def overview(self, vhosts: Iterable[str], everything: bool,
                 wanted: dict[str, Range | None]) -> dict:
        """The overview's counters with their details: the broker's own for
        a user who sees `everything` (RabbitMQ's global statistics), else
        the sums of the given virtual hosts' queues."""
        if everything:
            current = (_global_stats(self.broker.counters) + _dead_letters(self.broker)
                       + _lengths(self.broker.vhosts.values()))
            histories, fields, capacity = [self.overall], GLOBAL_FIELDS, OVERVIEW_SAMPLES
        else:
            names = [name for name in vhosts if name in self.broker.vhosts]
            current = self._vhost_totals(names)
            histories = [self.vhosts.get(name) for name in names]
            fields, capacity = QUEUE_FIELDS, OVERVIEW_SAMPLES
        details = self._details(histories, len(fields), capacity, wanted)
        stats, dead, totals = {}, {}, {}
        for name, value, detail in zip(fields, current, details):
            if name.startswith("dead_lettered."):
                reason = name.partition(".")[2]
                dead[reason] = value
                dead[reason + "_details"] = detail
            elif name in LENGTHS:
                totals[name], totals[name + "_details"] = value, detail
            else:
                stats[name], stats[name + "_details"] = value, detail
        return {"message_stats": stats, "queue_totals": totals,
                "dead_lettered": {r: dead[r] for r in REASONS},
                "dead_lettered_details": {r: dead[r + "_details"] for r in REASONS}}

    def queue(self, queue, wanted: dict[str, Range | None]) -> dict:
        """The `_details` of a queue's counters and lengths, to merge into
        its JSON (merge())."""
        known = self.queues.get(queue)
        details = self._details([known[1] if known else None], len(QUEUE_FIELDS),
                                QUEUE_SAMPLES, wanted)
        answer: dict = {"message_stats": {}, "dead_lettered_details": {}}
        for name, detail in zip(QUEUE_FIELDS, details):
            if name.startswith("dead_lettered."):
                answer["dead_lettered_details"][name.partition(".")[2]] = detail
            elif name in LENGTHS:
                answer[name + "_details"] = detail
            else:
                answer["message_stats"][name + "_details"] = detail
        return answer

    def _vhost_totals(self, names: list[str]) -> tuple:
        summed = [0] * len(QUEUE_FIELDS)
        for name in names:
            for i, value in enumerate(self.retired.get(name, ())):
                summed[i] += value
            for queue in self.broker.vhosts[name].queues.values():
                for i, value in enumerate(queue_reading(queue)):
                    summed[i] += value
        return tuple(summed)

    def _details(self, histories: list[History | None], width: int, capacity: int,
                 wanted: dict[str, Range | None]) -> list[dict]:
        """One `_details` object per field: counters take the msg_rates
        range, lengths the lengths range."""
        lengths_from = width - len(LENGTHS)
        instant = self._instant(histories, width, capacity)
        answers = []
        for kind, fields in (("msg_rates", range(lengths_from)),
                             ("lengths", range(lengths_from, width))):
            span = wanted.get(kind)
            if span is None:
                answers += [{"rate": instant[i]} for i in fields]
                continue
            points = self._points(histories, width, capacity, span)
            answers += [_ranged([(t, reading[i]) for t, reading in points]) for i in fields]
        return answers

    def _retained(self, capacity: int) -> int:
        return max(0, self.ticks - capacity)

    def _reading(self, histories, width: int, tick: int) -> tuple:
        summed = [0] * width
        for history in histories:
            if history is not None:
                for i, value in enumerate(history.at(tick)):
                    summed[i] += value
        return tuple(summed)

    def _instant(self, histories, width: int, capacity: int) -> list[float]:
        """Per second between the last two ticks (rate_from_last_increment)."""
        newest = self.ticks - 1
        if newest - 1 < self._retained(capacity):
            return [0.0] * width
        after = self._reading(histories, width, newest)
        before = self._reading(histories, width, newest - 1)
        elapsed = (self.times[newest % OVERVIEW_SAMPLES]
                   - self.times[(newest - 1) % OVERVIEW_SAMPLES])
        return [(a - b) * 1000 / elapsed for a, b in zip(after, before)]

    def _points(self, histories, width: int, capacity: int, span: Range) -> list[tuple]:
        """(timestamp, reading) at each point of the range, newest first: the
        reading of the last tick at or before the point.  Before the first
        tick everything was zero (the counters count from the start, as
        RabbitMQ's samples do); before the oldest tick kept once the ring
        has come round, nothing is known and no point is given."""
        oldest = self._retained(capacity)
        tick = self.ticks - 1
        points = []
        at = span.last
        while at >= span.first:
            while tick >= oldest and self.times[tick % OVERVIEW_SAMPLES] > at:
                tick -= 1
            if tick >= oldest:
                points.append((at, self._reading(histories, width, tick)))
            elif oldest == 0 and self.ticks:
                points.append((at, (0,) * width))
            else:
                break
            at -= span.incr
        return points


def _ranged(points: list[tuple[int, int]]) -> dict:
    """rabbit_mgmt_stats:format_rate/6 for one field: rate from the last
    two points, avg_rate over the range, avg of the samples."""
    samples = [{"sample": value, "timestamp": at} for at, value in points]
    if len(points) < 2:
        return {"rate": 0.0, "samples": samples}
    (t2, s2), (t1, s1) = points[0], points[1]
    (t0, s0) = points[-1]
    return {"rate": (s2 - s1) * 1000 / (t2 - t1), "samples": samples,
            "avg_rate": (s2 - s0) * 1000 / (t2 - t0),
            "avg": sum(value for _, value in points) / len(points)}


def _record(histories: dict, key, capacity: int, tick: int, reading: tuple) -> None:
    history = histories.get(key)
    if history is None:
        history = histories[key] = History(capacity, tick, reading)
    history.record(tick, reading)


def _global_stats(c) -> tuple:
    """RabbitMQ's global message_stats from the broker's counters."""
    deliver = sum(c.consumed_manual_ack.values())
    deliver_no_ack = sum(c.consumed_auto_ack.values())
    get = sum(c.got_manual_ack.values())
    get_no_ack = sum(c.got_auto_ack.values())
    return (c.received, c.confirmed, c.unroutable_returned, c.unroutable_dropped, deliver,
            deliver_no_ack, get, get_no_ack, sum(c.get_empty.values()),
            sum(c.redelivered.values()), sum(c.acknowledged.values()),
            deliver + deliver_no_ack + get + get_no_ack)


def _dead_letters(broker) -> tuple:
    """Dead-lettered by reason since start, deleted queues' included (what
    the Prometheus exporter's queue_messages_dead_lettered_total sums)."""
    counts = dict(broker.counters.retired_republished)
    for vhost in broker.vhosts.values():
        for queue in vhost.queues.values():
            for reason, count in queue.stats["dead_lettered"].items():
                counts[reason] = counts.get(reason, 0) + count
    return tuple(counts.get(reason, 0) for reason in REASONS)


def _lengths(vhosts) -> tuple:
    summed = [0] * len(LENGTHS)
    for vhost in vhosts:
        for queue in vhost.queues.values():
            for i, value in enumerate(queue_reading(queue)[QUEUE_COUNTED:]):
                summed[i] += value
    return tuple(summed)


def merge(shape: dict, extra: dict) -> dict:
    """`extra`'s keys into `shape`, one level of nested objects deep."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(shape.get(key), dict):
            shape[key].update(value)
        else:
            shape[key] = value
    return shape
