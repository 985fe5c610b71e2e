"""/metrics in the Prometheus text format: queue depths, message counters,
and dead-lettering by reason and drops by cause."""

from __future__ import annotations

from .shapes import dead_letter_counters


def _labels(**values: str) -> str:
    escaped = (f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
               for k, v in values.items())
    return "{" + ",".join(escaped) + "}"


def render(broker) -> str:
    lines: list[str] = []
    series = {
        "amqp_queue_messages_ready": ("gauge", "Messages ready for delivery"),
        "amqp_queue_messages_unacked": ("gauge", "Messages delivered, not yet acknowledged"),
        "amqp_queue_consumers": ("gauge", "Consumers"),
        "amqp_queue_messages_published_total": ("counter", "Messages enqueued"),
        "amqp_queue_messages_delivered_total": ("counter", "Messages delivered or got"),
        "amqp_queue_messages_acked_total": ("counter", "Messages acknowledged"),
        "amqp_queue_messages_expired_total": ("counter", "Messages that expired"),
        "amqp_queue_messages_dead_lettered_total": ("counter",
                                                    "Messages dead-lettered, by reason"),
        "amqp_queue_messages_dead_letter_dropped_total": (
            "counter", "Messages that died and went nowhere, by cause and reason"),
    }
    samples: dict[str, list[str]] = {name: [] for name in series}
    for vhost in broker.vhosts.values():
        for queue in vhost.queues.values():
            base = {"vhost": vhost.name, "queue": queue.name}
            label = _labels(**base)
            samples["amqp_queue_messages_ready"].append(f"{label} {queue.message_count}")
            samples["amqp_queue_messages_unacked"].append(f"{label} {queue.unacked}")
            samples["amqp_queue_consumers"].append(f"{label} {len(queue.consumers)}")
            samples["amqp_queue_messages_published_total"].append(f"{label} {queue.published}")
            samples["amqp_queue_messages_delivered_total"].append(f"{label} {queue.delivered}")
            samples["amqp_queue_messages_acked_total"].append(f"{label} {queue.acked}")
            counters = dead_letter_counters(queue)
            samples["amqp_queue_messages_expired_total"].append(f"{label} {counters['expired']}")
            for reason, count in counters["dead_lettered"].items():
                samples["amqp_queue_messages_dead_lettered_total"].append(
                    f"{_labels(**base, reason=reason)} {count}")
            for (cause, reason), count in queue.stats["dropped"].items():
                samples["amqp_queue_messages_dead_letter_dropped_total"].append(
                    f"{_labels(**base, cause=cause, reason=reason)} {count}")
    for name, (kind, help_text) in series.items():
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{sample}" for sample in samples[name])
    return "\n".join(lines) + "\n"
