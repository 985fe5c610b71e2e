"""Resident memory of the broker behind an AMQP URL on this machine, its
child processes included.

The broker is found by the process that owns the listening socket on the
URL's port (/proc/net/tcp* inode -> /proc/<pid>/fd), so the same code
measures this broker and a local RabbitMQ.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse


def listening_pid(port: int) -> int | None:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                next(handle)
                for line in handle:
                    fields = line.split()
                    local, state, inode = fields[1], fields[3], fields[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{inode}]")
        except OSError:
            continue
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def rss_bytes(pid: int) -> int:
    """Resident memory of one process."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
        except OSError:
            continue
    return found


def tree_pids(pid: int) -> list[int]:
    """The process and all its descendants still running (the process
    itself first, even when gone)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            pending.extend(_children(current))
        except OSError:
            continue
    return found


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of the process and all its descendants: this
    broker's dead-letter log writer, RabbitMQ's helper programs."""
    total = rss_bytes(pid)  # OSError when the process itself is gone
    for child in tree_pids(pid)[1:]:
        try:
            total += rss_bytes(child)
        except OSError:
            continue
    return total


class RssSampler:
    """Peak resident memory over a run, relative to its start."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.baseline = self.peak = tree_rss_bytes(pid) if pid else 0

    @classmethod
    def for_url(cls, url: str) -> RssSampler:
        return cls(listening_pid(urlparse(url).port or 5672))

    def sample(self) -> None:
        if self.pid:
            try:
                self.peak = max(self.peak, tree_rss_bytes(self.pid))
            except OSError:
                self.pid = None

    def peak_mb(self) -> float | None:
        return round(self.peak / 2**20, 1) if self.peak else None

    def growth_mb(self) -> float | None:
        if not self.baseline:
            return None
        return round((self.peak - self.baseline) / 2**20, 1)
