"""Each dead-letter reason through pika, as an application would meet it."""

from __future__ import annotations

import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread

from .waiting import wait_get


def dlq_setup(channel, dlx="dlx"):
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare("dlq")
    channel.queue_bind("dlq", dlx)


def test_rejected_with_all_headers(channel):
    dlq_setup(channel)
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
    channel.basic_publish("", "work", b"poison", pika.BasicProperties(message_id="m-1"))
    method, _, _ = channel.basic_get("work")
    channel.basic_reject(method.delivery_tag, requeue=False)
    method, props, body = wait_get(channel, "dlq")
    assert body == b"poison"
    assert method.exchange == "dlx" and method.routing_key == "work"
    headers = props.headers
    (death,) = headers["x-death"]
    assert death["reason"] == "rejected" and death["queue"] == "work"
    assert death["count"] == 1 and death["exchange"] == ""
    assert death["routing-keys"] == ["work"]
    for prefix in ("x-first-death", "x-last-death"):
        assert headers[f"{prefix}-reason"] == "rejected"
        assert headers[f"{prefix}-queue"] == "work"
        assert headers[f"{prefix}-exchange"] == ""
    assert props.message_id == "m-1"


def test_nack_multiple_dead_letters_each(channel):
    dlq_setup(channel)
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
    for n in range(3):
        channel.basic_publish("", "work", str(n).encode())
    tags = [channel.basic_get("work")[0].delivery_tag for _ in range(3)]
    channel.basic_nack(tags[-1], multiple=True, requeue=False)
    assert [wait_get(channel, "dlq")[2] for _ in range(3)] == [b"0", b"1", b"2"]


def test_expired_per_message_ttl_is_never_delivered(channel):
    dlq_setup(channel)
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
    channel.basic_publish("", "work", b"stale", pika.BasicProperties(expiration="20"))
    time.sleep(0.1)
    assert channel.basic_get("work")[0] is None
    _, props, _ = wait_get(channel, "dlq")
    assert props.expiration is None
    assert props.headers["x-death"][0]["original-expiration"] == "20"
    assert props.headers["x-first-death-reason"] == "expired"


def test_ttl_zero_reaches_a_waiting_consumer(channel):
    channel.queue_declare("work", arguments={"x-message-ttl": 0})
    got = []
    channel.basic_consume("work", lambda ch, m, p, b: got.append(b), auto_ack=True)
    channel.basic_publish("", "work", b"now")
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        channel.connection.process_data_events(time_limit=0.05)
    assert got == [b"now"]


def test_reaper_expires_behind_a_stuck_head():
    config = BrokerConfig(message_expiry_scan_period=50)
    with BrokerThread(config) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = conn.channel()
        dlq_setup(channel)
        channel.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
        channel.basic_publish("", "work", b"no-ttl-head")
        channel.basic_publish("", "work", b"short", pika.BasicProperties(expiration="10"))
        assert wait_get(channel, "dlq", timeout=3)[2] == b"short"
        assert channel.queue_declare("work", passive=True).method.message_count == 1
        conn.close()


def test_maxlen_drop_head(channel):
    dlq_setup(channel)
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx",
                                             "x-max-length": 2})
    for n in range(5):
        channel.basic_publish("", "work", str(n).encode())
    assert [wait_get(channel, "dlq")[2] for _ in range(3)] == [b"0", b"1", b"2"]
    _, props, _ = wait_get(channel, "work")
    assert props.headers is None


def test_reject_publish_nacks_the_publisher(channel):
    dlq_setup(channel)
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx",
                                             "x-max-length": 1,
                                             "x-overflow": "reject-publish"})
    channel.confirm_delivery()
    channel.basic_publish("", "work", b"fits")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", "work", b"refused")
    channel.basic_publish("", "dlq", b"marker")
    assert wait_get(channel, "dlq")[2] == b"marker"  # nothing was dead-lettered


def test_quorum_delivery_limit_counts_channel_closes(connection):
    channel = connection.channel()
    dlq_setup(channel)
    channel.queue_declare("qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 1, "x-dead-letter-exchange": "dlx"})
    channel.basic_publish("", "qq", b"poison")
    for expected in (None, 1):
        other = connection.channel()
        method, props, _ = other.basic_get("qq")
        assert (props.headers or {}).get("x-delivery-count") == expected
        other.close()  # unacked: a return
    _, props, body = wait_get(channel, "dlq")
    assert body == b"poison"
    assert props.headers["x-death"][0]["reason"] == "delivery_limit"


def test_invalid_expiration_is_406(channel):
    channel.queue_declare("work")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_publish("", "work", b"x", pika.BasicProperties(expiration="soon"))
        channel.queue_declare("work", passive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - invalid expiration 'soon': no_integer"


def test_whole_queue_expiry_and_delete_do_not_dead_letter(channel):
    dlq_setup(channel)
    channel.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
    channel.basic_publish("", "work", b"gone")
    channel.queue_delete("work")
    channel.queue_declare("idle", arguments={"x-dead-letter-exchange": "dlx", "x-expires": 100})
    channel.basic_publish("", "idle", b"gone too")
    time.sleep(0.4)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("idle", passive=True)
    assert info.value.reply_code == 404
    channel = channel.connection.channel()
    channel.basic_publish("", "dlq", b"marker")
    assert wait_get(channel, "dlq")[2] == b"marker"


def test_queue_in_use_does_not_expire(channel):
    channel.queue_declare("busy", arguments={"x-expires": 100})
    channel.basic_consume("busy", lambda *a: None)
    channel.connection.process_data_events(time_limit=0.4)
    assert channel.queue_declare("busy", passive=True).method.consumer_count == 1
