"""Broker configuration: embedded defaults, overridden by a TOML file and flags."""

from __future__ import annotations

import re
import socket
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from policies.address_settings import AddressSettings, parse as parse_address_settings
from policies.model import PolicyError


class ConfigError(ValueError):
    """A config file or flag the broker cannot use; the message says why."""


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 5672
    # Management HTTP API (RabbitMQ's default port); 0 picks a free port,
    # a negative number turns it off.
    management_port: int = 15672
    # Prometheus metrics (RabbitMQ's rabbitmq_prometheus port), on the
    # management host; 0 picks a free port, a negative number turns it off.
    prometheus_port: int = 15692
    data_dir: str = "./amqp-data"
    log_level: str = "info"
    default_vhost: str = "/"
    default_user: str = "guest"
    default_pass: str = "guest"
    # RabbitMQ's loopback_users: these users may log in from this machine only.
    loopback_users: list = field(default_factory=lambda: ["guest"])
    # RabbitMQ's defaults (rabbit.app): frame_max 131072, channel_max 2047,
    # heartbeat 60 s.
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    # Seconds to wait for close-ok before dropping the socket.
    close_timeout: float = 3.0
    # RabbitMQ's handshake_timeout (ms): a client that has not finished
    # connection.open by then is dropped, however slowly it keeps talking.
    handshake_timeout: int = 10000
    # Seconds a refused login waits for its connection.close 403, so a
    # client cannot try passwords as fast as the network allows.
    login_failure_delay: float = 1.0
    # RabbitMQ's connection_max (-1: no limit) and max_message_size (bytes;
    # RabbitMQ caps it at 512 MiB).
    connection_max: int = -1
    max_message_size: int = 128 << 20
    # RabbitMQ's vm_memory_high_watermark: above this fraction of the
    # machine's RAM (or the absolute size, when set) publishers are blocked.
    vm_memory_high_watermark: float = 0.4
    vm_memory_high_watermark_absolute: int = 0
    # Above this fraction of the watermark queues page transient messages
    # too (RabbitMQ's key and default).
    vm_memory_high_watermark_paging_ratio: float = 0.5
    # amqps: a second listener, on when a certificate and key are given.
    # verify_peer asks for a client certificate signed by tls_cacertfile;
    # fail_if_no_peer_cert refuses clients without one.
    tls_port: int = 5671
    tls_certfile: str = ""
    tls_keyfile: str = ""
    tls_cacertfile: str = ""
    tls_verify_peer: bool = False
    tls_fail_if_no_peer_cert: bool = False
    # Period of the expiry reaper in ms (Artemis's message-expiry-scan-period;
    # -1 turns the reaper off and expired messages die at the head only).
    message_expiry_scan_period: int = 1000
    # Period in ms of the scan deleting unused auto-created DLQ./EXP. queues
    # (Artemis's address-queue-scan-period; -1: only when a consumer leaves).
    address_queue_scan_period: int = 30000
    # RabbitMQ's consumer_timeout (ms): a channel whose oldest
    # unacknowledged delivery is older is closed with 406 and its messages
    # go back to their queues.  -1 turns it off (a queue's
    # x-consumer-timeout argument or consumer-timeout policy still applies).
    consumer_timeout: int = 1_800_000
    # Artemis: write a message's delivery count before each delivery, so a
    # crash never hides a delivery (costs a flush per delivery); and how
    # many count records one message gets at most (-1: no limit).
    persist_delivery_count_before_delivery: bool = False
    max_redelivery_records: int = 10
    # Who wins for dead-letter-exchange, dead-letter-routing-key,
    # dead-letter-strategy and overflow when a queue argument and a policy
    # both set one: "argument" (RabbitMQ) or "policy" (central control).
    policy_precedence: str = "argument"
    # Below this many free bytes on the data directory's disk, publishers are
    # blocked (connection.blocked) until space returns (RabbitMQ's default).
    disk_free_limit: int = 50_000_000
    # The dead-letter log in <data_dir>/dead-letters: files roll at a size or
    # an age; the oldest go once all together pass the retention size; bodies
    # up to the limit are kept in full (larger ones as size and digest only).
    dead_letter_log_file_bytes: int = 64 << 20
    dead_letter_log_file_seconds: int = 3600
    dead_letter_log_retention_bytes: int = 1 << 30
    dead_letter_log_body_limit: int = 64 << 10
    # This broker's name in every dead-letter log event (field `node`), so an
    # audit over many brokers' logs can tell them apart.
    node_name: str = field(default_factory=socket.gethostname)
    # Past this many ready messages (or body bytes) in memory, a queue pages
    # further persistent messages to <data_dir>/paging and reads them back as
    # its head drains; above the paging ratio of the memory watermark every
    # message past paging_pressure_threshold is paged.
    paging_threshold: int = 65536
    paging_threshold_bytes: int = 64 << 20
    paging_pressure_threshold: int = 1024
    # [address-settings."pattern"] tables (policies/address_settings.py).
    address_settings: AddressSettings = field(default_factory=AddressSettings)
    # Clustering (docs/clustering.md): the etcd members' client URLs; none
    # makes this a single broker that needs no etcd.  Nodes of one cluster
    # share its name and its secret (which authenticates them to each
    # other), and each listens for its peers on cluster_port.
    cluster_etcd: list = field(default_factory=list)
    cluster_name: str = "amqp-server"
    cluster_port: int = 5679
    cluster_secret: str = ""
    # The host other nodes and forwarded clients reach this one at (default:
    # `host`).
    cluster_advertise_host: str = ""
    # Copies a confirm waits for at least, the leader's included; below it
    # publishers are held.  A follower behind by more than the lag timeout
    # (ms) leaves the in-sync set (never below min_in_sync).
    min_in_sync: int = 2
    cluster_lag_timeout: int = 2000
    # Seconds a node's etcd lease lives without renewal: a leader that
    # cannot renew it stops confirming and is replaced (etcd raises values
    # below 1.5 of its election timeout).
    cluster_lease_ttl: int = 4
    # TLS on the cluster port (optional: the secret authenticates members
    # either way): this node's certificate and key, and the CA that signed
    # the others' (each side then requires the other's certificate).
    cluster_tls_certfile: str = ""
    cluster_tls_keyfile: str = ""
    cluster_tls_cacertfile: str = ""

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides) -> "BrokerConfig":
        values: dict = {}
        if path is not None:
            try:
                with open(path, "rb") as handle:
                    raw = tomllib.load(handle)
            except FileNotFoundError as exc:
                raise ConfigError(f"config file not found: {path}") from exc
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
            values.update(_flatten(raw.get("broker", raw)))
            tables = raw.get("address-settings", raw.get("broker", {}).get("address-settings"))
            if tables is not None:
                try:
                    values["address_settings"] = parse_address_settings(tables)
                except PolicyError as exc:
                    raise ConfigError(f"config file {path}: {exc}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
        config = cls()
        for key, value in values.items():
            expected = type(getattr(config, key))
            if key in _SIZE_KEYS and isinstance(value, str):
                value = parse_size(key, value)
            if key == "cluster_etcd" and isinstance(value, str):  # a flag: URL,URL,...
                value = [url.strip() for url in value.split(",") if url.strip()]
            if expected is float and isinstance(value, int):
                value = float(value)
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise ConfigError(
                    f"config key {key!r} must be {expected.__name__}, got {value!r}")
            setattr(config, key, value)
        if not all(isinstance(name, str) for name in config.loopback_users):
            raise ConfigError("config key 'loopback_users' must be a list of user names, "
                              f"got {config.loopback_users!r}")
        if config.consumer_timeout < -1:
            raise ConfigError("config key 'consumer_timeout' must be -1 (off) or a number "
                              f"of milliseconds, got {config.consumer_timeout}")
        if config.max_redelivery_records < -1:
            raise ConfigError("config key 'max_redelivery_records' must be -1 or more, "
                              f"got {config.max_redelivery_records}")
        if not 0 < config.max_message_size <= _MAX_MESSAGE_SIZE_LIMIT:
            raise ConfigError("config key 'max_message_size' must be between 1 and "
                              f"{_MAX_MESSAGE_SIZE_LIMIT}, got {config.max_message_size}")
        if not 0 <= config.vm_memory_high_watermark <= 1:
            raise ConfigError("config key 'vm_memory_high_watermark' must be a fraction "
                              f"between 0 and 1, got {config.vm_memory_high_watermark}")
        for key in ("tls_verify_peer", "tls_fail_if_no_peer_cert"):
            if getattr(config, key) and not config.tls_cacertfile:
                raise ConfigError(f"config key {key!r} needs 'tls_cacertfile'")
        if bool(config.tls_certfile) != bool(config.tls_keyfile):
            raise ConfigError("config keys 'tls_certfile' and 'tls_keyfile' go together")
        _check_cluster(config)
        if config.policy_precedence not in ("argument", "policy"):
            raise ConfigError("config key 'policy_precedence' must be \"argument\" or "
                              f"\"policy\", got {config.policy_precedence!r}")
        return config


def _check_cluster(config: "BrokerConfig") -> None:
    if not all(isinstance(url, str) and url.strip() for url in config.cluster_etcd):
        raise ConfigError("config key 'cluster_etcd' must be a list of etcd URLs, got "
                          f"{config.cluster_etcd!r}")
    if not config.cluster_etcd:
        return
    if not config.cluster_secret:
        raise ConfigError("a cluster needs a shared secret: set 'cluster_secret' (the same "
                          "on every node)")
    if not 0 <= config.cluster_port <= 65535:
        raise ConfigError(f"config key 'cluster_port' must be 0-65535, got "
                          f"{config.cluster_port}")
    if config.min_in_sync < 1:
        raise ConfigError(f"config key 'min_in_sync' must be at least 1 (the leader), got "
                          f"{config.min_in_sync}")
    tls = (config.cluster_tls_certfile, config.cluster_tls_keyfile,
           config.cluster_tls_cacertfile)
    if any(tls) and not all(tls):
        raise ConfigError("config keys 'cluster_tls_certfile', 'cluster_tls_keyfile' and "
                          "'cluster_tls_cacertfile' go together")
    if config.cluster_lag_timeout <= 0 or config.cluster_lease_ttl <= 0:
        raise ConfigError("config keys 'cluster_lag_timeout' and 'cluster_lease_ttl' must "
                          "be positive")


_SIZE_KEYS = ("disk_free_limit", "vm_memory_high_watermark_absolute", "max_message_size",
              "paging_threshold_bytes")
_MAX_MESSAGE_SIZE_LIMIT = 512 << 20
# RabbitMQ's information units: kB/MB/GB are powers of ten, KiB/MiB/GiB of two.
_UNITS = {"": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(key: str, text: str) -> int:
    """'2GB', '512MiB' or '1000000' as bytes, as RabbitMQ reads sizes."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ConfigError(f"config key {key!r} must be a size such as 1000000, '512MiB' "
                          f"or '2GB', got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _flatten(raw: dict) -> dict:
    # Only scalar keys belong to the broker section; tables (such as the
    # address settings of later features) are read by their own owners.
    return {k.replace("-", "_"): v for k, v in raw.items() if not isinstance(v, dict)}
