"""Brokers opened on a data directory in-process, restarted as after a
crash, and the segment files they leave."""

from __future__ import annotations

import weakref

from amqp_server.broker.broker import Broker
from amqp_server.config import BrokerConfig

# The broker last opened on each data directory by these tests.
_opened: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def open_broker(path, **config) -> tuple[Broker, list[str]]:
    """A broker on `path`.  Opening another one where a broker is open
    stands for a restart after a crash: the old one's lock goes first, as
    the kernel drops the lock of a killed broker."""
    crashed = _opened.pop(str(path), None)
    if crashed is not None:
        crashed.close_data_dir()
    broker = Broker(BrokerConfig(data_dir=str(path), **config))
    problems = broker.open_data_dir()
    _opened[str(path)] = broker
    return broker, problems


def segment_files(path) -> list:
    return sorted((path / "messages").glob("*.seg"))


# Messages kept in memory per queue before paging, in the paging tests.
PAGING_THRESHOLD = 10


def open_paging_broker(path, **config) -> Broker:
    """A broker on `path` that pages past a few messages per queue."""
    config.setdefault("paging_threshold", PAGING_THRESHOLD)
    return open_broker(path, **config)[0]
