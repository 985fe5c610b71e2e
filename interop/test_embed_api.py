"""The embedding API with real clients: `serve()` inside the test's own
event loop (aio-pika), `run_in_thread()` for blocking code (pika), the
errors a start can end with, and the inspection helpers."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aio_pika
import pika
import pytest

import amqp_server
from amqp_server import ListenError
from amqp_server.storage.lock import DataDirError

from .waiting import wait_for


async def test_serve_runs_the_broker_in_the_applications_own_loop():
    async with amqp_server.serve(port=0) as broker:
        assert broker.port > 0
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("orders")
            await channel.default_exchange.publish(aio_pika.Message(b"o-1"), "orders")
            # The helpers read the broker directly: same thread, same loop.
            assert broker.queue_depth("orders") == 1
            message = await queue.get(timeout=5)
            assert message.body == b"o-1"
            await message.ack()
        assert broker.open_connections() == 0  # close-ok came: it is closing


async def test_serve_stops_by_forcing_clients_closed_and_removes_its_directory():
    async with amqp_server.serve() as broker:
        directory = Path(broker.data_dir)
        connection = await aio_pika.connect(broker.url)
        closed = asyncio.get_running_loop().create_future()
        connection.close_callbacks.add(lambda _, exc: closed.set_result(exc))
    reason = await asyncio.wait_for(closed, 10)
    assert "320" in str(reason) or "CONNECTION_FORCED" in str(reason)
    assert not directory.exists()


async def test_serve_keeps_a_data_dir_it_was_given(tmp_path):
    async with amqp_server.serve(data_dir=tmp_path / "state") as broker:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue("kept", durable=True)
    async with amqp_server.serve(data_dir=tmp_path / "state") as again:
        assert again.queue_depth("kept") == 0  # recovered: the queue is there


def test_run_in_thread_serves_blocking_clients():
    with amqp_server.run_in_thread() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("jobs")
        channel.basic_publish("", "jobs", b"j-1")
        assert broker.queue_depth("jobs") == 1
        connection.close()
        assert broker.management_url.startswith("http://127.0.0.1:")


@pytest.fixture
def taken_port():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    yield holder.getsockname()[1]
    holder.close()


async def test_a_port_that_is_taken_is_named_with_the_reason(taken_port):
    with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{taken_port} "
                                          r"\(AMQP\): .*[Aa]ddress already in use"):
        async with amqp_server.serve(port=taken_port):
            pass
    with pytest.raises(ListenError, match=f"127.0.0.1:{taken_port} \\(management\\)"):
        async with amqp_server.serve(management_port=taken_port):
            pass


def test_a_thread_that_cannot_start_raises_why(taken_port, tmp_path):
    with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{taken_port}"):
        with amqp_server.run_in_thread(port=taken_port):
            pass
    with amqp_server.run_in_thread(data_dir=tmp_path):
        with pytest.raises(DataDirError, match="is in use by another broker"):
            amqp_server.run_in_thread(data_dir=tmp_path).start()


def test_peek_shows_messages_and_their_deaths_without_touching_them():
    with amqp_server.run_in_thread() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("dead")
        channel.queue_declare("work", arguments={"x-dead-letter-exchange": "",
                                                 "x-dead-letter-routing-key": "dead"})
        channel.basic_publish("", "work", b"poison", pika.BasicProperties(
            content_type="text/plain", message_id="m-1", headers={"tenant": "eu"}))
        channel.basic_publish("", "work", b"fine")
        method, _, _ = channel.basic_get("work")
        channel.basic_reject(method.delivery_tag, requeue=False)
        method, _, _ = channel.basic_get("work")
        channel.basic_reject(method.delivery_tag, requeue=True)

        [dead] = broker.peek("dead")
        assert (dead.body, dead.exchange, dead.routing_key) == (b"poison", "", "dead")
        assert dead.properties["content_type"] == "text/plain"
        assert dead.properties["message_id"] == "m-1"
        assert dead.headers["tenant"] == "eu"
        [death] = dead.deaths
        assert (death.reason, death.queue, death.exchange, death.routing_keys, death.count) \
            == ("rejected", "work", "", ("work",), 1)
        [requeued] = broker.peek("work")
        assert requeued.redelivered and requeued.deaths == ()
        assert broker.peek("work", limit=0) == []

        # Peeking changed nothing a consumer sees.
        method, properties, body = channel.basic_get("dead")
        assert (body, method.redelivered) == (b"poison", False)
        assert properties.headers["x-death"][0]["count"] == 1
        assert broker.peek("dead") == []
        method, _, body = channel.basic_get("work")
        assert (body, method.redelivered) == (b"fine", True)
        connection.close()


def test_peek_leaves_a_quorum_queues_delivery_count_alone():
    with amqp_server.run_in_thread() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("q", durable=True, arguments={"x-queue-type": "quorum"})
        channel.basic_publish("", "q", b"m")
        for _ in range(2):
            method, _, _ = channel.basic_get("q")
            channel.basic_nack(method.delivery_tag, requeue=True)
        assert broker.peek("q")[0].headers["x-delivery-count"] == 2
        assert broker.peek("q")[0].headers["x-delivery-count"] == 2
        _, properties, _ = channel.basic_get("q", auto_ack=True)
        assert properties.headers["x-delivery-count"] == 2
        connection.close()


def test_helpers_name_a_missing_queue_or_vhost():
    with amqp_server.run_in_thread() as broker:
        with pytest.raises(KeyError, match="no queue 'nowhere' in vhost '/'"):
            broker.queue_depth("nowhere")
        with pytest.raises(KeyError, match="no vhost 'other'"):
            broker.peek("q", vhost="other")


def test_connections_left_open_are_forced_closed_and_named():
    with amqp_server.run_in_thread() as broker:
        params = pika.URLParameters(broker.url)
        params.client_properties = {"connection_name": "orders-service"}
        forgotten = pika.BlockingConnection(params)
        assert broker.open_connections() == 1
        [named] = broker.close_connections()
        assert "(Pika Python Client Library " in named and "'orders-service'" in named
        assert broker.open_connections() == 0
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="320"):
            forgotten.channel()


def test_a_vhost_comes_and_goes_with_its_queues_and_policies():
    with amqp_server.run_in_thread() as broker:
        broker.add_vhost("tenant-a")
        broker.set_policy("limit", "^q$", {"max-length": 1}, vhost="tenant-a",
                          apply_to="queues")
        broker.declare_queue("q", vhost="tenant-a")
        connection = pika.BlockingConnection(pika.URLParameters(broker.url_for("tenant-a")))
        channel = connection.channel()
        channel.confirm_delivery()
        for body in (b"1", b"2"):
            channel.basic_publish("", "q", body)
        assert broker.queue_depth("q", vhost="tenant-a") == 1  # the policy applies
        broker.delete_vhost("tenant-a")
        assert wait_for(lambda: broker.open_connections() == 0)
        broker.add_vhost("tenant-a")
        broker.declare_queue("q", vhost="tenant-a")
        assert broker.call(lambda: broker.broker.policies.in_vhost("tenant-a")) == []
