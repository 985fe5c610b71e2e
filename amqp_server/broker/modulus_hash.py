"""The x-modulus-hash exchange, in RabbitMQ's core since 4.3
(rabbit_exchange_type_modulus_hash.erl; before, the sharding plugin's):
each message goes to exactly one of the exchange's destinations, picked by
the hash of its routing keys (CC and BCC included) modulo how many there
are.  The destinations are sorted first (exchanges before queues, each by
name), so a routing key keeps going where it went while the bindings stay
the same, across restarts too; a destination bound twice has two places
in the list, as in RabbitMQ's binding projection (a bag).  Declared only
in a virtual host following RabbitMQ 4.3's semantics."""

from __future__ import annotations

from .erlang_hash import phash2
from .exchange import Binding, Exchange

MODULUS_HASH_TYPE = "x-modulus-hash"
# rabbit_exchange_type_modulus_hash: ?PHASH2_RANGE, 2^27
PHASH2_RANGE = 1 << 27


class ModulusHashExchange(Exchange):
    type_name = MODULUS_HASH_TYPE

    def __init__(self, *args, **kwargs) -> None:
        self._ordered: list | None = None  # the destinations, sorted; None: to sort again
        super().__init__(*args, **kwargs)

    def _index_add(self, binding: Binding) -> None:
        self._ordered = None

    def _index_remove(self, binding: Binding) -> None:
        self._ordered = None

    def destinations(self) -> list:
        """One per binding, in RabbitMQ's order: lists:sort of #resource{}
        records, whose kind puts exchanges before queues, then the name's bytes."""
        if self._ordered is None:
            self._ordered = sorted(
                (binding.destination for binding in self.bindings.values()),
                key=lambda dest: (dest.is_queue, dest.name.encode("utf-8", "surrogateescape")))
        return self._ordered

    def match(self, routing_keys, message):
        ordered = self.destinations()
        if not ordered:
            return ()
        keys = [key.encode("utf-8", "surrogateescape") for key in routing_keys]
        return (ordered[phash2(keys, PHASH2_RANGE) % len(ordered)],)
