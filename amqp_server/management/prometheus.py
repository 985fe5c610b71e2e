"""Metrics in the Prometheus text format under the names of RabbitMQ's
rabbitmq_prometheus plugin (3.10), so that dashboards made for it work,
plus this broker's own families (dead letters, streams, a 4.3 quorum queue's
priorities) under the `amqp_` prefix.

Three views, as the plugin's:
- `aggregated` (/metrics): every family summed over its objects, no
  per-queue or per-channel labels;
- `per-object` (/metrics/per-object): one sample per queue, channel and
  connection, labelled as RabbitMQ labels them;
- `detailed` (/metrics/detailed?family=...&vhost=...): only the families
  asked for, per object, named `rabbitmq_detailed_*` (and
  `rabbitmq_cluster_*` for vhosts and exchanges); `vhost` filters queues.

Families RabbitMQ derives from Erlang (reductions, process memory, Raft,
mnesia, I/O) have no counterpart here and are not emitted.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

from dlx.deaths import REASONS

from ..broker.counters import dead_letter_deaths
from ..broker.resources import disk_free, resident_memory
from . import node
from .shapes import NODE, dead_letter_counters

PREFIX = "rabbitmq_"
DETAILED_PREFIX = "rabbitmq_detailed_"
CLUSTER_PREFIX = "rabbitmq_cluster_"
OWN_PREFIX = "amqp_"
PROTOCOL = {"protocol": "amqp091"}
QUEUE_TYPES = ("classic", "quorum")

# (metric without prefix, type, help, [(labels, value)])
Metric = tuple[str, str, str, list]


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _value(value) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(int(value))


def text_lines(prefix: str, metrics: Iterable[Metric]) -> list[str]:
    lines = []
    for name, kind, help_text, samples in metrics:
        lines.append(f"# TYPE {prefix}{name} {kind}")
        lines.append(f"# HELP {prefix}{name} {help_text}")
        lines.extend(f"{prefix}{name}{_labels(labels)} {_value(value)}"
                     for labels, value in samples)
    return lines


def _aggregate(metrics: Iterable[Metric], keep: tuple[str, ...] = ()) -> list[Metric]:
    """Sum each metric over its objects, keeping only the labels in `keep`."""
    summed = []
    for name, kind, help_text, samples in metrics:
        totals: dict[tuple, int] = {}
        for labels, value in samples:
            key = tuple((k, v) for k, v in labels.items() if k in keep)
            totals[key] = totals.get(key, 0) + value
        summed.append((name, kind, help_text,
                       [(dict(key), value) for key, value in totals.items()] or [({}, 0)]))
    return summed


# ---- RabbitMQ's core families, per object ------------------------------------

def _queues(broker, vhost: str | None = None) -> list:
    return [(v.name, q) for v in broker.vhosts.values() if vhost in (None, v.name)
            for q in v.queues.values()]


def queue_coarse_metrics(broker, vhost=None) -> list[Metric]:
    queues = _queues(broker, vhost)

    def each(value: Callable) -> list:
        return [({"vhost": v, "queue": q.name}, value(q)) for v, q in queues]
    return [
        ("queue_messages_ready", "gauge", "Messages ready to be delivered to consumers",
         each(lambda q: q.message_count)),
        ("queue_messages_unacked", "gauge",
         "Messages delivered to consumers but not yet acknowledged", each(lambda q: q.unacked)),
        ("queue_messages", "gauge",
         "Sum of ready and unacknowledged messages - total queue depth",
         each(_depth)),
    ]


def _depth(queue) -> int:
    """Ready and unacknowledged; a stream's deliveries take nothing out of
    it, so its depth is its log's count."""
    if queue.settings.is_stream:
        return queue.message_count
    return queue.message_count + queue.unacked + queue.delayed_count


def queue_consumer_count(broker, vhost=None) -> list[Metric]:
    return [("queue_consumers", "gauge", "Consumers on a queue",
             [({"vhost": v, "queue": q.name}, q.consumers_up)
              for v, q in _queues(broker, vhost)])]


def queue_metrics(broker, vhost=None) -> list[Metric]:
    queues = _queues(broker, vhost)

    def each(value: Callable) -> list:
        return [({"vhost": v, "queue": q.name}, value(q)) for v, q in queues]
    return queue_consumer_count(broker, vhost) + [
        ("queue_messages_ram", "gauge", "Ready and unacknowledged messages stored in memory",
         each(lambda q: len(q.ready) + q.unacked)),
        ("queue_messages_ready_ram", "gauge", "Ready messages stored in memory",
         each(lambda q: len(q.ready))),
        ("queue_messages_unacked_ram", "gauge", "Unacknowledged messages stored in memory",
         each(lambda q: q.unacked)),
        ("queue_messages_ready_bytes", "gauge", "Size in bytes of ready messages",
         each(lambda q: q.ready_bytes)),
        ("queue_messages_paged_out", "gauge", "Messages paged out to disk",
         each(lambda q: q.paged_count)),
        ("queue_messages_paged_out_bytes", "gauge",
         "Size in bytes of messages paged out to disk", each(lambda q: q.paged_bytes)),
    ]


def channel_queue_exchange_metrics(broker, vhost=None) -> list[Metric]:
    return [("queue_messages_published_total", "counter",
             "Total number of messages published to queues",
             [({"queue_vhost": v, "queue": q.name}, q.published)
              for v, q in _queues(broker, vhost)])]


def _channels(broker) -> list:
    return [(f"{conn.name} ({channel.number})", channel)
            for conn in broker.connections for channel in conn.channels.values()]


def _uncommitted(channel, kind: str) -> int:
    return channel.transactions.count(kind)


def channel_metrics(broker, vhost=None) -> list[Metric]:
    channels = _channels(broker)

    def each(value: Callable) -> list:
        return [({"channel": name}, value(ch)) for name, ch in channels]
    return [
        ("channel_consumers", "gauge", "Consumers on a channel",
         each(lambda ch: len(ch.consumers))),
        ("channel_messages_unacked", "gauge", "Delivered but not yet acknowledged messages",
         each(lambda ch: len(ch.unacked))),
        ("channel_messages_uncommitted", "gauge",
         "Messages received in a transaction but not yet committed",
         each(lambda ch: _uncommitted(ch, "publish"))),
        ("channel_acks_uncommitted", "gauge",
         "Message acknowledgements in a transaction not yet committed",
         each(lambda ch: _uncommitted(ch, "ack"))),
        ("consumer_prefetch", "gauge", "Limit of unacknowledged messages for each consumer",
         each(lambda ch: ch.consumer_prefetch)),
        ("channel_prefetch", "gauge",
         "Total limit of unacknowledged messages for all consumers on a channel",
         each(lambda ch: ch.global_prefetch)),
    ]


def connection_metrics(broker, vhost=None) -> list[Metric]:
    # RabbitMQ labels a connection's samples `channel` too (with its pid).
    return [("connection_channels", "gauge", "Channels on a connection",
             [({"channel": conn.name}, len(conn.channels)) for conn in broker.connections])]


PER_OBJECT_FAMILIES = {
    "queue_coarse_metrics": queue_coarse_metrics,
    "queue_consumer_count": queue_consumer_count,
    "queue_metrics": queue_metrics,
    "channel_metrics": channel_metrics,
    "connection_metrics": connection_metrics,
    "channel_queue_exchange_metrics": channel_queue_exchange_metrics,
}


# ---- families with no objects ------------------------------------------------

def connection_churn_metrics(broker) -> list[Metric]:
    c = broker.counters
    open_channels = sum(len(conn.channels) for conn in broker.connections)
    return [
        ("connections_opened_total", "counter", "Total number of connections opened",
         [({}, c.connections_opened)]),
        ("connections_closed_total", "counter",
         "Total number of connections closed or terminated",
         [({}, max(0, c.connections_opened - len(broker.connections)))]),
        ("channels_opened_total", "counter", "Total number of channels opened",
         [({}, c.channels_opened)]),
        ("channels_closed_total", "counter", "Total number of channels closed",
         [({}, max(0, c.channels_opened - open_channels))]),
        ("queues_declared_total", "counter", "Total number of queues declared",
         [({}, c.queues_declared)]),
        ("queues_created_total", "counter", "Total number of queues created",
         [({}, c.queues_created)]),
        ("queues_deleted_total", "counter", "Total number of queues deleted",
         [({}, c.queues_deleted)]),
    ]


def node_metrics(broker) -> list[Metric]:
    config = broker.config
    free = disk_free(config.data_dir)
    fds = node.open_fds()
    metrics = [
        ("process_open_tcp_sockets", "gauge", "Open TCP sockets",
         [({}, len(broker.connections))]),
        ("process_resident_memory_bytes", "gauge", "Memory used in bytes",
         [({}, resident_memory())]),
        ("process_max_fds", "gauge", "Open file descriptors limit", [({}, node.max_fds())]),
        ("process_max_tcp_sockets", "gauge", "Open TCP sockets limit", [({}, node.max_fds())]),
        ("resident_memory_limit_bytes", "gauge", "Memory high watermark in bytes",
         [({}, broker.memory_limit())]),
        ("disk_space_available_limit_bytes", "gauge",
         "Free disk space low watermark in bytes", [({}, config.disk_free_limit)]),
        # The overview dashboard shows the node's uptime from it.
        ("erlang_uptime_seconds", "gauge", "Node uptime", [({}, node.uptime_ms() / 1000.0)]),
    ]
    if fds is not None:
        metrics.append(("process_open_fds", "gauge", "Open file descriptors", [({}, fds)]))
    if free is not None:
        metrics.append(("disk_space_available_bytes", "gauge", "Disk space available in bytes",
                        [({}, free)]))
    return metrics


def alarm_metrics(broker) -> list[Metric]:
    alarms = broker.alarms
    return [
        ("alarms_file_descriptor_limit", "untyped",
         "is 1 if file descriptor limit alarm is in effect", [({}, 0)]),
        ("alarms_free_disk_space_watermark", "untyped",
         "is 1 if free disk space watermark alarm is in effect",
         [({}, int("disk" in alarms))]),
        ("alarms_memory_used_watermark", "untyped",
         "is 1 if VM memory watermark alarm is in effect", [({}, int("memory" in alarms))]),
    ]


def totals(broker) -> list[Metric]:
    queues = _queues(broker)
    return [
        ("connections", "gauge", "Connections currently open", [({}, len(broker.connections))]),
        ("channels", "gauge", "Channels currently open", [({}, len(_channels(broker)))]),
        ("consumers", "gauge", "Consumers currently connected",
         [({}, sum(len(q.consumers) for _, q in queues))]),
        ("queues", "gauge", "Queues available", [({}, len(queues))]),
    ]


def identity(broker, view: str) -> list[Metric]:
    """build_info and identity_info.  identity_info names the view it is
    in (`rabbitmq_endpoint`, as RabbitMQ 4.x does): the current overview
    dashboard joins every panel on it."""
    from .. import __version__
    return [
        ("build_info", "untyped", "RabbitMQ & Erlang/OTP version info",
         [({"rabbitmq_version": "3.13.0", "prometheus_plugin_version": "3.13.0",
            "product_name": "amqp-server", "product_version": __version__}, 1)]),
        ("identity_info", "untyped", "RabbitMQ node & cluster identity info",
         [({"rabbitmq_node": NODE, "rabbitmq_cluster": NODE,
            "rabbitmq_cluster_permanent_id": f"amqp-server-{NODE}",
            "rabbitmq_endpoint": view}, 1)]),
    ]


def global_metrics(broker) -> list[Metric]:
    """rabbitmq_global_*: totals since start that only grow."""
    c = broker.counters

    def by_type(counts: Counter) -> list:
        return [({**PROTOCOL, "queue_type": f"rabbit_{kind}_queue"}, counts[kind])
                for kind in QUEUE_TYPES]

    delivered = Counter()
    for counts in (c.consumed_auto_ack, c.consumed_manual_ack, c.got_auto_ack,
                   c.got_manual_ack):
        delivered.update(counts)
    consumers = sum(len(q.consumers) for _, q in _queues(broker))
    publishers = sum(1 for conn in broker.connections if conn.publishing)
    metrics = [
        ("global_messages_received_total", "counter",
         "Total number of messages received from publishers", [(PROTOCOL, c.received)]),
        ("global_messages_received_confirm_total", "counter",
         "Total number of messages received from publishers expecting confirmations",
         [(PROTOCOL, c.received_confirm)]),
        ("global_messages_routed_total", "counter",
         "Total number of messages routed to queues or streams", [(PROTOCOL, c.routed)]),
        ("global_messages_unroutable_dropped_total", "counter",
         "Total number of messages published as non-mandatory into an exchange and dropped "
         "as unroutable", [(PROTOCOL, c.unroutable_dropped)]),
        ("global_messages_unroutable_returned_total", "counter",
         "Total number of messages published as mandatory into an exchange and returned to "
         "the publisher as unroutable", [(PROTOCOL, c.unroutable_returned)]),
        ("global_messages_confirmed_total", "counter",
         "Total number of messages confirmed to publishers", [(PROTOCOL, c.confirmed)]),
        ("global_messages_delivered_total", "counter",
         "Total number of messages delivered to consumers", by_type(delivered)),
        *((f"global_messages_delivered_{method}_{mode}_ack_total", "counter",
           f"Total number of messages delivered to consumers using basic.{method} with "
           f"{mode_text} acknowledgment", by_type(count))
          for method, mode, mode_text, count in (
              ("consume", "manual", "manual", c.consumed_manual_ack),
              ("consume", "auto", "automatic", c.consumed_auto_ack),
              ("get", "manual", "manual", c.got_manual_ack),
              ("get", "auto", "automatic", c.got_auto_ack))),
        ("global_messages_get_empty_total", "counter",
         "Total number of times basic.get operations fetched no message", by_type(c.get_empty)),
        ("global_messages_redelivered_total", "counter",
         "Total number of messages redelivered to consumers", by_type(c.redelivered)),
        ("global_messages_acknowledged_total", "counter",
         "Total number of messages acknowledged by consumers", by_type(c.acknowledged)),
        ("global_publishers", "gauge", "Current number of publishers",
         [(PROTOCOL, publishers)]),
        ("global_consumers", "gauge", "Current number of consumers", [(PROTOCOL, consumers)]),
    ]
    return metrics + _global_dead_letters(broker)


_DEAD_LETTER_HELP = {
    "rejected": "Total number of messages dead-lettered due to basic.reject or basic.nack",
    "expired": "Total number of messages dead-lettered due to message TTL exceeded",
    "maxlen": "Total number of messages dead-lettered due to overflow drop-head or "
              "reject-publish-dlx",
    "delivery_limit": "Total number of messages dead-lettered due to delivery-limit exceeded",
}


# The series RabbitMQ 3.10.8's exporter gives from its start, at 0 until a
# death counts: rate() then sees a queue type's first deaths too.
_CLASSIC, _QUORUM = "rabbit_classic_queue", "rabbit_quorum_queue"
_DEAD_LETTER_SERIES = (
    [(_QUORUM, strategy, "delivery_limit")
     for strategy in ("at_least_once", "at_most_once", "disabled")]
    + [(kind, strategy, reason) for reason in ("expired", "rejected")
       for kind, strategy in ((_CLASSIC, "at_most_once"), (_CLASSIC, "disabled"),
                              (_QUORUM, "at_least_once"), (_QUORUM, "at_most_once"),
                              (_QUORUM, "disabled"))]
    + [(kind, strategy, "maxlen") for kind in (_CLASSIC, _QUORUM)
       for strategy in ("at_most_once", "disabled")])


def _global_dead_letters(broker) -> list[Metric]:
    deaths = Counter(dict.fromkeys(_DEAD_LETTER_SERIES, 0))
    deaths.update(broker.counters.retired_dead_lettered)
    for _, queue in _queues(broker):
        deaths.update(dead_letter_deaths(queue))
    metrics = []
    for reason in REASONS:
        samples = [({"queue_type": kind, "dead_letter_strategy": strategy}, count)
                   for (kind, strategy, why), count in sorted(deaths.items()) if why == reason]
        metrics.append((f"global_messages_dead_lettered_{reason}_total", "counter",
                        _DEAD_LETTER_HELP.get(reason, f"Messages dead-lettered: {reason}"),
                        samples))
    return metrics


def cluster_metrics(broker, vhost=None) -> dict[str, list[Metric]]:
    """/metrics/detailed's rabbitmq_cluster_* families."""
    vhosts = [v for v in broker.vhosts.values() if vhost in (None, v.name)]
    return {
        "vhost_status": [("vhost_status", "gauge", "Whether a given vhost is running",
                          [({"vhost": v.name}, 1) for v in broker.vhosts.values()])],
        "exchange_names": [(
            "exchange_name", "gauge", "Enumerates exchanges without any additional info. "
            "This value is cluster-wide. A cheaper alternative to `exchange_bindings`",
            [({"vhost": v.name, "exchange": x.name, "type": x.type_name}, 1)
             for v in broker.vhosts.values() for x in v.exchanges.values()])],
        "exchange_bindings": [(
            "exchange_bindings", "gauge",
            "Number of bindings for an exchange. This value is cluster-wide.",
            [({"vhost": v.name, "exchange": x.name, "type": x.type_name}, len(x.bindings))
             for v in vhosts for x in v.exchanges.values()])],
    }


# ---- this broker's own: dead letters and drops by cause ----------------------

def dead_letter_metrics(broker, vhost=None) -> list[Metric]:
    """Per queue: dead-lettered by reason, dropped by cause and reason,
    expired, held (at-least-once), delayed (Artemis redelivery delay); and
    what the dead-letter alerts read (docs/prometheus/): the age of the
    oldest message and of the oldest dead letter, dead letters waiting and
    received by reason."""
    dead, dropped, expired, held, delayed = [], [], [], [], []
    oldest, oldest_dead, waiting, received, archived = [], [], [], [], []
    now = time.time()
    for v, queue in _queues(broker, vhost):
        base = {"vhost": v, "queue": queue.name}
        counters = dead_letter_counters(queue)
        dead.extend(({**base, "reason": reason}, count)
                    for reason, count in counters["dead_lettered"].items())
        dropped.extend(({**base, "cause": cause, "reason": reason}, count)
                       for (cause, reason), count in queue.stats["dropped"].items())
        expired.append((base, counters["expired"]))
        held.append((base, counters["dead_letter_held"]))
        delayed.append((base, queue.delayed_count))
        census = queue.dead_letter_census()
        oldest.append((base, round(queue.oldest_age(now * 1000.0), 3)))
        oldest_dead.append((base, float(max(0.0, now - census.oldest_death))
                            if census.waiting and census.oldest_death is not None else 0.0))
        waiting.extend(({**base, "reason": reason}, census.waiting.get(reason, 0))
                       for reason in REASONS)
        archived.append((base, queue.stats["archived"]))
        arrived = queue.stats["dead_letters_received"]
        received.extend(({**base, "reason": reason}, arrived.get(reason, 0))
                        for reason in REASONS)
    return [
        ("queue_oldest_message_age_seconds", "gauge",
         "Seconds since the message at the head of the queue arrived (at least)", oldest),
        ("queue_oldest_dead_letter_age_seconds", "gauge",
         "Seconds since the oldest dead letter waiting in the queue died (x-death time)",
         oldest_dead),
        ("queue_dead_letters_waiting", "gauge",
         "Dead letters ready in the queue, by the reason of their latest death", waiting),
        ("queue_dead_letters_received_total", "counter",
         "Dead letters other queues' deaths put in the queue, by reason", received),
        ("queue_dead_letters_archived_total", "counter",
         "Dead letters retention archived out of the queue", archived),
        ("queue_messages_dead_lettered_total", "counter",
         "Messages dead-lettered, by reason", dead),
        ("queue_messages_dead_letter_dropped_total", "counter",
         "Messages that died and went nowhere, by cause and reason", dropped),
        ("queue_messages_expired_total", "counter", "Messages that expired", expired),
        ("queue_dead_letters_held", "gauge",
         "Dead letters of an at-least-once queue waiting for a target to accept them", held),
        ("queue_messages_delayed", "gauge",
         "Messages held back by a redelivery delay", delayed),
    ]


def stream_metrics(broker, vhost=None) -> list[Metric]:
    """Per stream: its log's segments, bytes, first and committed offsets,
    and each consumer's next offset."""
    segments, size, first, committed, consumers = [], [], [], [], []
    for v, queue in _queues(broker, vhost):
        stream = getattr(queue, "log", None) if queue.settings.is_stream else None
        if stream is None:
            continue
        base = {"vhost": v, "queue": queue.name}
        segments.append((base, stream.segment_count))
        size.append((base, stream.size))
        first.append((base, stream.first_offset))
        committed.append((base, stream.committed - 1))
        consumers.extend(({**base, "consumer_tag": tag}, offset)
                         for tag, offset in queue.consumer_offsets().items())
    return [
        ("stream_segments", "gauge", "Segment files of a stream's log", segments),
        ("stream_bytes", "gauge", "Bytes of a stream's log", size),
        ("stream_first_offset", "gauge", "Offset of a stream's oldest message", first),
        ("stream_committed_offset", "gauge",
         "Offset of a stream's newest message on disk (-1: none)", committed),
        ("stream_consumer_offset", "gauge", "The next offset a stream consumer reads",
         consumers),
    ]


def quorum_queue_metrics(broker, vhost=None) -> list[Metric]:
    """Per 4.3 quorum queue: its ready messages by priority and those
    returned.  RabbitMQ 4.3 has these only in its management API
    (rabbit_quorum_queue:handle_tick/3 hands them to the queue_metrics table,
    whose Prometheus family lists a fixed set of keys without them); they
    are ours because strict priorities can starve the low ones, which
    nothing else shows, and returned messages waiting are the retries of
    failing deliveries.  Its delivery limit and delayed-retry configuration
    are settings, not measures: the management API shows them."""
    by_priority, returned = [], []
    for v, queue in _queues(broker, vhost):
        if not queue.settings.is_quorum_4x:
            continue
        base = {"vhost": v, "queue": queue.name}
        by_priority.extend(({**base, "priority": str(level)}, count)
                           for level, count in sorted(queue.by_priority().items()))
        returned.append((base, len(queue.ready.returns)))
    return [
        ("queue_messages_ready_by_priority", "gauge",
         "Ready messages of a RabbitMQ 4.3 quorum queue at each priority holding any "
         "(returned ones aside)", by_priority),
        ("queue_messages_ready_returned", "gauge",
         "Ready messages of a RabbitMQ 4.3 quorum queue that were returned, served first",
         returned),
    ]


def flow_metrics(broker, vhost=None) -> list[Metric]:
    """Which connections and channels are in flow: held back by credit
    (broker/queue/credit.py) or a busy store, or were within the last
    seconds, as the management API's state 'flow' says (protocol/flow.py).
    RabbitMQ exports no such family; per object 1 or 0, summed on
    /metrics (how many)."""
    connections = [conn for conn in broker.connections
                   if vhost is None or (conn.vhost is not None and conn.vhost.name == vhost)]
    return [
        ("connection_in_flow", "gauge",
         "1 while the connection is in flow: not read while queues it publishes into drain",
         [({"connection": conn.name}, int(conn.flow.state() == "flow"))
          for conn in connections]),
        ("channel_in_flow", "gauge",
         "1 while the channel published into a queue that withheld credit, and a second after",
         [({"channel": f"{conn.name} ({number})"},
           int(conn.flow.channel_state(number) == "flow"))
          for conn in connections for number in conn.channels]),
    ]


_AGES = ("queue_oldest_message_age_seconds", "queue_oldest_dead_letter_age_seconds")


def _dead_letters_aggregated(broker) -> list[Metric]:
    """The same summed over queues, deleted queues included, so the
    counters never go down."""
    per_queue = dead_letter_metrics(broker)
    summed = _aggregate([m for m in per_queue if m[0] not in _AGES], keep=("reason", "cause"))
    # An age summed over queues means nothing: the oldest of all.
    summed += [(name, kind, help_text, [({}, max((v for _, v in samples), default=0.0))])
               for name, kind, help_text, samples in per_queue if name in _AGES]
    c = broker.counters
    retired = {
        "queue_messages_dead_lettered_total": Counter(
            {(("reason", reason),): n for reason, n in c.retired_republished.items()}),
        "queue_messages_dead_letter_dropped_total": Counter(
            {(("cause", cause), ("reason", reason)): n
             for (cause, reason), n in c.retired_dropped.items()}),
        "queue_messages_expired_total": Counter({(): c.retired_expired}),
        "queue_dead_letters_received_total": Counter(
            {(("reason", reason),): n for reason, n in c.retired_received.items()}),
        "queue_dead_letters_archived_total": Counter({(): c.retired_archived}),
    }
    metrics = []
    for name, kind, help_text, samples in summed:
        extra = retired.get(name)
        if extra:
            totals = Counter({tuple(labels.items()): value for labels, value in samples})
            totals.update(extra)
            if len(totals) > 1 and not totals.get((), 1):
                del totals[()]  # _aggregate's stand-in for no queue, beside real series
            samples = [(dict(key), value) for key, value in sorted(totals.items())]
        metrics.append((name, kind, help_text, samples))
    return metrics


# ---- the three views ---------------------------------------------------------

def render(broker, view: str = "aggregated", families: Iterable[str] = (),
           vhost: str | None = None) -> str:
    if view == "detailed":
        lines = []
        wanted = list(dict.fromkeys(families))
        for family in wanted:
            if family in PER_OBJECT_FAMILIES and not (
                    family == "queue_consumer_count" and "queue_metrics" in wanted):
                lines += text_lines(DETAILED_PREFIX, PER_OBJECT_FAMILIES[family](broker, vhost))
        cluster = cluster_metrics(broker, vhost)
        for family in wanted:
            if family in cluster:
                lines += text_lines(CLUSTER_PREFIX, cluster[family])
        if "dead_letter_metrics" in wanted:
            lines += text_lines(OWN_PREFIX, dead_letter_metrics(broker, vhost))
        if "stream_metrics" in wanted:
            lines += text_lines(OWN_PREFIX, stream_metrics(broker, vhost))
        if "quorum_queue_metrics" in wanted:
            lines += text_lines(OWN_PREFIX, quorum_queue_metrics(broker, vhost))
        if "flow_metrics" in wanted:
            lines += text_lines(OWN_PREFIX, flow_metrics(broker, vhost))
        lines += text_lines(PREFIX, identity(broker, view))
        return "\n".join(lines) + "\n"
    per_object = view == "per-object"
    core = [metric for family, make in PER_OBJECT_FAMILIES.items()
            if family != "queue_consumer_count" for metric in make(broker)]
    # RabbitMQ registers its alarm collector for /metrics only.
    alarms = [] if per_object else alarm_metrics(broker)
    lines = text_lines(PREFIX, connection_churn_metrics(broker) + node_metrics(broker)
                  + (core if per_object else _aggregate(core)) + totals(broker)
                  + identity(broker, view) + alarms + global_metrics(broker))
    lines += text_lines(OWN_PREFIX, dead_letter_metrics(broker) if per_object
                        else _dead_letters_aggregated(broker))
    streams = stream_metrics(broker)
    lines += text_lines(OWN_PREFIX, streams if per_object else _aggregate(streams[:2]))
    quorum = quorum_queue_metrics(broker)
    lines += text_lines(OWN_PREFIX, quorum if per_object
                        else _aggregate(quorum, keep=("priority",)))
    flow = flow_metrics(broker)
    lines += text_lines(OWN_PREFIX, flow if per_object else _aggregate(flow))
    if broker.cluster is not None:
        lines += text_lines(OWN_PREFIX, broker.cluster.metric_families())
    return "\n".join(lines) + "\n"
