"""Dead letters made the way a client makes them (published, then rejected,
expired or pushed out), counted, and the workbench's tasks waited on."""

from __future__ import annotations

import contextlib
import json
import time

import pika

from amqp_server.testing import BrokerThread

from .management_api import http
from .waiting import wait_for, wait_get, wait_get_noack


def wait_task(broker, task_id: str, auth=("guest", "guest"), seconds: float = 20.0) -> dict:
    """The task once it is no longer running (bounded in time)."""
    answer = {}

    def finished() -> bool:
        nonlocal answer
        status, answer = http(broker, "GET", f"/api/tasks/{task_id}", auth=auth)
        assert status == 200, answer
        return answer["state"] != "running"

    assert wait_for(finished, seconds, step=lambda: time.sleep(0.05)), answer
    return answer


def dead_letters(channel, bodies, queue="work", exchange="shop", key="order",
                 message_ids=None):
    """Publish `bodies` through `exchange` to `queue`, reject each without
    requeue: they die 'rejected' into `queue`.dlq through exchange dlx."""
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare(f"{queue}.dlq", durable=True)
    channel.queue_bind(f"{queue}.dlq", "dlx")
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue, durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    channel.queue_bind(queue, exchange, key)
    channel.confirm_delivery()
    for index, body in enumerate(bodies):
        message_id = message_ids[index] if message_ids else f"m-{index}"
        channel.basic_publish(exchange, key, body, pika.BasicProperties(
            message_id=message_id, delivery_mode=2, headers={"trace": f"t-{index}"}))
    for _ in bodies:
        method, _props, _body = wait_get_noack(channel, queue)
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert wait_for(lambda: channel.queue_declare(f"{queue}.dlq", passive=True)
                    .method.message_count == len(bodies))


@contextlib.contextmanager
def another_broker(queue: str):
    """A second broker with `queue` declared: (broker, a channel to it, its URI)."""
    with BrokerThread() as other:
        connection = pika.BlockingConnection(pika.URLParameters(other.url))
        try:
            channel = connection.channel()
            channel.queue_declare(queue)
            yield other, channel, f"amqp://guest:guest@127.0.0.1:{other.port}/%2F"
        finally:
            connection.close()


def count(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def dead_letters_of_every_kind(channel) -> None:
    """orders.dlq (through fanout dlx) receives one message rejected from
    `orders`, one expired in `orders.ttl`, one pushed out of `orders.capped`
    by its length limit; all published through exchange `shop`."""
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("orders.dlq", durable=True)
    channel.queue_bind("orders.dlq", "dlx")
    channel.exchange_declare("shop", "direct")
    for queue, key, extra in (("orders", "order", {}), ("orders.ttl", "ttl", {"x-message-ttl": 1}),
                              ("orders.capped", "capped", {"x-max-length": 1})):
        channel.queue_declare(queue, durable=True,
                              arguments={"x-dead-letter-exchange": "dlx", **extra})
        channel.queue_bind(queue, "shop", key)
    channel.confirm_delivery()

    def send(key: str, message_id: str, body: bytes) -> None:
        channel.basic_publish("shop", key, body, pika.BasicProperties(
            message_id=message_id, delivery_mode=2, content_type="application/json",
            headers={"trace": message_id}))

    send("order", "rejected-1", b'{"sku": "A-1", "qty": 2}')
    method, _props, _body = wait_get_noack(channel, "orders")
    channel.basic_reject(method.delivery_tag, requeue=False)
    send("ttl", "expired-1", b'{"sku": "B-2"}')
    assert wait_for(lambda: count(channel, "orders.dlq") == 2, 10)
    send("capped", "maxlen-1", b"\x00\x01 not text \xff")
    send("capped", "kept-1", b'{"sku": "C-3"}')
    assert wait_for(lambda: count(channel, "orders.dlq") == 3, 10)
    # The survivor leaves, so that a redriven message finds room again.
    assert wait_get_noack(channel, "orders.capped")[2] == b'{"sku": "C-3"}'


REJECTED = 22  # more than a console page of 20: paged forward
STREAM = "orders.dead"


def dead_letters_into_a_stream(channel) -> None:
    """`orders` and `orders.ttl` dead-letter through fanout `dlx` into the
    stream: bad-0 ... bad-21 rejected (offsets 0-21), late-1 expired (22)."""
    channel.exchange_declare("dlx", "fanout", durable=True)
    channel.queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    channel.queue_bind(STREAM, "dlx")
    channel.queue_declare("orders", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    channel.queue_declare("orders.ttl", durable=True,
                          arguments={"x-dead-letter-exchange": "dlx", "x-message-ttl": 1})
    channel.confirm_delivery()
    for n in range(REJECTED):
        channel.basic_publish("", "orders", b'{"n": %d}' % n,
                              pika.BasicProperties(message_id=f"bad-{n}", delivery_mode=2))
    for _ in range(REJECTED):
        method, _props, _body = wait_get(channel, "orders", auto_ack=False)
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert wait_for(lambda: count(channel, STREAM) == REJECTED, 10)
    channel.basic_publish("", "orders.ttl", b"late", pika.BasicProperties(message_id="late-1"))
    assert wait_for(lambda: count(channel, STREAM) == REJECTED + 1, 10)


def read_events(broker, expected: int, timeout: float = 10.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        files = sorted((broker.broker.dead_letter_log.directory).glob("*.ndjson"))
        lines = [line for path in files for line in path.read_text().splitlines()]
        if len(lines) >= expected or time.monotonic() > deadline:
            return [json.loads(line) for line in lines]
        time.sleep(0.05)
