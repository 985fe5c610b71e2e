"""Reading a queue without consuming it: its depth and its ready messages as
a consumer would receive them next (the workbench, the embedding API).

Reading changes nothing: a peeked message keeps its place, its redelivered
flag and its delivery counts, and its properties are decoded into a copy,
never into the message the broker will deliver.  These functions read the
broker's own objects, so they run on the broker's event loop thread.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlx.deaths import Death, history_from_headers

from ..wire.properties import decode_properties
from .message import HEADER_PREFIX

if TYPE_CHECKING:
    from .broker import Broker
    from .queue import Queue
    from .vhost import VirtualHost


@dataclass(frozen=True)
class PeekedMessage:
    """One ready message as a consumer would receive it next."""

    body: bytes
    exchange: str
    routing_key: str
    # The basic properties that are set, under pika's names (content_type,
    # headers, delivery_mode, ...); headers are a dict.
    properties: dict[str, Any]
    redelivered: bool
    # The parsed `x-death` header, most recent death first (empty for a
    # message that never died).
    deaths: tuple[Death, ...]

    @property
    def headers(self) -> dict[str, Any]:
        return self.properties.get("headers") or {}


def find_vhost(broker: Broker, name: str) -> VirtualHost:
    host = broker.vhosts.get(name)
    if host is None:
        raise KeyError(f"no vhost '{name}'")
    return host


def find_queue(broker: Broker, name: str, vhost: str = "/") -> Queue:
    queue = find_vhost(broker, vhost).queues.get(name)
    if queue is None:
        raise KeyError(f"no queue '{name}' in vhost '{vhost}'")
    return queue


def queue_depth(broker: Broker, name: str, vhost: str = "/") -> int:
    """Ready messages, as queue.declare-ok counts them (in memory and paged;
    not those delivered and unacknowledged, nor those waiting out a
    redelivery delay)."""
    return find_queue(broker, name, vhost).message_count


def peek(broker: Broker, name: str, vhost: str = "/",
         limit: int | None = None) -> list[PeekedMessage]:
    """The ready messages held in memory, in the order they would be
    delivered, at most `limit`.  Messages a long queue has paged to disk
    (past `paging_threshold`) are not read back for this."""
    # Iterating `ready` walks it in delivery order, whatever the queue's
    # ordering part (FIFO, or one FIFO per priority).
    ready = find_queue(broker, name, vhost).ready
    stop = None if limit is None else max(0, limit)
    return [_peeked(entry) for entry in itertools.islice(ready, stop)]


def _peeked(entry) -> PeekedMessage:
    message = entry.message
    properties = decode_properties(message.header[HEADER_PREFIX:]).as_dict()
    headers = properties.get("headers")
    return PeekedMessage(
        body=bytes(message.body), exchange=message.exchange,
        routing_key=message.routing_key, properties=properties,
        redelivered=entry.redelivered, deaths=history_from_headers(headers).deaths)
