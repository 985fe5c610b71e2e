"""An AMQP 0-9-1 broker whose reason to exist is messages that cannot be delivered.

Embedding it (`serve`, `run_in_thread`) imports the broker on first use, so
that `import amqp_server` stays cheap for the tools that only need a part.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "serve": "embed",
    "EmbeddedBroker": "embed",
    "run_in_thread": "embed_thread",
    "BrokerThread": "embed_thread",
    "PeekedMessage": "inspection",
    "BrokerConfig": "config",
    "ConfigError": "config",
    "ListenError": "server",
    "DataDirError": "storage.lock",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    from .config import BrokerConfig, ConfigError
    from .embed import EmbeddedBroker, serve
    from .embed_thread import BrokerThread, run_in_thread
    from .inspection import PeekedMessage
    from .server import ListenError
    from .storage.lock import DataDirError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amqp_server' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
