"""The JSON definitions document that versions before the definition log
kept in the data directory: found and read once, at the first start of a
newer version, which imports it and then writes the log instead."""

from __future__ import annotations

import json
from pathlib import Path

LEGACY_FILE = "definitions.json"


def legacy_path(data_dir: Path) -> Path:
    return Path(data_dir) / LEGACY_FILE


def legacy_document(data_dir: Path) -> dict | None:
    """The definitions export an earlier version kept, if there is one."""
    path = legacy_path(data_dir)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
