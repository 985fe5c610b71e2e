"""Messages a delayed-message exchange holds until they are due.

One per virtual host, as the plugin keeps one table per node
(rabbit_delayed_message.erl): a heap by due time and one alarm at the
earliest.  When a message is due it is routed through the exchange of its
name as it is then (the plugin keeps the exchange's name and looks up its
bindings when it routes), with `x-delay` negated so it is not delayed
again (the held copy is made negated when the message arrives, so a
burst falling due only routes); an exchange deleted in between routes it
nowhere.

Durability: a delayed message held by a durable exchange is written to the
message store as an entry of a pseudo-queue named after the exchange
(`stored_name`), its due time in the entry's deadline slot, so the
publisher's confirm waits for it to be on disk (and, clustered, on every
in-sync follower: the store's flushes are what replication ships) and boot
puts it back (`restore`).  The plugin writes every delayed message to its
Mnesia table, transient ones included; so does this, for a durable
exchange.  Once routed, the entry is removed; a crash between the two gives
at most a duplicate, never a loss.
"""

from __future__ import annotations

import heapq
from collections import Counter

from dlx.delays import (
    DELAY_HEADER,
    NO_DELAY,
    Delay,
    delivered_delay,
    due_at,
    scheduled_time,
)
from dlx.expiry import parse_expiration

from ..wire.frames import shortstr
from . import publishing
from .delayed_exchange import DELAYED_TYPE
from .message import Entry, Message
from .timers import Alarm

# Store entries of delayed messages belong to no queue: a name no client
# can give a queue (amq.* is refused, NUL is not in any name tools make).
STORED_PREFIX = "amq.delayed\x00"
# Due messages routed per timer callback, so a burst yields to clients.
ROUTE_BATCH = 2000
TICK_MS = 1.0


def stored_name(exchange: str) -> str:
    return STORED_PREFIX + exchange


def exchange_of_stored(name: str) -> str | None:
    """The exchange a store pseudo-queue holds messages of (None: a queue)."""
    return name[len(STORED_PREFIX):] if name.startswith(STORED_PREFIX) else None


class DelayedMessages:
    def __init__(self, vhost) -> None:
        self.vhost = vhost
        # (due ms, seq, exchange name, entry): seq keeps publish order
        # among messages due at the same millisecond.
        self._heap: list[tuple[float, int, str, Entry]] = []
        self._seq = 0
        self.counts: Counter = Counter()  # exchange name -> messages held
        self.accepted = 0  # messages ever held (a dead letterer reads whether it moved)
        self.routed = 0  # delayed messages routed when due (to a queue or not)
        self._alarm = Alarm(vhost.timers, self._on_timer)

    def __len__(self) -> int:
        return len(self._heap)

    def held_by(self, exchange: str) -> int:
        """The plugin's `messages_delayed` for one exchange."""
        return self.counts.get(exchange, 0)

    def hold(self, exchange, message: Message, delay: Delay, split=None) -> None:
        """`message`, published to `exchange`, waits out `delay`.  What
        waits (and is stored) is the copy that will be routed, `x-delay`
        already negated: the work is done as messages arrive, not when a
        burst of them falls due.  `split`: its headers already cut at
        `x-delay` (Message.split_headers), when the exchange has them."""
        due = due_at(self.vhost.clock(), delay)
        self.accepted += 1
        held = message.with_header(DELAY_HEADER, "long", delivered_delay(delay), split)
        entry = Entry(self._seq, held)
        self._seq += 1
        entry.deadline = due
        store = self.vhost.store
        if exchange.durable and store is not None:
            generation = store.enqueue(self.vhost.name, stored_name(exchange.name), entry,
                                       held)
            # The publisher's confirm waits for the published message's flush.
            message.stored_gen = max(message.stored_gen or 0, generation)
        self._push(entry, exchange.name)

    def _push(self, entry: Entry, exchange: str) -> None:
        heapq.heappush(self._heap, (entry.deadline, entry.seq, exchange, entry))
        self.counts[exchange] += 1
        self._alarm.arm(self._heap[0][0])

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def _on_timer(self) -> None:
        self.release(self.vhost.clock())

    def release(self, now: float, limit: int = ROUTE_BATCH) -> int:
        """Route the messages due by `now` (at most `limit`); re-arms the
        alarm for the rest.  Returns how many were routed."""
        heap = self._heap
        count = 0
        while heap and heap[0][0] <= now and count < limit:
            _, _, exchange_name, entry = heapq.heappop(heap)
            self._route(exchange_name, entry)
            count += 1
        if heap:
            # At most one wake-up a millisecond (the plugin's timers count
            # whole milliseconds too): messages due close together go out
            # together, and a batch cut short lets the loop serve clients.
            self._alarm.arm(max(heap[0][0], now + TICK_MS))
        return count

    def _route(self, exchange_name: str, entry: Entry) -> None:
        vhost = self.vhost
        self.counts[exchange_name] -= 1
        if not self.counts[exchange_name]:
            del self.counts[exchange_name]
        message = entry.message
        exchange = vhost.exchanges.get(exchange_name)
        outcome = publishing.UNROUTED
        if exchange is not None:
            if exchange.type_name == DELAYED_TYPE:
                exchange.remember(message, NO_DELAY)  # x-delay is negative now
            outcome = publishing.enqueue(publishing.route(vhost, exchange, message), message)
        self.routed += 1
        vhost.counters.routed_later(outcome.routed)
        if entry.segment is not None and vhost.store is not None:
            # After the queues' own entries: their records precede this removal.
            vhost.store.remove(vhost.name, stored_name(exchange_name), [entry])

    def drop_all(self) -> None:
        """The virtual host is deleted: nothing it held is routed, nor kept."""
        self._alarm.cancel()
        store = self.vhost.store
        for _, _, exchange_name, entry in self._heap:
            if entry.segment is not None and store is not None:
                store.remove(self.vhost.name, stored_name(exchange_name), [entry])
        self._heap.clear()
        self.counts.clear()

    # ---- recovery (boot.py) ----------------------------------------------

    def restore(self, exchange_name: str, stored: list) -> None:
        """Stored delayed messages of one exchange (message_store
        StoredEntry, in seq order) wait again; those whose time passed
        while the broker was down are routed as soon as the loop runs."""
        for item in stored:
            (_, _, _, seq, exchange, routing_key, header, body, keys, bcc,
             due, annotations) = item.record()
            message = Message(exchange, routing_key, shortstr(exchange) + shortstr(routing_key),
                              header, body, tuple(keys) if keys else None)
            message.annotations = annotations
            if bcc:
                message.bcc = tuple(bcc)
            message.scheduled = scheduled_time(message.properties.headers)
            expiration = message.properties.expiration
            if expiration is not None:
                try:
                    message.ttl = parse_expiration(expiration)
                except ValueError:
                    pass  # it passed when published; nothing to do but route it
            entry = Entry(seq, message)  # its stored seq: a removal names it
            entry.deadline = due if due is not None else 0.0
            entry.segment = item.segment
            self._push(entry, exchange_name)
        self._seq = max(self._seq, max((item.seq for item in stored), default=-1) + 1)
