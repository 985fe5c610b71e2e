"""RabbitMQ's published Grafana overview dashboard finds every metric it
needs here: each metric name its PromQL uses is exposed by a running
broker's Prometheus endpoint (/metrics or /metrics/per-object), or stands
in NOT_HERE with the reason it cannot be.

The names were extracted (with `metric_names` below) from
deps/rabbitmq_prometheus/docker/grafana/dashboards/RabbitMQ-Overview.json
in https://github.com/rabbitmq/rabbitmq-server at three commits: the ones
the 3.10 and 3.13 lines ship (tags v3.10.8, v3.13.7) and the current one,
which RabbitMQ 4.x's exporter serves.  The dashboard itself is not copied here, only the names.
To refresh: load the dashboard's JSON, call `dashboard_metrics` on it, and
compare with the sets below.
"""

from __future__ import annotations

import urllib.request

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .metrics import dashboard_metrics, metric_names

DASHBOARD = ("https://github.com/rabbitmq/rabbitmq-server/blob/{commit}/deps/rabbitmq_prometheus/"
             "docker/grafana/dashboards/RabbitMQ-Overview.json")
_COMMON = {
    "rabbitmq_build_info", "rabbitmq_channels", "rabbitmq_channels_closed_total",
    "rabbitmq_channels_opened_total", "rabbitmq_connections",
    "rabbitmq_connections_closed_total", "rabbitmq_connections_opened_total",
    "rabbitmq_disk_space_available_bytes", "rabbitmq_global_messages_acknowledged_total",
    "rabbitmq_global_messages_confirmed_total",
    "rabbitmq_global_messages_delivered_consume_auto_ack_total",
    "rabbitmq_global_messages_delivered_consume_manual_ack_total",
    "rabbitmq_global_messages_delivered_get_auto_ack_total",
    "rabbitmq_global_messages_delivered_get_manual_ack_total",
    "rabbitmq_global_messages_get_empty_total", "rabbitmq_global_messages_received_confirm_total",
    "rabbitmq_global_messages_received_total", "rabbitmq_global_messages_redelivered_total",
    "rabbitmq_global_messages_routed_total", "rabbitmq_global_messages_unroutable_dropped_total",
    "rabbitmq_global_messages_unroutable_returned_total", "rabbitmq_global_publishers",
    "rabbitmq_identity_info", "rabbitmq_process_max_fds", "rabbitmq_process_open_fds",
    "rabbitmq_process_resident_memory_bytes", "rabbitmq_queue_messages_ready",
    "rabbitmq_queue_messages_unacked", "rabbitmq_queues", "rabbitmq_queues_created_total",
    "rabbitmq_queues_declared_total", "rabbitmq_queues_deleted_total",
    "rabbitmq_resident_memory_limit_bytes",
}
# commit of the dashboard file -> the metric names its PromQL uses.
DASHBOARD_METRICS = {
    # tag v3.10.8, the release Debian ships and the tests compare with
    "5b67ea2bbd4c09e8ad2d5b2b67bf1b5feff29231": (_COMMON - {"rabbitmq_global_publishers"}) | {
        "rabbitmq_channel_consumers", "rabbitmq_consumers", "rabbitmq_process_max_tcp_sockets",
        "rabbitmq_process_open_tcp_sockets"},
    # tag v3.13.7
    "82e25af5d5a9c23c07c3fff9a7566a687d42ed2c": _COMMON | {
        "rabbitmq_consumers", "rabbitmq_process_max_tcp_sockets",
        "rabbitmq_process_open_tcp_sockets"},
    # main, March 2026 (RabbitMQ 4.x)
    "a07a30f55af995e7fd395604a68a6ea0d223175c": _COMMON | {
        "rabbitmq_disk_space_available_limit_bytes", "rabbitmq_erlang_uptime_seconds",
        "rabbitmq_global_consumers", "rabbitmq_global_messages_delivered_total",
        "rabbitmq_message_size_bytes_bucket", "rabbitmq_message_size_bytes_count",
        "rabbitmq_message_size_bytes_sum"},
}
# Names the dashboards use that this broker does not expose, and why.
NOT_HERE = {
    # RabbitMQ 4.x's histogram of the sizes of received messages (its "Avg
    # Size" and "Message Size Distribution" panels).  Counting sizes belongs
    # on the one publish path, where it would cost every publish; until then
    # those two panels stay empty and every other panel works.
    "rabbitmq_message_size_bytes_bucket": "no message size histogram yet",
    "rabbitmq_message_size_bytes_count": "no message size histogram yet",
    "rabbitmq_message_size_bytes_sum": "no message size histogram yet",
}
# Every panel joins on identity_info by these labels (namespace comes from
# the scrape configuration, not from the exporter).
JOIN_LABELS = {"rabbitmq_cluster", "rabbitmq_node", "rabbitmq_endpoint"}

def test_metric_names_are_read_out_of_the_dashboards_promql():
    # Expressions as the dashboard writes them.
    assert metric_names(
        'sum(rate(rabbitmq_channel_messages_redelivered_total[60s]) * on(instance, job) '
        'group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster"'
        ', namespace="$namespace"}) + sum(irate(rabbitmq_global_messages_delivered_total'
        '[$__rate_interval]))') == {"rabbitmq_channel_messages_redelivered_total",
                                     "rabbitmq_identity_info",
                                     "rabbitmq_global_messages_delivered_total"}
    assert metric_names('(rabbitmq_process_max_fds - rabbitmq_process_open_fds) * on(instance,'
                        ' job) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info'
                        ) == {"rabbitmq_process_max_fds", "rabbitmq_process_open_fds",
                              "rabbitmq_identity_info"}
    assert metric_names('sum(increase(rabbitmq_message_size_bytes_bucket{le="1e+06"}'
                        '[$__range])) by(le) > 0.5') == {"rabbitmq_message_size_bytes_bucket"}
    assert metric_names('label_values(rabbitmq_identity_info{namespace="$namespace", '
                        'rabbitmq_endpoint!="memory-breakdown"},rabbitmq_endpoint)') == {
        "rabbitmq_identity_info"}
    assert dashboard_metrics({
        "panels": [{"targets": [{"expr": "sum(rabbitmq_queues)"}]},
                   {"panels": [{"targets": [{"expr": "rabbitmq_connections"}]}]}],
        "templating": {"list": [{"type": "datasource", "query": "prometheus"},
                                {"type": "query", "query": {
                                    "query": "label_values(rabbitmq_identity_info, namespace)"}}]},
    }) == {"rabbitmq_queues", "rabbitmq_connections", "rabbitmq_identity_info"}


def _scrape(url: str) -> dict:
    """{sample name: [labels of each sample]}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample.labels)
    return found


@pytest.fixture
def busy(broker):
    """The broker with a queue holding a message, a consumer and a get."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.confirm_delivery()
    channel.queue_declare("gd.q")
    channel.basic_publish("", "gd.q", b"x")
    channel.basic_get("gd.q", auto_ack=False)
    channel.basic_consume("gd.q", lambda *args: None)
    yield broker
    conn.close()


@pytest.mark.parametrize("commit", DASHBOARD_METRICS)
def test_the_overview_dashboard_finds_every_metric_it_uses(busy, commit):
    exposed = {path: _scrape(busy.prometheus_url + path)
               for path in ("/metrics", "/metrics/per-object")}
    used = DASHBOARD_METRICS[commit]
    missing = {name for name in used if name not in NOT_HERE
               and not any(name in found for found in exposed.values())}
    assert not missing, f"{DASHBOARD.format(commit=commit)} needs {sorted(missing)}"
    assert set(NOT_HERE) <= set().union(*DASHBOARD_METRICS.values())  # no stale entry
    assert not set(NOT_HERE) & set().union(*(set(found) for found in exposed.values()))
    for path, found in exposed.items():
        (identity,) = found["rabbitmq_identity_info"]
        assert JOIN_LABELS <= set(identity), path
        assert identity["rabbitmq_endpoint"] == ("aggregated" if path == "/metrics"
                                                 else "per-object")
