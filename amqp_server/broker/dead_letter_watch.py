"""The broker's watch over its dead letter queues: once a second queues
mark what arrived (queue/arrivals.py, for the age of their oldest message;
every queue each second up to MARKS_PER_TICK queues);
every `interval` seconds each queue that has seen dead letters is sampled
and the alert conditions of docs/prometheus/dead-letter-alerts.yml are
evaluated on its samples by `dlx.alerts.firing`, so the web console names
the queues whose alerts fire with or without a Prometheus server.

A queue with no dead letter to look at is not sampled, only noted as
quiet since then; its first sample comes with zero samples standing for that
quiet time (where each alert's window looks back, and the last round),
so a burst into a dead letter queue that was empty fires as the rules do
on the zeros Prometheus scraped meanwhile."""

from __future__ import annotations

from collections import deque

from dlx.alerts import Sample, Thresholds, firing

# Queues whose arrivals one tick marks: about 5 ms of the loop a second.
MARKS_PER_TICK = 5000


class DeadLetterWatch:
    def __init__(self, thresholds: Thresholds, interval: float = 15.0) -> None:
        self.thresholds = thresholds
        self.interval = interval  # seconds between samples (Prometheus's evaluation interval)
        self._samples: dict[tuple[str, str], deque[Sample]] = {}
        self._last: float | None = None
        self._sampled_at: float | None = None  # the last sampling round
        self.firing: dict[tuple[str, str], tuple[str, ...]] = {}
        self._to_mark: list = []  # queues still to mark this round, last first

    def tick(self, vhosts, now_ms: float) -> None:
        self._mark(vhosts, now_ms)
        now = now_ms / 1000.0
        if self._last is None or now - self._last >= self.interval - 0.001:
            self._last = now
            self.sample(vhosts, now)

    def _mark(self, vhosts, now_ms: float) -> None:
        """Arrival marks for the next MARKS_PER_TICK queues: every queue
        each second up to that many queues, each every few seconds beyond
        (the age of an oldest message is then that much later a bound)."""
        if not self._to_mark:
            self._to_mark = [queue for vhost in vhosts for queue in vhost.queues.values()]
            self._to_mark.reverse()
        to_mark = self._to_mark
        for _ in range(min(MARKS_PER_TICK, len(to_mark))):
            queue = to_mark.pop()
            if not queue.deleted:
                queue.mark_arrivals(now_ms)

    def sample(self, vhosts, now: float) -> None:
        """One sample of each queue with dead letters (seen now or before),
        and the alerts that fire on its samples."""
        samples = self._samples
        seen = set()
        cutoff = now - self.thresholds.longest_window
        previous, self._sampled_at = self._sampled_at, now
        for vhost in vhosts:
            for queue in vhost.queues.values():
                arrived = queue.stats["dead_letters_received"]
                key = (vhost.name, queue.name)
                if not (arrived or queue.ready or queue.pager.count or queue.held_count):
                    if key not in samples:
                        # Nothing to look at: an empty queue that never saw any.
                        if queue.quiet_since is None:
                            queue.quiet_since = now
                        continue
                received = sum(arrived.values())
                held = queue.held_count
                census = queue.dead_letter_census()
                waiting = sum(census.waiting.values())
                if not (waiting or received or held) and key not in samples:
                    if queue.quiet_since is None:  # messages, none of them dead letters
                        queue.quiet_since = now
                    continue
                seen.add(key)
                age = (max(0.0, now - census.oldest_death)
                       if waiting and census.oldest_death is not None else 0.0)
                series = samples.get(key)
                if series is None:
                    series = samples[key] = deque(
                        self._quiet(queue.quiet_since, previous))
                series.append(Sample(now, waiting, age, received, held))
                # Keep the newest sample as old as the longest window, no older.
                while len(series) >= 2 and series[1].time <= cutoff:
                    series.popleft()
                fired = firing(series, self.thresholds)
                if fired:
                    self.firing[key] = fired
                else:
                    self.firing.pop(key, None)
        for key in list(samples):
            if key not in seen:  # the queue is gone
                del samples[key]
                self.firing.pop(key, None)

    def _quiet(self, since: float | None, until: float | None) -> list[Sample]:
        """Zero samples for a queue found quiet from `since` to `until`
        (the last round): one where each window reaches back to, one at
        `until`.  None when it was not seen quiet before this round."""
        if since is None or until is None or since > until:
            return []
        t = self.thresholds
        times = {max(since, until - window)
                 for window in (t.growth_window, t.rate_window, t.held_for)}
        return [Sample(at, 0, 0.0, 0, 0) for at in sorted(times | {until})]

    def alerts(self) -> list[dict]:
        """The queues whose alerts fire, as the management API gives them."""
        return [{"vhost": vhost, "queue": queue, "alerts": list(names)}
                for (vhost, queue), names in sorted(self.firing.items())]
