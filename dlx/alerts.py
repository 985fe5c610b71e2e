"""Which dead-letter alerts fire for one queue: the conditions of the
Prometheus rules shipped in docs/prometheus/dead-letter-alerts.yml,
evaluated on the broker's own samples so the web console can name the
queues whose alerts fire without a Prometheus server.

The rules and this function read the same gauges and counters
(docs/operations.md lists them) and compare them with the same thresholds:

- DeadLetterQueueGrowing: dead letters waiting grew by more than `growth`
  over `growth_window` seconds (PromQL: the gauge minus itself `offset`
  the window);
- DeadLetterTooOld: the oldest dead letter waiting is older than `max_age`;
- DeadLetterRateSpike: dead letters arrived faster than `rate` per second
  over `rate_window` seconds (PromQL: `rate()` of the arrival counter);
- AtLeastOnceDeadLettersStuck: an at-least-once queue held dead letters no
  target accepted in every sample of the last `held_for` seconds (the
  rule's `for:` clause).

Samples are plain data, oldest first, with an injected time: no clock here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GROWING = "DeadLetterQueueGrowing"
TOO_OLD = "DeadLetterTooOld"
RATE_SPIKE = "DeadLetterRateSpike"
STUCK = "AtLeastOnceDeadLettersStuck"
ALERTS = (GROWING, TOO_OLD, RATE_SPIKE, STUCK)


@dataclass(frozen=True)
class Thresholds:
    """The rules' numbers; the broker's config sets them (dead_letter_alert_*)
    and docs/prometheus/dead-letter-alerts.yml carries the same defaults."""
    growth: int = 100               # dead letters
    growth_window: float = 900.0    # seconds
    max_age: float = 86400.0        # seconds
    rate: float = 10.0              # dead letters per second
    rate_window: float = 300.0      # seconds
    held_for: float = 600.0         # seconds

    @property
    def longest_window(self) -> float:
        return max(self.growth_window, self.rate_window, self.held_for)


@dataclass(frozen=True)
class Sample:
    """One queue's dead-letter gauges and counter at `time` (seconds)."""
    time: float
    waiting: int              # dead letters waiting, all reasons
    oldest_age: float         # seconds, 0 when none waits
    received: int             # dead letters that ever arrived (a counter)
    held: int                 # at-least-once dead letters no target took yet


def firing(samples: Sequence[Sample], thresholds: Thresholds) -> tuple[str, ...]:
    """The alerts that fire on the newest sample, in ALERTS order.  A
    window reaches back to the newest sample at least that old; with none
    so old, a windowed alert does not fire yet (as `offset` finds no
    series and `for:` has not elapsed)."""
    if not samples:
        return ()
    now = samples[-1]
    found = []
    then = _at_least(samples, thresholds.growth_window)
    if then is not None and now.waiting - then.waiting > thresholds.growth:
        found.append(GROWING)
    if now.oldest_age > thresholds.max_age:
        found.append(TOO_OLD)
    then = _at_least(samples, thresholds.rate_window)
    if then is not None and now.time > then.time and (
            (now.received - then.received) / (now.time - then.time) > thresholds.rate):
        found.append(RATE_SPIKE)
    if now.held > 0 and _held_throughout(samples, thresholds.held_for):
        found.append(STUCK)
    return tuple(found)


def _at_least(samples: Sequence[Sample], window: float) -> Sample | None:
    """The newest sample taken `window` seconds or more before the newest."""
    cutoff = samples[-1].time - window
    for sample in reversed(samples):
        if sample.time <= cutoff:
            return sample
    return None


def _held_throughout(samples: Sequence[Sample], window: float) -> bool:
    cutoff = samples[-1].time - window
    if samples[0].time > cutoff:
        return False  # not watched for long enough yet
    return all(sample.held > 0 for sample in samples if sample.time >= cutoff)
