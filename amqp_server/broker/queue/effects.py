"""What a queue's decisions ask the world to do, as data (rabbit_fifo's
effects): the parts and the queue decide, `Queue.carry_out` (the queue's
shell, core.py) does it, after the decision is complete.  A test can
record the effects instead of carrying them out, and check a decision
without consumers, a store, timers or an event loop.

- `Deliver(consumer, entries)`: the consumer takes these entries (the
  store notes the stored ones as delivered);
- `DeadLetter(messages, reason)`: the virtual host's dead-letterer takes
  them (dead_letterer.py); the dead letters no target took (quorum
  at-least-once) come back to the queue, which holds them;
- `Forget(entries)`: they left the queue for good, the store forgets them;
- `CountReturn(entry, due)`: a returned delivery's count (and when its
  delayed redelivery is due) goes to the store;
- `ArmTimer(timer, due)`: call the queue back at wall-clock `due` (ms):
  `TTL` to expire its head, `REDELIVERY` for delayed messages, `EXPIRES`
  to check whether it is still unused (x-expires);
- `Unused()`: nobody used the queue for its x-expires: the virtual host
  deletes it;
- `GrantCredit(senders)`: the publishers that waited for the queue to
  drain (credit.py) may go on.

The hot paths carry out what they decided without building the effect
first, through the same functions `carry_out` uses: a publish to a plain
queue, a run, and batches to one consumer hand their deliveries over
(`Queue._hand_over`; test_queue_parts.py checks them against the general
path), and a TTL queue re-arms its timer after each publish
(`Queue._arm`)."""

from __future__ import annotations

from typing import NamedTuple

# ArmTimer's timers
TTL = "ttl"
REDELIVERY = "redelivery"
EXPIRES = "expires"


class Deliver(NamedTuple):
    consumer: object
    entries: list


class DeadLetter(NamedTuple):
    messages: list
    reason: str


class Forget(NamedTuple):
    entries: list


class CountReturn(NamedTuple):
    entry: object
    due: float | None


class ArmTimer(NamedTuple):
    timer: str
    due: float


class Unused(NamedTuple):
    pass


class GrantCredit(NamedTuple):
    senders: object  # a collection of publishers (credit_granted(queue))
