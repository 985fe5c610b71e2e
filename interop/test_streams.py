"""Streams over AMQP 0-9-1 with pika on real TCP: declared durable only,
appended and confirmed, read by every consumer from where its
x-stream-offset says, acks giving credit and removing nothing, and what a
stream does not do refused with RabbitMQ's words (docs/streams.md)."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import pika
import pytest

from .stream_scenarios import (
    STREAM,
    attempt,
    connect,
    consume,
    consume_refusal,
    declare,
    publish,
    unique,
)


def offsets(got):
    return [item[0] for item in got]


def test_a_stream_is_declared_durable_and_counts_its_messages(broker):
    name = unique()
    assert declare(broker.url, name, **{"x-max-age": "7D", "x-max-length-bytes": 10 ** 9,
                                        "x-stream-max-segment-size-bytes": 10 ** 6,
                                        "x-initial-cluster-size": 3}) == ("ok", None)
    publish(broker.url, name, 5)
    conn = connect(broker.url)
    ok = conn.channel().queue_declare(name, passive=True)
    assert ok.method.message_count == 5
    conn.close()


@pytest.mark.parametrize("durable, exclusive, auto_delete, words", [
    (False, False, False, "invalid property 'non-durable'"),
    (True, True, False, "invalid property 'exclusive-owner'"),
    (True, False, True, "invalid property 'auto-delete'"),
])
def test_a_stream_is_durable_only(broker, durable, exclusive, auto_delete, words):
    name = unique()
    result = attempt(broker.url, lambda ch: ch.queue_declare(
        name, durable=durable, exclusive=exclusive, auto_delete=auto_delete, arguments=STREAM))
    assert result == ("error", 406, f"PRECONDITION_FAILED - {words} for queue '{name}' "
                                    "in vhost '/'")


def test_a_server_named_stream_is_refused(broker):
    result = attempt(broker.url, lambda ch: ch.queue_declare("", durable=True, arguments=STREAM))
    assert result == ("error", 406, "PRECONDITION_FAILED - Cannot declare a server-named "
                                    "queue for type rabbit_stream_queue")


@pytest.mark.parametrize("arguments, term", [
    ({"x-max-age": "0s"}, "invalid_max_age"),
    ({"x-max-age": "10x"}, "invalid_max_age"),
    ({"x-max-age": "h"}, "invalid_max_age"),
    ({"x-max-age": 10}, "{unacceptable_type,signedint}"),
    ({"x-max-length-bytes": -1}, "{value_negative,-1}"),
    ({"x-initial-cluster-size": 0}, "{value_zero,0}"),
])
def test_stream_arguments_are_checked_with_rabbitmqs_terms(broker, arguments, term):
    name = unique()
    argument = next(iter(arguments))
    assert declare(broker.url, name, **arguments) == (
        "error", 406, f"PRECONDITION_FAILED - invalid arg '{argument}' for queue '{name}' "
                      f"in vhost '/': {term}")


@pytest.mark.parametrize("argument, value", [
    ("x-message-ttl", 10), ("x-max-length", 1), ("x-dead-letter-exchange", "x"),
    ("x-overflow", "drop-head"), ("x-max-priority", 3), ("x-expires", 1000),
    ("x-single-active-consumer", True), ("x-delivery-limit", 3),
])
def test_other_queue_types_arguments_are_refused_on_a_stream(broker, argument, value):
    name = unique()
    assert declare(broker.url, name, **{argument: value}) == (
        "error", 406, f"PRECONDITION_FAILED - invalid arg '{argument}' for queue '{name}' "
                      "in vhost '/' of queue type rabbit_stream_queue")


def test_a_segment_over_3_gb_is_refused(broker):
    assert declare(broker.url, unique(), **{"x-stream-max-segment-size-bytes": 3_000_000_001}) \
        == ("error", 406, "PRECONDITION_FAILED - Exceeded max value for "
                          "x-stream-max-segment-size-bytes")


def test_stream_arguments_are_refused_on_a_classic_queue(broker):
    name = unique()
    result = attempt(broker.url, lambda ch: ch.queue_declare(
        name, durable=True, arguments={"x-max-age": "1D"}))
    assert result == ("error", 406, f"PRECONDITION_FAILED - invalid arg 'x-max-age' for queue "
                                    f"'{name}' in vhost '/' of queue type rabbit_classic_queue")


# ---- consuming -------------------------------------------------------------------

def test_first_reads_everything_with_offsets_in_order(broker):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 5)
    got = consume(broker.url, name, "first", expect=5)
    assert got == [(i, i, b"m%d" % i, False) for i in range(5)]


@pytest.mark.parametrize("spec, expected", [
    ("first", [0, 1, 2, 3, 4]), ("last", [4]), ("next", []), (2, [2, 3, 4]), (0, list(range(5))),
    (-1, list(range(5))), (100, []),
])
def test_x_stream_offset_says_where_a_consumer_starts(broker, spec, expected):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 5)
    assert offsets(consume(broker.url, name, spec, expect=len(expected))) == expected


def test_without_an_offset_a_consumer_gets_only_new_messages(broker):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 3)
    conn = connect(broker.url)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    got = []
    channel.basic_consume(name, lambda ch, m, p, body: (got.append(body),
                                                         ch.basic_ack(m.delivery_tag)))
    channel.connection.process_data_events(0.2)
    publish(broker.url, name, 2, start=3)
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()
    assert got == [b"m3", b"m4"]


def test_a_timestamp_or_an_interval_starts_at_the_messages_since(broker):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 3)
    an_hour_ago = datetime.datetime.now() - datetime.timedelta(hours=1)
    assert offsets(consume(broker.url, name, an_hour_ago, expect=3)) == [0, 1, 2]
    assert offsets(consume(broker.url, name, "1h", expect=3)) == [0, 1, 2]
    in_an_hour = datetime.datetime.now() + datetime.timedelta(hours=1)
    assert offsets(consume(broker.url, name, in_an_hour)) == []


def test_many_consumers_each_read_everything(broker):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 20)
    conn = connect(broker.url)
    readers = [consume(broker.url, name, "first", expect=20, channel=conn.channel())
               for _ in range(3)]
    conn.close()
    assert all(offsets(got) == list(range(20)) for got in readers)


def test_the_prefetch_is_credit_an_ack_gives_it_back(broker):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 10)
    unacked = consume(broker.url, name, "first", prefetch=3, ack=False)
    assert offsets(unacked) == [0, 1, 2]
    assert offsets(consume(broker.url, name, "first", prefetch=3, expect=10)) == list(range(10))


def test_an_ack_removes_nothing(broker):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 4)
    consume(broker.url, name, "first", expect=4)
    assert offsets(consume(broker.url, name, "first", expect=4)) == [0, 1, 2, 3]
    conn = connect(broker.url)
    assert conn.channel().queue_declare(name, passive=True).method.message_count == 4
    conn.close()


def test_a_nack_gives_credit_and_delivers_nothing_again(broker):
    """3.13's rabbit_stream_queue:settle/5: every settlement gives credit
    (3.10 refused basic.nack with 540)."""
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 4)
    conn = connect(broker.url)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=1)
    got = []
    channel.basic_consume(name, lambda ch, m, p, body: (
        got.append((body, m.redelivered)), ch.basic_nack(m.delivery_tag, requeue=True)),
        arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 5
    while len(got) < 4 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.process_data_events(0.2)
    conn.close()
    assert got == [(b"m%d" % i, False) for i in range(4)]


# ---- refused as RabbitMQ refuses them -------------------------------------------------

def test_consume_without_a_prefetch_is_refused(broker):
    name = unique()
    declare(broker.url, name)
    assert consume_refusal(broker.url, name, None) == (
        "error", 406, f"PRECONDITION_FAILED - consumer prefetch count is not set for "
                      f"'queue '{name}' in vhost '/''")


def test_automatic_acknowledgement_is_refused(broker):
    name = unique()
    declare(broker.url, name)
    assert consume_refusal(broker.url, name, {"prefetch_count": 10}, auto_ack=True) == (
        "error", 540, f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream "
                      f"queues queue '{name}' in vhost '/'")


def test_global_qos_is_refused(broker):
    name = unique()
    declare(broker.url, name)

    def act(channel):
        channel.basic_qos(prefetch_count=10)
        channel.basic_qos(prefetch_count=10, global_qos=True)
        channel.basic_consume(name, lambda *a: None)
    assert attempt(broker.url, act) == (
        "error", 540, f"NOT_IMPLEMENTED - queue '{name}' in vhost '/' does not support global qos")
    # A channel-wide prefetch alone leaves the consumer without one.
    assert consume_refusal(broker.url, name, {"prefetch_count": 10, "global_qos": True})[:2] \
        == ("error", 406)


def test_basic_get_is_refused(broker):
    name = unique()
    declare(broker.url, name)
    assert attempt(broker.url, lambda ch: ch.basic_get(name)) == (
        "error", 540, f"NOT_IMPLEMENTED - basic.get not supported by stream queues queue "
                      f"'{name}' in vhost '/'")


def test_purge_is_refused(broker):
    name = unique()
    declare(broker.url, name)
    assert attempt(broker.url, lambda ch: ch.queue_purge(name)) == (
        "error", 540, f"NOT_IMPLEMENTED - queue.purge not supported by stream queues queue "
                      f"'{name}' in vhost '/'")


def test_an_offset_that_is_not_one_is_refused(broker):
    name = unique()
    declare(broker.url, name)
    assert consume_refusal(broker.url, name, {"prefetch_count": 10},
                           arguments={"x-stream-offset": "bogus"}) == (
        "error", 406, f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue '{name}' "
                      "in vhost '/': {invalid_stream_offset_arg,{longstr,<<\"bogus\">>}}")


@pytest.mark.parametrize("size", [15, 256, "a"])
def test_a_filter_size_outside_16_to_255_is_refused(broker, size):
    assert declare(broker.url, unique(), **{"x-stream-filter-size-bytes": size}) == (
        "error", 406, "PRECONDITION_FAILED - Invalid value for  x-stream-filter-size-bytes")


# ---- filtering (3.13) -------------------------------------------------------------

def publish_regions(url: str, name: str) -> None:
    """Offsets 0..5: emea, amer, (none), emea, apac, (none)."""
    conn = connect(url)
    channel = conn.channel()
    channel.confirm_delivery()
    for i, region in enumerate(["emea", "amer", None, "emea", "apac", None]):
        headers = {"i": i, **({"x-stream-filter-value": region} if region else {})}
        channel.basic_publish("", name, b"m%d" % i, pika.BasicProperties(headers=headers))
    conn.close()


@pytest.mark.parametrize("arguments, expected", [
    ({"x-stream-filter": "emea"}, [0, 3]),
    ({"x-stream-filter": ["emea", "apac"]}, [0, 3, 4]),
    ({"x-stream-filter": "emea", "x-stream-match-unfiltered": True}, [0, 2, 3, 5]),
    ({"x-stream-filter": "nowhere"}, []),
    ({"x-stream-match-unfiltered": True}, [0, 1, 2, 3, 4, 5]),  # alone it counts for nothing
])
def test_a_filter_delivers_the_messages_with_its_values(broker, arguments, expected):
    name = unique()
    declare(broker.url, name, **{"x-stream-filter-size-bytes": 32})
    publish_regions(broker.url, name)
    conn = connect(broker.url)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=2)  # filtered-out messages take no credit
    got = []
    channel.basic_consume(name, lambda ch, m, p, body: (
        got.append(p.headers["x-stream-offset"]), ch.basic_ack(m.delivery_tag)),
        arguments={"x-stream-offset": "first", **arguments})
    deadline = time.monotonic() + 5
    while len(got) < len(expected) and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.process_data_events(0.3)
    conn.close()
    assert got == expected


# ---- lifecycle, retention, dead letters ----------------------------------------------------

def stream_dir(broker, name: str) -> Path:
    return (Path(broker.data_dir) / "streams" / b"/".hex() / name.encode().hex())


def test_deleting_a_stream_deletes_its_log_and_a_new_one_starts_empty(broker):
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 3)
    conn = connect(broker.url)
    conn.channel().queue_delete(name, if_empty=True)  # a stream ignores if-empty (3.10, 3.13)
    conn.close()
    declare(broker.url, name)
    assert offsets(consume(broker.url, name, "first")) == []
    publish(broker.url, name, 1)
    assert offsets(consume(broker.url, name, "first", expect=1)) == [0]


def test_retention_removes_whole_segments_by_size(broker):
    name = unique()
    declare(broker.url, name, **{"x-stream-max-segment-size-bytes": 2000,
                                 "x-max-length-bytes": 5000})
    conn = connect(broker.url)
    channel = conn.channel()
    channel.confirm_delivery()
    for i in range(100):
        channel.basic_publish("", name, b"x" * 200, pika.BasicProperties(headers={"i": i}))
    conn.close()
    got = consume(broker.url, name, "first", expect=100, seconds=2)
    first = got[0][0]
    # Whole segments went from the oldest: what is left is contiguous up to the newest.
    assert 0 < first and offsets(got) == list(range(first, 100))
    files = sorted(os.listdir(stream_dir(broker, name)))
    assert 2 <= len(files) <= 5


def test_a_dead_letter_routed_into_a_stream_keeps_its_x_death(broker):
    source, target, exchange = unique("source"), unique(), unique("dlx")
    conn = connect(broker.url)
    channel = conn.channel()
    channel.exchange_declare(exchange, "fanout", durable=True)
    channel.queue_declare(target, durable=True, arguments=STREAM)
    channel.queue_bind(target, exchange)
    channel.queue_declare(source, arguments={"x-dead-letter-exchange": exchange})
    channel.basic_publish("", source, b"poison", pika.BasicProperties(headers={"i": 7}))
    method, _, _ = channel.basic_get(source)
    channel.basic_reject(method.delivery_tag, requeue=False)
    conn.close()
    conn = connect(broker.url)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=5)
    got = []
    channel.basic_consume(target, lambda ch, m, p, body: got.append((p.headers, body)),
                          arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()
    headers, body = got[0]
    assert body == b"poison" and headers["x-stream-offset"] == 0 and headers["i"] == 7
    death = headers["x-death"][0]
    assert (death["queue"], death["reason"], death["count"]) == (source, "rejected", 1)
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-queue"] == source


def test_a_policy_sets_retention_and_wins_over_the_argument(broker):
    """rabbit_stream_queue:policy_precedence/2: for a stream the policy's
    max-length-bytes comes before the argument's."""
    name = unique()
    broker.broker.set_policy("/", name, f"^{name}$", {"max-length-bytes": 3000,
                                                      "stream-max-segment-size-bytes": 1000},
                             apply_to="streams")
    declare(broker.url, name, **{"x-max-length-bytes": 10 ** 9})
    queue = broker.broker.vhosts["/"].queues[name]
    assert (queue.settings.max_length_bytes, queue.settings.stream_max_segment_size_bytes) \
        == (3000, 1000)


def test_unacked_deliveries_are_given_back_when_the_channel_closes(broker):
    """Closing with deliveries unacknowledged gives the credit back and puts
    nothing back: the stream still holds everything, nothing is unacked."""
    name = unique()
    declare(broker.url, name)
    publish(broker.url, name, 5)
    conn = connect(broker.url)
    channel = conn.channel()
    unacked = consume(broker.url, name, "first", prefetch=3, ack=False, channel=channel)
    assert [item[0] for item in unacked] == [0, 1, 2]
    again = consume(broker.url, name, "first", prefetch=10, expect=5, channel=channel)
    assert [item[0] for item in again] == [0, 1, 2, 3, 4]
    channel.close()
    conn.close()
    queue = broker.broker.vhosts["/"].queues[name]
    deadline = time.monotonic() + 5
    while queue.unacked and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (queue.unacked, queue.message_count, queue.readers) == (0, 5, {})


def test_a_stream_name_too_long_for_its_logs_directory_is_refused_whole(broker):
    # Named by the hex of the name: past 127 bytes the directory could not
    # be made, and a queue without a log was left until the next restart.
    name = "s" * 128
    result = attempt(broker.url, lambda ch: ch.queue_declare(
        name, durable=True, arguments={"x-queue-type": "stream"}))
    assert result[:2] == ("error", 406)
    assert "at most 127 bytes" in result[2]
    assert attempt(broker.url, lambda ch: ch.queue_declare(name, passive=True))[:2] == (
        "error", 404)
    assert declare(broker.url, "s" * 127)[0] == "ok"
