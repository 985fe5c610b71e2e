"""Every code example of README.md and docs/ runs as written (how each kind
of block is run is in doc_examples.py); the README stays short and links
only to what exists; the MkDocs site builds with its strict checks."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import doc_examples
from .doc_examples import DOCS, README, ROOT, blocks, convention_errors, pages, session

README_MAX_LINES = 160


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.name)
def test_every_block_says_how_it_is_run(page):
    assert convention_errors(page) == []


# Where a page's story ends, when exit codes alone would not show it went
# as the page says: queue -> ready messages, right after the page.
END_STATES = {
    # the dead letter, redriven back to orders by amqpctl
    "README.md": {"orders": 1, "orders.dead": 0},
    # the three expired quotes, named by the audit and redriven
    "audit.md": {"fx-quotes": 3, "fx-quotes.dlq": 0},
    # m-4 redriven, m-2 and m-3 moved, m-1 deleted
    "workbench.md": {"invoices": 1, "parking": 2, "invoices.dlq": 0},
}


def test_every_example_runs_in_reading_order_on_one_broker(tmp_path):
    """The README, then each page in the site's order, every block as a
    reader meets it, all on one broker: a page that declared again what an
    earlier one made differently (an exchange of another type, a queue
    naming another dead-letter exchange) fails here with the 406 the
    reader would get."""
    ended = {}
    with session(tmp_path) as examples:
        for page in pages():
            outputs = [(block, examples.run(block)) for block in blocks(page)]
            ended[page.name] = {queue: examples.broker.queue_depth(queue)
                                for queue in END_STATES.get(page.name, {})}
            if page == README:
                [back] = examples.broker.peek("orders")
                [redrive] = [done for block, done in outputs if "amqpctl redrive" in block.code]
    assert ended == {page.name: END_STATES.get(page.name, {}) for page in pages()}
    # The walk-through end to end: declared with a dead-letter exchange,
    # rejected, read with its x-death, redriven by amqpctl back to `orders`.
    assert back.body == b'{"id": 7, "sku": null}'
    assert back.properties["message_id"] == "order-7"
    [death] = back.deaths
    assert (death.reason, death.queue, death.count) == ("rejected", "orders", 1)
    assert "1 of 1 redriven" in redrive.stdout


def test_the_pages_are_read_in_the_sites_order():
    names = [page.name for page in pages()]
    assert names[:3] == ["README.md", "index.md", "arguments-and-policies.md"]
    assert sorted(names[1:]) == sorted(path.name for path in DOCS.glob("*.md"))


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest goes to docs/"


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)|<(https?://[^>]+)>")
BARE_URL = re.compile(r"https?://[^\s)>`]+")
LOCAL_HOSTS = re.compile(r"^https?://(localhost|127\.|0\.0\.0\.0|10\.|192\.168\.|\[::1\])")


def prose(text: str) -> str:
    """The text outside fenced blocks and code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`]*`", "", text)


def test_the_readme_links_only_to_files_that_exist_and_public_sites():
    text = prose(README.read_text())
    targets = [a or b for a, b in LINK.findall(text)]
    assert targets, "the README links into docs/"
    for target in targets:
        if re.match(r"https?://", target):
            assert not LOCAL_HOSTS.match(target), f"{target}: not a public site"
            continue
        path = target.split("#", 1)[0]
        resolved = (ROOT / path).resolve()
        assert not path.startswith("/") and resolved.is_relative_to(ROOT), \
            f"{target}: outside the repository"
        assert resolved.exists(), f"{target}: no such file"
    for url in BARE_URL.findall(LINK.sub("", text)):
        assert not LOCAL_HOSTS.match(url), f"{url}: a bare URL here becomes a link; quote it"


def test_the_site_builds_with_strict_checks(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        message = "mkdocs is not installed (pip install 'mkdocs>=1.6')"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--site-dir", str(tmp_path / "site")],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_a_block_without_a_rule_or_a_reason_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- example: skip -->\n```sh\nls\n```\n\n```rust\nfn main() {}\n```\n"
                    "\n```python\npika.URLParameters('amqp://guest:guest@127.0.0.1/')\n```\n")
    original = doc_examples.ROOT
    doc_examples.ROOT = tmp_path
    try:
        errors = convention_errors(page)
    finally:
        doc_examples.ROOT = original
    assert [error.split(": ", 1)[1].split(" ")[:3] for error in errors] == [
        ["a", "skipped", "block"], ["a", "```rust", "block"], ["give", "the", "AMQP"]]


def test_prints_say_what_they_print():
    assert doc_examples.expected_prints("print(1)   # 1\nx = 2\nprint(x)  # 2\n") == ["1", "2"]
    assert doc_examples.expected_prints("print(1)\n") is None
    with pytest.raises(AssertionError):
        doc_examples.expected_prints("print(1)   # 1\nprint(2)\n")


def test_the_pages_are_all_in_the_site():
    listed = set(re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE))
    assert listed == {path.name for path in DOCS.glob("*.md")}
    assert Path(DOCS / "console-workbench.png").exists()
