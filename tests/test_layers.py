"""The layers point one way (DESIGN.md, "Layout"): each part of the code
may import only the parts listed for it here, so an arrow that runs up the
layers (storage building broker objects, the broker reaching into the
management API) fails this test instead of growing unseen."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("amqp_server", "dlx", "policies", "spark")

# Part -> the parts it may import (besides itself).  Parts are module
# prefixes; a module belongs to the longest prefix that names it.  The
# package root (`amqp_server`, for its __version__) may be imported by all.
WIRE = {"amqp_server.wire", "amqp_server.errors"}
SEMANTICS = WIRE | {"dlx"}  # the pure fate decisions and their field values
ALLOWED: dict[str, set[str]] = {
    "amqp_server.errors": set(),
    "amqp_server.loops": set(),
    "amqp_server.read_shares": set(),
    "amqp_server.wire": {"amqp_server.errors"},
    "dlx": {"amqp_server.wire"},
    "policies": {"dlx", "amqp_server.wire"},
    "amqp_server.remote_publisher": WIRE,
    "amqp_server.config": {"policies", "dlx"},
    # The framing of the broker's log records (marker, length, CRC, msgpack)
    # imports nothing of the project: the audit reads streams' segment files
    # with it (spark/stream_dead_letters.py) rather than with a copy of it.
    "amqp_server.storage.records": set(),
    "amqp_server.storage": SEMANTICS | {"amqp_server.storage.records"},
    "amqp_server.cluster": SEMANTICS | {"policies", "amqp_server.storage",
                                        "amqp_server.storage.records"},
    "amqp_server.broker": SEMANTICS | {"policies", "amqp_server.config",
                                       "amqp_server.storage", "amqp_server.cluster"},
    "amqp_server.protocol": SEMANTICS | {"policies", "amqp_server.config",
                                         "amqp_server.storage", "amqp_server.broker"},
    "amqp_server.management": SEMANTICS | {
        "policies", "amqp_server.config", "amqp_server.storage", "amqp_server.cluster",
        "amqp_server.broker", "amqp_server.protocol", "amqp_server.remote_publisher"},
    "amqp_server.server": SEMANTICS | {
        "policies", "amqp_server.config", "amqp_server.storage", "amqp_server.cluster",
        "amqp_server.broker", "amqp_server.protocol", "amqp_server.management",
        "amqp_server.read_shares"},
    # The command-line tool speaks to a broker over HTTP and AMQP only.
    "policies.ctl": {"policies", "dlx", "amqp_server.wire", "amqp_server.remote_publisher"},
    # The audit reads the dead-letter log's and the streams' files, never
    # the broker.
    "spark": {"dlx", "amqp_server.storage.records"},
}
# The outer shell (the package's front door, cli, embedding, the pytest
# plugin, test helpers) may use anything; it is what the parts above are
# assembled into.
SHELL = {"amqp_server.__init__", "amqp_server.__main__", "amqp_server.cli",
         "amqp_server.embed", "amqp_server.embed_thread", "amqp_server.inspection",
         "amqp_server.node",
         "amqp_server.pytest_plugin", "amqp_server.pytest_settings", "amqp_server.testing"}
PARTS = set(ALLOWED) | SHELL


def _modules():
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            package = parts[:-1]
            yield ".".join(parts), package, path


def _imports(package: list[str], path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if node.module is None or node.level and not node.module:
                # `from . import a, b`: each name may be a module of its own.
                for alias in node.names:
                    yield f"{name}.{alias.name}", node.lineno
            else:
                yield name, node.lineno


def _part(module: str, parts=PARTS) -> str | None:
    if module.endswith(".__init__") and module.count(".") > 1:
        module = module[:-len(".__init__")]  # a package is its own part's
    best = None
    for part in parts:
        if (module == part or module.startswith(part + ".")) and (
                best is None or len(part) > len(best)):
            best = part
    return best


def test_every_module_belongs_to_a_part():
    homeless = [module for module, _, _ in _modules() if _part(module) is None]
    assert homeless == []


def test_imports_point_down_the_layers():
    wrong = []
    for module, package, path in _modules():
        source = _part(module)
        if source in SHELL:
            continue
        for imported, line in _imports(package, path):
            if imported.split(".")[0] not in SOURCES:
                continue  # the standard library and third parties
            if imported in ("amqp_server", "amqp_server.__version__"):
                continue  # the version, from the package root
            target = _part(imported)
            if target == source:
                continue
            if target not in ALLOWED[source]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} {source} -> {imported}")
    assert wrong == []


def test_the_check_sees_an_upward_import(tmp_path):
    # The walk itself: a relative import from storage into the broker is
    # resolved to the broker part, which storage may not import.
    path = tmp_path / "recovery.py"
    path.write_text("from ..broker.message import Entry\nfrom . import records\n")
    found = dict(_imports(["amqp_server", "storage"], path))
    assert _part("amqp_server.broker.message", ALLOWED) == "amqp_server.broker"
    assert "amqp_server.broker.message" in found
    assert "amqp_server.storage.records" in found
    assert "amqp_server.broker" not in ALLOWED["amqp_server.storage"]


def test_amqpctl_modules_use_no_private_names_of_each_other_and_none_imports_main():
    wrong = []
    for path in sorted((ROOT / "policies" / "ctl").glob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue  # the entry points: they are what imports main
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            if node.module == "main" or any(alias.name == "main" and not node.module
                                            for alias in node.names):
                wrong.append(f"{path.name}:{node.lineno} imports main")
            wrong += [f"{path.name}:{node.lineno} imports {alias.name}"
                      for alias in node.names if alias.name.startswith("_")]
    assert wrong == []


def _runtime_imports(package: list[str], path: Path):
    """The modules `path` imports when it runs (lazy imports in functions
    too), leaving out those under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {node.lineno for block in ast.walk(tree)
                   if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for statement in block.body for node in ast.walk(statement)
                   if isinstance(node, ast.Import | ast.ImportFrom)}
    for name, line in _imports(package, path):
        if line not in typing_only:
            yield name


def test_no_two_modules_import_each_other():
    """Two modules that import each other (one of them lazily, inside a
    function) are one module in two files: storage/archive.py and
    archive_parquet.py were."""
    modules = {module: package for module, package, _ in _modules()}
    imports = {}
    for module, package, path in _modules():
        names = set()
        for name in _runtime_imports(package, path):
            while name and name not in modules and f"{name}.__init__" not in modules:
                name = name.rpartition(".")[0]  # `from module import name`
            names.add(name)
        imports[module] = names - {"", module}
    mutual = sorted({tuple(sorted((a, b))) for a, names in imports.items() for b in names
                     if a in imports.get(b, ())})
    assert mutual == []
