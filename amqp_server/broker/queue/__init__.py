"""A queue, built from parts with one job each (DESIGN.md, "A queue is built
from parts"): `core` holds the messages and hands them to consumers and is
the hot path; `limits` makes messages leave without being consumed (length
limits, TTL at the head and by the reaper, x-expires); `redelivery` takes
back what consumers return (counts, delays, delivery limits) and holds
at-least-once dead letters; `paging` keeps long queues' tails on disk."""

from .core import Queue
from .outcome import ACCEPTED, REJECTED

__all__ = ["ACCEPTED", "REJECTED", "Queue"]
