"""Durable definitions (vhosts, users, durable exchanges, queues and the
bindings between durable ends) in one JSON document in the data directory,
in the format of RabbitMQ's definitions export.  Rewritten whole on each
change: written to a temporary file, fsynced, renamed."""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE_NAME = "definitions.json"


class DefinitionStore:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / FILE_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> dict | None:
        if not self.path.exists():
            return None
        try:
            return json.loads(self.path.read_text())
        except ValueError as exc:
            raise ValueError(f"{self.path} is not valid JSON: {exc}") from None

    def save(self, document: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as handle:
            json.dump(document, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
