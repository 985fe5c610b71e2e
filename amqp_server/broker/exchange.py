"""Exchanges and their routing rules: direct, fanout, topic, headers.

An exchange maps a message to destinations, which are queues or (for
exchange-to-exchange bindings) other exchanges; the virtual host walks the
graph.  Each type keeps an index shaped for its own match so routing does
not scan the binding list.
"""

from __future__ import annotations

from ..errors import access_refused, precondition_failed, resource_name
from ..wire.table import FieldTable, encode_array, encode_table, infer_type
from .topic import TopicTrie


class Binding:
    __slots__ = ("source", "destination", "routing_key", "arguments", "key")

    def __init__(self, source: Exchange, destination, routing_key: str,
                 arguments: FieldTable | None) -> None:
        self.source = source
        self.destination = destination
        self.routing_key = routing_key
        self.arguments = arguments or FieldTable()
        # Bindings are equal when destination, key and arguments are (RabbitMQ).
        self.key = (destination, routing_key, encode_table(self.arguments))


class Exchange:
    is_queue = False
    type_name = ""

    def __init__(self, vhost: str, name: str, durable: bool = False,
                 auto_delete: bool = False, internal: bool = False,
                 arguments: FieldTable | None = None) -> None:
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments or FieldTable()
        self.bindings: dict[tuple, Binding] = {}
        # How many bindings lead to exchanges: routing walks the graph only then.
        self.exchange_bindings = 0
        self.policy = None
        self.apply_policy(None)

    def apply_policy(self, policy) -> None:
        """The argument beats a policy's alternate-exchange (rabbit_exchange)."""
        self.policy = policy
        alternate = self.arguments.get("alternate-exchange")
        if not isinstance(alternate, str) and policy is not None:
            alternate = policy.definition.get("alternate-exchange")
        self.alternate: str | None = alternate if isinstance(alternate, str) else None

    @property
    def routes_by_content(self) -> bool:
        """Whether a message's headers can change where it goes from here:
        a headers exchange, or one whose messages may go on to another
        exchange (bound to it, or its alternate)."""
        return (self.type_name == "headers" or self.exchange_bindings > 0
                or self.alternate is not None)

    def check_publishable(self) -> None:
        """Only exchanges may route into an internal exchange (403)."""
        if self.internal:
            raise access_refused(
                f"cannot publish to internal {resource_name('exchange', self.name, self.vhost)}")

    def add_binding(self, binding: Binding) -> bool:
        if binding.key in self.bindings:
            return False
        self.bindings[binding.key] = binding
        if not binding.destination.is_queue:
            self.exchange_bindings += 1
        self._index_add(binding)
        return True

    def remove_binding(self, key: tuple) -> Binding | None:
        binding = self.bindings.pop(key, None)
        if binding is not None:
            if not binding.destination.is_queue:
                self.exchange_bindings -= 1
            self._index_remove(binding)
        return binding

    def validate_binding(self, arguments: FieldTable | None) -> None:
        """Raise the AMQP error RabbitMQ gives for bad binding arguments."""

    def match(self, routing_keys: list[str], message) -> set | frozenset | tuple | dict:
        """Destinations bound for these routing keys; each type overrides it."""
        return ()

    def _index_add(self, binding: Binding) -> None:
        pass

    def _index_remove(self, binding: Binding) -> None:
        pass


class _CountedIndex:
    """destination -> number of bindings; several bindings may share one."""

    @staticmethod
    def add(index: dict, key, destination) -> None:
        dests = index.setdefault(key, {})
        dests[destination] = dests.get(destination, 0) + 1

    @staticmethod
    def remove(index: dict, key, destination) -> None:
        dests = index.get(key)
        if dests is None:
            return
        count = dests.get(destination, 0)
        if count <= 1:
            dests.pop(destination, None)
            if not dests:
                del index[key]
        else:
            dests[destination] = count - 1


class DirectExchange(Exchange):
    type_name = "direct"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._by_key: dict[str, dict] = {}

    def _index_add(self, binding: Binding) -> None:
        _CountedIndex.add(self._by_key, binding.routing_key, binding.destination)

    def _index_remove(self, binding: Binding) -> None:
        _CountedIndex.remove(self._by_key, binding.routing_key, binding.destination)

    def match(self, routing_keys, message):
        if len(routing_keys) == 1:
            return self._by_key.get(routing_keys[0], ())
        found: set = set()
        for key in routing_keys:
            found.update(self._by_key.get(key, ()))
        return found


class FanoutExchange(Exchange):
    type_name = "fanout"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._all: dict = {}

    def _index_add(self, binding: Binding) -> None:
        self._all[binding.destination] = self._all.get(binding.destination, 0) + 1

    def _index_remove(self, binding: Binding) -> None:
        count = self._all.get(binding.destination, 0)
        if count <= 1:
            self._all.pop(binding.destination, None)
        else:
            self._all[binding.destination] = count - 1

    def match(self, routing_keys, message):
        return self._all


class TopicExchange(Exchange):
    type_name = "topic"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._trie = TopicTrie()

    def _index_add(self, binding: Binding) -> None:
        self._trie.add(binding.routing_key, binding.destination)

    def _index_remove(self, binding: Binding) -> None:
        self._trie.remove(binding.routing_key, binding.destination)

    def match(self, routing_keys, message):
        if len(routing_keys) == 1:
            return self._trie.match(routing_keys[0])
        found: set = set()
        for key in routing_keys:
            found.update(self._trie.match(key))
        return found


_X_MATCH_VALUES = ("all", "any", "all-with-x", "any-with-x")


class HeadersExchange(Exchange):
    """Matches message headers against binding arguments (x-match)."""

    type_name = "headers"

    def validate_binding(self, arguments: FieldTable | None) -> None:
        if not arguments or "x-match" not in arguments:
            return
        value = arguments["x-match"]
        kind = arguments.type_of("x-match")
        if kind != "longstr":
            raise precondition_failed(
                f"Invalid x-match field type {kind} (value {value!r}); expected longstr")
        if value not in _X_MATCH_VALUES:
            raise precondition_failed(
                f'Invalid x-match field value <<"{value}">>; '
                "expected all, any, all-with-x, or any-with-x")

    def match(self, routing_keys, message):
        headers = message.headers
        found = set()
        for binding in self.bindings.values():
            if binding.destination not in found and headers_match(binding.arguments, headers):
                found.add(binding.destination)
        return found


def headers_match(arguments: FieldTable, headers: dict) -> bool:
    """RabbitMQ 3.13's rabbit_exchange_type_headers match, on one binding:
    values equal as Erlang terms (=:=), so every integer width is one
    integer, but an integer is not a float and `true` is not 1."""
    mode = arguments.get("x-match", "all")
    with_x = mode in ("all-with-x", "any-with-x")
    want_any = mode in ("any", "any-with-x")
    types = arguments.types
    header_types = getattr(headers, "types", {})
    for key, expected in arguments.items():
        if key == "x-match" or (not with_x and key.startswith("x-")):
            continue
        if types.get(key) == "void" or expected is None:
            ok = key in headers
        else:
            ok = key in headers and _term(header_types.get(key), headers[key], 1000) == _term(
                types.get(key), expected, 1)
        if want_any and ok:
            return True
        if not want_any and not ok:
            return False
    return not want_any


_INTEGERS = frozenset(("byte", "short", "signedint", "long", "unsignedbyte",
                       "unsignedshort", "unsignedint"))


def _term(kind: str | None, value, timestamp_scale: int) -> tuple:
    """A header value as the Erlang term RabbitMQ compares.  Message
    headers carry timestamps in milliseconds there (mc_amqpl multiplies
    them by 1000); binding arguments keep theirs."""
    kind = kind or infer_type(value)
    if kind in _INTEGERS:
        return ("integer", value)
    if kind == "timestamp":
        return ("integer", int(value) * timestamp_scale)
    if kind in ("float", "double"):
        return ("float", value)
    if kind in ("longstr", "binary"):
        return ("binary", value.encode("utf-8", "surrogateescape")
                if isinstance(value, str) else bytes(value))
    if kind in ("table", "array"):
        return (kind, encode_table(value) if kind == "table" else encode_array(value))
    return (kind, value)


class DefaultExchange(DirectExchange):
    """The nameless exchange: every queue is bound by its own name."""

    def __init__(self, vhost: str, queues: dict) -> None:
        super().__init__(vhost, "", durable=True)
        self._queues = queues

    def match(self, routing_keys, message):
        queues = self._queues
        if len(routing_keys) == 1:
            queue = queues.get(routing_keys[0])
            return (queue,) if queue is not None else ()
        return {queues[key] for key in routing_keys if key in queues}


EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
}
