"""Consumer timeouts as RabbitMQ 4.3 evaluates them (its release notes: in
the queues; classic queues and streams have none), with pika, aio-pika and
a raw client against the broker in 4.3 mode: a quorum queue takes back
only the timed-out consumer's deliveries; that consumer is in a timeout
(rabbit_fifo v4.3.5's `timeout` status): it stays, takes nothing, and its
client hears basic.cancel; it takes messages again once the client has
settled what timed out (maybe_untimeout/2), and a basic.cancel-ok ends it
(rabbit_channel:handle_method/3).  The channel stays open."""

from __future__ import annotations

import aio_pika
import pytest
from pamqp import commands as spec
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from amqp_server.config import BrokerConfig
from amqp_server.testing import BrokerThread
from amqp_server.wire.frames import content_header
from amqp_server.wire.methods import make
from amqp_server.wire.properties import Properties, encode_properties

from .management_api import consumers_listed, http, queue_shown
from .rawclient import RawClient
from .waiting import until, wait_for, wait_get_noack

TIMEOUT_MS = 1000
QUORUM = {"x-queue-type": "quorum"}


@pytest.fixture
def broker():
    """conftest's `connection` and `channel` open on this one."""
    with BrokerThread(BrokerConfig(rabbitmq_semantics="4.3",
                                   consumer_timeout=TIMEOUT_MS)) as running:
        yield running



def queue_state(broker, name: str) -> tuple[int, int]:
    queue = queue_shown(broker, name)
    return queue["messages_ready"], queue["messages_unacknowledged"]



class Holder:
    """A pika consumer that keeps its deliveries and counts the broker's
    basic.cancel frames for it."""

    def __init__(self, connection, queue: str, **arguments) -> None:
        self.connection = connection
        self.channel = connection.channel()
        self.held: list = []
        self.cancels: list[str] = []
        self.channel.add_on_cancel_callback(
            lambda frame: self.cancels.append(frame.method.consumer_tag))
        self.tag = self.channel.basic_consume(
            queue, lambda ch, method, props, body: self.held.append(method),
            arguments=arguments or None)

    def wait(self, condition, seconds: float = 10) -> bool:
        return wait_for(condition, seconds, lambda: self.connection.process_data_events(0.05))


def test_a_timed_out_consumer_hears_basic_cancel_and_stays_without_deliveries(broker,
                                                                            connection):
    channel = connection.channel()
    channel.queue_declare("work", durable=True, arguments=QUORUM)
    for body in (b"one", b"two"):
        channel.basic_publish("", "work", body)
    holder = Holder(connection, "work")
    assert holder.wait(lambda: len(holder.held) == 2, 5)
    assert holder.wait(lambda: holder.cancels == [holder.tag])
    assert queue_state(broker, "work") == (2, 0)
    # Still there: listed as RabbitMQ's channel registered it (no update
    # for a competing consumer), not counted (query_consumer_count/1),
    # still the channel's, still a consumer to queue.declare (query_stat/1).
    assert consumers_listed(broker, "work") == {holder.tag: (True, "up")}
    assert queue_shown(broker, "work")["consumers"] == 0
    channels = {c["number"]: c for c in http(broker, "GET", "/api/channels")[1]}
    assert channels[holder.channel.channel_number]["consumer_count"] == 1
    declared = channel.queue_declare("work", passive=True).method
    assert (declared.message_count, declared.consumer_count) == (2, 1)
    # It takes nothing while in the timeout.
    _, props, body = wait_get_noack(channel, "work")
    assert body == b"one" and props.headers == {"x-acquired-count": 1}  # not a failure


def raw_consumer(broker, tag: str = "ctag1") -> RawClient:
    """A raw client consuming `work` (a quorum queue) as `tag` with a
    timeout of 1 s, on channel 1, one message published to it."""
    client = RawClient(broker.port, timeout=20)
    client.handshake()
    client.open_channel()
    client.send_method(1, make(spec.Queue.Declare, queue="work", durable=True,
                               arguments=QUORUM))
    assert isinstance(client.read_method()[1], spec.Queue.DeclareOk)
    client.send_method(1, make(spec.Basic.Consume, queue="work", consumer_tag=tag,
                               arguments={"x-consumer-timeout": 1000}))
    assert isinstance(client.read_method()[1], spec.Basic.ConsumeOk)
    client.publish(1, "", "work", content_header(1, encode_properties(Properties())), b"m")
    return client


def delivered(client: RawClient):
    """The next basic.deliver, its header and body read."""
    deliver = client.read_method()[1]
    assert isinstance(deliver, spec.Basic.Deliver), deliver
    client.read_frame(), client.read_frame()
    return deliver


def cancelled(client: RawClient) -> spec.Basic.Cancel:
    cancel = client.read_method()[1]
    assert isinstance(cancel, spec.Basic.Cancel), cancel
    return cancel


def test_a_timed_out_consumer_takes_messages_again_once_its_client_settles_them(broker):
    """maybe_untimeout/2: once every timed-out delivery is settled (any
    way: the ack settles nothing), the consumer is `up`, and what is ready
    goes to it, under the tag its client heard cancelled; it times out
    again, and the channel sends basic.cancel again.  (pika's
    BlockingConnection fails on that second basic.cancel for a consumer it
    already dropped: KeyError in BlockingChannel._on_consumer_cancelled_by_
    broker, with RabbitMQ 4.3.5 as here.)"""
    client = raw_consumer(broker)
    first = delivered(client)
    assert cancelled(client).consumer_tag == "ctag1"
    client.send_method(1, make(spec.Basic.Ack, delivery_tag=first.delivery_tag))
    again = delivered(client)
    assert (again.consumer_tag, again.delivery_tag, again.redelivered) == ("ctag1", 2, True)
    assert cancelled(client).consumer_tag == "ctag1"
    assert queue_state(broker, "work") == (1, 0)
    client.close()


def test_a_timed_out_consumer_keeps_its_tag_on_the_channel(broker, connection):
    """RabbitMQ's channel keeps the consumer after sending basic.cancel, so
    its tag is still in use there (530 closes the connection)."""
    channel = connection.channel()
    channel.queue_declare("work", durable=True, arguments=QUORUM)
    channel.basic_publish("", "work", b"m")
    holder = Holder(connection, "work")
    assert holder.wait(lambda: holder.cancels == [holder.tag])
    with pytest.raises(ConnectionClosedByBroker) as closed:
        holder.channel.basic_consume("work", lambda *args: None, consumer_tag=holder.tag)
    assert closed.value.reply_code == 530
    assert closed.value.reply_text == (
        f"NOT_ALLOWED - attempt to reuse consumer tag '{holder.tag}'")


def test_basic_cancel_ok_answering_the_brokers_cancel_ends_the_consumer(broker):
    # quorum_queue_SUITE consumer_timeout of v4.3.5: the client casts
    # basic.cancel_ok and the queue has no consumer left
    client = raw_consumer(broker)
    deliver = delivered(client)
    cancel = cancelled(client)
    assert (cancel.consumer_tag, cancel.nowait) == ("ctag1", True)
    client.send_method(1, make(spec.Basic.CancelOk, consumer_tag="ctag1"))
    client.send_method(1, make(spec.Queue.Declare, queue="work", passive=True))
    declared = client.read_method()[1]  # no reply to the cancel-ok came first
    assert (declared.message_count, declared.consumer_count) == (1, 0)
    # Its timed-out delivery can still be settled: it does nothing.
    client.send_method(1, make(spec.Basic.Ack, delivery_tag=deliver.delivery_tag))
    client.send_method(1, make(spec.Queue.Declare, queue="work", passive=True))
    declared = client.read_method()[1]
    assert (declared.message_count, declared.consumer_count) == (1, 0)
    client.close()


def test_only_the_timed_out_consumers_messages_go_back(broker, connection):
    channel = connection.channel()
    channel.queue_declare("work", durable=True, arguments={"x-queue-type": "quorum"})
    for body in (b"slow", b"fast"):
        channel.basic_publish("", "work", body)
    slow, fast = [], []
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume("work", lambda ch, m, p, b: slow.append(m))
    channel.basic_consume("work", lambda ch, m, p, b: fast.append(m),
                          arguments={"x-consumer-timeout": 600_000})
    assert wait_for(lambda: slow and fast, 5, lambda: connection.process_data_events(0.05))
    assert wait_for(lambda: queue_state(broker, "work") == (1, 1), 10,
                    lambda: connection.process_data_events(0.1))
    channel.basic_ack(fast[0].delivery_tag)  # its own stayed delivered


def test_a_classic_queue_has_no_consumer_timeout_in_4_3(broker, connection):
    channel = connection.channel()
    channel.queue_declare("plain", durable=True)
    channel.basic_publish("", "plain", b"m")
    method, _, _ = wait_get_noack(channel, "plain")
    connection.sleep(2.5 * TIMEOUT_MS / 1000)
    assert channel.is_open and queue_state(broker, "plain") == (0, 1)
    channel.basic_ack(method.delivery_tag)


def test_a_basic_get_past_its_timeout_closes_the_channel(broker, connection):
    channel = connection.channel()
    closed: list = []
    channel._impl.add_on_close_callback(lambda ch, reason: closed.append(reason))
    channel.queue_declare("work", durable=True, arguments={"x-queue-type": "quorum"})
    channel.basic_publish("", "work", b"m")
    wait_get_noack(channel, "work")
    assert wait_for(lambda: closed, 10, lambda: connection.process_data_events(0.1))
    [reason] = closed
    assert isinstance(reason, ChannelClosedByBroker) and reason.reply_code == 406
    # rabbit_channel:handle_queue_actions/2 for a released ... timeout action
    # of a tag it has no consumer for: handle_consumer_timed_out(-1, ...)
    assert reason.reply_text == (
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout "
        "value used: -1 ms. This timeout value can be configured, see consumers doc guide "
        "to learn more")
    assert queue_state(broker, "work") == (1, 0)
    _, props, _ = wait_get_noack(connection.channel(), "work")
    assert props.headers == {"x-acquired-count": 1}  # the timeout, not the close, counted


def test_global_qos_is_taken_as_a_consumers_prefetch(broker, connection):
    """4.3 denies the deprecated global qos: a quorum queue consumer on a
    channel with basic.qos global=true is accepted (3.13 refuses it with
    540) and the count is its own prefetch."""
    channel = connection.channel()
    channel.queue_declare("work", durable=True, arguments={"x-queue-type": "quorum"})
    for n in range(3):
        channel.basic_publish("", "work", str(n).encode())
    channel.basic_qos(prefetch_count=1, global_qos=True)
    got = []
    channel.basic_consume("work", lambda ch, m, p, b: got.append(b),
                          arguments={"x-consumer-timeout": 600_000})
    connection.process_data_events(0.5)
    assert got == [b"0"]


def test_a_cancelled_consumers_delivery_past_its_timeout_closes_the_channel(broker,
                                                                          connection):
    """The channel has no consumer to send basic.cancel for: it closes, as
    rabbit_channel:handle_queue_actions/2 does for a tag no longer in its
    consumer_mapping."""
    channel = connection.channel()
    closed: list = []
    channel._impl.add_on_close_callback(lambda ch, reason: closed.append(reason))
    channel.queue_declare("work", durable=True, arguments=QUORUM)
    channel.basic_publish("", "work", b"m")
    held: list = []
    tag = channel.basic_consume("work", lambda ch, method, props, body: held.append(method))
    assert wait_for(lambda: held, 5, lambda: connection.process_data_events(0.05))
    channel.basic_cancel(tag)
    assert wait_for(lambda: closed, 10, lambda: connection.process_data_events(0.1))
    [reason] = closed
    assert reason.reply_code == 406 and "Timeout value used: -1 ms" in reason.reply_text
    assert queue_state(broker, "work") == (1, 0)


def test_a_timed_out_single_active_consumer_steps_aside_for_the_next(broker, connection):
    # evaluate_consumer_timeout: holding nothing more, it goes to the
    # waiting consumers (its management entry: waiting), and the next is
    # activated; it comes back in order once its client settles
    channel = connection.channel()
    channel.queue_declare("work", durable=True,
                          arguments={**QUORUM, "x-single-active-consumer": True})
    channel.basic_publish("", "work", b"m")
    first = Holder(connection, "work")
    second = Holder(connection, "work", **{"x-consumer-timeout": 600_000})
    assert first.wait(lambda: first.cancels == [first.tag])
    assert second.wait(lambda: second.held)
    assert queue_shown(broker, "work")["single_active_consumer_tag"] == second.tag
    assert consumers_listed(broker, "work") == {first.tag: (False, "waiting"),
                                      second.tag: (True, "single_active")}
    assert queue_shown(broker, "work")["consumers"] == 2  # a waiting one counts
    second.channel.close()
    first.channel.basic_ack(first.held[0].delivery_tag)
    assert first.wait(lambda: queue_shown(broker, "work")["single_active_consumer_tag"]
                      == first.tag)


async def test_an_asyncio_worker_that_timed_out_resumes_after_a_late_ack(broker):
    """An aio-pika worker too slow for its x-consumer-timeout: its message
    goes to the other worker, it hears basic.cancel (aio-pika drops the
    consumer), and its late ack puts it back among the queue's consumers."""
    async with await aio_pika.connect(broker.url) as connection:
        slow_channel, fast_channel = await connection.channel(), await connection.channel()
        await slow_channel.set_qos(prefetch_count=1)
        queue = await slow_channel.declare_queue("work", durable=True, arguments=QUORUM)
        slow_held: list = []
        fast_got: list[bytes] = []

        async def slow(message):
            slow_held.append(message)

        async def fast(message):
            fast_got.append(message.body)
            await message.ack()

        slow_tag = await queue.consume(slow, arguments={"x-consumer-timeout": 1000})
        await slow_channel.default_exchange.publish(aio_pika.Message(b"job"),
                                                    routing_key="work")
        assert await until(lambda: slow_held)
        fast_queue = await fast_channel.get_queue("work", ensure=False)
        await fast_queue.consume(fast, arguments={"x-consumer-timeout": 600_000})
        assert await until(lambda: fast_got == [b"job"], 10)
        underlay = await slow_channel.get_underlay_channel()
        assert slow_tag not in underlay.consumers  # aio-pika dropped it at basic.cancel
        assert consumers_listed(broker, "work")[slow_tag] == (True, "up")
        assert queue_shown(broker, "work")["consumers"] == 1
        await slow_held[0].ack()
        assert await until(lambda: queue_shown(broker, "work")["consumers"] == 2)
