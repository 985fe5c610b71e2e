"""Messages, clocks and consumers for the queue tests that run without any
socket: a message as a channel would have built it, routed into a virtual
host, a clock that moves only when told, a consumer that takes everything."""

from __future__ import annotations

from amqp_server.broker.message import Message
from amqp_server.broker.vhost import VirtualHost
from amqp_server.wire.frames import content_header
from amqp_server.wire.properties import Properties, encode_properties


def message(key: str, body: bytes = b"x", exchange: str = "", **props) -> Message:
    header = content_header(len(body), encode_properties(Properties(**props)))
    msg = Message.to(exchange, key, header, body)
    msg.inspect()
    return msg


def publish(vhost: VirtualHost, msg: Message) -> list:
    queues = vhost.route(vhost.exchanges[msg.exchange], msg.routing_keys, msg)
    return [queue.enqueue(msg) for queue in queues]


class FakeClock:
    """Wall-clock milliseconds that move only when a test says so."""

    def __init__(self, now: float = 1_700_000_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> float:
        self.now += ms
        return self.now


class TakeAll:
    """A consumer with room for everything; keeps the bodies it gets."""

    priority = 0

    def __init__(self):
        self.got = []

    def can_take(self):
        return True

    def room(self):
        return 1000

    def output_room(self):
        return 1 << 20

    def take(self, queue, entry):
        self.got.append(entry.message.body)

    def take_many(self, queue, entries):
        self.got.extend(entry.message.body for entry in entries)


def persistent(key: str, body: bytes = b"x", **props):
    return message(key, body, delivery_mode=2, **props)
