"""A pytest plugin for the client libraries' own integration suites, run
from their release archives (which leave out the repositories' top-level
conftest): `-E NAME` runs the tests marked `env(NAME)`, others marked with
an env are skipped."""

from __future__ import annotations

import pytest


def pytest_addoption(parser) -> None:
    parser.addoption("-E", action="append", metavar="NAME",
                     help="run the tests marked env(NAME)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "env(name): runs only with -E name")
    config.addinivalue_line("markers", "flaky(reruns, reruns_delay): retried by its suite")


def pytest_runtest_setup(item) -> None:
    wanted = set(item.config.getoption("-E") or ())
    names = {mark.args[0] for mark in item.iter_markers(name="env")}
    if names and not names & wanted:
        pytest.skip(f"needs -E {' or '.join(sorted(names))}")
