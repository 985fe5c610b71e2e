"""A stream as the management API and amqpctl show it: its type, size,
segments, first and last offsets and each consumer's offset."""

from __future__ import annotations

import time
import urllib.parse

from .stream_scenarios import connect, declare, publish, unique
from .test_management import amqpctl, http


def queue_info(broker, name):
    return http(broker, "GET", f"/api/queues/%2F/{urllib.parse.quote(name, safe='')}")[1]


def test_the_management_api_shows_a_streams_log_and_its_consumers(broker):
    name = unique()
    declare(broker.url, name, **{"x-stream-max-segment-size-bytes": 1000})
    publish(broker.url, name, 30)
    conn = connect(broker.url)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=5)
    tag = channel.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": 10})
    deadline = time.monotonic() + 5
    info = queue_info(broker, name)
    while info["stream"]["consumer_offsets"].get(tag) != 15 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
        info = queue_info(broker, name)
    assert info["type"] == "stream"
    assert (info["messages"], info["messages_ready"], info["messages_unacknowledged"]) \
        == (30, 30, 5)
    stream = info["stream"]
    assert (stream["first_offset"], stream["last_offset"], stream["next_offset"]) == (0, 29, 30)
    assert stream["committed_offset"] == info["committed_offset"] == 29
    assert stream["segments"] == info["segments"] > 1
    assert stream["size_bytes"] > 30 * 10
    # unacked deliveries use the credit: it read five, from offset 10
    assert stream["consumer_offsets"] == {tag: 15}
    assert info["members"] == info["online"] == [info["leader"]]
    conn.close()


def test_amqpctl_list_queues_shows_the_type(broker, capsys):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 2)
    capsys.readouterr()
    assert amqpctl(broker, "list_queues", "name", "type", "messages", "segments", "-q") == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "name\ttype\tmessages\tsegments"
    assert f"{name}\tstream\t2\t1" in rows


def test_prometheus_has_a_streams_log_and_consumer_offsets(broker):
    from .test_prometheus import scrape, value
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 3)
    conn = connect(broker.url)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    tag = channel.basic_consume(name, lambda ch, m, p, b: ch.basic_ack(m.delivery_tag),
                                arguments={"x-stream-offset": "first"})
    labels = {"vhost": "/", "queue": name}
    consumer = {**labels, "consumer_tag": tag}

    def offset(metrics):
        return metrics.get("amqp_stream_consumer_offset", {}).get(
            frozenset(consumer.items()))
    deadline = time.monotonic() + 5
    metrics = scrape(broker, "/metrics/per-object")
    while offset(metrics) != 3 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
        metrics = scrape(broker, "/metrics/per-object")
    conn.close()
    assert value(metrics, "amqp_stream_segments", **labels) == 1
    assert value(metrics, "amqp_stream_bytes", **labels) > 0
    assert value(metrics, "amqp_stream_first_offset", **labels) == 0
    assert value(metrics, "amqp_stream_committed_offset", **labels) == 2
    assert offset(metrics) == 3
    assert value(metrics, "rabbitmq_queue_messages", **labels) == 3
    assert value(scrape(broker), "amqp_stream_segments") >= 1


def test_http_get_purge_and_the_workbench_refuse_a_stream(broker):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 2)
    path = f"/api/queues/%2F/{urllib.parse.quote(name, safe='')}"
    status, body = http(broker, "POST", f"{path}/get", {"count": 1, "ackmode": "ack_requeue_true",
                                                         "encoding": "auto"})
    assert status >= 400 and "basic.get not supported by stream queues" in str(body)
    status, body = http(broker, "DELETE", f"{path}/contents")
    assert status >= 400 and "queue.purge not supported by stream queues" in str(body)
    for method, action, payload in (("GET", "messages", None), ("POST", "redrive", {}),
                                    ("POST", "move", {"target": "x"}),
                                    ("POST", "delete-messages", {})):
        status, body = http(broker, method, f"{path}/{action}", payload)
        assert status == 400 and "does not read streams yet" in str(body), action
    assert queue_info(broker, name)["messages"] == 2  # nothing taken out
