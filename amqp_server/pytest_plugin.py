"""pytest plugin: a real AMQP 0-9-1 broker in the test process, on a free
loopback port, for every test that asks for `amqp_broker` or `amqp_url`.

Registered through the `pytest11` entry point (name `amqp_server`), so
installing the package is all it takes; `-p no:amqp_server` turns it off.
It imports the broker only when a test first asks for it, and needs no
client library itself.

How long a broker lives is the ini option `amqp_broker_scope`: `function`
(the default: a new broker for every test, its vhost `/`), `module` or
`session` (one broker shared, each test in a vhost of its own, created before
it and deleted after it, so a queue declared in one test is never seen in
the next).  A test whose `amqp_config` differs from the ini's gets a broker
for that config, shared in the same way.  Queues and policies come from ini
options and markers and are set up in the test's vhost before it runs.

At teardown, connections the test left open are closed and reported with a
`LeftoverConnectionWarning`, so a forgotten connection neither hangs the
session nor leaks into the next test.
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .pytest_settings import (
    INI_OPTIONS,
    MARKERS,
    SETTINGS,
    BrokerSpec,
    PolicySpec,
    QueueSpec,
    Settings,
    broker_spec,
    checked,
    read_settings,
    set_up_specs,
)

if TYPE_CHECKING:
    from .embed_thread import BrokerThread
    from .inspection import PeekedMessage


class LeftoverConnectionWarning(UserWarning):
    """A test ended with AMQP connections open; the fixture closed them."""


def pytest_addoption(parser: pytest.Parser) -> None:
    for name, kind, default, help_text in INI_OPTIONS:
        parser.addini(name, help_text, type=kind, default=default)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    config.stash[SETTINGS] = read_settings(config)


# ---- brokers, per scope -------------------------------------------------

class BrokerPool:
    """The brokers of one scope (a session, a module, a test): one per
    distinct config, started on first use, stopped by `close()`.  A broker
    that fails to start is not tried again in the same scope."""

    def __init__(self) -> None:
        self._running: dict[tuple[str, str], BrokerThread] = {}
        self._failed: dict[tuple[str, str], str] = {}
        self._vhost_numbers = itertools.count(1)

    def get(self, spec: BrokerSpec, settings: Settings,
            data_dir: Callable[[], Path]) -> BrokerThread:
        key = spec.pool_key
        running = self._running.get(key)
        if running is not None:
            return running
        if key not in self._failed:
            try:
                running = self._running[key] = _start(spec, settings, data_dir())
                return running
            except Exception as exc:  # ListenError, DataDirError, ConfigError
                self._failed[key] = f"amqp_broker: the broker could not start: {exc}"
        pytest.fail(self._failed[key], pytrace=False)

    def vhost_name(self, test_name: str) -> str:
        """Unique within the broker, readable in the management API; only
        characters every client's URL parsing keeps as they are."""
        return f"test-{next(self._vhost_numbers)}-" + \
            re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)[:100]

    def close(self) -> None:
        running, self._running = list(self._running.values()), {}
        for thread in running:
            thread.stop()


def _start(spec: BrokerSpec, settings: Settings, data_dir: Path) -> BrokerThread:
    from .embed import load_config
    from .embed_thread import BrokerThread

    config = load_config(spec.config_file, **dict(spec.keys))
    return BrokerThread(config, data_dir, host=settings.host, port=settings.port,
                        management_port=settings.management_port).start()


@pytest.fixture(scope="session")
def _amqp_session_brokers() -> Iterator[BrokerPool]:
    pool = BrokerPool()
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def _amqp_module_brokers() -> Iterator[BrokerPool]:
    pool = BrokerPool()
    yield pool
    pool.close()


# ---- what a test gets -------------------------------------------------

@dataclass
class BrokerFixture:
    """A running broker and the vhost this test has to itself: `/` of a
    broker of its own (scope `function`), or a fresh vhost of a shared one."""

    thread: BrokerThread
    vhost: str
    shared: bool
    _pool: BrokerPool = field(repr=False)
    # (file, line) of the test, where a leftover-connection warning points
    _test_location: tuple[str, int] = field(default=("", 0), repr=False)
    _vhost_added: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        """amqp:// URL of the test's vhost, as guest."""
        return self.thread.url_for(self.vhost)

    @property
    def host(self) -> str:
        return self.thread.host

    @property
    def port(self) -> int:
        return self.thread.port

    @property
    def management_url(self) -> str:
        """http://host:port of the management API (use `vhost` in its paths)."""
        return self.thread.management_url

    @property
    def data_dir(self) -> str:
        return self.thread.data_dir

    def queue_depth(self, queue: str) -> int:
        """Ready messages in a queue of the test's vhost."""
        return self.thread.queue_depth(queue, self.vhost)

    def peek(self, queue: str, limit: int | None = None) -> list[PeekedMessage]:
        """The messages waiting in a queue of the test's vhost (a dead-letter
        queue, say), head first, without consuming them: `.body`,
        `.properties`, `.headers` and `.deaths` (the parsed `x-death`)."""
        return self.thread.peek(queue, self.vhost, limit)

    def open_connections(self) -> int:
        """Client connections open on the test's vhost (a broker of its
        own: on any vhost)."""
        return self.thread.open_connections(self.vhost if self.shared else None)

    def _set_up(self, queues: list[QueueSpec], policies: list[PolicySpec]) -> None:
        if self.shared:
            self.thread.add_vhost(self.vhost)
            self._vhost_added = True
        # Policies first: a queue declared after them starts with them.
        for policy in policies:
            checked(f"amqp_broker: cannot set up policy {policy.name!r}",
                    lambda policy=policy: self.thread.set_policy(
                        policy.name, policy.pattern, policy.definition, vhost=self.vhost,
                        priority=policy.priority, apply_to=policy.apply_to))
        for queue in queues:
            checked(f"amqp_broker: cannot set up queue {queue.name!r}",
                    lambda queue=queue: self.thread.declare_queue(
                        queue.name, queue.arguments, vhost=self.vhost, durable=queue.durable))

    def _tear_down(self) -> None:
        """Close what the test left open (and say so), then drop its vhost
        or stop its broker."""
        try:
            left = self.thread.close_connections(
                self.vhost if self.shared else None,
                "closed by the amqp_broker fixture: the test left it open")
            if left:
                many = len(left) != 1
                warnings.warn_explicit(LeftoverConnectionWarning(
                    f"{len(left)} AMQP connection{'s' if many else ''} left open by the "
                    f"test {'were' if many else 'was'} closed by the amqp_broker fixture: "
                    + "; ".join(left)), LeftoverConnectionWarning, *self._test_location)
        finally:
            if self._vhost_added:
                self.thread.delete_vhost(self.vhost)
            elif not self.shared:
                self._pool.close()


@pytest.fixture
def amqp_broker(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerFixture]:
    """A broker for this test: `.url` (its vhost), `.port`, `.management_url`,
    `.data_dir`, `.queue_depth(queue)`, `.peek(queue)`; see the README."""
    settings = request.config.stash[SETTINGS]
    item = request.node
    spec = broker_spec(item, settings)
    queues, policies = set_up_specs(item, settings)
    shared = settings.scope != "function"
    pool = request.getfixturevalue(f"_amqp_{settings.scope}_brokers") if shared \
        else BrokerPool()
    thread = pool.get(spec, settings, lambda: tmp_path_factory.mktemp("amqp-broker"))
    fixture = BrokerFixture(thread, pool.vhost_name(item.name) if shared else "/", shared,
                            pool, (str(item.path), (item.location[1] or 0) + 1))
    try:
        fixture._set_up(queues, policies)
    except BaseException:
        fixture._tear_down()
        raise
    yield fixture
    fixture._tear_down()


@pytest.fixture
def amqp_url(amqp_broker: BrokerFixture) -> str:
    """amqp:// URL of a broker (vhost) this test has to itself."""
    return amqp_broker.url
