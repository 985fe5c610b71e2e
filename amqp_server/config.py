"""Broker configuration: embedded defaults, overridden by a TOML file and flags."""

from __future__ import annotations

import re
import socket
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dlx.alerts import Thresholds
from dlx.semantics import DEFAULT as DEFAULT_SEMANTICS, MODES as SEMANTICS_MODES
from policies.address_settings import AddressSettings, parse as parse_address_settings
from policies.deprecated_features import permit_problem
from policies.model import PolicyError
from policies.plain_words import closest, quoted as _quoted, shown as _shown


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
    # The most seconds a closing connection waits for its client (close-ok
    # to the broker's connection.close, or the end of the socket after the
    # broker's close-ok): RabbitMQ's 30 (rabbit_reader's ?CLOSING_TIMEOUT).
    # A negotiated heartbeat below it is the bound instead, and 3 s before
    # tune-ok, as RabbitMQ's.
    close_timeout: float = 30.0
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
    # Which RabbitMQ's behaviour queues and dead-lettering follow: "3.13"
    # or "4.3" (docs/choosing-semantics.md); a virtual host may choose its
    # own when it is created.
    rabbitmq_semantics: str = DEFAULT_SEMANTICS
    # The deprecated features RabbitMQ 4.3 denies by default that a 4.3
    # virtual host permits again (rabbitmq.conf's
    # deprecated_features.permit.<name> = true): "transient_nonexcl_queues",
    # "global_qos", "queue_master_locator".
    permit_deprecated_features: list = field(default_factory=list)
    # Below this many free bytes on the data directory's disk, publishers are
    # blocked (connection.blocked) until space returns (RabbitMQ's default).
    disk_free_limit: int = 50_000_000
    # Credit flow (broker/queue/credit.py): a queue with consumers may grow
    # by this many ready messages (or body bytes) past the fewest it held
    # since they came before the connections publishing into it stop being
    # read ('flow'); they are read again once it has drained back by half.
    # 0 turns that limit off.
    credit_flow_backlog: int = 20_000
    credit_flow_backlog_bytes: int = 64 << 20
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
    # The dead-letter alerts the broker evaluates itself for the web console
    # (dlx/alerts.py), with the thresholds of the shipped Prometheus rules
    # (docs/prometheus/dead-letter-alerts.yml): growth of the dead letters
    # waiting over a window (seconds), age of the oldest one (seconds), rate
    # of arrival (per second over a window), at-least-once dead letters held
    # for (seconds); evaluated every interval (seconds).
    dead_letter_alert_growth: int = 100
    dead_letter_alert_growth_window: float = 900.0
    dead_letter_alert_max_age: float = 86400.0
    dead_letter_alert_rate: float = 10.0
    dead_letter_alert_rate_window: float = 300.0
    dead_letter_alert_held_for: float = 600.0
    dead_letter_alert_interval: float = 15.0
    # Where retention archives dead letters (x-dead-letter-retention,
    # docs/dead-letter-queues.md); empty: <data_dir>/dead-letter-archive,
    # where the audit finds them.
    dead_letter_archive_dir: str = ""
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

    def alert_thresholds(self) -> Thresholds:
        return Thresholds(self.dead_letter_alert_growth, self.dead_letter_alert_growth_window,
                          self.dead_letter_alert_max_age, self.dead_letter_alert_rate,
                          self.dead_letter_alert_rate_window, self.dead_letter_alert_held_for)

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> BrokerConfig:
        """Embedded defaults, then the TOML file at `path`, then `overrides`
        (flags and keyword arguments, None meaning not given).  A key is
        spelled with `_` or `-`; ConfigError says what is wrong in plain
        words, with a "did you mean" for a near miss."""
        # field -> (value, the key as written, where: the file, or None for a flag)
        values: dict[str, tuple[Any, str, str | None]] = {}
        address_settings = None
        if path is not None:
            raw = _read(path)
            where = f"config file {path}"
            for table in raw:
                if isinstance(raw[table], dict) and table not in _TABLES:
                    raise ConfigError(f"{where}: unknown table [{table}]"
                                      f"{_did_you_mean(table, _TABLES, '[{}]')}")
            broker = raw.get("broker", {})
            for section in (raw, broker):
                for key, value in section.items():
                    if not isinstance(value, dict):
                        values[_field_name(key, where)] = (value, key, where)
            tables = raw.get("address-settings", broker.get("address-settings"))
            if tables is not None:
                try:
                    address_settings = parse_address_settings(tables)
                except PolicyError as exc:
                    raise ConfigError(f"{where}: {exc.plain}") from None
        for key, value in overrides.items():
            if value is not None:
                values[_field_name(key, None)] = (value, key, None)
        config = cls()
        for name, (value, written, where_set) in values.items():
            try:
                value = _checked(name, written, value, type(getattr(config, name)))
            except ConfigError as exc:
                raise ConfigError(f"{where_set}: {exc}" if where_set else str(exc)) from None
            setattr(config, name, value)
        if address_settings is not None:
            config.address_settings = address_settings
        config._check_together()
        return config

    def _check_together(self) -> None:
        """What a key's type alone does not say, or what two keys say together."""
        if not all(isinstance(name, str) for name in self.loopback_users):
            raise ConfigError("loopback_users must be a list of user names, "
                              f"got {_shown(self.loopback_users)}")
        if self.consumer_timeout < -1:
            raise ConfigError("consumer_timeout must be -1 (off) or a number of "
                              f"milliseconds, got {self.consumer_timeout}")
        if self.max_redelivery_records < -1:
            raise ConfigError("max_redelivery_records must be -1 (no limit) or more, "
                              f"got {self.max_redelivery_records}")
        if not 0 < self.max_message_size <= _MAX_MESSAGE_SIZE_LIMIT:
            raise ConfigError("max_message_size must be between 1 and "
                              f"{_MAX_MESSAGE_SIZE_LIMIT}, got {self.max_message_size}")
        for key in ("credit_flow_backlog", "credit_flow_backlog_bytes"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key} must be 0 (off) or more, got {getattr(self, key)}")
        if not 0 <= self.vm_memory_high_watermark <= 1:
            raise ConfigError("vm_memory_high_watermark must be a fraction between 0 and 1, "
                              f"got {self.vm_memory_high_watermark}")
        for key in ("tls_verify_peer", "tls_fail_if_no_peer_cert"):
            if getattr(self, key) and not self.tls_cacertfile:
                raise ConfigError(f"{key} needs tls_cacertfile (the CA that signs client "
                                  "certificates)")
        if bool(self.tls_certfile) != bool(self.tls_keyfile):
            raise ConfigError("tls_certfile and tls_keyfile go together: give both or neither")
        problem = permit_problem(self.permit_deprecated_features)
        if problem is not None:
            raise ConfigError(problem)
        _check_cluster(self)
        for key in _ALERT_KEYS:
            if getattr(self, key) < 0 or (key == "dead_letter_alert_interval"
                                          and getattr(self, key) <= 0):
                raise ConfigError(f"{key} must be a positive number, got {getattr(self, key)}")
        self.log_level = self.log_level.lower()  # as logging takes it: WARNING or warning
        for key, choices in _CHOICES.items():
            value = getattr(self, key)
            if value not in choices:
                raise ConfigError(f"{key} must be one of {_quoted(choices)}, got {_shown(value)}"
                                  f"{_did_you_mean(str(value), choices)}")


def _read(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"config file {path} is a directory") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def _field_name(key: str, where: str | None) -> str:
    """The BrokerConfig field a key names (`-` or `_`), or ConfigError."""
    name = key.replace("-", "_")
    if name in _FIELDS:
        return name
    spelled = [f.replace("_", "-") for f in _FIELDS] if "-" in key else list(_FIELDS)
    hint = _did_you_mean(key, spelled)
    if where is None:
        raise ConfigError(f'unknown config key "{key}"{hint}')
    raise ConfigError(f'{where}: unknown key "{key}"{hint}')


def _checked(name: str, written: str, value: Any, expected: type) -> Any:
    if name in _SIZE_KEYS and isinstance(value, str):
        value = parse_size(written, value)
    if name == "cluster_etcd" and isinstance(value, str):  # a flag: URL,URL,...
        value = [url.strip() for url in value.split(",") if url.strip()]
    if name == "rabbitmq_semantics" and isinstance(value, float):
        # TOML reads `rabbitmq_semantics = 4.3`, unquoted, as a number.
        value = repr(value)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(f"{written} must be {_KINDS.get(expected, expected.__name__)}, "
                          f"got {_shown(value)}")
    return value


def _did_you_mean(word: str, choices: Iterable[str], form: str = '"{}"') -> str:
    match = closest(word, choices)
    return f"; did you mean {form.format(match)}?" if match is not None else ""


def _check_cluster(config: BrokerConfig) -> None:
    if not all(isinstance(url, str) and url.strip() for url in config.cluster_etcd):
        raise ConfigError("cluster_etcd must be a list of etcd URLs (a flag: URL,URL,...), "
                          f"got {_shown(config.cluster_etcd)}")
    if not config.cluster_etcd:
        return
    if not config.cluster_secret:
        raise ConfigError("a cluster needs a shared secret: set cluster_secret in the config "
                          "file or AMQP_SERVER_CLUSTER_SECRET, the same on every node")
    if not 0 <= config.cluster_port <= 65535:
        raise ConfigError(f"cluster_port must be 0-65535, got {config.cluster_port}")
    if config.min_in_sync < 1:
        raise ConfigError(f"min_in_sync must be at least 1 (the leader), got "
                          f"{config.min_in_sync}")
    tls = (config.cluster_tls_certfile, config.cluster_tls_keyfile,
           config.cluster_tls_cacertfile)
    if any(tls) and not all(tls):
        raise ConfigError("cluster_tls_certfile, cluster_tls_keyfile and "
                          "cluster_tls_cacertfile go together: give all three or none")
    if config.cluster_lag_timeout <= 0 or config.cluster_lease_ttl <= 0:
        raise ConfigError("cluster_lag_timeout and cluster_lease_ttl must be positive")


_ALERT_KEYS = ("dead_letter_alert_growth", "dead_letter_alert_growth_window",
               "dead_letter_alert_max_age", "dead_letter_alert_rate",
               "dead_letter_alert_rate_window", "dead_letter_alert_held_for",
               "dead_letter_alert_interval")
_SIZE_KEYS = ("disk_free_limit", "vm_memory_high_watermark_absolute", "max_message_size",
              "paging_threshold_bytes", "credit_flow_backlog_bytes")
_MAX_MESSAGE_SIZE_LIMIT = 512 << 20
# RabbitMQ's information units: kB/MB/GB are powers of ten, KiB/MiB/GiB of two.
_UNITS = {"": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(key: str, text: str) -> int:
    """'2GB', '512MiB' or '1000000' as bytes, as RabbitMQ reads sizes."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if match is None or match.group(2).lower() not in _UNITS:
        unit = match.group(2) if match is not None else ""
        hint = _did_you_mean(unit, _UNIT_NAMES) if unit else ""
        raise ConfigError(f'{key} must be a size such as 1000000, "512MiB" or "2GB", '
                          f"got {_shown(text)}{hint}")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


_FIELDS = {f.name for f in fields(BrokerConfig)}
# The tables a config file may hold: scalar keys at the top or in [broker],
# and the Artemis address settings.
_TABLES = ("broker", "address-settings")
_KINDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false",
          list: "a list"}
_CHOICES = {"policy_precedence": ("argument", "policy"),
            "rabbitmq_semantics": SEMANTICS_MODES,
            "log_level": ("debug", "info", "warning", "error", "critical")}
_UNIT_NAMES = ("kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
