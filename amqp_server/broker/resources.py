"""What the resource alarms compare: this process's resident memory against
RabbitMQ's vm_memory_high_watermark, free disk against disk_free_limit."""

from __future__ import annotations

import os
import shutil

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def total_memory() -> int:
    """Physical RAM in bytes (0 when the platform cannot tell)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * _PAGE
    except (AttributeError, ValueError, OSError):
        return 0


def resident_memory() -> int:
    """This process's resident set in bytes (0 when unknown)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def memory_limit(relative: float, absolute: int, total: int) -> int:
    """The high watermark in bytes: the absolute size when one is set, else
    the fraction of RAM (0 when RAM is unknown: no memory alarm)."""
    return absolute if absolute > 0 else int(relative * total)


def disk_free(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None
