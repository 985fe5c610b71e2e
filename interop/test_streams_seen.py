"""A stream as the management API and amqpctl show it: its type, size,
segments, first and last offsets and each consumer's offset."""

from __future__ import annotations

import time
import urllib.parse

import pika

from .management_api import amqpctl, http
from .stream_scenarios import connect, declare, publish, unique


def queue_info(broker, name):
    return http(broker, "GET", f"/api/queues/%2F/{urllib.parse.quote(name, safe='')}")[1]


def stream_behind_a_dlx(broker):
    """A connection and channel, a queue `source` whose dead letters go
    through fanout `exchange` into the stream `target`."""
    source, target, exchange = unique("source"), unique(), unique("dlx")
    conn = connect(broker.url)
    channel = conn.channel()
    channel.exchange_declare(exchange, "fanout", durable=True)
    channel.queue_declare(target, durable=True, arguments={"x-queue-type": "stream"})
    channel.queue_bind(target, exchange)
    channel.queue_declare(source, arguments={"x-dead-letter-exchange": exchange})
    return conn, channel, source, target, exchange


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
    from .metrics import scrape, value
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
    for action, payload in (("move", {"exchange": "x"}), ("delete-messages", {})):
        status, body = http(broker, "POST", f"{path}/{action}", payload)
        assert status == 400 and "does not move or delete a stream" in str(body), action
    assert queue_info(broker, name)["messages"] == 2  # nothing taken out


def test_the_workbench_browses_a_dead_letter_stream_by_offset_time_and_filter(broker):
    """Read, never consumed: a page from an offset, from a moment, filtered
    by reason, each message with its deaths; the stream keeps them all."""
    conn, channel, source, target, exchange = stream_behind_a_dlx(broker)
    channel.confirm_delivery()
    for i in range(6):
        channel.basic_publish("", source, b"poison %d" % i,
                              pika.BasicProperties(message_id=f"m{i}",
                                                   expiration="0" if i % 2 else None))
    deadline = time.monotonic() + 5
    while channel.queue_declare(source, passive=True).method.message_count < 3 \
            and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    for _ in range(3):
        method, _, _ = channel.basic_get(source)
        channel.basic_reject(method.delivery_tag, requeue=False)
    conn.close()
    path = f"/api/queues/%2F/{urllib.parse.quote(target, safe='')}/messages"
    deadline = time.monotonic() + 5
    status, page = http(broker, "GET", path)
    while len(page["messages"]) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
        status, page = http(broker, "GET", path)
    assert status == 200 and page["type"] == "stream"
    assert [m["seq"] for m in page["messages"]] == list(range(6))
    assert page["next_offset"] == 6
    # When the stream took each: what a page started at a time goes by.
    assert all(abs(m["appended_at"] - time.time()) < 60 for m in page["messages"])
    reasons = sorted(m["reason"] for m in page["messages"])
    assert reasons == ["expired"] * 3 + ["rejected"] * 3
    assert all(m["original_queue"] == source for m in page["messages"])
    status, later = http(broker, "GET", f"{path}?offset=4&limit=1")
    assert [m["seq"] for m in later["messages"]] == [4] and later["next_offset"] == 5
    status, rejected = http(broker, "GET", f"{path}?reason=rejected")
    assert [m["reason"] for m in rejected["messages"]] == ["rejected"] * 3
    status, future = http(broker, "GET", f"{path}?timestamp={int(time.time()) + 3600}")
    assert future["messages"] == []
    status, past = http(broker, "GET", f"{path}?timestamp={int(time.time()) - 3600}")
    assert len(past["messages"]) == 6
    assert queue_info(broker, target)["messages"] == 6  # browsing consumed nothing


def test_a_redrive_from_a_stream_copies_and_marks_what_it_sent_back(broker):
    conn, channel, source, target, exchange = stream_behind_a_dlx(broker)
    for i in range(3):
        channel.basic_publish("", source, b"poison %d" % i)
        method, _, _ = channel.basic_get(source)
        channel.basic_reject(method.delivery_tag, requeue=False)
    path = f"/api/queues/%2F/{urllib.parse.quote(target, safe='')}"
    deadline = time.monotonic() + 5
    while queue_info(broker, target)["messages"] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, result = http(broker, "POST", f"{path}/redrive", {"offsets": [0, 2, 7]})
    assert status == 200
    assert (result["redriven"], result["already_redriven"], result["kept"], result["missing"]) \
        == ([0, 2], [], [], [7])
    got = []
    for _ in range(2):
        method, _, body = channel.basic_get(source, auto_ack=True)
        got.append(body)
    assert got == [b"poison 0", b"poison 2"]  # back where they died from
    assert queue_info(broker, target)["messages"] == 3  # the stream keeps them
    page = http(broker, "GET", f"{path}/messages")[1]
    assert [m["redriven"] for m in page["messages"]] == [True, False, True]
    # A second redrive of the same is a choice, not an accident.
    status, again = http(broker, "POST", f"{path}/redrive", {"filter": {}})
    assert (again["redriven"], again["already_redriven"]) == ([1], [0, 2])
    status, forced = http(broker, "POST", f"{path}/redrive", {"offsets": [0], "again": True})
    assert forced["redriven"] == [0]
    status, refused = http(broker, "POST", f"{path}/redrive", {"seqs": [1]})  # a queue's
    assert status == 400 and 'redriven by "offsets", a "filter" or "messages"' in str(refused)
    # Offsets and a filter together: one would go unheeded.
    status, refused = http(broker, "POST", f"{path}/redrive",
                           {"offsets": [1], "filter": {"body": "poison"}})
    assert status == 400 and 'exactly one of "offsets", a "filter" or "messages"' in str(refused)
    assert channel.queue_declare(source, passive=True).method.message_count == 2
    conn.close()


def test_a_redrive_by_filter_says_where_its_read_stopped_and_whether_the_stream_goes_on(
        broker, monkeypatch):
    """"All matching" is never silently "the first SCAN_MAX": the answer
    gives `next_offset` and `more`, and a redrive from there takes the rest."""
    from amqp_server.management import stream_browse
    monkeypatch.setattr(stream_browse, "SCAN_MAX", 4)
    conn, channel, source, target, exchange = stream_behind_a_dlx(broker)
    for i in range(6):
        channel.basic_publish("", source, b"%s %d" % (b"poison" if i % 2 == 0 else b"fine", i))
        method, _, _ = channel.basic_get(source)
        channel.basic_reject(method.delivery_tag, requeue=False)
    path = f"/api/queues/%2F/{urllib.parse.quote(target, safe='')}/redrive"
    deadline = time.monotonic() + 5
    while queue_info(broker, target)["messages"] < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, first = http(broker, "POST", path, {"filter": {"body": "poison"}, "offset": 0})
    assert status == 200
    assert (first["redriven"], first["already_redriven"], first["missing"]) == ([0, 2], [], [])
    assert (first["next_offset"], first["more"]) == (4, True)  # offsets 0-3 read, 4-5 not
    status, rest = http(broker, "POST", path,
                        {"filter": {"body": "poison"}, "offset": first["next_offset"]})
    assert (rest["redriven"], rest["next_offset"], rest["more"]) == ([4], 6, False)
    status, again = http(broker, "POST", path, {"filter": {"body": "poison"}, "offset": 2})
    assert (again["redriven"], again["already_redriven"], again["more"]) == ([], [2, 4], False)
    # Offsets named one by one: nothing was scanned for, nothing to say.
    status, named = http(broker, "POST", path, {"offsets": [1]})
    assert named["redriven"] == [1] and "next_offset" not in named and "more" not in named
    status, refused = http(broker, "POST", path, {"filter": {}, "offset": "first"})
    assert status == 400 and "offset must be a stream offset" in str(refused)
    got = []
    for _ in range(4):
        method, _, body = channel.basic_get(source, auto_ack=True)
        got.append(body)
    assert got == [b"poison 0", b"poison 2", b"poison 4", b"fine 1"]
    assert queue_info(broker, target)["messages"] == 6  # the stream keeps them all
    conn.close()


def test_a_dead_letter_routed_into_a_stream_is_in_the_dead_letter_log(broker):
    """What the audit reads: the death, with the stream as its target."""
    from .dead_letters import read_events
    conn, channel, source, target, exchange = stream_behind_a_dlx(broker)
    channel.basic_publish("", source, b"poison", pika.BasicProperties(message_id="m-9"))
    method, _, _ = channel.basic_get(source)
    channel.basic_reject(method.delivery_tag, requeue=False)
    conn.close()
    [event] = [e for e in read_events(broker, 1) if e["queue"] == source]
    assert (event["outcome"], event["reason"], event["target_queues"], event["message_id"]) \
        == ("dead_lettered", "rejected", [target], "m-9")


def test_a_page_from_a_moment_passes_over_thousands_of_older_messages(broker):
    # A read passes over at most 4,096 older messages: the page once ended
    # there, empty, its next offset amid the older ones.
    name = unique()
    declare(broker.url, name)
    conn = connect(broker.url)
    channel = conn.channel()
    channel.confirm_delivery()
    for i in range(5000):
        channel.basic_publish("", name, b"old %d" % i)
    time.sleep(1.05 - (time.time() % 1))  # the next whole second: every old one is before it
    moment = int(time.time())
    for i in range(3):
        channel.basic_publish("", name, b"new %d" % i)
    conn.close()
    path = f"/api/queues/%2F/{urllib.parse.quote(name, safe='')}/messages"
    status, page = http(broker, "GET", f"{path}?timestamp={moment}")
    assert status == 200
    assert [m["seq"] for m in page["messages"]] == [5000, 5001, 5002]
    assert page["next_offset"] == 5003
