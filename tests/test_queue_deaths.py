"""Queues and a virtual host dead-lettering without any socket: expiry with
a fake clock, the reaper behind a stuck head, limits, counters and
at-least-once holding."""

from __future__ import annotations

import random

import pytest

from amqp_server.broker.queue import REFUSED
from amqp_server.broker.vhost import VirtualHost
from amqp_server.errors import AMQPError
from amqp_server.wire.table import FieldTable
from dlx.redelivery import redelivery_delay

from .messages import FakeClock, TakeAll, message, publish


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def vhost(clock):
    host = VirtualHost("/", clock=clock)
    host.declare_queue("dlq", None)
    return host


def declare(vhost, name, **arguments):
    args = FieldTable({k.replace("_", "-"): v for k, v in arguments.items()})
    durable = args.get("x-queue-type") == "quorum"
    return vhost.declare_queue(name, None, durable=durable, arguments=args)


def bodies(queue):
    return [entry.message.body for entry in queue.ready]


def test_reaper_expires_messages_behind_a_stuck_head(vhost, clock):
    q = declare(vhost, "q", x_dead_letter_exchange="", x_dead_letter_routing_key="dlq")
    publish(vhost, message("q", b"forever"))
    publish(vhost, message("q", b"short", expiration="10"))
    publish(vhost, message("q", b"long", expiration="100000"))
    later = clock.advance(50)
    assert q.expire(later) == 0          # the head never expires: RabbitMQ stops here
    assert q.sweep(later) == 1           # the reaper does not
    assert bodies(q) == [b"forever", b"long"]
    assert bodies(vhost.queues["dlq"]) == [b"short"]
    assert q.stats["expired"] == 1
    assert q.stats["dead_lettered"]["expired"] == 1
    assert q.ready_bytes == len(b"forever") + len(b"long")


def test_queue_ttl_expires_at_head(vhost, clock):
    q = declare(vhost, "q", x_message_ttl=1000, x_dead_letter_exchange="",
                x_dead_letter_routing_key="dlq")
    publish(vhost, message("q", b"a"))
    publish(vhost, message("q", b"b", expiration="5000"))
    assert q.expire(clock.advance(999)) == 0
    assert q.expire(clock.advance(1)) == 2  # the lower TTL applies to both
    dead = vhost.queues["dlq"].ready[1].message
    assert dead.properties.expiration is None
    assert dead.properties.headers["x-death"][0]["original-expiration"] == "5000"


def test_drop_head_and_byte_limit(vhost):
    q = declare(vhost, "q", x_max_length_bytes=5, x_dead_letter_exchange="",
                x_dead_letter_routing_key="dlq")
    for body in (b"aa", b"bb", b"cc"):
        publish(vhost, message("q", body))
    assert bodies(q) == [b"bb", b"cc"]
    assert bodies(vhost.queues["dlq"]) == [b"aa"]
    assert q.stats["dead_lettered"]["maxlen"] == 1


def test_drops_are_counted_by_cause(vhost):
    none = declare(vhost, "none", x_max_length=0)
    missing = declare(vhost, "missing", x_max_length=0, x_dead_letter_exchange="nope")
    unrouted = declare(vhost, "unrouted", x_max_length=0, x_dead_letter_exchange="amq.direct")
    cycle = declare(vhost, "cycle", x_max_length=0, x_dead_letter_exchange="")
    for q in (none, missing, unrouted, cycle):
        publish(vhost, message(q.name))
    assert none.stats["dropped"] == {("no_dlx", "maxlen"): 1}
    assert missing.stats["dropped"] == {("dlx_missing", "maxlen"): 1}
    assert unrouted.stats["dropped"] == {("no_route", "maxlen"): 1}
    assert cycle.stats["dropped"] == {("cycle", "maxlen"): 1}


def test_delete_does_not_dead_letter(vhost):
    q = declare(vhost, "q", x_dead_letter_exchange="", x_dead_letter_routing_key="dlq")
    publish(vhost, message("q"))
    vhost.remove_queue(q)
    assert not vhost.queues["dlq"].ready


def test_quorum_returns_count_until_the_delivery_limit(vhost):
    q = declare(vhost, "qq", x_queue_type="quorum", x_delivery_limit=1,
                x_dead_letter_exchange="", x_dead_letter_routing_key="dlq")
    publish(vhost, message("qq", b"poison"))
    entry = q.take_one()
    q.requeue([entry])
    again = q.take_one()
    assert again.redelivered
    assert again.message.properties.headers["x-delivery-count"] == 1
    assert again.message.properties.headers.type_of("x-delivery-count") == "long"
    q.requeue([again])
    assert not q.ready
    dead = vhost.queues["dlq"].ready[0].message
    assert "x-delivery-count" not in dead.properties.headers
    assert dead.properties.headers["x-death"][0]["reason"] == "delivery_limit"


def test_quorum_declare_rules(vhost):
    args = FieldTable({"x-queue-type": "quorum"})
    with pytest.raises(AMQPError) as info:
        vhost.declare_queue("q", None, durable=False, arguments=args)
    assert info.value.explanation == "invalid property 'non-durable' for queue 'q' in vhost '/'"
    with pytest.raises(AMQPError) as info:
        vhost.declare_queue("q", object(), durable=True, exclusive=True, arguments=args)
    assert "invalid property 'exclusive-owner'" in info.value.explanation


def test_at_least_once_holds_until_a_target_exists(vhost, clock):
    q = declare(vhost, "qq", x_queue_type="quorum", x_dead_letter_exchange="later",
                x_dead_letter_strategy="at-least-once", x_overflow="reject-publish",
                x_max_length=2)
    publish(vhost, message("qq", b"held"))
    q.reject([q.take_one()])
    assert [(m.body, reason) for m, reason in q.redelivery.held] == [(b"held", "rejected")]
    # Held dead letters count toward the limit, as in rabbit_fifo.
    publish(vhost, message("qq", b"one"))
    assert publish(vhost, message("qq", b"two")) == [REFUSED]
    vhost.declare_exchange("later", "fanout")
    target = vhost.declare_queue("target", None)
    vhost.bind("later", target, "", None)
    q.sweep(clock())
    assert not q.held_count
    assert bodies(target) == [b"held"]
    assert q.stats["dead_lettered"]["rejected"] == 1


def test_cc_and_bcc_route_at_publish_and_bcc_is_hidden(vhost):
    vhost.declare_exchange("in", "direct")
    for name in ("main", "copy", "blind"):
        vhost.bind("in", vhost.declare_queue(name, None), name, None)
    msg = message("main", exchange="in",
                  headers=FieldTable({"CC": ["copy"], "BCC": ["blind"]}))
    publish(vhost, msg)
    for name in ("main", "copy", "blind"):
        delivered = vhost.queues[name].ready[0].message
        assert "BCC" not in delivered.properties.headers
        assert delivered.properties.headers["CC"] == ["copy"]


def test_expired_message_behind_the_head_is_never_delivered(vhost):
    q = declare(vhost, "q", x_dead_letter_exchange="", x_dead_letter_routing_key="dlq")
    publish(vhost, message("q", b"head"))
    publish(vhost, message("q", b"stale", expiration="0"))
    publish(vhost, message("q", b"fresh"))
    consumer = TakeAll()
    q.add_consumer(consumer, False)
    assert consumer.got == [b"head", b"fresh"]
    assert bodies(vhost.queues["dlq"]) == [b"stale"]


# ---- delayed redelivery and delivery attempts, with an explicit clock ----------

def deliver_all(queue):
    entries = []
    while (entry := queue.take_one()) is not None:
        entries.append(entry)
    return entries


def test_delayed_messages_wait_while_others_flow(vhost, clock):
    q = declare(vhost, "q", x_redelivery_delay=1000)
    for body in (b"a", b"b"):
        publish(vhost, message("q", body))
    first = q.take_one()
    q.requeue([first])
    assert [e.message.body for e in q.delayed] == [b"a"]
    assert q.take_one().message.body == b"b"      # not held up behind "a"
    assert q.take_one() is None
    assert q.redelivery.next_due == clock() + 1000
    assert q.redeliver_due(clock.advance(999)) == 0
    assert q.redeliver_due(clock.advance(1)) == 1
    again = q.take_one()
    assert again.message.body == b"a" and again.redelivered and again.returns == 1


def test_attempts_dead_letter_with_reason_delivery_limit(vhost):
    q = declare(vhost, "q", x_max_delivery_attempts=2, x_dead_letter_address="",
                x_dead_letter_routing_key="dlq")
    publish(vhost, message("q", b"poison"))
    q.requeue(deliver_all(q))
    q.requeue(deliver_all(q))
    assert q.take_one() is None
    dead = vhost.queues["dlq"].take_one()
    assert dead.message.death_history().deaths[0].reason == "delivery_limit"
    assert q.stats["dead_lettered"]["delivery_limit"] == 1


def test_expired_while_waiting_dies_at_the_next_sweep(vhost, clock):
    q = declare(vhost, "q", x_redelivery_delay=60_000, x_dead_letter_exchange="",
                x_dead_letter_routing_key="dlq")
    publish(vhost, message("q", b"short", expiration="50"))
    q.requeue(deliver_all(q))
    assert q.sweep(clock.advance(100)) == 0 and not q.delayed_count
    assert vhost.queues["dlq"].take_one().message.body == b"short"


def test_purge_and_delete_take_waiting_messages_too(vhost):
    q = declare(vhost, "q", x_redelivery_delay=60_000)
    publish(vhost, message("q", b"m"))
    q.requeue(deliver_all(q))
    assert q.purge() == 1 and not q.delayed_count


def test_seeded_jitter_is_reproducible(clock):
    vhost = VirtualHost("/", clock=clock, rng=random.Random(7))
    q = declare(vhost, "q", x_redelivery_delay=1000, x_redelivery_collision_avoidance_factor=1)
    publish(vhost, message("q", b"m"))
    q.requeue(deliver_all(q))
    expected = redelivery_delay(1, 1000, 1.0, None, 1.0, random.Random(7))
    assert expected != 1000
    assert q.redelivery.next_due == clock() + expected
