"""A transaction never loses a message.  The shape applications use: take a
message, publish a result, ack the message, commit.  RabbitMQ routes each
publish when it arrives, so a commit after the exchange was deleted still
succeeds; and whatever happens before or during the commit, every message
ends up either settled or back in its queue."""

from __future__ import annotations

import pika
import pytest
from pamqp import commands as spec
from pika.exceptions import ChannelClosedByBroker

from amqp_server.wire import frames
from amqp_server.wire.methods import make

from .management_api import http
from .rawclient import RawClient
from .users import ctl
from .waiting import wait_for

WORK, RESULTS, EXCHANGE = "tx.work", "tx.results", "tx.out"


def set_up(url: str):
    """tx.work holds one message; tx.out (direct) routes `done` to tx.results."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    for queue in (WORK, RESULTS):
        channel.queue_delete(queue)
        channel.queue_declare(queue)
    channel.exchange_delete(EXCHANGE)
    channel.exchange_declare(EXCHANGE, "direct")
    channel.queue_bind(RESULTS, EXCHANGE, "done")
    channel.basic_publish("", WORK, b"job")
    return conn


def take_and_publish(conn):
    """In a transaction: get the job, publish its result, ack the job."""
    channel = conn.channel()
    channel.tx_select()
    method, _, body = channel.basic_get(WORK)
    assert body == b"job"
    channel.basic_publish(EXCHANGE, "done", b"result")
    channel.basic_ack(method.delivery_tag)
    return channel


def counts(url: str) -> tuple[int, int]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    found = tuple(channel.queue_declare(q, passive=True).method.message_count
                  for q in (WORK, RESULTS))
    conn.close()
    return found


def exchange_deleted_before_commit(url: str) -> tuple:
    """(what the commit did, messages in tx.work and tx.results after)."""
    admin = set_up(url)
    worker = pika.BlockingConnection(pika.URLParameters(url))
    channel = take_and_publish(worker)
    admin.channel().exchange_delete(EXCHANGE)
    try:
        channel.tx_commit()
        outcome = "committed"
    except ChannelClosedByBroker as exc:
        outcome = (exc.reply_code, exc.reply_text)
    worker.close()
    seen = counts(url)
    admin.channel().queue_delete(WORK)
    admin.channel().queue_delete(RESULTS)
    admin.close()
    return outcome, seen


def test_a_commit_after_the_exchange_was_deleted_delivers_what_was_routed(broker):
    assert exchange_deleted_before_commit(broker.url) == ("committed", (0, 1))


def test_the_same_as_rabbitmq(broker, rabbitmq_url):
    assert exchange_deleted_before_commit(broker.url) == exchange_deleted_before_commit(
        rabbitmq_url)


def test_a_queue_deleted_before_commit_drops_only_its_copy(broker):
    admin = set_up(broker.url)
    admin.channel().queue_declare("tx.other")
    admin.channel().queue_bind("tx.other", EXCHANGE, "done")
    worker = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = take_and_publish(worker)
    admin.channel().queue_delete(RESULTS)
    channel.tx_commit()
    assert admin.channel().queue_declare("tx.other", passive=True).method.message_count == 1
    assert admin.channel().queue_declare(WORK, passive=True).method.message_count == 0
    worker.close()
    admin.close()


def test_permissions_are_checked_at_publish_not_at_commit(broker):
    """As RabbitMQ: revoking write after the publish does not fail the commit."""
    assert ctl(broker, "add_user", "txu", "pw") == 0
    assert ctl(broker, "set_permissions", "txu", ".*", ".*", ".*") == 0
    admin = set_up(broker.url)
    worker = pika.BlockingConnection(pika.URLParameters(
        broker.url.replace("guest:guest", "txu:pw")))
    channel = take_and_publish(worker)
    assert ctl(broker, "set_permissions", "txu", "", "", "") == 0
    channel.tx_commit()
    assert counts(broker.url) == (0, 1)
    worker.close()
    admin.close()


@pytest.mark.parametrize("ending", ["channel closed", "connection closed", "socket dropped"])
def test_what_ends_before_commit_puts_the_message_back(broker, ending):
    admin = set_up(broker.url)
    worker = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = take_and_publish(worker)
    if ending == "channel closed":
        channel.close()
    elif ending == "connection closed":
        worker.close()
    else:
        worker._impl._transport._sock.close()  # no close handshake at all
    assert wait_for(lambda: counts(broker.url) == (1, 0))
    method, _, body = admin.channel().basic_get(WORK, auto_ack=True)
    assert body == b"job" and method.redelivered
    admin.close()


def test_a_commit_the_client_does_not_wait_for_is_all_or_nothing(broker):
    """tx.commit written and the socket closed at once: the broker either
    committed everything or nothing; the job is never in neither queue."""
    admin = set_up(broker.url)
    raw = RawClient(broker.port)
    raw.handshake()
    raw.open_channel()
    raw.send_method(1, make(spec.Tx.Select))
    raw.read_method()
    raw.send_method(1, make(spec.Basic.Get, queue=WORK))
    _, got = raw.read_method()
    raw.read_frame()
    raw.read_frame()
    raw.publish(1, EXCHANGE, "done", frames.content_header(6, b"\x00\x00"), b"result")
    raw.send_method(1, make(spec.Basic.Ack, delivery_tag=got.delivery_tag))
    raw.send_method(1, make(spec.Tx.Commit))
    raw.close()
    assert wait_for(lambda: counts(broker.url) in ((0, 1), (1, 0)))
    assert http(broker, "GET", "/api/queues/%2F/" + WORK)[1]["messages_unacknowledged"] == 0
    admin.close()
