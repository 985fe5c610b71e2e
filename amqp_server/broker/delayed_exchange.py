"""The `x-delayed-message` exchange type, as RabbitMQ's delayed-message
exchange plugin defines it (rabbit_exchange_type_delayed_message.erl).

It routes like the type its `x-delayed-type` argument names (direct,
fanout, topic or headers: this exchange keeps one of those for its
bindings), except that a message whose `x-delay` header delays it
(dlx/delays.py) routes to nothing now and is handed to the virtual host's
delayed messages (delayed_messages.py), which route it through this
exchange again when it is due, its `x-delay` negated.  Routing to nothing
is what the plugin does, with the consequences it has there: a mandatory
publish gets basic.return 312 NO_ROUTE at once (and its message is still
delivered later), and an alternate exchange gets the message at once too.
"""

from __future__ import annotations

from dlx.delays import DELAY_HEADER, NO_DELAY, Delay, read_delay, read_delay_leniently

from ..errors import INTERNAL_ERROR, AMQPError, precondition_failed
from ..wire.table import FieldTable, typed_value
from .exchange import EXCHANGE_TYPES, Binding, Exchange
from .modulus_hash import MODULUS_HASH_TYPE, ModulusHashExchange

DELAYED_TYPE = "x-delayed-message"
ROUTING_TYPE_ARGUMENT = "x-delayed-type"


def routing_type_of(arguments: FieldTable | None) -> str:
    """The type `x-delayed-type` names, or the plugin's 406 (validate/1)."""
    typed = typed_value(arguments, ROUTING_TYPE_ARGUMENT) if arguments else None
    if typed is None or typed[0] not in ("longstr", "binary"):
        raise precondition_failed(
            "Invalid argument, 'x-delayed-type' must be an existing exchange type")
    name = typed[1]
    if isinstance(name, (bytes, bytearray)):
        name = bytes(name).decode("utf-8", "surrogateescape")
    if name == DELAYED_TYPE:
        raise precondition_failed(
            "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
    if name not in EXCHANGE_TYPES:
        # rabbit_exchange:check_type/1, as exchange.declare says it (3.13).
        raise precondition_failed(f"unknown exchange type '{name}'")
    return name


class DelayedExchange(Exchange):
    type_name = DELAYED_TYPE

    def __init__(self, vhost: str, name: str, durable: bool = False,
                 auto_delete: bool = False, internal: bool = False,
                 arguments: FieldTable | None = None) -> None:
        routing_type = routing_type_of(arguments)
        super().__init__(vhost, name, durable, auto_delete, internal, arguments)
        # The bindings are routed by an exchange of the named type, kept
        # in step with this one's.
        self.routing = EXCHANGE_TYPES[routing_type](vhost, name, durable, auto_delete,
                                                    internal, arguments)
        # Where delayed messages wait: the virtual host's, set when declared.
        self.held = None
        # The last message whose delay was read and what it was: the
        # publish path reads it to check it, then routing reads it again.
        self._last: tuple = _FORGOTTEN

    @property
    def routes_by_content(self) -> bool:
        return True  # the x-delay header decides whether it routes now

    def validate_binding(self, arguments: FieldTable | None) -> None:
        self.routing.validate_binding(arguments)

    def add_binding(self, binding: Binding) -> bool:
        if not super().add_binding(binding):
            return False
        self.routing.add_binding(binding)
        return True

    def remove_binding(self, key: tuple) -> Binding | None:
        binding = super().remove_binding(key)
        if binding is not None:
            self.routing.remove_binding(key)
        return binding

    def check_delay(self, message, layout=None) -> None:
        """A client's publish: an `x-delay` string that is not an integer
        fails it as the plugin's channel crash does (541, the connection
        closes); anywhere else such a message routes at once."""
        try:
            split = message.split_headers(_DELAY_KEY, layout)
            entry = message.header_entries(_DELAY_KEY, split)
            self.remember(message, read_delay(entry, entry.types), split)
        except ValueError as exc:
            raise AMQPError(INTERNAL_ERROR, str(exc)) from None

    def remember(self, message, delay: Delay, split=None) -> None:
        """`message`'s delay is `delay` (and its headers cut at `x-delay`
        are `split`): the next match of it need not read them again."""
        self._last = (message, delay, split)

    def match(self, routing_keys, message):
        last, delay, split = self._last
        if last is not message:
            delay, split = message_delay(message), None
        self._last = _FORGOTTEN  # no message object outlives its publish here
        if delay.delays and self.held is not None:
            self.held.hold(self, message, delay, split)
            return ()
        return self.routing.match(routing_keys, message)


_DELAY_KEY = frozenset((DELAY_HEADER.encode(),))
_FORGOTTEN = (None, NO_DELAY, None)


def message_delay(message) -> Delay:
    """`x-delay` as the plugin reads it; a malformed or non-integer value
    does not delay (the publish path refused a client's already).  Only
    the `x-delay` entry is decoded: this runs for every message the
    exchange routes."""
    try:
        entry = message.header_entries(_DELAY_KEY)
        return read_delay_leniently(entry, entry.types)
    except ValueError:
        return NO_DELAY


# Every type a client may declare: the built-in ones and this one.
DECLARABLE_TYPES: dict[str, type[Exchange]] = {**EXCHANGE_TYPES, DELAYED_TYPE: DelayedExchange}
# In a virtual host following RabbitMQ 4.3, x-modulus-hash too (core since 4.3).
DECLARABLE_TYPES_4_3: dict[str, type[Exchange]] = {**DECLARABLE_TYPES,
                                                    MODULUS_HASH_TYPE: ModulusHashExchange}
