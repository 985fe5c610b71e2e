"""The Prometheus listener: RabbitMQ's metric names filled from real
traffic, read back with Prometheus's own text parser."""

from __future__ import annotations

import urllib.error
import urllib.request

import pika
import pytest

from amqp_server.testing import BrokerThread

from .metrics import scrape, value
from .waiting import wait_for, wait_get_noack


@pytest.fixture
def channel(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield conn.channel()
    conn.close()


def test_queue_depths_per_object_and_summed(broker, channel):
    channel.queue_declare("pm.a")
    channel.queue_declare("pm.b")
    for _ in range(3):
        channel.basic_publish("", "pm.a", b"x")
    channel.basic_publish("", "pm.b", b"y")
    channel.basic_get("pm.b", auto_ack=False)
    per_object = scrape(broker, "/metrics/per-object")
    assert value(per_object, "rabbitmq_queue_messages_ready", vhost="/", queue="pm.a") == 3
    assert value(per_object, "rabbitmq_queue_messages_unacked", vhost="/", queue="pm.b") == 1
    assert value(per_object, "rabbitmq_queue_messages", vhost="/", queue="pm.b") == 1
    assert value(per_object, "rabbitmq_queue_consumers", vhost="/", queue="pm.a") == 0
    summed = scrape(broker)
    assert value(summed, "rabbitmq_queue_messages_ready") == 3
    assert value(summed, "rabbitmq_queue_messages_unacked") == 1
    assert value(summed, "rabbitmq_queues") == 2
    assert value(summed, "rabbitmq_connections") == 1
    assert value(summed, "rabbitmq_channels") == 1


def test_global_counters_follow_publishes_deliveries_and_acks(broker, channel):
    channel.confirm_delivery()
    channel.queue_declare("pm.work")
    for _ in range(4):
        channel.basic_publish("", "pm.work", b"x")
    channel.basic_publish("", "pm.nowhere", b"lost")
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", "pm.nowhere", b"back", mandatory=True)
    method, _, _ = channel.basic_get("pm.work", auto_ack=False)
    channel.basic_ack(method.delivery_tag)
    channel.basic_get("pm.work", auto_ack=True)
    # The two left, consumed and acked: none is in flight when the consumer
    # is cancelled, so the counts do not depend on timing.
    taken = 0
    for method, _, _ in channel.consume("pm.work", inactivity_timeout=5):
        assert method is not None
        channel.basic_ack(method.delivery_tag)
        taken += 1
        if taken == 2:
            break
    channel.cancel()
    got = scrape(broker)
    amqp = {"protocol": "amqp091"}
    classic = {**amqp, "queue_type": "rabbit_classic_queue"}
    assert value(got, "rabbitmq_global_messages_received_total", **amqp) == 6
    assert value(got, "rabbitmq_global_messages_received_confirm_total", **amqp) == 6
    assert value(got, "rabbitmq_global_messages_routed_total", **amqp) == 4
    assert value(got, "rabbitmq_global_messages_unroutable_dropped_total", **amqp) == 1
    assert value(got, "rabbitmq_global_messages_unroutable_returned_total", **amqp) == 1
    assert value(got, "rabbitmq_global_messages_confirmed_total", **amqp) == 6
    assert value(got, "rabbitmq_global_messages_delivered_get_manual_ack_total", **classic) == 1
    assert value(got, "rabbitmq_global_messages_delivered_get_auto_ack_total", **classic) == 1
    assert value(got, "rabbitmq_global_messages_delivered_consume_manual_ack_total",
                 **classic) == 2
    assert value(got, "rabbitmq_global_messages_delivered_total", **classic) == 4
    assert value(got, "rabbitmq_global_messages_acknowledged_total", **classic) == 3
    assert value(got, "rabbitmq_global_messages_get_empty_total", **classic) == 0


def test_get_empty_and_redeliveries_are_counted(broker, channel):
    channel.queue_declare("pm.again")
    assert channel.basic_get("pm.again")[0] is None
    channel.basic_publish("", "pm.again", b"x")
    method, _, _ = channel.basic_get("pm.again")
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, _ = channel.basic_get("pm.again", auto_ack=True)
    assert method.redelivered
    got = scrape(broker)
    classic = {"protocol": "amqp091", "queue_type": "rabbit_classic_queue"}
    assert value(got, "rabbitmq_global_messages_get_empty_total", **classic) == 1
    assert value(got, "rabbitmq_global_messages_redelivered_total", **classic) == 1


def test_dead_letters_by_reason_survive_the_queues_deletion(broker, channel):
    channel.queue_declare("pm.dlq")
    channel.queue_declare("pm.src", arguments={"x-dead-letter-exchange": "",
                                               "x-dead-letter-routing-key": "pm.dlq"})
    channel.queue_declare("pm.bare", arguments={"x-max-length": 1})
    # Its dead-lettering fails: the exchange does not exist (a drop, not a dead letter).
    channel.queue_declare("pm.lost", arguments={"x-max-length": 1,
                                                "x-dead-letter-exchange": "pm.missing"})
    for _ in range(2):
        channel.basic_publish("", "pm.src", b"x")
        channel.basic_publish("", "pm.bare", b"x")  # the older one is dropped: no DLX
        channel.basic_publish("", "pm.lost", b"x")
    for _ in range(2):
        method, _, _ = channel.basic_get("pm.src")
        channel.basic_reject(method.delivery_tag, requeue=False)
    per_object = scrape(broker, "/metrics/per-object")
    assert value(per_object, "amqp_queue_messages_dead_lettered_total",
                 vhost="/", queue="pm.src", reason="rejected") == 2
    assert value(per_object, "amqp_queue_messages_dead_letter_dropped_total",
                 vhost="/", queue="pm.bare", cause="no_dlx", reason="maxlen") == 1
    before = scrape(broker)
    channel.queue_delete("pm.src")
    channel.queue_delete("pm.bare")
    channel.queue_delete("pm.lost")
    channel.queue_delete("pm.dlq")
    after = scrape(broker)
    for got in (before, after):
        assert value(got, "rabbitmq_global_messages_dead_lettered_rejected_total",
                     queue_type="rabbit_classic_queue", dead_letter_strategy="at_most_once") == 2
        assert value(got, "rabbitmq_global_messages_dead_lettered_maxlen_total",
                     queue_type="rabbit_classic_queue", dead_letter_strategy="disabled") == 1
        assert value(got, "amqp_queue_messages_dead_lettered_total", reason="rejected") == 2
        assert value(got, "amqp_queue_messages_dead_letter_dropped_total",
                     cause="no_dlx", reason="maxlen") == 1
        assert value(got, "amqp_queue_messages_dead_letter_dropped_total",
                     cause="dlx_missing", reason="maxlen") == 1
        assert got["amqp_queue_messages_dead_lettered_total"].get(
            frozenset({("reason", "maxlen")}), 0) == 0
        assert value(got, "amqp_queue_dead_letters_received_total", reason="rejected") == 2
        assert value(got, "amqp_queue_dead_letters_archived_total") == 0
    # No unlabelled stand-in beside the labelled series.
    assert frozenset() not in after["amqp_queue_dead_letters_received_total"]
    assert value(after, "rabbitmq_queues_deleted_total") == 4
    assert value(after, "rabbitmq_queues_created_total") == 4


def test_churn_counters(broker):
    for _ in range(2):
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        conn.channel()
        conn.channel().close()
        conn.close()
    got = scrape(broker)
    assert value(got, "rabbitmq_connections_opened_total") == 2
    assert value(got, "rabbitmq_connections_closed_total") == 2
    assert value(got, "rabbitmq_channels_opened_total") == 4
    assert value(got, "rabbitmq_channels_closed_total") == 4


def test_alarms_and_identity(broker):
    broker.call(broker.broker.set_alarm, "disk", True)
    try:
        got = scrape(broker)
    finally:
        broker.call(broker.broker.set_alarm, "disk", False)
    assert value(got, "rabbitmq_alarms_free_disk_space_watermark") == 1
    assert value(got, "rabbitmq_alarms_memory_used_watermark") == 0
    assert value(scrape(broker), "rabbitmq_alarms_free_disk_space_watermark") == 0
    identity = got["rabbitmq_identity_info"]
    assert [dict(labels)["rabbitmq_node"] for labels in identity] == ["amqp-server@localhost"]
    assert value(got, "rabbitmq_disk_space_available_limit_bytes") == \
        broker.broker.config.disk_free_limit


def test_detailed_gives_only_the_families_asked_for_in_the_vhost(broker, channel):
    broker.add_vhost("pm.elsewhere")
    broker.declare_queue("pm.there", vhost="pm.elsewhere")
    channel.queue_declare("pm.here")
    got = scrape(broker, "/metrics/detailed?family=queue_coarse_metrics&vhost=pm.elsewhere")
    assert set(got) == {"rabbitmq_detailed_queue_messages_ready",
                        "rabbitmq_detailed_queue_messages_unacked",
                        "rabbitmq_detailed_queue_messages",
                        "rabbitmq_build_info", "rabbitmq_identity_info"}
    assert list(got["rabbitmq_detailed_queue_messages_ready"]) == [
        frozenset({"vhost": "pm.elsewhere", "queue": "pm.there"}.items())]
    got = scrape(broker, "/metrics/detailed?family=vhost_status&family=dead_letter_metrics")
    assert value(got, "rabbitmq_cluster_vhost_status", vhost="pm.elsewhere") == 1
    assert value(got, "amqp_queue_messages_expired_total", vhost="/", queue="pm.here") == 0
    assert set(scrape(broker, "/metrics/detailed")) == {"rabbitmq_build_info",
                                                         "rabbitmq_identity_info"}


def test_unknown_paths_are_404(broker):
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(broker.prometheus_url + "/api/overview", timeout=10)
    assert raised.value.code == 404


def test_the_listener_can_be_turned_off():
    with BrokerThread({"prometheus_port": -1}) as broker:
        assert broker.server.prometheus is None
        with pytest.raises(RuntimeError, match="prometheus_port=-1"):
            broker.prometheus_url


def test_a_lazy_dead_letter_queue_counts_its_paged_dead_letters(broker, channel):
    # A lazy queue keeps 256 messages in memory, any queue pages past its
    # threshold: the gauge once read 256 however many waited.
    channel.queue_declare("pm.lazy", arguments={"x-queue-mode": "lazy"})
    channel.queue_declare("pm.ttl", arguments={"x-message-ttl": 0,
                                               "x-dead-letter-exchange": "",
                                               "x-dead-letter-routing-key": "pm.lazy"})
    channel.confirm_delivery()
    for _ in range(1000):
        channel.basic_publish("", "pm.ttl", b"x")
    assert wait_for(lambda: channel.queue_declare("pm.lazy", passive=True)
                    .method.message_count == 1000)
    waiting = {"vhost": "/", "queue": "pm.lazy", "reason": "expired"}
    per_object = scrape(broker, "/metrics/per-object")
    assert value(per_object, "amqp_queue_dead_letters_waiting", **waiting) == 1000
    for _ in range(900):  # read back from the page file as the head drains
        method, _, _ = wait_get_noack(channel, "pm.lazy")
        channel.basic_ack(method.delivery_tag)
    per_object = scrape(broker, "/metrics/per-object")
    assert value(per_object, "amqp_queue_dead_letters_waiting", **waiting) == 100
