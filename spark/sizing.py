"""How big an audit's input is, from file sizes alone (no Spark job), and
what that means for how the JVM and Spark should work (session.py).

Measured on 2 cores, 1M events (851 MB of log): compacting it took 50 s of
CPU with the JVM's default compilers and 76 s with C1 alone, while a
re-run on the compacted dataset took 61 s of CPU by default and 34 s with
C1 alone: C2 pays off only on a long run of parsing.  Below ~100k events,
generating code for each query costs more than interpreting it.  Below a
few million, adaptive execution re-plans the audit's query (some 40
stages) at a cost above its gain: 1M events re-run in 17-18 s without it,
20.5 s with it (2 cores); larger inputs, not measured again, keep it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .checkpoint import Checkpoint
from .compact import EVENTS
from .sources import LogSource, is_uri

LOG_BYTES_PER_EVENT = 900
PARQUET_BYTES_PER_EVENT = 50
# Retention's archive keeps each body in full (base64, then zstd): 1,084
# bytes a record of a 1 KB body (bench.archive), about a log line's size.
ARCHIVE_BYTES_PER_EVENT = LOG_BYTES_PER_EVENT
LIGHT_EVENTS = 100_000  # interpreted expressions, no adaptive planning
HEAVY_PARSE_BYTES = 256 << 20  # of log to parse: C2 worth its compiling
HEAVY_EVENTS = 3_000_000


@dataclass(frozen=True)
class Sizing:
    events: int  # about how many the audit reads
    log_bytes: int  # of log it parses (not compacted yet)

    @property
    def light(self) -> bool:
        return self.events < LIGHT_EVENTS

    @property
    def adaptive(self) -> bool:
        """Adaptive query execution: worth its re-planning between stages."""
        return self.events >= HEAVY_EVENTS

    @property
    def quick_jit(self) -> bool:
        """C1 only: its code is ready sooner, runs slower."""
        return self.log_bytes < HEAVY_PARSE_BYTES and self.events < HEAVY_EVENTS


def size_input(sources: list[LogSource], parquet_dir: str | None,
               done: Checkpoint) -> Sizing | None:
    """None when the dataset is behind a URI: not sized."""
    if parquet_dir is not None and is_uri(parquet_dir):
        return None
    log_bytes = archived = 0
    for source in sources:
        compacted = done.compacted(source.data_dir)
        log_bytes += sum(size for path, size in zip(source.files, source.sizes)
                         if path.rsplit("/", 1)[-1] not in compacted)
        archived += sum(source.archived_sizes) // ARCHIVE_BYTES_PER_EVENT
    dataset = Path(parquet_dir) / EVENTS if parquet_dir else None
    parquet_bytes = sum(path.stat().st_size for path in dataset.rglob("*")
                        if path.is_file()) if dataset else 0
    return Sizing(log_bytes // LOG_BYTES_PER_EVENT + parquet_bytes // PARQUET_BYTES_PER_EVENT
                  + archived, log_bytes)
