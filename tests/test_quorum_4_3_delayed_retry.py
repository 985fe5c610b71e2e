"""RabbitMQ 4.3's delayed retry of a quorum queue, against its source
(v4.3.5): the configuration rabbit_quorum_queue makes of the arguments and
policy keys, the delay rabbit_fifo computes, and a quorum queue holding a
returned message back (fake clock, no socket)."""

from __future__ import annotations

import pytest

from amqp_server.broker.vhost import VirtualHost
from amqp_server.management.shapes import queue_json
from amqp_server.wire.table import FieldTable
from dlx.delayed_retry import DelayedRetry, delayed_retry, describe, retry_delay
from dlx.redelivery import NACKED, REJECTED, TIMED_OUT
from policies.effective import resolve

from .messages import FakeClock, message, publish

Q43 = "4.3"


# ---- the configuration (rabbit_quorum_queue.erl:1967-1997) ---------------------


@pytest.mark.parametrize("values,made", [
    (("failed", 1000, 60000), DelayedRetry("failed", 1000, 60000)),
    (("all", 500, None), DelayedRetry("all", 500, 500)),        # :1981 max defaults to min
    (("returned", 500, 0), DelayedRetry("returned", 500, 500)),  # :1983 not positive: min
    (("disabled", 500, 900), None),
    (("all", None, 900), None),                                   # :1978 no min: disabled
    (("all", 0, 900), None),                                      # :1990 min not positive
    (("sometimes", 500, 900), None),                              # :1992 unknown type
])
def test_the_configuration_the_values_make(values, made):
    assert delayed_retry(*values) == made


def settings(policy=None, operator=None, semantics=Q43, **arguments):
    args = FieldTable({"x-queue-type": "quorum",
                       **{k.replace("_", "-"): v for k, v in arguments.items()}})
    return resolve(args, policy, operator, semantics=semantics)


def test_the_policys_type_wins_over_the_argument():
    # :1968 args_policy_lookup(<<"delayed-retry-type">>, fun policy_has_precedence/2, Q)
    made = settings({"delayed-retry-type": "failed"}, x_delayed_retry_type="all",
                    x_delayed_retry_min=100)
    assert made.delayed_retry == DelayedRetry("failed", 100, 100)


def test_the_smaller_min_and_max_win():
    # :1976-1977 fun min/2
    made = settings({"delayed-retry-min": 50, "delayed-retry-max": 900},
                    x_delayed_retry_type="all", x_delayed_retry_min=100,
                    x_delayed_retry_max=400)
    assert made.delayed_retry == DelayedRetry("all", 50, 400)


def test_an_operator_policy_raises_the_min_and_lowers_the_max():
    # :267-272 merge_policy_value: type replaced, max(min), min(max)
    made = settings({"delayed-retry-type": "all", "delayed-retry-min": 50,
                     "delayed-retry-max": 900},
                    {"delayed-retry-type": "failed", "delayed-retry-min": 200,
                     "delayed-retry-max": 600})
    assert made.delayed_retry == DelayedRetry("failed", 200, 600)


def test_only_a_4_3_quorum_queue_retries_with_a_delay():
    assert settings(semantics="3.13", x_delayed_retry_type="all",
                    x_delayed_retry_min=10).delayed_retry is None
    classic = resolve(FieldTable({"x-delayed-retry-type": "all"}), semantics=Q43)
    assert classic.delayed_retry is None


def test_the_management_api_describes_it_as_rabbitmq():
    # :1999-2003 fmt_delayed_retry
    assert describe(None) == "disabled"
    assert describe(DelayedRetry("failed", 1000, 60000)) == "failed (min: 1000ms, max: 60000ms)"


# ---- the delay (rabbit_fifo.erl:2424-2443) -------------------------------------

ALL = DelayedRetry("all", 1000, 3500)


@pytest.mark.parametrize("count,delay", [(None, 1000), (0, 1000), (1, 1000), (2, 2000),
                                         (3, 3000), (4, 3500), (40, 3500)])
def test_the_delay_is_min_times_the_delivery_count_at_most_max(count, delay):
    # calculate_ready_at: DeliveryCount undefined -> 1, else max(1, DC)
    assert retry_delay(ALL, True, count) == delay


def test_which_returns_wait():
    failed, returned = DelayedRetry("failed", 10, 10), DelayedRetry("returned", 10, 10)
    # should_delay0: {failed, ...} only when the delivery failed, {returned, ...}
    # only when it did not
    assert (retry_delay(failed, True, 1), retry_delay(failed, False, 1)) == (10, None)
    assert (retry_delay(returned, True, 1), retry_delay(returned, False, 1)) == (None, 10)
    assert retry_delay(None, True, 1) is None


# ---- a quorum queue holding returns back ---------------------------------------


@pytest.fixture
def clock():
    return FakeClock()


def queue_with(clock, **arguments):
    host = VirtualHost("/", clock=clock, semantics=Q43)
    args = FieldTable({"x-queue-type": "quorum",
                       **{k.replace("_", "-"): v for k, v in arguments.items()}})
    return host, host.declare_queue("work", None, durable=True, arguments=args)


def test_a_failed_delivery_waits_longer_each_time(clock):
    host, q = queue_with(clock, x_delayed_retry_type="failed", x_delayed_retry_min=1000,
                         x_delayed_retry_max=2500)
    publish(host, message("work"))
    waits = []
    for _ in range(3):
        start = clock.now
        q.requeue([q.take_one()], REJECTED)
        assert q.take_one() is None and q.delayed_count == 1
        waits.append(q.redelivery.next_due - start)
        clock.now = q.redelivery.next_due
        q.redeliver_due(clock.now)
    assert waits == [1000, 2000, 2500]
    assert q.take_one() is not None


def test_a_nack_is_not_delayed_when_only_failures_are(clock):
    host, q = queue_with(clock, x_delayed_retry_type="failed", x_delayed_retry_min=1000)
    publish(host, message("work"))
    q.requeue([q.take_one()], NACKED)
    assert q.delayed_count == 0 and q.take_one() is not None


def test_returned_delays_nacks_and_timeouts_not_rejects(clock):
    host, q = queue_with(clock, x_delayed_retry_type="returned", x_delayed_retry_min=100)
    publish(host, message("work"))
    q.requeue([q.take_one()], TIMED_OUT)
    assert q.delayed_count == 1
    clock.now = q.redelivery.next_due
    q.redeliver_due(clock.now)
    q.requeue([q.take_one()], REJECTED)
    assert q.delayed_count == 0 and q.message_count == 1


def test_the_management_api_shows_the_configuration_and_the_waiting(clock):
    host, q = queue_with(clock, x_delayed_retry_type="all", x_delayed_retry_min=1000,
                         x_delayed_retry_max=5000)
    for body in (b"a", b"b"):
        publish(host, message("work", body))
    q.requeue([q.take_one()], REJECTED)
    clock.advance(10)
    q.requeue([q.take_one()], REJECTED)
    shown = queue_json(q)
    assert shown["delayed_retry"] == "all (min: 1000ms, max: 5000ms)"
    assert shown["delivery_limit"] == 20
    assert (shown["messages_delayed"], shown["messages"]) == (2, 2)
    assert shown["next_delayed_at"] == int(clock.now - 10 + 1000)
    assert shown["last_delayed_at"] == int(clock.now + 1000)


def test_3_13_queues_show_none_of_it():
    host = VirtualHost("/", clock=FakeClock())
    q = host.declare_queue("work", None, durable=True,
                           arguments=FieldTable({"x-queue-type": "quorum"}))
    shown = queue_json(q)
    assert "delayed_retry" not in shown and "delivery_limit" not in shown
