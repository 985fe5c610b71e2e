"""The compaction checkpoint: which log files of which broker are in the
Parquet dataset, and in which batch.

It lives next to the dataset, under `--parquet-dir/checkpoint/`, as small
JSON files that are only ever added (one per compaction that found new
files), written through Spark, so it works wherever the dataset does: a
shared filesystem, HDFS, S3 (on a local path Python writes it and renames
it into place, which is quicker than a Spark job).  Each file appears
whole or not at all, and that is the commit point:
rows of a batch no checkpoint file names (a run that died between writing
the Parquet and committing) are never read, and their files are compacted
again.  Entries and batches are per data directory: each broker is
compacted on its own as its files are sealed, and an audit of some brokers
reads only their rows of a dataset that others share.

One audit at a time per `--parquet-dir`: two running at once could both
compact the same files.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from .sources import is_uri

CHECKPOINT = "checkpoint"
SCHEMA = "data_dir STRING, file STRING, batch STRING"


@dataclass(frozen=True)
class Checkpoint:
    entries: tuple[tuple[str, str, str], ...] = ()  # (data_dir, file name, batch)

    def compacted(self, data_dir: str) -> set[str]:
        """Names of the files of this data directory already compacted."""
        return {name for source, name, _ in self.entries if source == data_dir}

    def batches(self, data_dirs: list[str]) -> list[str]:
        """The batches holding these data directories' events (a batch holds
        one broker's, so the dataset may be shared by audits of other ones)."""
        wanted = set(data_dirs)
        return sorted({batch for source, _, batch in self.entries if source in wanted})


def load(spark: SparkSession | None, parquet_dir: str) -> Checkpoint:
    """Read by Python when the dataset is on a local path (no Spark job,
    and before Spark starts: see job.size_input), else by Spark."""
    if not is_uri(parquet_dir):
        return _load_local(Path(parquet_dir) / CHECKPOINT)
    try:
        rows = spark.read.schema(SCHEMA).json(f"{parquet_dir}/{CHECKPOINT}").collect()
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            return Checkpoint()  # nothing compacted yet
        raise
    return Checkpoint(tuple((row.data_dir, row.file, row.batch) for row in rows))


def _load_local(directory: Path) -> Checkpoint:
    entries = []
    # What Spark reads of a directory: files not named _... or .... (its
    # commit markers and checksums).
    for path in sorted(directory.glob("[!_.]*")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            entries.append((row["data_dir"], row["file"], row["batch"]))
    return Checkpoint(tuple(entries))


def commit(spark: SparkSession, parquet_dir: str,
           entries: list[tuple[str, str, str]]) -> None:
    """On a local path, Python writes the file and renames it into place
    (the rename is the commit; a Spark job for a few lines cost a second);
    elsewhere Spark's commit protocol does it."""
    if not is_uri(parquet_dir):
        _commit_local(Path(parquet_dir) / CHECKPOINT, entries)
        return
    (spark.createDataFrame(entries, SCHEMA).coalesce(1)
     .write.mode("append").json(f"{parquet_dir}/{CHECKPOINT}"))


def _commit_local(directory: Path, entries: list[tuple[str, str, str]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    name = f"part-{uuid.uuid4().hex}.json"
    # Written under a name starting with "." (neither _load_local nor Spark
    # reads those), flushed, then renamed: the file appears whole or not at all.
    temporary = directory / f".{name}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        for data_dir, file, batch in entries:
            handle.write(json.dumps({"data_dir": data_dir, "file": file, "batch": batch},
                                    ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, directory / name)
