"""x-death as RabbitMQ 4.x treats it (4.0.1's release notes; mc.erl and
mc_amqpl.erl of v4.3.5): only deaths the broker recorded are a message's
history; an x-death a client published is a header like any other, until
the message dies here and its history starts."""

from __future__ import annotations

import datetime

import pytest

from amqp_server.broker.vhost import VirtualHost
from amqp_server.wire.table import FieldArray, FieldTable, Timestamp

from .messages import FakeClock, message, publish


def client_x_death(queue: str, reason: str = "expired", count: int = 5) -> FieldTable:
    """Headers as a client republishing a dead letter sends them."""
    entry = FieldTable({"count": count, "reason": reason, "queue": queue, "exchange": "",
                        "routing-keys": FieldArray([queue]),
                        "time": Timestamp(int(datetime.datetime(2024, 1, 1).timestamp()))})
    headers = FieldTable({"x-death": FieldArray([entry]),
                          "x-first-death-reason": reason, "x-first-death-queue": queue,
                          "x-first-death-exchange": ""})
    return headers


@pytest.fixture(params=["3.13", "4.3"])
def vhost(request):
    host = VirtualHost("/", clock=FakeClock(), semantics=request.param)
    host.declare_queue("dlq", None, durable=True)
    host.declare_queue("work", None, durable=True, arguments=FieldTable({
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    return host


def die_in_work(vhost, headers: FieldTable) -> dict:
    publish(vhost, message("work", b"m", headers=headers))
    work = vhost.queues["work"]
    work.reject([work.take_one()])
    return dict(vhost.queues["dlq"].ready[0].message.properties.headers)


def test_a_client_x_death_counts_on_in_3_13_and_starts_over_in_4_3(vhost):
    headers = die_in_work(vhost, client_x_death("work", reason="rejected", count=5))
    [death] = headers["x-death"]
    # 3.13: mc_amqpl:recover_deaths read the header; 4.3: a fresh history
    # (mc.erl:392 record_death with no deaths annotation: count 1)
    assert death["count"] == (6 if vhost.semantics == "3.13" else 1)


def test_4_3_sets_the_first_death_headers_anew(vhost):
    headers = die_in_work(vhost, client_x_death("elsewhere"))
    # mc.erl:443-450: no deaths yet, so x-first-death-* are this death's;
    # 3.13 kept the publisher's (its x-death was read as deaths)
    expected = "expired" if vhost.semantics == "3.13" else "rejected"
    assert headers["x-first-death-reason"] == expected
    reasons = [death["reason"] for death in headers["x-death"]]
    assert reasons == (["rejected", "expired"] if vhost.semantics == "3.13" else ["rejected"])


def test_a_client_x_death_makes_no_cycle_in_4_3():
    """Expired from `a` into `b`: 3.13 sees `b` in the client's history (an
    automatic death there) and drops it as a cycle; 4.3 delivers it
    (mc.erl:462 is_death_cycle reads only the deaths annotation)."""
    outcomes = {}
    for semantics in ("3.13", "4.3"):
        host = VirtualHost("/", clock=FakeClock(), semantics=semantics)
        host.declare_queue("b", None, durable=True)
        host.declare_queue("a", None, durable=True, arguments=FieldTable({
            "x-message-ttl": 0, "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "b"}))
        publish(host, message("a", b"m", headers=client_x_death("b")))
        host.queues["a"].expire(host.clock() + 1)
        outcomes[semantics] = host.queues["b"].message_count
    assert outcomes == {"3.13": 0, "4.3": 1}


def test_the_brokers_own_deaths_count_on_in_both(vhost):
    work, dlq = vhost.queues["work"], vhost.queues["dlq"]
    vhost.declare_queue("retry", None, durable=True, arguments=FieldTable({
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"}))
    publish(vhost, message("work", b"m"))
    work.reject([work.take_one()])
    # back to work through the broker's own dead-lettering, then dies again
    first = dlq.take_one()
    retry = vhost.queues["retry"]
    retry.enqueue(first.message)
    retry.reject([retry.take_one()])
    work.reject([work.take_one()])
    deaths = {(d["queue"], d["reason"]): d["count"]
              for d in dlq.ready[0].message.properties.headers["x-death"]}
    assert deaths == {("work", "rejected"): 2, ("retry", "rejected"): 1}
