"""Routing and wire details where clients can tell brokers apart, compared
with a real RabbitMQ: topic keys with empty words, headers values with
their types, global and per-consumer prefetch together, the ids a close
names, amq.rabbitmq.trace, and the arguments and properties refused."""

from __future__ import annotations

from decimal import Decimal

import pika
import pytest
from pamqp import commands as spec
from pika.exceptions import ChannelClosedByBroker

from amqp_server.wire import frames
from amqp_server.wire.methods import make

from .consumers import Recorder, publish, settle
from .rawclient import RawClient

TOPIC_BINDINGS = ["", "*", "#", "#.#", "a.*", "a.", "a.#", "*.*", ".", "*.", ".*", "#.a",
                  "a.#.b", "#."]
TOPIC_KEYS = ["", "a", "a.", ".", "..", "a.b", ".a", "a..b", "a.b."]


def topic_matches(url: str) -> dict:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.exchange_declare("wd.topic", "topic", auto_delete=True)
    matched = {}
    for index, binding in enumerate(TOPIC_BINDINGS):
        queue = f"wd.topic.{index}"
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, "wd.topic", binding)
    channel.confirm_delivery()
    for key in TOPIC_KEYS:
        channel.basic_publish("wd.topic", key, key.encode() or b"<empty>")
    for index, binding in enumerate(TOPIC_BINDINGS):
        got = []
        while True:
            method, _, body = channel.basic_get(f"wd.topic.{index}", auto_ack=True)
            if method is None:
                break
            got.append(body.decode())
        matched[binding] = got
        channel.queue_delete(f"wd.topic.{index}")
    conn.close()
    return matched


def test_topic_keys_with_empty_words_route_as_in_rabbitmq(broker, rabbitmq_url):
    ours = topic_matches(broker.url)
    assert ours == topic_matches(rabbitmq_url)
    assert ours["*"] == ["a"] and ours[""] == ["<empty>"]


# (binding value, header value as pika sends it): what 3.10 and 3.13 agree on.
AGREED_HEADER_CASES = {
    "bool true vs int 1": (True, 1),
    "int 1 vs long 1": (1, 2**33 - 2**33 + 1),
    "string vs same string": ("x", "x"),
    "string vs other": ("x", "y"),
    "bool vs bool": (True, True),
}


def headers_matches(url: str, cases: dict) -> dict:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.exchange_declare("wd.headers", "headers")
    seen = {}
    for index, (name, (bound, sent)) in enumerate(cases.items()):
        queue = f"wd.h.{index}"
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, "wd.headers", arguments={"x-match": "all", f"k{index}": bound})
        channel.confirm_delivery() if index == 0 else None
        channel.basic_publish("wd.headers", "", b"m", pika.BasicProperties(
            headers={f"k{index}": sent}))
        seen[name] = channel.basic_get(queue, auto_ack=True)[0] is not None
        channel.queue_delete(queue)
    channel.exchange_delete("wd.headers")
    conn.close()
    return seen


def test_headers_values_compare_as_in_rabbitmq(broker, rabbitmq_url):
    ours = headers_matches(broker.url, AGREED_HEADER_CASES)
    assert ours == headers_matches(rabbitmq_url, AGREED_HEADER_CASES)
    assert ours["bool true vs int 1"] is False and ours["int 1 vs long 1"] is True


def test_headers_values_compare_as_erlang_terms(broker):
    """3.13 compares with =:= (3.10, the reference here, with ==): an
    integer is not a decimal."""
    cases = {"int 1 vs decimal 1": (1, Decimal(1)), "int vs int": (7, 7)}
    assert headers_matches(broker.url, cases) == {
        "int 1 vs decimal 1": False, "int vs int": True}


def prefetch(url: str) -> dict:
    """In-flight deliveries with per-consumer and global prefetch set in
    either order (RabbitMQ: a later per-consumer qos lifts the global one)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    seen = {}
    for order in ("consumer then global", "global then consumer"):
        setup = conn.channel()
        for queue in ("wd.p1", "wd.p2"):
            setup.queue_delete(queue)
            setup.queue_declare(queue)
            publish(conn, queue, [f"{queue}.{n}" for n in range(10)])
        channel = conn.channel()
        if order == "consumer then global":
            channel.basic_qos(prefetch_count=2)
            channel.basic_qos(prefetch_count=3, global_qos=True)
        else:
            channel.basic_qos(prefetch_count=3, global_qos=True)
            channel.basic_qos(prefetch_count=2)
        got = []
        for queue in ("wd.p1", "wd.p2"):
            channel.basic_consume(queue, lambda ch, m, p, b, got=got: got.append(b))
        conn.process_data_events(time_limit=0.5)
        seen[order] = len(got)
        channel.close()
        for queue in ("wd.p1", "wd.p2"):
            setup.queue_delete(queue)
    conn.close()
    return seen


def test_global_and_per_consumer_prefetch_as_in_rabbitmq(broker, rabbitmq_url):
    ours = prefetch(broker.url)
    assert ours == prefetch(rabbitmq_url) == {"consumer then global": 3,
                                               "global then consumer": 4}


def closes(url: str) -> dict:
    """What closes the channel or connection, with the ids it names."""
    client = RawClient.for_url(url)
    seen = {}
    client.send_method(1, make(spec.Basic.Publish, exchange="", routing_key="x",
                               immediate=True))
    client.send(frames.frame(2, 1, frames.content_header(1, b"\x00\x00")))
    client.send(frames.frame(3, 1, b"x"))
    _, close = client.read_method()
    seen["immediate"] = (type(close).__name__, close.reply_code, close.class_id,
                         close.method_id)
    client.close()
    client = RawClient.for_url(url)
    client.send_method(1, make(spec.Basic.Ack, delivery_tag=99))
    _, close = client.read_method()
    seen["unknown ack"] = (type(close).__name__, close.reply_code, close.reply_text,
                           close.class_id, close.method_id)
    client.close()
    return seen


def test_the_method_a_close_names_as_in_rabbitmq(broker, rabbitmq_url):
    ours = closes(broker.url)
    assert ours == closes(rabbitmq_url)
    assert ours["immediate"] == ("Close", 540, 60, 40)


def refusals(url: str) -> dict:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    seen = {}
    declares = {
        "queue mode foo": dict(queue="wd.q", arguments={"x-queue-mode": "foo"}),
        "queue mode int": dict(queue="wd.q", arguments={"x-queue-mode": 1}),
        "queue mode lazy": dict(queue="wd.q", arguments={"x-queue-mode": "lazy"}),
        "queue type foo": dict(queue="wd.q", arguments={"x-queue-type": "foo"}),
        "queue version 3": dict(queue="wd.q", arguments={"x-queue-version": 3}),
        "queue version 2": dict(queue="wd.q", arguments={"x-queue-version": 2}),
        "server-named quorum": dict(queue="", durable=True,
                                    arguments={"x-queue-type": "quorum"}),
        "quorum lazy": dict(queue="wd.qq", durable=True,
                            arguments={"x-queue-type": "quorum", "x-queue-mode": "lazy"}),
    }
    for name, arguments in declares.items():
        channel = conn.channel()
        try:
            declared = channel.queue_declare(**arguments).method.queue
            seen[name] = "declared"
            channel.queue_delete(declared)
        except ChannelClosedByBroker as exc:
            seen[name] = (exc.reply_code, exc.reply_text)
    conn.channel().queue_declare("wd.q")
    for expiration in ["-1", "1.5", "abc", "", " 5", "5 ", "0x10", "1e3", "315360000001",
                       "0", "00", "+5"]:
        channel = conn.channel()
        channel.confirm_delivery()
        try:
            channel.basic_publish("", "wd.q", b"x", pika.BasicProperties(expiration=expiration))
            seen[f"expiration {expiration!r}"] = "published"
        except ChannelClosedByBroker as exc:
            seen[f"expiration {expiration!r}"] = (exc.reply_code, exc.reply_text)
    channel = conn.channel()
    seen["trace passive"] = channel.exchange_declare("amq.rabbitmq.trace", passive=True) and "ok"
    try:
        channel.basic_publish("amq.rabbitmq.trace", "k", b"x")
        channel.queue_declare("wd.q", passive=True)
        seen["trace publish"] = "published"
    except ChannelClosedByBroker as exc:
        seen["trace publish"] = (exc.reply_code, exc.reply_text)
    conn.channel().queue_delete("wd.q")
    conn.close()
    return seen


def test_refused_arguments_and_properties_as_in_rabbitmq(broker, rabbitmq_url):
    ours = refusals(broker.url)
    assert ours == refusals(rabbitmq_url)
    assert ours["trace publish"][0] == 403


def test_a_lazy_queue_keeps_little_in_memory(broker, channel):
    from .management_api import http
    channel.queue_declare("wd.lazy", arguments={"x-queue-mode": "lazy"})
    for _n in range(1000):
        channel.basic_publish("", "wd.lazy", b"x" * 100)
    queue = http(broker, "GET", "/api/queues/%2F/wd.lazy")[1]
    assert queue["messages_ram"] <= 256 and queue["messages"] == 1000
    got = 0
    while channel.basic_get("wd.lazy", auto_ack=True)[0] is not None:
        got += 1
    assert got == 1000


def test_x_max_priority_zero_makes_two_levels_as_313(channel):
    """3.13.4 and later: priority 0 and 1 (3.10 made such a queue FIFO)."""
    channel.queue_declare("wd.p0", arguments={"x-max-priority": 0})
    for body, priority in ((b"low", None), (b"high", 1), (b"higher", 9)):
        channel.basic_publish("", "wd.p0", body, pika.BasicProperties(priority=priority))
    got = [channel.basic_get("wd.p0", auto_ack=True)[2] for _ in range(3)]
    assert got == [b"high", b"higher", b"low"]


def test_a_quorum_single_active_queue_ignores_exclusive(connection):
    channel = connection.channel()
    channel.queue_declare("wd.qsac", durable=True, arguments={
        "x-queue-type": "quorum", "x-single-active-consumer": True})
    Recorder(connection, "wd.qsac", "first", 1)
    second = connection.channel()
    second.basic_consume("wd.qsac", lambda *a: None, exclusive=True)  # no 403
    settle(connection)
    assert second.is_open



CONSUME_CASES = [
    ("wd.c", {"x-stream-offset": "first"}),
    ("wd.qc", {"x-cancel-on-ha-failover": True}),
    ("wd.c", {"x-cancel-on-ha-failover": 1}),
    ("wd.c", {"x-cancel-on-ha-failover": True}),
    ("wd.c", {"x-priority": "a"}),
    ("wd.c", {"x-stream-offset": "first", "x-priority": "a"}),
    ("wd.qc", {"x-priority": 5}),
]


def consume_refusals(url: str) -> list:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    setup = conn.channel()
    setup.queue_declare("wd.c")
    setup.queue_declare("wd.qc", durable=True, arguments={"x-queue-type": "quorum"})
    seen = []
    for queue, arguments in CONSUME_CASES:
        channel = conn.channel()
        try:
            channel.basic_consume(queue, lambda *a: None, arguments=arguments)
            seen.append("ok")
            channel.close()
        except ChannelClosedByBroker as exc:
            seen.append((exc.reply_code, exc.reply_text))
    setup.queue_delete("wd.c")
    setup.queue_delete("wd.qc")
    conn.close()
    return seen


def test_consume_arguments_checked_per_queue_type_as_in_rabbitmq(broker, rabbitmq_url):
    ours = consume_refusals(broker.url)
    assert ours == consume_refusals(rabbitmq_url)
    assert ours[0] == (406, "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue "
                            "'wd.c' in vhost '/' of queue type rabbit_classic_queue")


def test_credit_mode_is_refused_not_ignored(channel):
    """x-credit needs basic.credit, which AMQP 0-9-1 clients cannot send
    (RabbitMQ 3.10 closes the connection with 541 for some values)."""
    channel.queue_declare("wd.credit")
    with pytest.raises(ChannelClosedByBroker) as refused:
        channel.basic_consume("wd.credit", lambda *a: None,
                              arguments={"x-credit": {"credit": 5, "drain": False}})
    assert refused.value.reply_code == 406 and "basic.credit" in refused.value.reply_text


# (arguments, durable): each queue type's own arguments on the other types.
OTHER_TYPE_CASES = [
    ({"x-max-age": "1D"}, False),
    ({"x-stream-max-segment-size-bytes": 5}, False),
    ({"x-initial-cluster-size": 1}, False),
    ({"x-queue-leader-locator": "client-local"}, False),
    ({"x-quorum-initial-group-size": 1}, False),
    ({"x-queue-master-locator": "min-masters"}, False),
    ({"x-max-in-memory-length": 5}, False),
    ({"x-queue-type": "quorum", "x-queue-master-locator": "min-masters"}, True),
    ({"x-queue-type": "quorum", "x-max-priority": 5}, True),
    ({"x-queue-type": "quorum", "x-queue-leader-locator": "balanced"}, True),
    ({"x-foo": 1}, False),
]


def declares(url: str) -> list:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    seen = []
    for arguments, durable in OTHER_TYPE_CASES:
        channel = conn.channel()
        try:
            channel.queue_declare("wd.args", durable=durable, arguments=arguments)
            seen.append("ok")
            channel.queue_delete("wd.args")
            channel.close()
        except ChannelClosedByBroker as exc:
            seen.append((exc.reply_code, exc.reply_text))
    conn.close()
    return seen


def test_arguments_of_other_queue_types_refused_as_in_rabbitmq(broker, rabbitmq_url):
    ours = declares(broker.url)
    assert ours == declares(rabbitmq_url)
    assert ours[0][0] == 406 and ours[-1] == "ok"


def delete_while_consuming(url: str) -> list:
    """The order of the replies when a channel deletes the queue it
    consumes from (py-amqp raises a cancel that comes before delete-ok)."""
    client = RawClient.for_url(url)
    seen = []

    def read(count: int) -> None:
        for _ in range(count):
            _, method = client.read_method()
            seen.append(type(method).__name__)

    # RabbitMQ may answer a pipelined delete before the consume, so the
    # delete waits for consume-ok: only the last two replies' order is
    # what py-amqp depends on.
    client.send_method(1, make(spec.Queue.Declare, queue="wd.del"))
    client.send_method(1, make(spec.Basic.Consume, queue="wd.del", consumer_tag="c1"))
    read(2)
    client.send_method(1, make(spec.Queue.Delete, queue="wd.del"))
    read(2)
    client.close()
    return seen


def test_delete_ok_comes_before_the_cancel_as_in_rabbitmq(broker, rabbitmq_url):
    ours = delete_while_consuming(broker.url)
    assert ours == delete_while_consuming(rabbitmq_url)
    assert ours == ["DeclareOk", "ConsumeOk", "DeleteOk", "Cancel"]
