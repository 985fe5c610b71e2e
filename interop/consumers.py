"""Consumers that record what they get, and the publishes and settles the
dispatch tests make."""

from __future__ import annotations

from .waiting import wait_for


class Recorder:
    """A consumer on its own channel that records what it gets."""

    def __init__(self, conn, queue: str, name: str, prefetch: int, **arguments) -> None:
        self.name = name
        self.channel = conn.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.got: list[tuple[str, bool]] = []
        self.tags: list[int] = []
        self.ctag = self.channel.basic_consume(queue, self._on, arguments=arguments or None)

    def _on(self, channel, method, properties, body) -> None:
        self.got.append((body.decode(), method.redelivered))
        self.tags.append(method.delivery_tag)

    def ack_all(self) -> None:
        if self.tags:
            self.channel.basic_ack(self.tags[-1], multiple=True)
            self.tags.clear()


def publish(conn, queue: str, bodies) -> None:
    channel = conn.channel()
    for body in bodies:
        channel.basic_publish("", queue, body.encode())
    channel.close()


def settle(conn, *recorders, count: int | None = None) -> None:
    """Let deliveries arrive (both brokers deliver asynchronously): until
    the recorders hold `count` messages between them (at most 5 s), or a
    moment when no count is known."""
    if count is None:
        conn.process_data_events(time_limit=0.3)
        return
    wait_for(lambda: sum(len(r.got) for r in recorders) >= count,
             step=lambda: conn.process_data_events(time_limit=0.05))
    conn.process_data_events(time_limit=0.1)  # and nothing more comes
