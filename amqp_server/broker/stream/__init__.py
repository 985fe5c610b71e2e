"""Streams: RabbitMQ's append-only queue type, as AMQP 0-9-1 clients use it
(docs/streams.md).  The log is storage/stream_log.py; the rules (max-age,
offset specs, retention) are policies/stream_rules.py."""

from .consuming import check_stream_consume
from .queue import StreamQueue

__all__ = ["StreamQueue", "check_stream_consume"]
