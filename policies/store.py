"""The broker's policies and operator policies, persisted in the data
directory as one JSON document (written to a temporary file, fsynced and
renamed, so a crash leaves the old or the new file, never half of one)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from dlx.semantics import RABBITMQ_4_3

from .model import Policy, PolicyError, make_policy

FILE_NAME = "policies.json"


class PolicyStore:
    def __init__(self) -> None:
        self.policies: dict[tuple[str, str], Policy] = {}
        self.operator_policies: dict[tuple[str, str], Policy] = {}
        self._path: Path | None = None
        # A clustered leader ships each saved document to its followers.
        self._ship: Callable[[bytes], None] | None = None

    def open(self, data_dir: str | Path) -> list[str]:
        """Load what was saved in `data_dir` and persist there from now on.
        Returns a message per saved policy that no longer validates."""
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / FILE_NAME
        problems: list[str] = []
        if not self._path.exists():
            return problems
        saved = json.loads(self._path.read_text())
        for kind, table in (("policies", self.policies),
                            ("operator_policies", self.operator_policies)):
            for item in saved.get(kind, []):
                try:
                    # Checked by 4.3's rules, which take every key and value
                    # 3.13's do; the broker checks each against its vhost's
                    # once the vhosts are back (Broker.drop_policies_their_vhosts_refuse).
                    policy = make_policy(item["vhost"], item["name"], item["pattern"],
                                         item["definition"], item.get("priority", 0),
                                         item.get("apply-to", "all"),
                                         operator=kind == "operator_policies",
                                         semantics=RABBITMQ_4_3)
                except (PolicyError, KeyError) as exc:
                    problems.append(f"{kind} entry {item!r} skipped: {exc}")
                    continue
                table[(policy.vhost, policy.name)] = policy
        return problems

    def table(self, operator: bool) -> dict[tuple[str, str], Policy]:
        return self.operator_policies if operator else self.policies

    def put(self, policy: Policy, operator: bool = False) -> None:
        self.table(operator)[(policy.vhost, policy.name)] = policy
        self._save()

    def remove(self, vhost: str, name: str, operator: bool = False) -> Policy | None:
        policy = self.table(operator).pop((vhost, name), None)
        if policy is not None:
            self._save()
        return policy

    def in_vhost(self, vhost: str, operator: bool = False) -> list[Policy]:
        return [p for (v, _), p in sorted(self.table(operator).items()) if v == vhost]

    def _save(self) -> None:
        if self._path is None:
            return
        document = {"policies": [p.as_json() for p in self.policies.values()],
                    "operator_policies": [p.as_json() for p in self.operator_policies.values()]}
        encoded = json.dumps(document, indent=1, sort_keys=True).encode()
        write_document(self._path, encoded)
        if self._ship is not None:
            self._ship(encoded)

    def ship_to(self, ship: Callable[[bytes], None] | None) -> None:
        """From now on each saved document also goes to `ship` (a clustered
        leader's replication); None: no more."""
        self._ship = ship

    def document(self) -> bytes:
        """The saved document as it stands (a follower's starting copy)."""
        if self._path is None or not self._path.exists():
            return b""
        return self._path.read_bytes()


def write_document(path: Path, encoded: bytes) -> None:
    """Write to a temporary file, fsync, rename: the old or the new document
    survives a crash, never half of one."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as handle:
        handle.write(encoded)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
