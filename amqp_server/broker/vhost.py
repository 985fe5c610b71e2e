"""A virtual host: its exchanges, queues and bindings, and the rules RabbitMQ
applies when clients declare, bind and delete them.

Errors carry RabbitMQ's exact wording (rabbit_channel.erl, rabbit_misc.erl),
because clients and their users match on it.
"""

from __future__ import annotations

import base64
import os
import random
from collections.abc import Callable

from dlx.addresses import address_filter, per_address_queue, qpid_names
from dlx.semantics import DEFAULT as DEFAULT_SEMANTICS, is_4x
from policies.address_settings import AddressSettings
from policies.deprecated_features import (
    QUEUE_MASTER_LOCATOR,
    TRANSIENT_NONEXCL_QUEUES,
    denied_message,
    permitted,
)
from policies.effective import resolve
from policies.model import match_exchange, match_queue

# rabbit_classic_queue:capabilities() -> queue_arguments: the only arguments
# compared when a queue is declared again (a stream's: its own type's).
from policies.registry import (
    EQUIVALENCE_ARGUMENTS as QUEUE_EQUIVALENCE_ARGS,
    QUEUE_TYPES,
    STREAM_EQUIVALENCE_ARGUMENTS as STREAM_EQUIVALENCE_ARGS,
    ArgumentError,
    queue_type_of,
    validate_queue_arguments,
)
from policies.store import PolicyStore

from ..errors import (
    INTERNAL_ERROR,
    AMQPError,
    access_refused,
    not_found,
    precondition_failed,
    resource_locked,
    resource_name,
)
from ..storage.definition_log import NO_JOURNAL, persists
from ..wire.table import FieldTable, encode_table, typed_value
from . import publishing
from .access_control import check_not_default
from .auto_created import AutoCreatedQueues
from .counters import Counters
from .dead_letterer import DeadLetterer
from .delayed_exchange import DECLARABLE_TYPES, DECLARABLE_TYPES_4_3, DelayedExchange
from .delayed_messages import DelayedMessages
from .direct_reply import DirectReplies
from .exchange import EXCHANGE_TYPES, Binding, DefaultExchange, Exchange
from .message import Message
from .queue import Queue
from .queue.credit import HIGH_BYTES as CREDIT_BYTES, HIGH_COUNT as CREDIT_COUNT
from .stream import StreamQueue
from .stream.declaring import check_stream_declare
from .timers import Timers, now_ms

EXCHANGE_EQUIVALENCE_ARGS = ("alternate-exchange",)
# Distinct (arguments, policies) whose merged settings a vhost keeps.
SETTINGS_KEPT = 4096

# Every vhost's own exchanges (rabbit_vhost); amq.rabbitmq.trace is the
# internal one RabbitMQ's firehose tracer publishes to.
STANDARD_EXCHANGES = (
    ("amq.direct", "direct", False),
    ("amq.fanout", "fanout", False),
    ("amq.topic", "topic", False),
    ("amq.headers", "headers", False),
    ("amq.match", "headers", False),
    ("amq.rabbitmq.trace", "topic", True),
)

# rabbit_misc:type_class/1: integers of any width compare as equals.
_TYPE_CLASS = {
    "byte": "int", "short": "int", "signedint": "int", "long": "int",
    "decimal": "int", "unsignedbyte": "int", "unsignedshort": "int",
    "unsignedint": "int", "float": "float", "double": "float",
}


def server_generated_name(prefix: str) -> str:
    """RabbitMQ's rabbit_guid:binary/2 form: prefix, '-', url-safe base64."""
    raw = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
    return f"{prefix}-{raw}"


def _describe(typed: tuple[str, object] | None) -> str:
    """rabbit_misc:val/1 as it appears in "inequivalent arg" errors."""
    if typed is None:
        return "none"
    kind, value = typed
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"the value '{value}' of type '{kind}'"


def _bare(value: object) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"'{value}'"


def _flag(value: bool) -> str:
    return "'true'" if value else "'false'"


def assert_args_equivalent(current: FieldTable, requested: FieldTable,
                           keys: tuple[str, ...], what: str) -> None:
    for key in keys:
        old = typed_value(current, key)
        new = typed_value(requested, key)
        if old == new:
            continue
        if old is not None and new is not None:
            old_class = _TYPE_CLASS.get(old[0], old[0])
            new_class = _TYPE_CLASS.get(new[0], new[0])
            if old_class == new_class and old[1] == new[1]:
                continue
            # Both present: RabbitMQ compares and prints the bare values.
            raise precondition_failed(
                f"inequivalent arg '{key}' for {what}: "
                f"received {_bare(new[1])} but current is {_bare(old[1])}")
        if key == "x-queue-type" and {old, new} <= {None, ("longstr", "classic")}:
            continue
        raise precondition_failed(
            f"inequivalent arg '{key}' for {what}: "
            f"received {_describe(new)} but current is {_describe(old)}")


class VirtualHost:
    def __init__(self, name: str, timers: Timers | None = None,
                 policies: PolicyStore | None = None, policy_wins: bool = False,
                 address_settings: AddressSettings | None = None,
                 clock: Callable[[], float] = now_ms, rng: random.Random | None = None,
                 semantics: str = DEFAULT_SEMANTICS, semantics_chosen: bool = False,
                 permits: tuple[str, ...] | list[str] = ()) -> None:
        self.name = name
        # Whose rules its queues and dead-lettering follow (dlx/semantics.py),
        # and whether the vhost chose them (its metadata) or has the broker's.
        self.semantics = semantics
        self.semantics_chosen = semantics_chosen
        # The deprecated features 4.3 denies that the config permits again.
        self.permits: tuple[str, ...] = tuple(permits)
        self.timers = timers or Timers()
        # The clock (wall-clock ms) and the random source its queues and
        # dead-lettering read; tests pass fakes.
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.policies = policies or PolicyStore()
        self.policy_wins = policy_wins
        self.address_settings = address_settings or AddressSettings()
        # Durability, set by the broker once it has a data directory.
        self.journal = NO_JOURNAL  # where durable definitions' changes go
        self.store = None
        self.paging = None
        # How far a queue with consumers may grow before its publishers
        # wait (queue/credit.py), from the broker's config.
        self.credit_limits = (CREDIT_COUNT, CREDIT_BYTES)
        self.dead_letterer = DeadLetterer(self)
        self.counters = Counters()  # the broker's, once it adopts this vhost
        self.replies = DirectReplies()  # the broker's, once it adopts this vhost
        self.auto_created = AutoCreatedQueues(self.timers, self.remove_queue)
        self.delayed = DelayedMessages(self)  # held by x-delayed-message exchanges
        self._settings_made: dict[tuple, object] = {}
        self.queues: dict[str, Queue] = {}
        self.exchanges: dict[str, Exchange] = {"": DefaultExchange(name, self.queues)}
        for xname, xtype, internal in STANDARD_EXCHANGES:
            self.exchanges[xname] = EXCHANGE_TYPES[xtype](name, xname, durable=True,
                                                           internal=internal)

    @property
    def metadata(self) -> dict:
        """What the vhost chose for itself (kept with its definition):
        its semantics, when it chose them."""
        return {"rabbitmq_semantics": self.semantics} if self.semantics_chosen else {}

    # ---- lookups -------------------------------------------------------

    def exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise not_found(f"no {resource_name('exchange', name, self.name)}")
        return exchange

    def queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            raise not_found(f"no {resource_name('queue', name, self.name)}")
        return queue

    def check_exclusive_access(self, queue: Queue, owner: object) -> None:
        if queue.exclusive_owner is not None and queue.exclusive_owner is not owner:
            raise self._locked(queue)

    def _locked(self, queue: Queue):
        return resource_locked(
            f"cannot obtain exclusive access to locked "
            f"{resource_name('queue', queue.name, self.name)}. It could be originally "
            "declared on another connection or the exclusive property value does not "
            "match that of the original declaration.")

    # ---- exchanges -----------------------------------------------------

    def declare_exchange(self, name: str, type_name: str, passive: bool = False,
                         durable: bool = False, auto_delete: bool = False,
                         internal: bool = False,
                         arguments: FieldTable | None = None) -> Exchange:
        if name == "":
            raise access_refused("operation not permitted on the default exchange")
        what = resource_name("exchange", name, self.name)
        if passive:
            return self.exchange(name)
        cls = (DECLARABLE_TYPES_4_3 if is_4x(self.semantics) else DECLARABLE_TYPES).get(type_name)
        if cls is None:
            # 3.13 made this a channel error (406); 3.10 closed the connection.
            raise precondition_failed(f"unknown exchange type '{type_name}'")
        arguments = arguments if arguments is not None else FieldTable()
        existing = self.exchanges.get(name)
        if existing is None:
            if name.startswith("amq."):
                raise access_refused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
            alternate = typed_value(arguments, "alternate-exchange")
            if alternate is not None and alternate[0] != "longstr":
                raise precondition_failed(
                    f"invalid type '{alternate[0]}' for arg 'alternate-exchange' in {what}")
            exchange = cls(self.name, name, durable, auto_delete, internal, arguments)
            if isinstance(exchange, DelayedExchange):
                exchange.held = self.delayed
            exchange.apply_policy(match_exchange(self.policies.in_vhost(self.name), name))
            self.exchanges[name] = exchange
            if durable:
                self.journal.exchange_declared(exchange)
            return exchange
        for field, old, new in (
            ("type", existing.type_name, type_name),
            ("durable", existing.durable, durable),
            ("auto_delete", existing.auto_delete, auto_delete),
            ("internal", existing.internal, internal),
        ):
            if old != new:
                shown_old = _flag(old) if isinstance(old, bool) else f"'{old}'"
                shown_new = _flag(new) if isinstance(new, bool) else f"'{new}'"
                raise precondition_failed(
                    f"inequivalent arg '{field}' for {what}: "
                    f"received {shown_new} but current is {shown_old}")
        assert_args_equivalent(existing.arguments, arguments, EXCHANGE_EQUIVALENCE_ARGS, what)
        return existing

    def delete_exchange(self, name: str, if_unused: bool = False) -> None:
        if name == "":
            raise access_refused("operation not permitted on the default exchange")
        if name.startswith("amq."):
            raise access_refused(
                f"deletion of system {resource_name('exchange', name, self.name)} not allowed")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return  # deleting what is not there succeeds (RabbitMQ 3.x+)
        if if_unused and exchange.bindings:
            raise precondition_failed(f"{resource_name('exchange', name, self.name)} in use")
        self._remove_exchange(exchange)

    def _remove_exchange(self, exchange: Exchange) -> None:
        if self.exchanges.get(exchange.name) is not exchange:
            return
        del self.exchanges[exchange.name]
        for binding in list(exchange.bindings.values()):
            self._drop_binding(binding, cascade=False)
        # Exchange-to-exchange bindings that point at this exchange go too.
        for source in list(self.exchanges.values()):
            for _key, binding in list(source.bindings.items()):
                if binding.destination is exchange:
                    self._drop_binding(binding)
        if exchange.durable:
            self.journal.exchange_deleted(exchange)

    # ---- queues --------------------------------------------------------

    def declare_queue(self, name: str, owner: object, passive: bool = False,
                      durable: bool = False, exclusive: bool = False,
                      auto_delete: bool = False,
                      arguments: FieldTable | None = None,
                      auto_created: bool = False) -> Queue:
        """`auto_created`: an Artemis DLQ./EXP. queue, deleted once unused."""
        arguments = arguments if arguments is not None else FieldTable()
        self.counters.queues_declared += 1
        if passive:
            queue = self.queue(name)
            self.check_exclusive_access(queue, owner)
            queue.touch()
            return queue
        generated = name == ""
        if generated:
            queue_type = queue_type_of(arguments)
            if queue_type in QUEUE_TYPES and queue_type != "classic":
                raise precondition_failed("Cannot declare a server-named queue for type "
                                          f"{QUEUE_TYPES[queue_type][0]}")
            name = server_generated_name("amq.gen")
        existing = self.queues.get(name)
        if existing is not None:
            exclusive_owner = owner if exclusive else None
            if existing.exclusive_owner is not exclusive_owner:
                raise self._locked(existing)
            what = resource_name("queue", name, self.name)
            durable = durable and not exclusive
            for field, old, new in (("durable", existing.durable, durable),
                                    ("auto_delete", existing.auto_delete, auto_delete)):
                if old != new:
                    raise precondition_failed(
                        f"inequivalent arg '{field}' for {what}: "
                        f"received {_flag(new)} but current is {_flag(old)}")
            assert_args_equivalent(existing.arguments, arguments,
                                   STREAM_EQUIVALENCE_ARGS if existing.settings.is_stream
                                   else QUEUE_EQUIVALENCE_ARGS, what)
            existing.touch()
            return existing
        if name.startswith("amq.") and not generated:
            raise access_refused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        what = resource_name("queue", name, self.name)
        dlx = typed_value(arguments, "x-dead-letter-exchange")
        if dlx is not None and dlx[0] != "longstr":
            # rabbit_channel checks this before the queue type's validators.
            raise precondition_failed(
                f"invalid type '{dlx[0]}' for arg 'x-dead-letter-exchange' in {what}")
        try:
            queue_type = validate_queue_arguments(arguments, self.semantics)
        except ArgumentError as error:
            raise precondition_failed(error.message(what)) from None
        # 4.3 denies the deprecated features these use (541, closing the
        # connection): rabbit_amqqueue:declare/7 checks a transient
        # non-exclusive queue before the queue type's own checks,
        # rabbit_classic_queue:validate_arguments/1 the master locator.
        if not (durable or exclusive) and not permitted(TRANSIENT_NONEXCL_QUEUES,
                                                        self.semantics, self.permits):
            raise AMQPError(INTERNAL_ERROR, denied_message(TRANSIENT_NONEXCL_QUEUES))
        if (queue_type == "classic" and "x-queue-master-locator" in arguments
                and not permitted(QUEUE_MASTER_LOCATOR, self.semantics, self.permits)):
            raise AMQPError(INTERNAL_ERROR, denied_message(QUEUE_MASTER_LOCATOR))
        if queue_type in ("quorum", "stream"):
            # rabbit_queue_type_util checks, in RabbitMQ's order.
            for refused, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner"),
                                  (not durable, "non-durable")):
                if refused:
                    raise precondition_failed(f"invalid property '{prop}' for {what}")
        if queue_type == "stream":
            check_stream_declare(arguments, what, self.name, name)
        kind = StreamQueue if queue_type == "stream" else Queue
        queue = kind(self.name, name, durable and not exclusive,
                      owner if exclusive else None, auto_delete, arguments,
                      self._queue_settings(name, queue_type, arguments), self.timers,
                      self.clock, self.rng)
        queue.dead_letter_sink = self.dead_letter
        queue.on_unused = self.remove_queue
        queue.credit.set_limits(*self.credit_limits)
        if self.paging is not None:
            queue.attach_paging(self.paging)
        self.queues[name] = queue
        self.counters.queues_created += 1
        if auto_created:
            self.auto_created.adopt(queue)
        queue.touch()
        if queue.durable:
            queue.store = self.store
            if persists(queue):
                self.journal.queue_declared(queue)
        if queue.settings.qpid_dlq_enabled:
            exchange, dlq = qpid_names(name)
            self.ensure_dead_letter_queue(exchange, "fanout", dlq, queue.durable, "", None)
        return queue

    def ensure_dead_letter_queue(self, exchange_name: str, exchange_type: str,
                                 queue_name: str, durable: bool, routing_key: str,
                                 arguments: FieldTable | None,
                                 auto_created: bool = False) -> None:
        """Declare (if missing) a dead-letter exchange, a queue and the binding
        between them: Qpid's <queue>_DLE/_DLQ pair and Artemis's auto-created
        DLQ./EXP. resources.  An exchange that exists keeps its type."""
        exchange = self.exchanges.get(exchange_name)
        if exchange is None:
            exchange = self.declare_exchange(exchange_name, exchange_type, durable=durable)
        target = self.queues.get(queue_name)
        if target is None:
            target = self.declare_queue(queue_name, None, durable=durable,
                                        auto_created=auto_created)
        self.bind(exchange.name, target, routing_key, arguments)

    def ensure_address_queue(self, exchange_name: str, affixes: tuple[str, str],
                             address: str) -> None:
        """Artemis's auto-created dead letter (or expiry) resources: the
        address as a headers exchange and `DLQ.<address>` taking only the
        messages first sent to `address`."""
        self.ensure_dead_letter_queue(exchange_name, "headers",
                                      per_address_queue(affixes, address), True, "",
                                      address_filter(address), auto_created=True)

    def delete_queue(self, queue: Queue, if_unused: bool = False,
                     if_empty: bool = False) -> int:
        what = resource_name("queue", queue.name, self.name)
        if queue.settings.is_stream:
            if_unused = if_empty = False  # rabbit_stream_queue:delete/4 ignores both
        if if_unused and queue.consumers:
            raise precondition_failed(f"{what} in use")
        if if_empty and queue.message_count:
            raise precondition_failed(f"{what} not empty")
        return self.remove_queue(queue)

    def remove_queue(self, queue: Queue) -> int:
        """Delete a queue unconditionally; returns how many ready messages went."""
        if self.queues.get(queue.name) is not queue:
            return 0
        del self.queues[queue.name]
        self.counters.retire(queue)
        self.auto_created.forget(queue)
        queue.close()
        count = queue.purge()
        for binding in list(queue.bindings.values()):
            self._drop_binding(binding)
        for consumer in list(queue.consumers):
            queue.remove_consumer(consumer)
            consumer.cancelled_by_broker()
        if persists(queue):
            self.journal.queue_deleted(queue)
        return count

    # ---- bindings ------------------------------------------------------

    def bind(self, source_name: str, destination: Queue | Exchange, routing_key: str,
             arguments: FieldTable | None) -> None:
        source = self._binding_source(source_name)
        source.validate_binding(arguments)
        binding = Binding(source, destination, routing_key, arguments)
        if source.add_binding(binding):
            if destination.is_queue:
                destination.bindings[(source.name, binding.key)] = binding
            if persists(source) and persists(destination):
                self.journal.binding_added(self.name, binding)

    def unbind(self, source_name: str, destination: Queue | Exchange, routing_key: str,
               arguments: FieldTable | None) -> None:
        source = self._binding_source(source_name)
        binding = source.bindings.get(Binding(source, destination, routing_key, arguments).key)
        if binding is not None:
            self._drop_binding(binding)

    def _binding_source(self, name: str) -> Exchange:
        check_not_default(name)
        return self.exchange(name)

    def _drop_binding(self, binding: Binding, cascade: bool = True) -> None:
        source = binding.source
        source.remove_binding(binding.key)
        if binding.destination.is_queue:
            binding.destination.bindings.pop((source.name, binding.key), None)
        if persists(source) and persists(binding.destination):
            self.journal.binding_removed(self.name, binding)
        # An auto-delete exchange goes with its last binding (RabbitMQ).
        if cascade and source.auto_delete and not source.bindings:
            self._remove_exchange(source)

    # ---- publishing ----------------------------------------------------

    # Every way a message enters a queue goes through broker/publishing.py,
    # whose functions are bound here as methods, without a call in between.
    publish = publishing.publish
    publish_run = publishing.publish_run
    check_and_route = publishing.check_and_route
    enqueue_routed = publishing.enqueue_routed
    republish = publishing.republish

    def route(self, exchange: Exchange, routing_keys: list[str], message):
        """Queues the message goes to, through e2e bindings and alternates
        (direct reply-to aside: publishing.route)."""
        destinations = exchange.match(routing_keys, message)
        if not exchange.exchange_bindings and (destinations or exchange.alternate is None):
            return destinations  # only queues can match: nothing to walk
        queues: dict[Queue, None] = {}
        seen = {exchange}
        pending = [(exchange, destinations)]
        while pending:
            current, dests = pending.pop()
            if not dests and current.alternate is not None:
                alternate = self.exchanges.get(current.alternate)
                dests = (alternate,) if alternate is not None else ()
            for dest in dests:
                if dest.is_queue:
                    queues[dest] = None
                elif dest not in seen:
                    seen.add(dest)
                    pending.append((dest, dest.match(routing_keys, message)))
        return list(queues)

    # ---- policies ------------------------------------------------------

    def _queue_settings(self, name: str, queue_type: str, arguments: FieldTable):
        policy = match_queue(self.policies.in_vhost(self.name), name, queue_type)
        operator = match_queue(self.policies.in_vhost(self.name, operator=True), name,
                               queue_type)
        address = self.address_settings.match(name)
        # Queues alike (a restart brings back thousands declared the same
        # way) share one settings object, merged once.
        key = (encode_table(arguments), policy, operator, tuple(address.items()))
        settings = self._settings_made.get(key)
        if settings is None:
            if len(self._settings_made) >= SETTINGS_KEPT:
                self._settings_made.clear()
            settings = self._settings_made[key] = resolve(
                arguments, policy.definition if policy else None,
                operator.definition if operator else None, self.policy_wins, address,
                self.semantics)
        return settings, policy, operator

    def reapply_policies(self) -> None:
        """A policy was set or cleared: every queue and exchange takes its
        effective settings again at once (a queue that gains a max-length
        trims, one that gains a DLX dead-letters from now on)."""
        for queue in list(self.queues.values()):
            settings, policy, operator = self._queue_settings(
                queue.name, queue.settings.queue_type, queue.arguments)
            queue.policy, queue.operator_policy = policy, operator
            if settings != queue.settings:
                queue.apply_settings(settings)
        policies = self.policies.in_vhost(self.name)
        for exchange in self.exchanges.values():
            if exchange.name:
                exchange.apply_policy(match_exchange(policies, exchange.name))

    # ---- dead-lettering ------------------------------------------------

    def dead_letter(self, queue: Queue, messages: list[Message], reason: str) -> list:
        """A queue's DeadLetter effect, carried out; returns the (message,
        reason) no target took, which the queue holds (at-least-once)."""
        return self.dead_letterer.dead_letter(queue, messages, reason)
