"""The test suite's own structure, checked so that it cannot drift: helpers
live in helper modules and fixtures in conftest.py (no test module imports
another), every kind of test is a registered marker, and the suite collects
without the audit extra."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = ("tests", "interop")


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, relative imports by their last part."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.rpartition(".")[2] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                found.add(node.module.rpartition(".")[2])
            else:  # from . import name
                found.update(alias.name for alias in node.names)
    return found


def test_no_module_of_the_suite_imports_a_test_module():
    importing = {}
    for suite in SUITES:
        for path in sorted((ROOT / suite).glob("*.py")):
            tests = sorted(name for name in imported_modules(path) if name.startswith("test_"))
            if tests:
                importing[f"{suite}/{path.name}"] = tests
    assert importing == {}


def test_the_kinds_conftest_marks_are_registered_markers():
    sys.path.insert(0, str(ROOT))
    try:
        import conftest
    finally:
        sys.path.remove(str(ROOT))
    with open(ROOT / "pyproject.toml", "rb") as handle:
        options = tomllib.load(handle)["tool"]["pytest"]["ini_options"]
    registered = {line.split(":")[0] for line in options["markers"]}
    kinds = set(conftest.KIND_OF_FIXTURE.values()) | set(conftest.SERIAL_KINDS)
    assert kinds | {"slow"} == registered
    assert "--strict-markers" in options["addopts"].split()


def test_the_suite_collects_without_the_audit_extra(tmp_path):
    """`pytest` in a checkout installed without `[audit]` (as ./scripts/serve
    installs it): the tests that need Spark are skipped, none fails to
    import."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\n"
                       "for name in ('pyspark', 'pandas', 'matplotlib', 'rich'):\n"
                       "    sys.modules[name] = None\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *SUITES],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "error" not in done.stdout.splitlines()[-1]
