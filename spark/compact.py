"""Incremental compaction of the dead-letter log to Parquet, and reading
the whole log back: Parquet for what was compacted, JSON for the rest.

The broker writes one NDJSON file at a time; every file but the newest is
sealed and can be compacted.  A checkpoint in the warehouse lists the files
compacted so far and the batches written for them: rows of a batch the
checkpoint does not name (a run that died between writing and committing)
are ignored, so a re-run never counts an event twice and reads only what is
new.  Parquet is zstd-compressed and partitioned by day.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .schema import EVENT_SCHEMA

LOG_DIR = "dead-letters"
LOG_SUFFIX = ".ndjson"
CHECKPOINT = "_checkpoint.json"
EVENTS = "events"


@dataclass
class Checkpoint:
    files: list[str] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, warehouse: Path) -> "Checkpoint":
        path = warehouse / CHECKPOINT
        if not path.exists():
            return cls()
        data = json.loads(path.read_text())
        return cls(list(data.get("files", [])), list(data.get("batches", [])))

    def save(self, warehouse: Path) -> None:
        warehouse.mkdir(parents=True, exist_ok=True)
        temporary = warehouse / (CHECKPOINT + ".tmp")
        temporary.write_text(json.dumps({"files": self.files, "batches": self.batches}))
        os.replace(temporary, warehouse / CHECKPOINT)  # atomic: the commit point


def log_files(data_dir: Path) -> list[Path]:
    """The log's files, oldest first (their names sort by time)."""
    return sorted((data_dir / LOG_DIR).glob(f"*{LOG_SUFFIX}"))


def read_json(spark: SparkSession, files: list[Path]) -> DataFrame:
    if not files:
        return spark.createDataFrame([], EVENT_SCHEMA)
    # A line the writer is still appending is malformed for now: skipped.
    return (spark.read.schema(EVENT_SCHEMA).option("mode", "DROPMALFORMED")
            .json([str(path) for path in files]))


def compact(spark: SparkSession, data_dir: Path, warehouse: Path) -> int:
    """Compact the sealed files not compacted yet; returns how many."""
    checkpoint = Checkpoint.load(warehouse)
    done = set(checkpoint.files)
    sealed = log_files(data_dir)[:-1]
    todo = [path for path in sealed if path.name not in done]
    if not todo:
        return 0
    batch = uuid.uuid4().hex
    (read_json(spark, todo)
     .withColumn("batch", F.lit(batch))
     .withColumn("day", F.to_date(F.timestamp_micros("time")))
     .write.mode("append").partitionBy("day").option("compression", "zstd")
     .parquet(str(warehouse / EVENTS)))
    checkpoint.files.extend(path.name for path in todo)
    checkpoint.batches.append(batch)
    checkpoint.save(warehouse)
    return len(todo)


def read_events(spark: SparkSession, data_dir: Path, warehouse: Path) -> DataFrame:
    """Every event: compacted Parquet plus the JSON not compacted yet."""
    checkpoint = Checkpoint.load(warehouse)
    done = set(checkpoint.files)
    pending = read_json(spark, [p for p in log_files(data_dir) if p.name not in done])
    if not checkpoint.batches:
        return pending
    compacted = (spark.read.parquet(str(warehouse / EVENTS))
                 .where(F.col("batch").isin(checkpoint.batches))
                 .select(*EVENT_SCHEMA.fieldNames()))
    return compacted.unionByName(pending)
