"""The broker's own install is lean: the wheel the README says how to build
(and ./scripts/serve) bring the broker and its dependencies (uvloop among
them, and pyarrow, which writes the dead-letter archive), nothing of the
audit, the tests or the fuzzer, which are extras.  The wheel holds the web
console's files; in a new venv with it alone installed the broker starts
and answers, serves its console, amqpctl works, and amqp-dlq-audit says in
one line which extra it needs; in the test venv, where everything is
installed, the broker still imports none of it, nor pyarrow: only its
archive's writer process loads that."""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from .rawclient import RawClient

ROOT = Path(__file__).resolve().parents[1]
# What the extras bring (audit, test, fuzz), by import name: the broker's
# code paths import none of them.
EXTRAS = ("pyspark", "py4j", "pandas", "numpy", "matplotlib", "rich", "grpc",
          "pytest", "hypothesis", "pika", "aio_pika", "trustme", "kombu", "amqp", "celery",
          "selenium", "prometheus_client", "atheris")
# Installed with the broker, loaded only by the archive's writer process.
WRITER_ONLY = ("pyarrow",)
# pip's words when it could not reach an index (as opposed to a requirement
# that no index has).
UNREACHABLE = ("NewConnectionError", "Failed to establish a new connection",
               "Temporary failure in name resolution", "Name or service not known",
               "Network is unreachable", "ProxyError", "ConnectTimeoutError",
               "Read timed out")


def run(*command, timeout: float = 120, **options) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          timeout=timeout, check=False, **options)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel the README builds (`pip wheel --no-deps -w dist .`), from a
    copy of the checkout (an in-tree build would write build/ into it)."""
    work = tmp_path_factory.mktemp("wheel")
    checkout = work / "checkout"
    shutil.copytree(ROOT, checkout, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.egg-info", "build", "dist", "amqp-data",
        ".hypothesis"))
    built = run(sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check",
                "--no-deps", "-w", work / "dist", checkout,
                timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (path,) = (work / "dist").glob("amqp_server-*-py3-none-any.whl")
    return path


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory, wheel) -> Path:
    """A new venv with the wheel installed and no extra."""
    venv = tmp_path_factory.mktemp("lean") / "venv"
    made = run(sys.executable, "-m", "venv", venv)
    assert made.returncode == 0, made.stderr
    installed = run(venv / "bin" / "python", "-m", "pip", "install",
                    "--disable-pip-version-check", wheel, timeout=900)
    if installed.returncode != 0:
        said = installed.stdout + installed.stderr
        if any(words in said for words in UNREACHABLE):
            pytest.skip("pip could not reach a package index to install the broker's "
                        f"dependencies: {said.strip().splitlines()[-1]}")
        pytest.fail(f"pip install of the checkout failed:\n{said[-4000:]}")
    assert "BuildBackendWarning" not in installed.stdout + installed.stderr
    return venv


def importable(python: Path, names) -> list[str]:
    probe = run(python, "-c", "import importlib.util, sys\n"
                "print(*(name for name in sys.argv[1:] if importlib.util.find_spec(name)))",
                *names)
    assert probe.returncode == 0, probe.stderr
    return probe.stdout.split()


def imported(stderr: str) -> set[str]:
    """The top-level modules a process imported, from its -X importtime lines."""
    return {line.rsplit("|", 1)[1].strip().split(".")[0]
            for line in stderr.splitlines() if line.startswith("import time:")}


class Broker:
    """`amqp-server` from a venv's bin on free ports, as a process."""

    def __init__(self, bin_dir: Path, data_dir: Path, env: dict | None = None) -> None:
        # A file, not a pipe: -X importtime writes more than a pipe holds.
        self.err = data_dir.parent / "amqp-server.err"
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [str(bin_dir / "amqp-server"), "--port", "0", "--management-port", "0",
                 "--prometheus-port", "0", "--data-dir", str(data_dir),
                 "--log-level", "warning"],
                stdout=subprocess.PIPE, stderr=err, text=True, cwd=data_dir.parent, env=env)
        said = [self.proc.stdout.readline() for _ in range(3)]
        ports = [re.search(r":(\d+)(/|$)", line.strip()) for line in said]
        if not all(ports):
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"amqp-server did not start: {said}\n{self.err.read_text()[-2000:]}")
        self.port, self.management_port, _ = (int(match.group(1)) for match in ports)

    def stop(self) -> str:
        """Stops it as Ctrl-C would; its standard error."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        err = self.err.read_text()
        assert self.proc.returncode == 0, err[-2000:]
        return err


def handshake_and_declare(port: int, queue: str) -> None:
    """Real bytes over a real socket: protocol header, connection.start
    to open-ok, a channel, a queue."""
    client = RawClient.opened(port, queue)
    client.close()


@pytest.mark.slow  # builds the wheel, installs it into a new venv
def test_the_wheel_holds_the_consoles_files_and_the_console_scripts(wheel):
    console = ROOT / "amqp_server" / "management" / "console"
    wanted = {path.relative_to(ROOT).as_posix() for path in console.rglob("*")
              if path.is_file() and "__pycache__" not in path.parts}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [name for name in names if name.endswith("entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    assert wanted and wanted <= names, sorted(wanted - names)
    for script in ("amqp-server", "amqpctl", "amqp-dlq-audit"):
        assert f"{script} = " in scripts


@pytest.mark.slow  # builds the wheel, installs it into a new venv
def test_the_installed_wheel_serves_the_web_console(base_venv, tmp_path):
    broker = Broker(base_venv / "bin", tmp_path / "data")
    try:
        base = f"http://127.0.0.1:{broker.management_port}"
        for path, kind in (("/", "text/html"), ("/console/console.js", "javascript"),
                           ("/console/console.css", "text/css"),
                           ("/console/vendor/uPlot.iife.min.js", "javascript")):
            with urllib.request.urlopen(base + path, timeout=10) as response:
                assert response.status == 200 and kind in response.headers["Content-Type"]
                assert response.read()
    finally:
        err = broker.stop()
    assert "Traceback" not in err


@pytest.mark.slow  # builds the wheel, installs it into a new venv
def test_the_base_install_brings_the_broker_uvloop_and_pyarrow_and_no_extra(base_venv):
    python = base_venv / "bin" / "python"
    assert importable(python, ["amqp_server", "dlx", "policies", "uvloop", "pyarrow"]) == [
        "amqp_server", "dlx", "policies", "uvloop", "pyarrow"]
    assert importable(python, EXTRAS) == []


@pytest.mark.slow  # builds the wheel, installs it into a new venv
def test_the_broker_of_the_base_install_starts_and_answers(base_venv, tmp_path):
    broker = Broker(base_venv / "bin", tmp_path / "data")
    try:
        handshake_and_declare(broker.port, "lean")
        listed = run(base_venv / "bin" / "amqpctl", "--port", broker.management_port,
                     "list_queues", "name")
        assert listed.returncode == 0, listed.stderr
        assert "lean" in listed.stdout.split()
    finally:
        err = broker.stop()
    assert "Traceback" not in err


@pytest.mark.slow  # builds the wheel, installs it into a new venv
def test_the_audit_of_the_base_install_names_the_extra_it_needs(base_venv, tmp_path):
    done = run(base_venv / "bin" / "amqp-dlq-audit", "--data-dir", tmp_path,
               "--out", tmp_path / "report")
    assert done.returncode == 69  # EX_UNAVAILABLE
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install '.[audit]' in a checkout" in lines[0]


def test_the_broker_and_amqpctl_import_none_of_the_extras(tmp_path):
    """In the test venv, where every extra is installed."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    broker = Broker(bin_dir, tmp_path / "data", env=env)
    try:
        handshake_and_declare(broker.port, "imports")
        ctl = run(bin_dir / "amqpctl", "--port", broker.management_port, "list_queues",
                  env=env)
        assert ctl.returncode == 0, ctl.stderr[-2000:]
    finally:
        err = broker.stop()
    assert imported(err) & set(EXTRAS + WRITER_ONLY) == set()
    assert imported(ctl.stderr) & set(EXTRAS + WRITER_ONLY) == set()
    assert "uvloop" in imported(err)


def test_scripts_serve_installs_nothing_again_and_imports_no_extra():
    venv = ROOT / ".venv"
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    if Path(sys.prefix).resolve() != venv.resolve() or not any(
            (venv / f".installed-{what}-{key}").exists() for what in ("serve", "test")):
        pytest.skip("the tests do not run in the .venv that ./scripts/test made")
    done = run(ROOT / "scripts" / "serve", "--help",
               env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: amqp-server")
    assert not [line for line in done.stderr.splitlines()
                if not line.startswith("import time:")], done.stderr[-2000:]
    assert imported(done.stderr) & set(EXTRAS + WRITER_ONLY) == set()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
def test_the_broker_archives_as_parquet_without_loading_pyarrow_itself(tmp_path):
    """Retention archives a dead letter (a Parquet file appears) while the
    broker's own process maps no Arrow library: its writer process does."""
    import pika

    broker = Broker(Path(sys.executable).parent, tmp_path / "data")
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = conn.channel()
        channel.queue_declare("lean.dlq", arguments={"x-dead-letter-retention": 1000})
        channel.basic_publish("", "lean.dlq", b"old", pika.BasicProperties(headers={
            "x-death": [{"queue": "work", "reason": "rejected", "count": 1,
                         "time": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
                         "exchange": "", "routing-keys": ["work"]}]}))
        conn.close()
        archive = tmp_path / "data" / "dead-letter-archive"
        deadline = time.monotonic() + 30
        while not list(archive.rglob("archive-*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(archive.rglob("archive-*.parquet"))
        maps = Path(f"/proc/{broker.proc.pid}/maps").read_text()
        assert "libarrow" not in maps
    finally:
        broker.stop()
