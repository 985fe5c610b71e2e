"""basic.*, confirm.* and tx.* driven by pika's BlockingConnection."""

from __future__ import annotations

import pika
import pytest
from pamqp import commands as spec
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker, UnroutableError

from amqp_server.wire.frames import FRAME_HEADER, content_header, frame
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties
from interop.rawclient import RawClient


def fill(channel, queue, count):
    channel.queue_declare(queue)
    for i in range(count):
        channel.basic_publish("", queue, str(i).encode())


def test_consume_delivers_in_order_with_server_tag(connection, channel):
    fill(channel, "q", 5)
    seen = []
    tag = channel.basic_consume("q", lambda ch, m, p, b: seen.append((m.consumer_tag, b)),
                                auto_ack=True)
    while len(seen) < 5:
        connection.process_data_events(time_limit=0.1)
    assert tag.startswith("ctag") or tag.startswith("amq.ctag")
    assert [b for _, b in seen] == [b"0", b"1", b"2", b"3", b"4"]


def test_server_generated_consumer_tag(broker):
    client = RawClient.opened(broker.port, queue="q")
    client.send_method(1, make(spec.Basic.Consume, queue="q", consumer_tag=""))
    _, ok = client.read_method()
    assert ok.consumer_tag.startswith("amq.ctag-")
    client.close()


def test_prefetch_per_consumer_limits_unacked(connection, channel):
    fill(channel, "q", 10)
    channel.basic_qos(prefetch_count=3)
    seen = []
    channel.basic_consume("q", lambda ch, m, p, b: seen.append(m.delivery_tag))
    connection.process_data_events(time_limit=0.3)
    assert len(seen) == 3
    channel.basic_ack(seen[-1], multiple=True)
    connection.process_data_events(time_limit=0.3)
    assert len(seen) == 6


def test_global_prefetch_is_shared_by_channel_consumers(connection, channel):
    fill(channel, "a", 5)
    fill(channel, "b", 5)
    channel.basic_qos(prefetch_count=4, global_qos=True)
    seen = []
    channel.basic_consume("a", lambda ch, m, p, b: seen.append(m.delivery_tag))
    channel.basic_consume("b", lambda ch, m, p, b: seen.append(m.delivery_tag))
    connection.process_data_events(time_limit=0.3)
    assert len(seen) == 4


def test_prefetch_size_is_not_implemented(connection):
    channel = connection.channel()
    with pytest.raises(ConnectionClosedByBroker) as info:
        channel.basic_qos(prefetch_size=10)
    assert info.value.reply_code == 540


def test_round_robin_between_consumers(connection, channel):
    fill(channel, "q", 0)
    first, second = [], []
    channel.basic_consume("q", lambda ch, m, p, b: first.append(b), auto_ack=True)
    channel.basic_consume("q", lambda ch, m, p, b: second.append(b), auto_ack=True)
    for i in range(6):
        channel.basic_publish("", "q", str(i).encode())
    while len(first) + len(second) < 6:
        connection.process_data_events(time_limit=0.1)
    assert first == [b"0", b"2", b"4"] and second == [b"1", b"3", b"5"]


def test_reused_consumer_tag_is_not_allowed(broker):
    # pika refuses duplicate tags itself, so the raw client sends them.
    client = RawClient.opened(broker.port, queue="q")
    for _ in range(2):
        client.send_method(1, make(spec.Basic.Consume, queue="q", consumer_tag="dup"))
    client.read_method()  # consume-ok
    _, close = client.read_method()
    assert isinstance(close, spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (
        530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")
    client.close()


def test_exclusive_consumer(connection):
    channel = connection.channel()
    fill(channel, "q", 0)
    channel.basic_consume("q", lambda *a: None, exclusive=True)
    other = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        other.basic_consume("q", lambda *a: None)
    assert info.value.reply_code == 403
    assert info.value.reply_text == "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use"


def test_queue_deletion_cancels_consumers(connection, channel):
    fill(channel, "q", 0)
    cancelled = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume("q", lambda *a: None)
    connection.channel().queue_delete("q")
    connection.process_data_events(time_limit=0.3)
    assert cancelled == [tag]


def test_basic_get_and_get_empty(channel):
    fill(channel, "q", 2)
    method, _, body = channel.basic_get("q")
    assert (body, method.message_count, method.redelivered) == (b"0", 1, False)
    channel.basic_get("q", auto_ack=True)
    assert channel.basic_get("q") == (None, None, None)


def test_requeued_message_returns_to_its_position_redelivered(channel):
    fill(channel, "q", 3)
    first, _, _ = channel.basic_get("q")
    second, _, _ = channel.basic_get("q")
    channel.basic_reject(second.delivery_tag, requeue=True)
    channel.basic_nack(first.delivery_tag, requeue=True)
    got = [channel.basic_get("q", auto_ack=True) for _ in range(3)]
    assert [(b, m.redelivered) for m, _, b in got] == [(b"0", True), (b"1", True), (b"2", False)]


def test_nack_multiple_without_requeue_discards(channel):
    fill(channel, "q", 3)
    tags = [channel.basic_get("q")[0].delivery_tag for _ in range(3)]
    channel.basic_nack(tags[-1], multiple=True, requeue=False)
    assert channel.queue_declare("q", passive=True).method.message_count == 0


def test_ack_multiple_and_all_with_tag_zero(channel):
    fill(channel, "q", 4)
    tags = [channel.basic_get("q")[0].delivery_tag for _ in range(4)]
    channel.basic_ack(tags[1], multiple=True)
    channel.basic_ack(0, multiple=True)
    channel.basic_recover(requeue=True)
    assert channel.basic_get("q")[0] is None


def test_unknown_delivery_tag(connection):
    channel = connection.channel()
    channel.basic_ack(99)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("probe")
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 99"
    channel = connection.channel()
    fill(channel, "q", 1)
    tag = channel.basic_get("q")[0].delivery_tag
    channel.basic_ack(tag)
    channel.basic_ack(tag)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("probe")
    assert info.value.reply_code == 406


def test_recover_requeues_unacked(channel):
    fill(channel, "q", 2)
    channel.basic_get("q")
    channel.basic_get("q")
    channel.basic_recover(requeue=True)
    method, _, body = channel.basic_get("q", auto_ack=True)
    assert (body, method.redelivered) == (b"0", True)


def test_closing_channel_requeues_unacked(connection):
    channel = connection.channel()
    fill(channel, "q", 1)
    channel.basic_get("q")
    channel.close()
    method, _, body = connection.channel().basic_get("q", auto_ack=True)
    assert (body, method.redelivered) == (b"0", True)


def test_mandatory_unroutable_is_returned(connection, channel):
    returned = []
    channel.add_on_return_callback(lambda ch, m, p, b: returned.append((m.reply_code, b)))
    channel.basic_publish("amq.direct", "nobody", b"back", mandatory=True)
    connection.process_data_events(time_limit=0.3)
    assert returned == [(312, b"back")]


def test_immediate_is_not_implemented(broker):
    # pika cannot send immediate=true; RabbitMQ answers it with 540.
    client = RawClient.opened(broker.port)
    client.send_method(1, make(spec.Basic.Publish, exchange="", routing_key="q", immediate=True))
    client.send(frame(FRAME_HEADER, 1, content_header(0, encode_properties(Properties()))))
    _, close = client.read_method()
    assert isinstance(close, spec.Connection.Close)
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")
    client.close()


def test_publisher_confirms(connection, channel):
    channel.confirm_delivery()
    channel.queue_declare("q")
    for _i in range(20):
        channel.basic_publish("", "q", b"x")
    with pytest.raises(UnroutableError):
        channel.basic_publish("amq.direct", "nobody", b"x", mandatory=True)
    assert channel.queue_declare("q", passive=True).method.message_count == 20


def test_transaction_commit_and_rollback(channel):
    channel.queue_declare("q")
    channel.tx_select()
    channel.basic_publish("", "q", b"kept")
    assert channel.queue_declare("q", passive=True).method.message_count == 0
    channel.tx_commit()
    assert channel.queue_declare("q", passive=True).method.message_count == 1
    channel.basic_publish("", "q", b"dropped")
    channel.tx_rollback()
    assert channel.queue_declare("q", passive=True).method.message_count == 1
    method, _, _ = channel.basic_get("q")
    channel.basic_ack(method.delivery_tag)
    channel.tx_rollback()  # the ack is undone: the message is unacked again
    channel.basic_ack(method.delivery_tag)
    channel.tx_commit()
    channel.basic_recover(requeue=True)
    assert channel.basic_get("q")[0] is None


def test_transactions_of_persistent_messages_commit_once_on_disk(broker, channel):
    channel.queue_declare("durable-tx", durable=True)
    channel.tx_select()
    for n in range(50):
        channel.basic_publish("", "durable-tx", b"%d" % n, pika.BasicProperties(delivery_mode=2))
        channel.tx_commit()  # answered only after the store's flush
    store = broker.broker.store
    assert store.synced >= store.log.generation - 1
    assert channel.queue_declare("durable-tx", passive=True).method.message_count == 50


def test_tx_and_confirm_do_not_mix(connection):
    channel = connection.channel()
    channel.tx_select()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.confirm_delivery()
    assert info.value.reply_text == "PRECONDITION_FAILED - cannot switch from tx to confirm mode"
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.tx_commit()
    assert info.value.reply_text == "PRECONDITION_FAILED - channel is not transactional"


def test_channel_flow_pauses_deliveries(connection, channel):
    fill(channel, "q", 0)
    seen = []
    channel.basic_consume("q", lambda ch, m, p, b: seen.append(b), auto_ack=True)
    paused = []
    channel._impl.flow(False, lambda active: paused.append(active))
    connection.process_data_events(time_limit=0.2)
    channel.basic_publish("", "q", b"held")
    connection.process_data_events(time_limit=0.3)
    assert paused == [False] and seen == []
    channel._impl.flow(True, lambda active: paused.append(active))
    connection.process_data_events(time_limit=0.3)
    assert seen == [b"held"]


def test_large_message_is_split_into_frames(connection, channel):
    body = bytes(range(256)) * 4096  # 1 MiB, far over frame_max
    fill(channel, "q", 0)
    channel.basic_publish("", "q", body)
    assert channel.basic_get("q", auto_ack=True)[2] == body
