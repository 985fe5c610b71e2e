"""RabbitMQ 4.3's strict priorities in quorum queues (rabbit_fifo v8,
rabbit_fifo_pq of v4.3.5): 32 levels, 4 without a priority, returned
messages first, and the per-priority counts its management shows."""

from __future__ import annotations

import pytest

from amqp_server.broker.vhost import VirtualHost
from amqp_server.errors import AMQPError
from amqp_server.management.shapes import queue_json
from amqp_server.wire.table import FieldTable
from dlx.redelivery import NACKED, REJECTED

from .disk_brokers import open_paging_broker
from .messages import FakeClock, message, persistent, publish


def quorum(semantics: str = "4.3", **arguments):
    host = VirtualHost("/", clock=FakeClock(), semantics=semantics)
    args = FieldTable({"x-queue-type": "quorum",
                       **{k.replace("_", "-"): v for k, v in arguments.items()}})
    return host, host.declare_queue("q", None, durable=True, arguments=args)


def send(host, *items) -> None:
    """(body, priority or None) each."""
    for body, priority in items:
        props = {} if priority is None else {"priority": priority}
        publish(host, message("q", body, **props))


def drain(queue) -> list[bytes]:
    out = []
    while (entry := queue.take_one()) is not None:
        out.append(entry.message.body)
    return out


def test_the_highest_priority_first_and_none_counts_as_4():
    # rabbit_fifo.erl:3775-3786 msg_priority: ?DEFAULT_PRIORITY (4) without one
    host, q = quorum()
    send(host, (b"p3", 3), (b"none", None), (b"p5", 5), (b"p4", 4), (b"p0", 0))
    assert drain(q) == [b"p5", b"none", b"p4", b"p3", b"p0"]


def test_priorities_above_31_are_31():
    # max(0, min(P, ?MAX_PRIORITY)), rabbit_fifo_pq: 32 levels
    host, q = quorum()
    send(host, (b"p31", 31), (b"p200", 200), (b"p30", 30))
    assert drain(q) == [b"p31", b"p200", b"p30"]


def test_3_13_quorum_queues_keep_publish_order():
    host, q = quorum("3.13")
    send(host, (b"p0", 0), (b"p9", 9))
    assert drain(q) == [b"p0", b"p9"]


def test_returned_messages_come_first_in_the_order_they_came_back():
    # take_next_msg/1: the returns queue before any priority; return_one/8
    # appends to it (lqueue:in)
    host, q = quorum()
    send(host, (b"a", 1), (b"b", 2), (b"hi", 9))
    hi, b, a = q.take_one(), q.take_one(), q.take_one()
    send(host, (b"top", 31))
    q.requeue([b], REJECTED)
    q.requeue([a], REJECTED)
    q.requeue([hi], REJECTED)
    assert drain(q) == [b"b", b"a", b"hi", b"top"]


def test_a_nack_without_a_delivery_limit_requeues_at_priority_4():
    # handle_aux for #return -> #requeue: rabbit_fifo_pq:in(?DEFAULT_PRIORITY, ...)
    host, q = quorum(x_delivery_limit=-1)
    send(host, (b"p9", 9), (b"p5", 5), (b"none", None))
    q.requeue([q.take_one()], NACKED)  # p9 back behind the 4s
    assert drain(q) == [b"p5", b"none", b"p9"]


def test_drop_head_drops_a_returned_message_first():
    # drop_head/2 takes take_next_msg/1's
    host, q = quorum(x_max_length=2)
    send(host, (b"r", 9), (b"a", 1))
    q.requeue([q.take_one()], REJECTED)
    send(host, (b"b", 1))
    assert drain(q) == [b"a", b"b"]


def test_the_management_api_counts_messages_by_priority():
    # rabbit_fifo_pq:overview/1 detail and num_active_priorities;
    # rabbit_quorum_queue:handle_tick/3 messages_by_priority,
    # messages_active_priorities, messages_ready_returned
    host, q = quorum()
    send(host, (b"a", 1), (b"b", None), (b"c", None), (b"d", 9))
    q.requeue([q.take_one()], REJECTED)
    shown = queue_json(q)
    assert shown["messages_by_priority"] == {"1": 1, "4": 2}
    assert shown["messages_active_priorities"] == 2
    assert shown["messages_ready_returned"] == 1
    assert shown["messages_ready"] == 4


def test_paged_messages_keep_their_priority(tmp_path):
    broker = open_paging_broker(tmp_path, rabbitmq_semantics="4.3")
    q = broker.vhosts["/"].declare_queue("q", None, durable=True,
                                         arguments=FieldTable({"x-queue-type": "quorum"}))
    for n in range(12):
        q.enqueue(persistent("q", f"low{n}".encode(), priority=1))
    q.enqueue(persistent("q", b"high", priority=20))
    assert q.paged_count > 0
    assert queue_json(q)["messages_by_priority"] == {"1": 12, "20": 1}
    assert drain(q)[0] == b"high"


@pytest.mark.parametrize("semantics", ["3.13", "4.3"])
def test_x_max_priority_stays_refused_on_quorum_queues(semantics):
    host = VirtualHost("/", clock=FakeClock(), semantics=semantics)
    with pytest.raises(AMQPError, match="invalid arg 'x-max-priority'"):
        host.declare_queue("q", None, durable=True, arguments=FieldTable(
            {"x-queue-type": "quorum", "x-max-priority": 5}))
