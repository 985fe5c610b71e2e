"""`amqp-dlq-audit` without the `audit` extra says in one line what to
install, instead of a traceback; --help needs nothing but Python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_without(module: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The command's entry point in a fresh interpreter where `module`
    cannot be imported (as if the extra were not installed)."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    code = "import sys; from spark.audit import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT,
                          env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("module", ["pyspark", "matplotlib", "rich"])
def test_a_missing_extra_is_one_line_naming_the_install(module, tmp_path):
    result = run_without(module, tmp_path, "--data-dir", str(tmp_path), "--out",
                         str(tmp_path / "out"))
    assert result.returncode == 69
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "pip install '.[audit]' in a checkout" in line and module in line


def test_help_needs_no_extra(tmp_path):
    result = run_without("pyspark", tmp_path, "--help")
    assert result.returncode == 0 and "--parquet-dir" in result.stdout
