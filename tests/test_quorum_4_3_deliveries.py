"""RabbitMQ 4.3's quorum queue deliveries, checked line by line against its
source (v4.3.5): which returns count as failed deliveries, the default
delivery limit of 20 and how it merges, x-delivery-count and
x-acquired-count, and the count a dead letter carries to the next quorum
queue.  Pure functions first, then a quorum queue in a virtual host with
a fake clock (no socket)."""

from __future__ import annotations

import pytest

from amqp_server.broker.message import ANN_DELIVERY_COUNT
from amqp_server.broker.vhost import VirtualHost
from amqp_server.wire.table import FieldTable
from dlx.redelivery import (
    CLOSED,
    DEAD,
    NACKED,
    NOW,
    RECOVERED,
    REJECTED,
    TAIL,
    TIMED_OUT,
    Redelivery,
    after_quorum_return,
    delivery_failed,
)
from policies.effective import DEFAULT_DELIVERY_LIMIT, resolve
from policies.model import PolicyError, make_policy

from .disk_brokers import open_broker
from .messages import FakeClock, message, persistent, publish

Q43 = "4.3"


def quorum(semantics: str = Q43, policy=None, operator=None, **arguments):
    args = FieldTable({"x-queue-type": "quorum",
                       **{k.replace("_", "-"): v for k, v in arguments.items()}})
    return resolve(args, policy, operator, semantics=semantics)


# ---- which returns count (rabbit_channel.erl, rabbit_fifo.erl) ----------------


@pytest.mark.parametrize("how,failed", [
    # rabbit_channel.erl:1504-1512: basic.reject requeue=true is settle(true, false),
    # a modify with delivery_failed = true
    (REJECTED, True),
    # rabbit_channel.erl:1226-1235: basic.nack requeue=true is the plain `requeue`
    (NACKED, False),
    # rabbit_channel.erl:1485: basic.recover settles `requeue` too
    (RECOVERED, False),
    # rabbit_fifo.erl:1041 handle_down -> cancel_consumer(..., down) ->
    # return_all(..., Reason == down): a consumer gone counts as failed
    (CLOSED, True),
    # rabbit_fifo.erl evaluate_consumer_timeout: return_multiple(..., false, ...)
    (TIMED_OUT, False),
])
def test_4_3_counts_only_failed_deliveries(how, failed):
    assert delivery_failed(how, Q43) is failed


@pytest.mark.parametrize("how", [REJECTED, NACKED, RECOVERED, CLOSED, TIMED_OUT])
def test_3_13_counts_every_return(how):
    assert delivery_failed(how, "3.13") is True


# ---- the delivery limit (rabbit_quorum_queue.erl, rabbit_policies.erl) --------


def test_a_4_3_quorum_queue_has_a_delivery_limit_of_20():
    # rabbit_quorum_queue.erl:142 ?DEFAULT_DELIVERY_LIMIT and :2079-2080
    assert DEFAULT_DELIVERY_LIMIT == 20
    assert quorum().delivery_limit == 20


def test_3_13_and_classic_queues_have_no_default_limit():
    assert quorum("3.13").delivery_limit is None
    classic = resolve(FieldTable(), semantics=Q43)
    assert classic.delivery_limit is None


def test_minus_one_turns_the_limit_off():
    # rabbit_fifo.erl:217-223 update_config: a negative limit is undefined
    assert quorum(x_delivery_limit=-1).delivery_limit is None
    assert quorum(policy={"delivery-limit": -1}).delivery_limit is None


def test_a_limit_that_is_not_an_integer_means_20():
    # rabbit_quorum_queue.erl:2083-2084: get_delivery_limit of anything else
    assert quorum(x_delivery_limit="five").delivery_limit == 20


@pytest.mark.parametrize("argument,policy,limit", [
    (5, 10, 5),       # :2064 min/2
    (5, -1, 5),       # :2061-2063 either negative: max/2, the conservative one
    (-1, 10, 10),
    (-1, -1, None),   # both negative: max is -1, no limit
    (None, 3, 3),
])
def test_argument_and_policy_merge_as_resolve_delivery_limit(argument, policy, limit):
    arguments = {} if argument is None else {"x_delivery_limit": argument}
    assert quorum(policy={"delivery-limit": policy}, **arguments).delivery_limit == limit


@pytest.mark.parametrize("mine,operator,limit", [
    (10, 4, 4), (10, -1, 10), (-1, 7, 7),  # rabbit_policies.erl:230-241
])
def test_an_operator_policy_merges_as_rabbit_policies_does(mine, operator, limit):
    assert quorum(policy={"delivery-limit": mine},
                  operator={"delivery-limit": operator}).delivery_limit == limit


def test_4_3_takes_any_integer_as_a_policy_delivery_limit():
    # rabbit_policies.erl:174-178: is_integer(Value), no lower bound
    assert make_policy("/", "p", ".*", {"delivery-limit": -1}, semantics=Q43)
    with pytest.raises(PolicyError, match='<<"ten">> is not a valid delivery limit'):
        make_policy("/", "p", ".*", {"delivery-limit": "ten"}, semantics=Q43)
    with pytest.raises(PolicyError, match="-1 is not a valid delivery limit"):
        make_policy("/", "p", ".*", {"delivery-limit": -1})  # 3.13: Value >= 0


# ---- what a return does (rabbit_fifo.erl:2348 return_one) ---------------------


LIMIT_2 = Redelivery(delivery_limit=2, semantics=Q43)
NO_LIMIT = Redelivery(delivery_limit=None, semantics=Q43)


def test_past_the_limit_a_message_dies():
    # :2367-2370 DeliveryCount > DeliveryLimit
    assert after_quorum_return(2, 2, REJECTED, LIMIT_2) == (NOW, 0)
    assert after_quorum_return(3, 3, REJECTED, LIMIT_2) == (DEAD, 0)


def test_a_count_past_the_limit_dies_on_any_return():
    """The check reads the count whether this return added to it or not:
    a nacked dead letter that arrived with 3 failures dies at limit 2."""
    assert after_quorum_return(3, 1, NACKED, LIMIT_2) == (DEAD, 0)


def test_returns_without_failures_never_reach_the_limit():
    # 4.3.0's release notes: "unlimited explicit message returns"
    assert after_quorum_return(None, 500, NACKED, LIMIT_2) == (NOW, 0)


def test_without_a_limit_a_plain_return_goes_to_the_tail():
    # :1377-1405 handle_aux for #return with delivery_limit = undefined:
    # a #requeue, appended as a new message
    assert after_quorum_return(None, 1, NACKED, NO_LIMIT) == (TAIL, 0)
    assert after_quorum_return(None, 1, RECOVERED, NO_LIMIT) == (TAIL, 0)
    # a modify (basic.reject) or a consumer gone is a return_one: the head
    assert after_quorum_return(1, 1, REJECTED, NO_LIMIT) == (NOW, 0)
    assert after_quorum_return(1, 1, CLOSED, NO_LIMIT) == (NOW, 0)


# ---- a quorum queue in a virtual host -------------------------------------------


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def vhost(clock):
    host = VirtualHost("/", clock=clock, semantics=Q43)
    host.declare_queue("dlq", None, durable=True,
                       arguments=FieldTable({"x-queue-type": "quorum"}))
    return host


def work_queue(vhost, **arguments):
    args = FieldTable({"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                       "x-dead-letter-routing-key": "dlq",
                       **{k.replace("_", "-"): v for k, v in arguments.items()}})
    return vhost.declare_queue("work", None, durable=True, arguments=args)


def take(queue):
    entry = queue.take_one()
    assert entry is not None
    return entry


def headers(entry) -> dict:
    return dict(entry.message.properties.headers or {})


def test_a_first_delivery_carries_no_counts(vhost):
    q = work_queue(vhost)
    publish(vhost, message("work"))
    entry = take(q)
    assert "x-delivery-count" not in headers(entry) and not entry.redelivered


def test_a_nack_counts_an_acquisition_not_a_failure(vhost):
    # rabbit_fifo_client.erl:246-262 add_delivery_count_header: acquired_count
    # (every return, rabbit_fifo.erl:3884 incr_msg_headers) and delivery_count
    # (failed only) become x-acquired-count and x-delivery-count
    q = work_queue(vhost)
    publish(vhost, message("work"))
    q.requeue([take(q)], NACKED)
    entry = take(q)
    assert headers(entry) == {"x-acquired-count": 1}
    assert entry.redelivered  # AcqCount > 0


def test_a_reject_counts_both(vhost):
    q = work_queue(vhost)
    publish(vhost, message("work"))
    q.requeue([take(q)], NACKED)
    q.requeue([take(q)], REJECTED)
    assert headers(take(q)) == {"x-acquired-count": 2, "x-delivery-count": 1}


def test_twenty_failures_are_taken_the_twenty_first_dead_letters(vhost):
    q = work_queue(vhost)
    publish(vhost, message("work"))
    for _ in range(20):
        q.requeue([take(q)], REJECTED)
    assert q.message_count == 1
    q.requeue([take(q)], REJECTED)
    assert q.message_count == 0
    [dead] = vhost.queues["dlq"].ready
    assert dead.message.properties.headers["x-death"][0]["reason"] == "delivery_limit"


def test_nacks_never_dead_letter(vhost):
    q = work_queue(vhost)
    publish(vhost, message("work"))
    for _ in range(50):
        q.requeue([take(q)], NACKED)
    assert q.message_count == 1 and vhost.queues["dlq"].message_count == 0


def test_a_dead_letter_carries_its_failures_to_the_next_quorum_queue(vhost):
    """rabbit_fifo.erl:2326 annotate_msg copies delivery_count into the
    message; :2032 maybe_set_msg_delivery_count takes it at the next quorum
    queue, whose first delivery shows it (rabbit_fifo_client.erl:264-267:
    acquired as many) and is redelivered."""
    q = work_queue(vhost)
    publish(vhost, message("work"))
    q.requeue([take(q)], REJECTED)
    q.requeue([take(q)], REJECTED)
    q.reject([take(q)], REJECTED)  # rabbit_fifo.erl:3861 discard: DelFailed true
    dead = take(vhost.queues["dlq"])
    assert headers(dead)["x-delivery-count"] == 3
    assert headers(dead)["x-acquired-count"] == 3
    assert dead.redelivered
    assert dead.message.annotations[ANN_DELIVERY_COUNT] == 3


def test_a_nack_without_requeue_is_not_a_failure(vhost):
    # rabbit_channel.erl:1233 settle(false, true): modify(DelFailed false, undeliverable)
    q = work_queue(vhost)
    publish(vhost, message("work"))
    q.reject([take(q)], NACKED)
    dead = take(vhost.queues["dlq"])
    assert "x-delivery-count" not in headers(dead) and not dead.redelivered


def test_a_carried_count_past_the_limit_dies_on_its_first_return(vhost):
    q = work_queue(vhost)
    dlq = vhost.queues["dlq"]
    publish(vhost, message("work"))
    for _ in range(21):
        q.requeue([take(q)], REJECTED)
    assert dlq.message_count == 1
    dlq.requeue([take(dlq)], NACKED)  # 21 > 20: dies at once (no DLX: dropped)
    assert dlq.message_count == 0


def test_without_a_limit_a_nack_goes_behind_the_others(vhost):
    q = work_queue(vhost, x_delivery_limit=-1)
    for body in (b"a", b"b", b"c"):
        publish(vhost, message("work", body))
    q.requeue([take(q)], NACKED)
    assert [e.message.body for e in q.ready] == [b"b", b"c", b"a"]
    q.requeue([take(q)], REJECTED)  # a failure goes to the head (returns queue)
    assert [e.message.body for e in q.ready] == [b"b", b"c", b"a"]


def test_with_a_limit_a_return_goes_first(vhost):
    q = work_queue(vhost)
    for body in (b"a", b"b"):
        publish(vhost, message("work", body))
    q.requeue([take(q)], NACKED)
    assert [e.message.body for e in q.ready] == [b"a", b"b"]


def test_3_13_counts_every_return_as_before(clock):
    host = VirtualHost("/", clock=clock)
    host.declare_queue("dlq", None)
    q = host.declare_queue("work", None, durable=True, arguments=FieldTable({
        "x-queue-type": "quorum", "x-delivery-limit": 1, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "dlq"}))
    publish(host, message("work"))
    q.requeue([take(q)], NACKED)
    assert headers(take_and_back(q)) == {"x-delivery-count": 1}
    q.requeue([take(q)], NACKED)
    assert q.message_count == 0 and host.queues["dlq"].message_count == 1


def take_and_back(queue):
    """Look at the head without taking it for good."""
    return queue.ready[0]


# ---- across a restart (the store's "E" annotations and "C" counts) ---------------


def durable_work(broker):
    vhost = broker.vhosts["/"]
    for name, extra in (("dlq", {}), ("work", {"x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": "dlq"})):
        if name not in vhost.queues:
            vhost.declare_queue(name, None, durable=True, arguments=FieldTable(
                {"x-queue-type": "quorum", **extra}))
    return vhost


def test_failed_and_acquired_counts_survive_a_restart(tmp_path):
    broker, _ = open_broker(tmp_path, rabbitmq_semantics=Q43)
    vhost = durable_work(broker)
    q = vhost.queues["work"]
    q.enqueue(persistent("work"))
    q.requeue([take(q)], REJECTED)
    q.requeue([take(q)], NACKED)
    broker.store.flush_now()
    again, problems = open_broker(tmp_path, rabbitmq_semantics=Q43)
    assert problems == []
    entry = take(again.vhosts["/"].queues["work"])
    assert headers(entry) == {"x-acquired-count": 2, "x-delivery-count": 1}


def test_a_dead_letters_count_and_own_deaths_survive_a_restart(tmp_path):
    broker, _ = open_broker(tmp_path, rabbitmq_semantics=Q43)
    vhost = durable_work(broker)
    q = vhost.queues["work"]
    q.enqueue(persistent("work"))
    q.reject([take(q)], REJECTED)
    broker.store.flush_now()
    again, _ = open_broker(tmp_path, rabbitmq_semantics=Q43)
    dlq = again.vhosts["/"].queues["dlq"]
    entry = take(dlq)
    assert headers(entry)["x-delivery-count"] == 1 and entry.redelivered
    assert entry.message.owns_deaths  # its x-death is still a death history


# ---- purge (rabbit_fifo.erl:501-519) ---------------------------------------------


@pytest.mark.parametrize("semantics,purged,held_after", [("4.3", 3, 0), ("3.13", 2, 1)])
def test_purge_drops_pending_at_least_once_dead_letters_in_4_3(clock, semantics, purged,
                                                               held_after):
    """4.3: NumPurged = NumReady + DelayedLen + NumDlx, and dlx_purge/1 empties
    the discards; 3.13 left them to be retried."""
    host = VirtualHost("/", clock=clock, semantics=semantics)
    q = host.declare_queue("qq", None, durable=True, arguments=FieldTable({
        "x-queue-type": "quorum", "x-dead-letter-exchange": "nowhere",
        "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}))
    for body in (b"a", b"b", b"c"):
        publish(host, message("qq", body))
    q.reject([take(q)])
    assert q.held_count == 1
    assert q.purge() == purged
    assert q.held_count == held_after
