"""The README's embedding examples, run as written: the `serve()` and
`run_in_thread()` programs in a fresh interpreter, the pytest plugin's
examples and the Celery recipe as a small project run by pytest."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks(heading: str) -> list[str]:
    """The ```python blocks under a `### heading` of the README."""
    section = re.search(rf"\n### {re.escape(heading)}.*?(?=\n##)", README.read_text(), re.S)
    return re.findall(r"```python\n(.*?)```", section.group(), re.S)


@pytest.mark.parametrize("heading", ["In an asyncio application", "In synchronous code"])
def test_the_programs_run_and_print_the_queue_depth(heading):
    [program] = python_blocks(heading)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_the_pytest_plugin_examples_pass(pytester):
    [examples] = python_blocks("The pytest plugin")
    pytester.makeini("[pytest]\nasyncio_mode = auto\n"
                     "asyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_examples=examples)
    pytester.runpytest("-W", "error::amqp_server.pytest_plugin.LeftoverConnectionWarning"
                       ).assert_outcomes(passed=4)


def test_the_celery_recipe_passes(pytester):
    [recipe] = python_blocks("Celery")
    conftest, tests = recipe.split("# test_tasks.py\n")
    pytester.makeini("[pytest]\namqp_broker_scope = session\n"
                     "asyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_tasks=tests)
    pytester.runpytest("-W", "error::amqp_server.pytest_plugin.LeftoverConnectionWarning"
                       ).assert_outcomes(passed=1)
