"""The broker's watch over its dead letter queues: once a second every queue
marks what arrived (queue/arrivals.py, for the age of its oldest message);
every `interval` seconds each queue that has seen dead letters is sampled
and the alert conditions of docs/prometheus/dead-letter-alerts.yml are
evaluated on its samples by `dlx.alerts.firing`, so the web console names
the queues whose alerts fire with or without a Prometheus server."""

from __future__ import annotations

from collections import deque

from dlx.alerts import Sample, Thresholds, firing


class DeadLetterWatch:
    def __init__(self, thresholds: Thresholds, interval: float = 15.0) -> None:
        self.thresholds = thresholds
        self.interval = interval  # seconds between samples (Prometheus's evaluation interval)
        self._samples: dict[tuple[str, str], deque[Sample]] = {}
        self._last: float | None = None
        self.firing: dict[tuple[str, str], tuple[str, ...]] = {}

    def tick(self, vhosts, now_ms: float) -> None:
        for vhost in vhosts:
            for queue in vhost.queues.values():
                queue.mark_arrivals(now_ms)
        now = now_ms / 1000.0
        if self._last is None or now - self._last >= self.interval - 0.001:
            self._last = now
            self.sample(vhosts, now)

    def sample(self, vhosts, now: float) -> None:
        """One sample of each queue with dead letters (seen now or before),
        and the alerts that fire on its samples."""
        samples = self._samples
        seen = set()
        cutoff = now - self.thresholds.longest_window
        for vhost in vhosts:
            for queue in vhost.queues.values():
                key = (vhost.name, queue.name)
                census = queue.dead_letter_census()
                waiting = sum(census.waiting.values())
                received = sum(queue.stats["dead_letters_received"].values())
                held = queue.held_count
                if not (waiting or received or held) and key not in samples:
                    continue
                seen.add(key)
                age = (max(0.0, now - census.oldest_death)
                       if waiting and census.oldest_death is not None else 0.0)
                series = samples.setdefault(key, deque())
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

    def alerts(self) -> list[dict]:
        """The queues whose alerts fire, as the management API gives them."""
        return [{"vhost": vhost, "queue": queue, "alerts": list(names)}
                for (vhost, queue), names in sorted(self.firing.items())]
