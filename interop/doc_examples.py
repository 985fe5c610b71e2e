"""The code examples of README.md and docs/*.md, found and run as written.

A fenced block's language says how it is run:

    python   a program, saved to a file and run in a fresh interpreter
    sh       a script, run by `bash -e`
    toml     a broker config file: loaded as `amqp-server --config` loads it
    ini      a pytest ini file: a project with it runs a test that takes
             `amqp_broker` (the files it names are made empty)
    json     parsed (one document, or one per line)
    yaml     parsed; every `httpGet` in it is requested and must answer 200
    text     output or a listing: never run

An HTML comment on the line before the fence changes that:

    <!-- example: channel -->    python: run with `connection` and `channel`
                                 (pika, on the page's broker) opened first
    <!-- example: pytest -->     python: a test module, or files split by
                                 `# conftest.py` / `# test_x.py` lines, run by
                                 pytest; every test in it must pass
    <!-- example: skip: WHY -->  not run; WHY says why

Any other language needs a skip with its reason.

The pages are one session, as a reader meets them: the README, then the
documentation in the order of mkdocs.yml's nav, every block in the order
it appears, all on one broker on free ports, with its data in
`./amqp-data` of a scratch directory that is the examples' working
directory. A page's examples therefore name their own exchanges and
queues, or use those an earlier page made as that page left them. The
addresses the examples are written with are those of `./scripts/serve`;
they are rewritten to the page's broker: `127.0.0.1:5672` or
`localhost:5672` (and `port-listener/5672`) to its AMQP port, `:15672` to
its management port, `:15692` to its Prometheus port. `amqpctl` finds the
broker through AMQPCTL_PORT, and the virtualenv's scripts come first on
PATH. Before each block the broker's dead-letter log is given the moment
to catch up (its writer is a process) that a person typing the next
command gives it.

A python block whose `print(...)` lines end in `# TEXT` must print those
TEXTs, one a line, in order; a block says what every print prints, or
nothing.
"""

from __future__ import annotations

import configparser
import io
import json
import os
import re
import subprocess
import sys
import time
import tokenize
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from amqp_server.config import BrokerConfig, ConfigError
from amqp_server.testing import BrokerThread

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

RUN_BY_LANGUAGE = ("python", "sh", "toml", "ini", "json", "yaml")
NEVER_RUN = ("text",)
MARKERS = ("channel", "pytest", "skip")
NEEDS_BROKER = ("python", "sh", "yaml")

MARKER = re.compile(r"<!--\s*example:\s*(?P<kind>[\w-]+)\s*(?::\s*(?P<reason>.*?))?\s*-->")
FENCE = re.compile(r"^```(?P<info>.*)$")
# An AMQP URL to this machine that names no port would reach whatever
# listens on 5672 (in CI, the reference RabbitMQ), not the page's broker.
PORTLESS_URL = re.compile(r"amqps?://[^\s'\"/]*@(?:127\.0\.0\.1|localhost)(?=[/'\"\s]|$)")
PRINT_TIMEOUT = 120
SCRIPT_TIMEOUT = 600  # the audit's first run on a new machine writes its class archive


def pages() -> list[Path]:
    """Every page, in the order a reader meets them: the README, then the
    site's nav (the pages it leaves out last, by name)."""
    nav = re.findall(r"^\s*-\s*[^:]+:\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(),
                     re.MULTILINE)
    listed = [DOCS / name for name in nav]
    return [README, *listed, *sorted(set(DOCS.glob("*.md")) - set(listed))]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int          # of the opening fence, 1-based
    language: str
    code: str
    marker: str | None = None
    reason: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.marker != "skip" and self.language not in NEVER_RUN


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, in order, each with the marker before it."""
    found, lines = [], page.read_text().split("\n")
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start = i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise AssertionError(f"{page.relative_to(ROOT)}:{start + 1}: the block never ends")
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.fullmatch(previous.strip())
        found.append(Block(page, start + 1, fence["info"].strip().split(" ")[0],
                           "\n".join(lines[start + 1:end]) + "\n",
                           marker["kind"] if marker else None,
                           marker["reason"] if marker else None))
        i = end + 1
    return found


def convention_errors(page: Path) -> list[str]:
    """What keeps a block from saying how it is run, or why it is not."""
    errors = []
    for block in blocks(page):
        if block.marker is not None and block.marker not in MARKERS:
            errors.append(f"{block.where}: unknown marker 'example: {block.marker}'")
        elif block.marker == "skip" and not block.reason:
            errors.append(f"{block.where}: a skipped block says why ('example: skip: WHY')")
        elif block.marker in ("channel", "pytest") and block.language != "python":
            errors.append(f"{block.where}: 'example: {block.marker}' is for python blocks")
        elif block.marker is None and block.language not in RUN_BY_LANGUAGE + NEVER_RUN:
            errors.append(f"{block.where}: a ```{block.language or '(no language)'} block "
                          "is run by no rule: name a language that is, or skip it and say why")
        elif (block.runs and block.language in ("python", "sh")
              and PORTLESS_URL.search(block.code)):
            errors.append(f"{block.where}: give the AMQP URL its port (127.0.0.1:5672), "
                          "so that the test can point it at the page's broker")
    text = page.read_text()
    for marker in MARKER.finditer(text):
        after = text[marker.end():].lstrip("\n")
        if not after.startswith("```"):
            line = text.count("\n", 0, marker.start()) + 1
            errors.append(f"{page.relative_to(ROOT)}:{line}: an example marker stands "
                          "right before a fenced block")
    return errors


def expected_prints(code: str) -> list[str] | None:
    """The `# TEXT` of each print line, or None when no print says."""
    said, silent = [], 0
    tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    by_line: dict[int, list[tokenize.TokenInfo]] = {}
    for token in tokens:
        by_line.setdefault(token.start[0], []).append(token)
    for line_tokens in by_line.values():
        words = [t for t in line_tokens if t.type not in (tokenize.INDENT, tokenize.DEDENT,
                                                           tokenize.NL, tokenize.NEWLINE)]
        if not words or words[0].string != "print":
            continue
        comment = [t.string for t in words if t.type == tokenize.COMMENT]
        if comment:
            said.append(comment[0][1:].strip())
        else:
            silent += 1
    if said and silent:
        raise AssertionError("say what every print prints (`# TEXT`), or none")
    return said or None


class Session:
    """One page's examples against one broker, in order."""

    def __init__(self, broker: BrokerThread | None, workdir: Path) -> None:
        self.broker = broker
        self.workdir = workdir
        self.count = 0

    # ---- where things are ------------------------------------------------------

    def rewrite(self, code: str) -> str:
        if self.broker is None:
            return code
        amqp, management = self.broker.port, self.broker.management_port
        prometheus = int(self.broker.prometheus_url.rsplit(":", 1)[1])
        code = re.sub(r"(?:127\.0\.0\.1|localhost):5672\b", f"127.0.0.1:{amqp}", code)
        code = code.replace("port-listener/5672", f"port-listener/{amqp}")
        code = re.sub(r"(?:127\.0\.0\.1|localhost):15672\b", f"127.0.0.1:{management}", code)
        return re.sub(r"(?:127\.0\.0\.1|localhost):15692\b", f"127.0.0.1:{prometheus}", code)

    def env(self) -> dict[str, str]:
        scripts = str(Path(sys.executable).parent)
        env = dict(os.environ, PATH=scripts + os.pathsep + os.environ.get("PATH", ""))
        env.pop("PYTHONPATH", None)
        if self.broker is not None:
            env["AMQPCTL_PORT"] = str(self.broker.management_port)
        return env

    def settle(self) -> None:
        """The dead-letter log's writer is a process: let it write what the
        broker recorded (bounded), as the next command typed by hand would."""
        log = self.broker.broker.dead_letter_log if self.broker is not None else None
        if log is None or not log.recorded:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            written = sum(len(path.read_text().splitlines()) for path in log.files())
            if written >= log.recorded:
                return
            time.sleep(0.05)

    # ---- running ---------------------------------------------------------------

    def run(self, block: Block) -> subprocess.CompletedProcess | None:
        """Run one block; AssertionError names the block and what went wrong."""
        if not block.runs:
            return None
        self.count += 1
        self.settle()
        runner = getattr(self, f"_{block.marker or block.language}")
        try:
            return runner(block)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{block.where}: still running after {exc.timeout} s") from None

    def _file(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def _process(self, block: Block, argv: list[str], timeout: float,
                 cwd: Path | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(argv, check=False, cwd=cwd or self.workdir, env=self.env(),
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"{block.where}: exit {done.returncode}\n"
                                 f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}")
        return done

    def _python(self, block: Block, code: str | None = None) -> subprocess.CompletedProcess:
        program = self._file(f"example_{self.count}.py", self.rewrite(code or block.code))
        done = self._process(block, [sys.executable, str(program)], PRINT_TIMEOUT)
        expected = expected_prints(block.code)
        if expected is not None and done.stdout.splitlines() != expected:
            raise AssertionError(f"{block.where}: printed {done.stdout.splitlines()}, "
                                 f"the page says {expected}")
        return done

    def _channel(self, block: Block) -> subprocess.CompletedProcess:
        return self._python(block, (
            "import pika\n"
            "connection = pika.BlockingConnection(pika.URLParameters("
            "'amqp://guest:guest@127.0.0.1:5672/%2F'))\n"
            "channel = connection.channel()\n"
            f"{block.code}"
            "connection.close()\n"))

    def _sh(self, block: Block) -> subprocess.CompletedProcess:
        script = self._file(f"example_{self.count}.sh", self.rewrite(block.code))
        return self._process(block, ["bash", "-e", str(script)], SCRIPT_TIMEOUT)

    def _pytest(self, block: Block) -> subprocess.CompletedProcess:
        project = self.workdir / f"project_{self.count}"
        parts = re.split(r"^# (\w+\.py)\n", block.code, flags=re.MULTILINE)
        files = dict(zip(parts[1::2], parts[2::2])) if len(parts) > 1 else \
            {"test_example.py": block.code}
        for name, text in files.items():
            self._file(f"{project.name}/{name}", text)
        self._file(f"{project.name}/pytest.ini", "[pytest]\nasyncio_mode = auto\n"
                   "asyncio_default_fixture_loop_scope = function\n")
        tests = sum(len(re.findall(r"^(?:async )?def test_", text, re.MULTILINE))
                    for text in files.values())
        done = self._process(block, [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "-W", "error::amqp_server.pytest_plugin.LeftoverConnectionWarning"],
            SCRIPT_TIMEOUT, cwd=project)
        if f"{tests} passed" not in done.stdout:
            raise AssertionError(f"{block.where}: not all {tests} tests passed\n{done.stdout}")
        return done

    def _ini(self, block: Block) -> subprocess.CompletedProcess:
        project = self.workdir / f"project_{self.count}"
        parser = configparser.ConfigParser()
        parser.read_string(block.code)
        config_file = parser.get("pytest", "amqp_config", fallback="")
        if config_file:
            self._file(f"{project.name}/{config_file}", "")
        self._file(f"{project.name}/pytest.ini", block.code)
        self._file(f"{project.name}/test_settings.py",
                   "def test_the_settings_apply(amqp_broker):\n    pass\n")
        return self._process(block, [sys.executable, "-m", "pytest", "-q", "-p",
                                     "no:cacheprovider"], SCRIPT_TIMEOUT, cwd=project)

    def _toml(self, block: Block) -> None:
        path = self._file(f"example_{self.count}.toml", block.code)
        try:
            BrokerConfig.load(path)
        except ConfigError as exc:
            raise AssertionError(f"{block.where}: {exc}") from None

    def _json(self, block: Block) -> None:
        try:
            json.loads(block.code)
        except ValueError:
            for line in block.code.splitlines():
                if line.strip():
                    json.loads(line)

    def _yaml(self, block: Block) -> None:
        import yaml  # mkdocs brings PyYAML

        probes = []

        def walk(node) -> None:
            if isinstance(node, dict):
                if "httpGet" in node:
                    probes.append(node["httpGet"])
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(yaml.safe_load(self.rewrite(block.code)))
        ports = {15672: self.broker.management_port}
        for probe in probes:
            port = ports.get(probe["port"], probe["port"])
            request = urllib.request.Request(f"http://127.0.0.1:{port}{probe['path']}")
            for header in probe.get("httpHeaders", []):
                request.add_header(header["name"], header["value"])
            with urllib.request.urlopen(request, timeout=10) as response:
                if response.status != 200:
                    raise AssertionError(f"{block.where}: {probe['path']} answered "
                                         f"{response.status}")


@contextmanager
def session(workdir: Path) -> Iterator[Session]:
    """One broker for the pages' examples, run one after another in it."""
    with BrokerThread(data_dir=str(workdir / "amqp-data")) as broker:
        yield Session(broker, workdir)
