"""The audit's tables and replay file on disk.  Tables arrive as Arrow
tables (what Spark returned, with Spark's types), so each is written as
Parquet as it is, and as CSV with the same text as the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .report import Table, write_csv

REPLAY_FILE = "replay-candidates.ndjson"


def as_rows(table: pa.Table) -> Table:
    columns = [column.to_pylist() for column in table.columns]
    return Table(table.column_names, list(zip(*columns)) if columns else [])


def write_tables(table_dir: Path, tables: dict[str, pa.Table]) -> dict[str, Table]:
    """Writes `<name>.parquet` and `<name>.csv` per table (replacing what an
    earlier run left there); returns the rows for the report."""
    if table_dir.exists():
        shutil.rmtree(table_dir)
    table_dir.mkdir(parents=True)
    written = {}
    for name, table in tables.items():
        pq.write_table(table, table_dir / f"{name}.parquet", compression="zstd")
        written[name] = as_rows(table)
        write_csv(table_dir / f"{name}.csv", written[name])
    return written


def replay_lines(candidates: Table) -> list[dict]:
    """One line per message and queue it waits in now, in the format the
    broker's redrive takes (`amqpctl redrive --from-file`; see the README)."""
    lines = []
    for row in candidates.rows:
        died = dict(zip(candidates.columns, row))
        for queue in died["target_queues"] or ():
            lines.append({
                "node": died["node"], "vhost": died["vhost"], "queue": queue,
                "message_id": died["message_id"], "body_sha256": died["body_sha256"],
                "died_in": died["queue"], "reason": died["reason"],
                "exchange": died["original_exchange"],
                "routing_keys": list(died["original_routing_keys"] or ()),
                "time": died["time"].isoformat(timespec="microseconds"),
                "expires_again": died["expires_again"],
            })
    return lines


def write_replay_file(path: Path, candidates: Table) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for line in replay_lines(candidates):
            handle.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
