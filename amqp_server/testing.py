"""Kept for the tests written before the public embedding API:
`BrokerThread` is `amqp_server.run_in_thread()`'s broker (`embed_thread.py`)."""

from .embed_thread import BrokerThread

__all__ = ["BrokerThread"]
