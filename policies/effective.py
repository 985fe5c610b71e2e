"""A queue's effective settings from its arguments, its policy, the address
settings of the broker's config and its operator policy (DESIGN.md,
"Effective settings of a queue").

Per key, as settings_table.py says and RabbitMQ merges them: for the
dead-letter keys, `overflow`, `queue-mode` and `queue-version` an argument
beats the policy; for numeric limits the smaller value wins; an operator
policy lowers a numeric limit, and its `overflow` or `queue-version`
replaces the user policy's (rabbit_policies:merge_policy_value/3); a
stream takes `max-length-bytes`, `max-age` and its segment size from its
policy before its arguments (rabbit_stream_queue:policy_precedence/2).  Address
settings fill in what neither the arguments nor the policy set; the Artemis
settings take the first layer that sets them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeGuard

from amqp_server.wire.table import FieldTable
from dlx.delayed_retry import DelayedRetry, delayed_retry
from dlx.expiry import clamps
from dlx.limits import DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX
from dlx.redelivery import ARTEMIS_MAX_DELIVERY_ATTEMPTS, Redelivery
from dlx.semantics import DEFAULT as DEFAULT_SEMANTICS, MODES, is_4x

from .checks import qpid_flag
from .settings_table import (
    AT_LEAST_ONCE,
    AT_MOST_ONCE,
    LARGER_WINS,
    OPERATOR_REPLACES,
    POLICY_WINS,
    SETTINGS,
    SMALLER_WINS,
    UNLIMITED_IF_NEGATIVE,
    Setting,
)
from .stream_rules import max_age_ms

__all__ = ["AT_LEAST_ONCE", "AT_MOST_ONCE", "DEFAULTS", "DEFAULT_DELIVERY_LIMIT",
           "QueueSettings", "merged", "resolve"]


@dataclass(frozen=True)
class QueueSettings:
    """One field per setting of the table (settings_table.py), which also
    gives each its default (DEFAULTS)."""
    expires: int | None
    message_ttl: int | None
    dead_letter_exchange: str | None
    dead_letter_routing_key: str | None
    dead_letter_strategy: str
    max_length: int | None
    max_length_bytes: int | None
    max_in_memory_length: int | None
    max_in_memory_bytes: int | None
    max_priority: int | None
    overflow: str
    queue_mode: str
    queue_version: int | None
    single_active_consumer: bool
    queue_type: str
    delivery_limit: int | None
    # streams: retention by age (`7D`, as given) and a segment's size;
    # the cluster size is kept (one node holds a stream here)
    max_age: str | None
    stream_max_segment_size_bytes: int
    stream_filter_size_bytes: int
    initial_cluster_size: int | None
    # ms a delivery may stay unacknowledged; any type (x-consumer-timeout
    # is not checked in 3.13), enforced only when an integer.
    consumer_timeout: object
    # 4.3: how long a quorum queue waits for a consumer whose node became
    # unreachable (kept: consumers here are always on the queue's node)
    consumer_disconnected_timeout: int
    # 4.3: a quorum queue's delayed retry (dlx/delayed_retry.py)
    delayed_retry_type: str
    delayed_retry_min: int | None
    delayed_retry_max: int | None
    # ActiveMQ Artemis
    redelivery_delay: int
    redelivery_delay_multiplier: float
    max_redelivery_delay: int | None
    redelivery_collision_avoidance_factor: float
    max_delivery_attempts: int
    auto_create_dead_letter_resources: bool
    dead_letter_queue_prefix: str
    dead_letter_queue_suffix: str
    expiry_address: str | None
    expiry_delay: int
    min_expiry_delay: int
    max_expiry_delay: int
    auto_create_expiry_resources: bool
    expiry_queue_prefix: str
    expiry_queue_suffix: str
    # for the queues those auto-create: deleted when unused (dlx/addresses.py)
    auto_delete_queues: bool
    auto_delete_queues_delay: int
    auto_delete_queues_message_count: int
    # Qpid
    qpid_maximum_delivery_count: int | None
    qpid_dlq_enabled: bool
    # ours: ms a dead letter may wait before it is archived (None: forever)
    dead_letter_retention: int | None
    # Whose rules the queue follows (dlx/semantics.py): its virtual host's.
    semantics: str = DEFAULT_SEMANTICS

    @property
    def redelivery(self) -> Redelivery:
        """What a return does (dlx.redelivery); Qpid's count, when given,
        stands in for max-delivery-attempts."""
        qpid = self.qpid_maximum_delivery_count
        return Redelivery(
            self.redelivery_delay, float(self.redelivery_delay_multiplier),
            self.max_redelivery_delay, float(self.redelivery_collision_avoidance_factor),
            qpid if qpid is not None else self.max_delivery_attempts, qpid is not None,
            self.delivery_limit if self.is_quorum else None, self.semantics,
            self.delayed_retry)

    @property
    def is_quorum_4x(self) -> bool:
        """A quorum queue under RabbitMQ 4.3's rules (rabbit_fifo v8)."""
        return self.is_quorum and is_4x(self.semantics)

    @property
    def delayed_retry(self) -> DelayedRetry | None:
        """4.3's delayed retry of a quorum queue, None when off."""
        if not self.is_quorum_4x:
            return None
        return delayed_retry(self.delayed_retry_type, self.delayed_retry_min,
                             self.delayed_retry_max)

    @property
    def clamps_expiry(self) -> bool:
        return clamps(self.expiry_delay, self.min_expiry_delay, self.max_expiry_delay)

    @property
    def is_quorum(self) -> bool:
        return self.queue_type == "quorum"

    @property
    def is_stream(self) -> bool:
        return self.queue_type == "stream"

    @property
    def max_age_ms(self) -> int | None:
        return max_age_ms(self.max_age) if self.max_age is not None else None

    @property
    def at_least_once(self) -> bool:
        """3.13 uses at-least-once only with a DLX and reject-publish; any
        other combination falls back to at-most-once (rabbit_quorum_queue:dlh)."""
        return (self.is_quorum and self.dead_letter_strategy == AT_LEAST_ONCE
                and self.overflow == REJECT_PUBLISH and self.dead_letter_exchange is not None)

    @property
    def has_length_limit(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None


class _Rows(NamedTuple):
    """The table as one semantics sees it."""

    # Each setting's rows, its own first (dead-letter-address follows the DLX).
    groups: dict[str, tuple[Setting, ...]]
    # Any of a setting's names, as an argument or as a key, -> its rows.
    by_argument: dict[str, tuple[Setting, ...]]
    by_key: dict[str, tuple[Setting, ...]]


def _rows(semantics: str) -> _Rows:
    groups: dict[str, tuple[Setting, ...]] = {}
    for row in SETTINGS:
        if row.field is not None and semantics in row.modes:
            groups[row.field] = (*groups.get(row.field, ()), row)
    return _Rows(groups,
                 {s.argument: rows for rows in groups.values() for s in rows if s.argument},
                 {s.key: rows for rows in groups.values() for s in rows
                  if s.key and s.target == "queue"})


_ROWS = {mode: _rows(mode) for mode in MODES}
# A field's default is its first row's (the settings 4.3 added have theirs).
DEFAULTS: dict[str, Any] = {}
for _row in SETTINGS:
    if _row.field is not None:
        DEFAULTS.setdefault(_row.field, _row.default)
# 4.3's rabbit_quorum_queue: ?DEFAULT_DELIVERY_LIMIT, when neither the
# arguments nor a policy set an integer.
DEFAULT_DELIVERY_LIMIT = 20


def _layer(rows: tuple[Setting, ...], lookup: Callable[[Setting], object]) -> object:
    """The value a layer gives under any of a setting's names."""
    for setting in rows:
        value = lookup(setting)
        if value is not None:
            return _plain(value)
    return None


def _named(table: _Rows, arguments: Mapping[str, object], *layers: Mapping[str, object]) \
        -> list[tuple[str, tuple[Setting, ...]]]:
    """The settings that some layer names, in table order: only those
    need merging (most queues name none or a few)."""
    wanted = {id(rows) for rows in map(table.by_argument.get, arguments) if rows}
    for layer in layers:
        wanted.update(id(rows) for rows in map(table.by_key.get, layer) if rows)
    return [(field, rows) for field, rows in table.groups.items() if id(rows) in wanted]


def resolve(arguments: FieldTable | None, policy: Mapping[str, object] | None = None,
            operator_policy: Mapping[str, object] | None = None, policy_wins: bool = False,
            address_settings: Mapping[str, object] | None = None,
            semantics: str = DEFAULT_SEMANTICS) -> QueueSettings:
    """`policy_wins` flips the argument-first keys that allow it for sites
    that want central control (config `policy_precedence = "policy"`);
    `address_settings` is the merged `[address-settings]` match for the queue;
    `semantics` whose rules apply (dlx/semantics.py)."""
    args: Mapping[str, object] = arguments or FieldTable()
    user: Mapping[str, object] = policy or {}
    operator: Mapping[str, object] = operator_policy or {}
    address: Mapping[str, object] = address_settings or {}
    values: dict[str, Any] = {}
    stream = _plain(args.get("x-queue-type")) == "stream"
    for field, rows in _named(_ROWS[semantics], args, user, operator, address):
        setting = rows[0]
        merge = setting.stream_merge if stream and setting.stream_merge else setting.merge
        argument = _layer(rows, lambda s: args.get(s.argument) if s.argument else None)
        from_policy = _layer(rows, lambda s: user.get(s.key) if s.key else None)
        capped = _layer(rows, lambda s: operator.get(s.key) if s.key and s.operator else None)
        if setting.operator == OPERATOR_REPLACES and capped is not None:
            from_policy = capped  # rabbit_policies:merge_policy_value/3
        elif setting.operator in (LARGER_WINS, UNLIMITED_IF_NEGATIVE) and capped is not None:
            # 4.3's merges: the operator's value joins the user policy's
            # first (rabbit_policy:effective_definition), then the argument.
            from_policy = merged(setting.operator, from_policy, capped)
        if merge in (SMALLER_WINS, UNLIMITED_IF_NEGATIVE):
            value = merged(merge, argument, from_policy)
        elif merge == POLICY_WINS or policy_wins and setting.policy_may_win:
            value = _first(from_policy, argument)
        else:
            value = _first(argument, from_policy)
        if value is None:
            value = _layer(rows, lambda s: address.get(s.key) if s.key and s.address else None)
        if setting.operator == SMALLER_WINS:
            value = _smaller(value, capped)
        if value is not None:
            values[field] = value
    if address and "max_delivery_attempts" not in values:
        values["max_delivery_attempts"] = ARTEMIS_MAX_DELIVERY_ATTEMPTS
    if not values.get("qpid_maximum_delivery_count", 1):
        del values["qpid_maximum_delivery_count"]  # 0 is Qpid's "no limit"
    if "qpid_dlq_enabled" in values:
        values["qpid_dlq_enabled"] = qpid_flag(values["qpid_dlq_enabled"])
    if "single_active_consumer" in values:
        # rabbit_quorum_queue:single_active_consumer_on/1: {bool, true} only
        values["single_active_consumer"] = values["single_active_consumer"] is True
    if values.get("dead_letter_exchange") is None:
        # A routing key or strategy without an exchange does nothing (3.13 logs it).
        values.pop("dead_letter_routing_key", None)
    if values.get("dead_letter_exchange") is not None or values.get("qpid_dlq_enabled"):
        # Retention is for the last stop of dead letters; a queue that sends
        # its own on is not one (its argument is refused at declaration).
        values.pop("dead_letter_retention", None)
    if values.get("queue_type") == "quorum" and values.get("overflow") == REJECT_PUBLISH_DLX:
        values["overflow"] = DROP_HEAD  # quorum queues do not support it (3.13 warns)
    if is_4x(semantics) and values.get("queue_type") == "quorum":
        # 4.3's rabbit_quorum_queue:get_delivery_limit/2: 20 unless an
        # integer is set; rabbit_fifo:update_config/2: a negative one is none.
        limit = values.get("delivery_limit")
        if not _is_number(limit) or isinstance(limit, float):
            values["delivery_limit"] = DEFAULT_DELIVERY_LIMIT
        elif limit < 0:
            values["delivery_limit"] = None
    return QueueSettings(**{**DEFAULTS, **values}, semantics=semantics)


def _plain(value: object) -> object:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value


def _first(a: object, b: object) -> object:
    return a if a is not None else b


def merged(rule: str, a: object, b: object) -> object:
    """Two layers' values merged by a numeric `rule` (settings_table.py);
    a layer that sets nothing leaves the other's."""
    if a is None:
        return b
    if b is None:
        return a
    if rule == LARGER_WINS:
        return b if _smaller(a, b) is a else a
    if rule == UNLIMITED_IF_NEGATIVE and (_negative(a) or _negative(b)):
        return b if _smaller(a, b) is a else a
    return _smaller(a, b)


def _negative(value: object) -> bool:
    return _is_number(value) and value < 0


def _smaller(a: object, b: object) -> object:
    """erlang:min: a number sorts before any other term (an unchecked
    argument may be a string)."""
    if a is None:
        return b
    if b is None:
        return a
    if _is_number(a) and _is_number(b):
        return min(a, b)
    return a if _is_number(a) or not _is_number(b) else b


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

