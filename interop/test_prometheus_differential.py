"""The exporter's names against a real RabbitMQ's rabbitmq_prometheus: every
`rabbitmq_*` metric this broker emits exists on the reference under the same
path with the same type and label names, so a dashboard built for RabbitMQ
finds it.  Both brokers hold the same objects (a queue with a message, a
connection with a channel) so that per-object families have samples."""

from __future__ import annotations

import urllib.request
import uuid

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

PATHS = ("/metrics", "/metrics/per-object")
# Families known to both brokers that must be present, not only allowed.
EXPECTED = {
    "/metrics": {"rabbitmq_queue_messages_ready", "rabbitmq_queues", "rabbitmq_connections",
                 "rabbitmq_global_messages_received_total",
                 "rabbitmq_global_messages_routed_total",
                 "rabbitmq_alarms_memory_used_watermark", "rabbitmq_identity_info"},
    "/metrics/per-object": {"rabbitmq_queue_messages_ready", "rabbitmq_queue_consumers",
                            "rabbitmq_channels_opened_total"},
}
# Same name, other labels, on purpose: RabbitMQ counts publishes per
# (channel, exchange, queue); this broker counts them per queue only.
# build_info names this broker's product instead of an Erlang release.
# identity_info names its view (rabbitmq_endpoint), as RabbitMQ 4.x's does:
# the current overview dashboard joins on it (test_grafana_dashboard.py).
OTHER_LABELS = {"rabbitmq_queue_messages_published_total", "rabbitmq_build_info",
                "rabbitmq_identity_info"}


def families(url: str) -> dict:
    """{sample name: (family type, label names of its first sample)}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, (family.type, frozenset(sample.labels)))
    return found


@pytest.fixture
def both(broker, rabbitmq_url, rabbitmq_prometheus_url):
    """The same objects on both brokers, removed afterwards."""
    queue = f"pd.{uuid.uuid4().hex[:8]}"
    connections = []
    for url in (broker.url, rabbitmq_url):
        conn = pika.BlockingConnection(pika.URLParameters(url))
        channel = conn.channel()
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"x")
        connections.append((conn, channel))
    yield broker.prometheus_url, rabbitmq_prometheus_url
    for conn, channel in connections:
        channel.queue_delete(queue)
        conn.close()


@pytest.mark.parametrize("path", PATHS)
def test_every_rabbitmq_name_we_emit_is_rabbitmqs(both, path):
    ours_url, theirs_url = both
    ours, theirs = families(ours_url + path), families(theirs_url + path)
    ours = {name: shape for name, shape in ours.items() if name.startswith("rabbitmq_")}
    assert EXPECTED[path] <= set(ours)
    assert sorted(set(ours) - set(theirs)) == []
    differences = {name: (ours[name], theirs[name]) for name in ours
                   if name not in OTHER_LABELS and ours[name] != theirs[name]}
    assert differences == {}


def test_own_families_keep_to_their_prefix(both):
    ours_url, _ = both
    names = set(families(ours_url + "/metrics"))
    own = {name for name in names if not name.startswith("rabbitmq_")}
    assert own and all(name.startswith("amqp_") for name in own)


def series(url: str, prefix: str) -> set:
    """The (name, labels) of every sample whose name starts with `prefix`."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items()))
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name.startswith(prefix)}


def test_every_dead_letter_series_rabbitmq_starts_with_is_here_from_the_start(both):
    # At 0 until a death counts, so rate() sees a queue type's first deaths.
    # (RabbitMQ's confirmed_total counts at-least-once dead letters its
    # targets confirmed; this broker has no such counter, docs/differences.md.)
    ours_url, theirs_url = both
    prefix = "rabbitmq_global_messages_dead_lettered_"
    theirs = {found for found in series(theirs_url + "/metrics", prefix)
              if found[0] != prefix + "confirmed_total"}
    assert theirs and theirs <= series(ours_url + "/metrics", prefix)
