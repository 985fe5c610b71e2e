"""The broker as one RabbitMQ node: the object /api/nodes lists, with the
keys monitors read (memory and disk against their limits and alarms, file
descriptors, sockets, uptime), in RabbitMQ's names and units.  Erlang's own
figures (processes, reductions, mnesia) have no counterpart and are left out."""

from __future__ import annotations

import os
import resource
import sys
import time

from dlx.semantics import is_4x

from .. import __version__
from ..broker import resources
from ..broker.delayed_exchange import DECLARABLE_TYPES, DECLARABLE_TYPES_4_3
from ..broker.modulus_hash import MODULUS_HASH_TYPE
from .shapes import NODE

# When this module was first imported: the broker process's start, close enough.
_STARTED = time.monotonic()

_EXCHANGE_DESCRIPTIONS = {
    "direct": "AMQP direct exchange, as per the AMQP specification",
    "fanout": "AMQP fanout exchange, as per the AMQP specification",
    "headers": "AMQP headers exchange, as per the AMQP specification",
    "topic": "AMQP topic exchange, as per the AMQP specification",
    "x-delayed-message": "Delayed Message Exchange.",  # the plugin's description/0
}
# rabbit_exchange_type_modulus_hash:description/0
_EXCHANGE_DESCRIPTIONS[MODULUS_HASH_TYPE] = "Modulus Hashing Exchange"


def _declarable(broker) -> tuple[str, ...]:
    """The exchange types some virtual host takes: x-modulus-hash only
    where one follows RabbitMQ 4.3's semantics."""
    if any(is_4x(vhost.semantics) for vhost in broker.vhosts.values()):
        return tuple(DECLARABLE_TYPES_4_3)
    return tuple(DECLARABLE_TYPES)


_AUTH_MECHANISMS = (("AMQPLAIN", "QPid AMQPLAIN mechanism"),
                    ("PLAIN", "SASL PLAIN authentication mechanism"))


def open_fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def max_fds() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def uptime_ms() -> int:
    return int((time.monotonic() - _STARTED) * 1000)


def node_json(broker, listeners: list[dict]) -> dict:
    config = broker.config
    disk_free = resources.disk_free(config.data_dir)
    management = [entry for entry in listeners if entry["protocol"] == "http"]
    return {
        "name": config.node_name if broker.cluster is not None else NODE,
        "type": "disc",
        "running": True,
        "os_pid": str(os.getpid()),
        "partitions": [],
        "cluster_links": [],
        "processors": os.cpu_count() or 1,
        "uptime": uptime_ms(),
        "rates_mode": "none",
        "mem_used": resources.resident_memory(),
        "mem_limit": broker.memory_limit(),
        "mem_alarm": "memory" in broker.alarms,
        "mem_calculation_strategy": "rss",
        "disk_free": disk_free if disk_free is not None else 0,
        "disk_free_limit": config.disk_free_limit,
        "disk_free_alarm": "disk" in broker.alarms,
        "fd_used": open_fds() or 0,
        "fd_total": max_fds(),
        "sockets_used": len(broker.connections),
        "sockets_total": max_fds(),
        "db_dir": os.path.abspath(config.data_dir),
        "config_files": [],
        "log_files": ["<stdout>"],
        "enabled_plugins": [],
        "exchange_types": [{"name": name, "description": _EXCHANGE_DESCRIPTIONS.get(name, ""),
                            "enabled": True} for name in _declarable(broker)],
        "auth_mechanisms": [{"name": name, "description": text, "enabled": True}
                            for name, text in _AUTH_MECHANISMS],
        "contexts": [{"description": "RabbitMQ Management", "path": "/",
                      "port": str(entry["port"])} for entry in management],
        "applications": [{"name": "amqp_server", "description": "amqp-server",
                          "version": __version__}],
        "python_version": sys.version.split()[0],
    }
