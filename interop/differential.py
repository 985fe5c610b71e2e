"""One scenario run on this broker and on the reference RabbitMQ, and what each
observed compared."""

from __future__ import annotations

import time
import uuid

import pika

from .rawclient import RawClient

LAST_DEATH = ("x-last-death-reason", "x-last-death-queue", "x-last-death-exchange")


def normalize(value, kind: str, prefix: str):
    if kind == "timestamp":
        return ("timestamp", "<time>")
    if kind == "table":
        return ("table", {key: normalize(value[key], value.type_of(key), prefix)
                          for key in value})
    if kind == "array":
        types = getattr(value, "types", [])
        return ("array", [normalize(v, t, prefix) for v, t in zip(value, types)])
    if isinstance(value, str):
        return (kind, value.replace(prefix, "<p>"))
    return (kind, value)


def observe(raw: RawClient, queue: str, prefix: str):
    """What a consumer sees of the head of `queue`, or None when empty."""
    got = raw.get(queue)
    if got is None:
        return None
    ok, props, body = got
    headers = props.headers
    seen_headers = None
    if headers is not None:
        for key in LAST_DEATH:
            headers.pop(key, None)
        seen_headers = normalize(headers, "table", prefix)[1]
    other = {k: v for k, v in props.as_dict().items() if k != "headers"}
    return {"exchange": ok.exchange.replace(prefix, "<p>"),
            "routing_key": ok.routing_key.replace(prefix, "<p>"),
            "redelivered": ok.redelivered, "properties": other,
            "headers": seen_headers, "body": body}


def wait_for(raw: RawClient, queue: str, prefix: str, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while True:
        seen = observe(raw, queue, prefix)
        if seen is not None or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)



class Scenario:
    """One run of a scenario on one broker: pika for actions, raw reads."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = f"dlx-{uuid.uuid4().hex[:8]}-"
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.raw = RawClient.for_url(url)
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def name(self, short: str) -> str:
        return self.prefix + short

    def queue(self, short: str, **arguments) -> str:
        name = self.name(short)
        args = {k.replace("_", "-"): v for k, v in arguments.items()}
        for key in ("x-dead-letter-exchange",):
            if key in args and args[key] not in ("",) and not args[key].startswith("amq."):
                args[key] = self.name(args[key])
        if "x-dead-letter-routing-key" in args and args.get("x-dead-letter-exchange") == "":
            args["x-dead-letter-routing-key"] = self.name(args["x-dead-letter-routing-key"])
        quorum = args.get("x-queue-type") == "quorum"
        self.ch.queue_declare(name, durable=quorum, arguments=args)
        self.queues.append(name)
        return name

    def exchange(self, short: str, kind: str = "fanout") -> str:
        name = self.name(short)
        self.ch.exchange_declare(name, kind)
        self.exchanges.append(name)
        return name

    def fanout_dlq(self) -> None:
        """The usual target: fanout exchange `dlx` into queue `dlq`."""
        self.exchange("dlx")
        self.queue("dlq")
        self.bind("dlq", "dlx")

    def bind(self, queue: str, exchange: str, key: str = "", arguments=None) -> None:
        self.ch.queue_bind(self.name(queue), self.name(exchange), key, arguments=arguments)

    def publish(self, exchange: str, key: str, body: bytes = b"m", **props) -> None:
        self.ch.basic_publish(exchange, key, body, pika.BasicProperties(**props))

    def get(self, queue: str):
        """basic.get, polling briefly: RabbitMQ moves dead letters and
        quorum returns asynchronously."""
        deadline = time.monotonic() + 5.0
        while True:
            method, props, body = self.ch.basic_get(self.name(queue))
            if method is not None or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert method is not None, f"nothing in {queue}"
        return method, props, body

    def reject(self, queue: str, requeue: bool = False, nack: bool = False) -> None:
        method, _, _ = self.get(queue)
        if nack:
            self.ch.basic_nack(method.delivery_tag, requeue=requeue)
        else:
            self.ch.basic_reject(method.delivery_tag, requeue=requeue)

    def look(self, queue: str, timeout: float = 5.0):
        return wait_for(self.raw, self.name(queue), self.prefix, timeout)

    def empty(self, queue: str, settle: float = 0.3) -> bool:
        time.sleep(settle)
        return observe(self.raw, self.name(queue), self.prefix) is None

    def close(self) -> None:
        ch = self.conn.channel() if self.conn.is_open else None
        for name in self.queues:
            if ch:
                ch.queue_delete(name)
        for name in self.exchanges:
            if ch:
                ch.exchange_delete(name)
        if self.conn.is_open:
            self.conn.close()
        self.raw.close()


def both(broker, rabbitmq_url, scenario):
    results = []
    for url in (broker.url, rabbitmq_url):
        run = Scenario(url)
        try:
            results.append(scenario(run))
        finally:
            run.close()
    return results


def same(broker, rabbitmq_url, scenario):
    ours, theirs = both(broker, rabbitmq_url, scenario)
    assert ours == theirs
    return ours
