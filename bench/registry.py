"""Every benchmark scenario: how to run it and which number it reports.

`metric` is the number compared across brokers; `better` says which way is
good (higher unless stated); `extra` names further numbers reported side by
side, lower being better (memory).
"""

from __future__ import annotations

from .dead_letters import dead_letter_path, ttl_mass_expiry
from .memory import memory_per_message
from .persistent import persistent_confirms
from .real_clients import aio_pika_publish_consume, pika_dead_letter
from .realistic import dead_letter_reject, durable_declares, latency, transient_distinct
from .scenarios import _many_connections, _run, publish_consume
from .streams import stream_memory, stream_publish_consume

# Body sizes of the varied scenario: 55, 65, ... 145 bytes, mean 100.
VARIED_SIZES = tuple(range(55, 146, 10))

SCENARIOS = {
    # The shapes real clients produce lead: one settle frame per delivery,
    # each message its own id, timestamp and headers.
    "dead-letter-reject": dict(
        run=lambda url, scale: dead_letter_reject(url, int(100_000 * scale), 180),
        metric="dead_letters_per_s",
        what="a message-id, trace-id header, content-type and timestamp each; one "
             "basic.reject(requeue=false) per delivery; a second consumer drains the DLQ, "
             "checking x-death, one basic.ack per delivery; prefetch 100"),
    "transient-distinct": dict(
        run=lambda url, scale: transient_distinct(url, int(200_000 * scale), 180),
        metric="deliveries_per_s",
        what="publish->consume, 100 B, a message-id, trace-id header, content-type and "
             "timestamp each; prefetch 1000, a multiple ack every 100"),
    "pika-dead-letter": dict(
        run=lambda url, scale: pika_dead_letter(url, int(20_000 * scale), 180),
        metric="dead_letters_per_s",
        what="pika publisher (a message-id, trace-id, type, timestamp each), pika consumer "
             "with basic_reject(requeue=False) per delivery, aio-pika draining the DLQ "
             "with message.ack() each; prefetch 100"),
    "aio-pika-publish-consume": dict(
        run=lambda url, scale: aio_pika_publish_consume(url, int(20_000 * scale), 180),
        metric="deliveries_per_s",
        what="aio-pika publisher with confirms (100 in flight), distinct properties; "
             "aio-pika consumer, message.ack() each; prefetch 100"),
    "stream-1-distinct": dict(
        run=lambda url, scale: stream_publish_consume(url, int(100_000 * scale), 1,
                                                      distinct=True),
        metric="deliveries_per_s",
        what="100 B messages with a message-id, trace-id header, content-type and timestamp "
             "each, published with confirms (2,000 in flight) into a stream; one consumer "
             "from offset first, prefetch 1000, one basic.ack per delivery"),
    "stream-5-distinct": dict(
        run=lambda url, scale: stream_publish_consume(url, int(100_000 * scale), 5,
                                                      distinct=True),
        metric="deliveries_per_s",
        what="the same with five consumers, each reading every message"),
    "latency": dict(
        run=lambda url, scale: latency(url, 5000, 10 * scale),
        metric="p99_ms", better="lower", extra=("p50_ms", "p999_ms"),
        what="publishes paced at 5,000/s with distinct properties, time to the consumer"),
    "durable-declares": dict(
        run=lambda url, scale: durable_declares(url, int(10_000 * scale)),
        metric="last_window_per_s", extra=("first_window_per_s",),
        what="durable queues with x-dead-letter-exchange declared one after another; "
             "declares/s over the last 2,000"),
    "transient": dict(
        run=lambda url, scale: publish_consume(url, int(200_000 * scale), (100,), 1, 120),
        metric="deliveries_per_s",
        what="publish->consume, 100 B bodies, prefetch 1000, multiple acks"),
    "transient-varied": dict(
        run=lambda url, scale: publish_consume(url, int(200_000 * scale), VARIED_SIZES, 1, 120),
        metric="deliveries_per_s",
        what="the same with bodies of 55-145 B (mean 100), each size after the other"),
    "fanout": dict(
        run=lambda url, scale: publish_consume(url, int(20_000 * scale), (100,), 10, 120),
        metric="deliveries_per_s",
        what="topic exchange to 10 queues, deliveries counted"),
    "connections": dict(
        run=lambda url, scale: _run(_many_connections(url, int(1000 * scale))),
        metric="connections_per_s",
        what="1000 connections opened, each with a channel and a round trip"),
    "dead-letter": dict(
        run=lambda url, scale: dead_letter_path(url, int(100_000 * scale), 120),
        metric="dead_letters_per_s",
        what="consumer nacks every message (requeue=false), a second drains the DLQ"),
    "ttl-expiry": dict(
        run=lambda url, scale: ttl_mass_expiry(url, int(100_000 * scale), 120),
        metric="seconds", better="lower", extra=("peak_rss_mb", "rss_growth_mb"),
        what="100k messages with per-message TTLs expiring at one instant, until all in the DLQ"),
    "persistent-1": dict(
        run=lambda url, scale: persistent_confirms(url, int(50_000 * scale), 1),
        metric="confirms_per_s",
        what="persistent 1 KB messages to a durable queue, confirms, 1 publisher"),
    "persistent-10": dict(
        run=lambda url, scale: persistent_confirms(url, int(50_000 * scale), 10),
        metric="confirms_per_s",
        what="persistent 1 KB messages to a durable queue, confirms, 10 publishers"),
    "memory-transient": dict(
        run=lambda url, scale: memory_per_message(url, int(1_000_000 * scale), False),
        metric="bytes_per_message", better="lower", extra=("second_half_growth_mb",),
        what="RSS growth per queued 100-byte transient message, 1M queued"),
    "memory-persistent": dict(
        run=lambda url, scale: memory_per_message(url, int(1_000_000 * scale), True),
        metric="bytes_per_message", better="lower", extra=("second_half_growth_mb",),
        what="RSS growth per queued 100-byte persistent message, 1M queued"),
    "stream-1": dict(
        run=lambda url, scale: stream_publish_consume(url, int(100_000 * scale), 1),
        metric="deliveries_per_s", extra=(),
        what="100 B messages published with confirms (2,000 in flight) into a stream, one "
             "consumer from offset first, prefetch 1000, a multiple ack every 250"),
    "stream-5": dict(
        run=lambda url, scale: stream_publish_consume(url, int(100_000 * scale), 5),
        metric="deliveries_per_s",
        what="the same with five consumers, each reading every message"),
    "memory-stream": dict(
        run=lambda url, scale: stream_memory(url, int(1_000_000 * scale)),
        metric="bytes_per_message", better="lower", extra=("second_half_growth_mb",),
        what="RSS growth per 100-byte message held in a stream, 1M published with confirms"),
}
