"""What the pytest plugin's ini options and markers ask for: read, checked
and turned into specs (which broker config, which queues and policies)
before any broker starts.  A mistake fails with a message that names it:
pytest.UsageError for an ini option, the test's setup for a marker."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

SCOPES = ("function", "module", "session")

# (name, pytest's type for it, default, help)
INI_OPTIONS: tuple[tuple[str, Literal["string", "linelist"], Any, str], ...] = (
    ("amqp_broker_scope", "string", "function",
     "how long a test broker lives: function, module or session (shared brokers give "
     "each test a vhost of its own)"),
    ("amqp_config", "string", "",
     "TOML config file for test brokers (as amqp-server --config), relative to the ini file"),
    ("amqp_host", "string", "127.0.0.1", "address test brokers listen on"),
    ("amqp_port", "string", "0", "AMQP port of test brokers (0: a free one)"),
    ("amqp_management_port", "string", "0",
     "management HTTP API port of test brokers (0: a free one, -1: no API)"),
    ("amqp_queues", "linelist", [],
     "queues declared in every test's vhost, one a line: NAME [ARGUMENTS-AS-JSON]"),
    ("amqp_policies", "linelist", [],
     "policies set in every test's vhost, one a line: NAME PATTERN DEFINITION-AS-JSON"),
)

MARKERS = (
    "amqp_config(path=None, **keys): the test broker's config: a TOML file (relative to "
    "the test file) and/or config keys; such a test gets a broker for that config",
    "amqp_queue(name, arguments=None, durable=False): declare this queue in the test's "
    "vhost before the test",
    "amqp_policy(name, pattern, definition, priority=0, apply_to='all'): set this policy "
    "in the test's vhost before the test",
)


@dataclass(frozen=True)
class QueueSpec:
    name: str
    arguments: dict[str, Any] | None = None
    durable: bool = False


@dataclass(frozen=True)
class PolicySpec:
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "all"


@dataclass(frozen=True)
class BrokerSpec:
    """The config a test's broker starts with; tests with equal specs share
    a broker in the shared scopes."""
    config_file: Path | None = None
    keys: tuple[tuple[str, Any], ...] = ()

    @property
    def pool_key(self) -> tuple[str, str]:
        return (str(self.config_file), repr(self.keys))


@dataclass(frozen=True)
class Settings:
    """The ini options, read and checked once per session."""
    scope: str
    host: str
    port: int
    management_port: int
    broker: BrokerSpec
    queues: tuple[QueueSpec, ...] = ()
    policies: tuple[PolicySpec, ...] = ()


SETTINGS = pytest.StashKey[Settings]()


def read_settings(config: pytest.Config) -> Settings:
    """The ini options; pytest.UsageError names the one that is wrong."""
    scope = config.getini("amqp_broker_scope").strip() or "function"
    if scope not in SCOPES:
        raise pytest.UsageError(
            f"amqp_broker_scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    base = config.inipath.parent if config.inipath else config.rootpath
    config_file = config.getini("amqp_config").strip()
    return Settings(
        scope=scope,
        host=config.getini("amqp_host").strip() or "127.0.0.1",
        port=_ini_port(config, "amqp_port", 0),
        management_port=_ini_port(config, "amqp_management_port", -1),
        broker=BrokerSpec(base / config_file if config_file else None),
        queues=tuple(_queue_line(line) for line in config.getini("amqp_queues")),
        policies=tuple(_policy_line(line) for line in config.getini("amqp_policies")))


def _ini_port(config: pytest.Config, name: str, lowest: int) -> int:
    text = config.getini(name).strip() or "0"
    try:
        port = int(text)
    except ValueError:
        port = None
    if port is None or not lowest <= port <= 65535:
        raise pytest.UsageError(f"{name} must be a port number from {lowest} to 65535, "
                                f"got {text!r}")
    return port


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise pytest.UsageError(f"{where}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise pytest.UsageError(f"{where}: must be a JSON object, got {text!r}")
    return value


def _queue_line(line: str) -> QueueSpec:
    parts = line.split(None, 1)
    arguments = _json_object(parts[1], f"amqp_queues line {line!r}") if len(parts) > 1 \
        else None
    return QueueSpec(parts[0], arguments)


def _policy_line(line: str) -> PolicySpec:
    parts = line.split(None, 2)
    if len(parts) < 3:
        raise pytest.UsageError(f"amqp_policies line {line!r}: want NAME PATTERN "
                                "DEFINITION-AS-JSON")
    definition = _json_object(parts[2], f"amqp_policies line {line!r}")
    return PolicySpec(parts[0], parts[1], definition)


def _from_marker(kind: Callable[..., Any], marker: pytest.Mark) -> Any:
    return checked(f"@pytest.mark.{marker.name}",
                   lambda: kind(*marker.args, **marker.kwargs))


# The markers' signatures: a marker given wrong arguments fails its test
# with Python's own words ("amqp_queue() missing 1 required positional
# argument: 'name'").

def amqp_config(path: str | Path | None = None, **keys: Any) -> tuple[Any, dict[str, Any]]:
    return path, keys


def amqp_queue(name: str, arguments: dict[str, Any] | None = None,
               durable: bool = False) -> QueueSpec:
    return QueueSpec(name, arguments, durable)


def amqp_policy(name: str, pattern: str, definition: dict[str, Any], priority: int = 0,
                apply_to: str = "all") -> PolicySpec:
    return PolicySpec(name, pattern, definition, priority, apply_to)


def broker_spec(item: pytest.Item, settings: Settings) -> BrokerSpec:
    """The ini's broker config, or the closest `amqp_config` marker's."""
    marker = item.get_closest_marker("amqp_config")
    if marker is None:
        return settings.broker
    path, keys = _from_marker(amqp_config, marker)
    config_file = Path(item.path).parent / path if path is not None \
        else settings.broker.config_file
    return BrokerSpec(config_file, tuple(sorted(keys.items())))


def set_up_specs(item: pytest.Item, settings: Settings) -> tuple[list[QueueSpec],
                                                                    list[PolicySpec]]:
    """Queues and policies from the ini, then from markers, outermost first."""
    queues = [*settings.queues, *(_from_marker(amqp_queue, marker) for marker in
                                  reversed(list(item.iter_markers("amqp_queue"))))]
    policies = [*settings.policies, *(_from_marker(amqp_policy, marker) for marker in
                                      reversed(list(item.iter_markers("amqp_policy"))))]
    return queues, policies


def checked(what: str, action: Callable[[], Any]) -> Any:
    """`action()`, or the test fails at setup saying what could not be done
    and why (a PolicyError, the AMQPError a client would get, ...)."""
    try:
        return action()
    except Exception as exc:
        problem = f"{what}: {exc}"
    pytest.fail(problem, pytrace=False)  # outside the except: no chained traceback
