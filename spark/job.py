"""The audit on an existing SparkSession: find the logs, compact what was
sealed since the last run, aggregate and fetch every table (one query),
write the report.  `amqp-dlq-audit` (audit.py) wraps it in a
command."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, functions as F

from . import checkpoint, fact_tables, report, tables
from .buckets import bucket_unit
from .compact import compact, read_events, to_compact
from .progress import Progress
from .session import tune
from .sizing import Sizing, size_input
from .sources import LogSource, is_uri, local_sources, unique, uri_sources
from .stream_dead_letters import with_stream_dead_letters
from .table_files import REPLAY_FILE, write_replay_file, write_tables

PARQUET_DIR = "dead-letters-parquet"  # under the data directory, for one broker
ARCHIVED = "archived"  # the outcome of a record retention archived

# The tables in the order the report shows them.
ORDER = ("over_time", "by_node", "by_queue_reason", "by_exchange", "top_poison", "cycles",
         "time_to_death", "delivery_counts", "reasons_per_queue", "first_to_last", "drops",
         "replay_candidates")


class UsageError(Exception):
    """Options that do not go together; the message says what to give."""


# The archive's own records have event ids of the archiver's ("<id>-a<n>");
# the log's lines of the same removals, the log's ("<id>-<n>").
_ARCHIVE_ID = "-a[0-9]+$"
_ARCHIVED_KEY = ["vhost", "queue", "time", "message_id", "body_sha256"]


def count_archived(archived: DataFrame) -> int:
    """Each message retention archived, once: copies of one record or line
    (a follower's replicated archive and log) are one by their event id;
    an archive record and the log's line of its removal share their head
    (queue, time, message), and among alike messages archived together
    (one batch shares a time) the archive's records and the log's lines
    are counted by key, the larger of the two counts standing."""
    with_ids = archived.where(F.col("event_id").isNotNull()).dropDuplicates(["event_id"])
    once = with_ids.unionByName(archived.where(F.col("event_id").isNull()))
    from_archive = F.col("event_id").rlike(_ARCHIVE_ID)
    per_key = once.groupBy(*_ARCHIVED_KEY).agg(
        F.sum(F.when(from_archive, 1).otherwise(0)).alias("records"),
        F.sum(F.when(from_archive, 0).otherwise(1)).alias("lines"))
    total = per_key.agg(F.sum(F.greatest("records", "lines"))).first()[0]
    return int(total or 0)


def find_sources(spark: SparkSession, specs: list[str],
                 progress: Progress) -> tuple[list[LogSource], list[str]]:
    sources, notes = local_sources([spec for spec in specs if not is_uri(spec)])
    uris = [spec for spec in specs if is_uri(spec)]
    if uris:
        progress(f"listing the logs under {', '.join(uris)}")
        more, more_notes = uri_sources(spark, uris)
        sources, notes = sources + more, notes + more_notes
    return unique(sources), notes


def parquet_location(given: str | None, sources: list[LogSource]) -> str | None:
    """Where the compacted dataset is: --parquet-dir, else (one broker) its
    data directory's dead-letters-parquet; None: JSON only."""
    if given is not None:
        return given if is_uri(given) else str(Path(given).absolute())
    if len(sources) == 1:
        return f"{sources[0].data_dir}/{PARQUET_DIR}"
    return None


def size_local_input(args) -> Sizing | None:
    """The input's size before Spark starts, when every --data-dir is a
    plain path (it decides how the driver JVM compiles); a data directory
    that names nothing raises DataDirError, options that do not go
    together UsageError."""
    sources, _ = local_sources([spec for spec in args.data_dir if not is_uri(spec)])
    sources = unique(sources)
    parquet_dir = check_parquet_dir(args, sources)
    if any(is_uri(spec) for spec in args.data_dir):
        return None
    done = checkpoint.load(None, parquet_dir) if parquet_dir else checkpoint.Checkpoint()
    return size_input(sources, parquet_dir, done)


def check_parquet_dir(args, sources: list[LogSource]) -> str | None:
    parquet_dir = parquet_location(args.parquet_dir, sources)
    if parquet_dir is None and not args.no_compact:
        raise UsageError(f"{len(sources)} data directories: give --parquet-dir (where their "
                         "compacted events go), or --no-compact")
    return parquet_dir


def run(spark: SparkSession, args, progress: Progress | None = None,
        spark_done: Callable[[], None] | None = None) -> dict:
    """The whole audit; returns the summary (with `_run` facts about this
    run).  `spark_done` is called once Spark is no longer needed (the
    report is written from what was fetched)."""
    progress = progress or Progress(quiet=True)
    started = time.monotonic()
    sources, notes = find_sources(spark, args.data_dir, progress)
    parquet_dir = check_parquet_dir(args, sources)
    done = checkpoint.load(spark, parquet_dir) if parquet_dir else checkpoint.Checkpoint()
    sizing = size_input(sources, parquet_dir, done)
    tune(spark, sizing, dict(args.conf))
    todo = [] if args.no_compact else to_compact(sources, done)
    if todo:
        progress(f"compacting {sum(len(files) for _, files in todo)} sealed log files of "
                 f"{len(todo)} broker(s) into {parquet_dir}")
        done = compact(spark, parquet_dir, todo, done)

    progress("aggregating the events")
    filters = tables.Filters(args.since, args.until, args.vhost, args.queue, args.node)
    split = fact_tables.Split(args.by_node)
    events = filters.apply(with_stream_dead_letters(
        spark, sources, read_events(spark, sources, parquet_dir, done, filters.partitions)))
    # Retention's archive records (and the log's lines of their removal)
    # are no deaths: counted apart (count_archived).
    is_archived = F.col("outcome").eqNullSafe(ARCHIVED)
    archived = events.where(is_archived)
    prepared = tables.prepare(events.where(~is_archived))
    # One query fetches the facts and the tables that need the events; the
    # two caches are built on the way and shared by them.
    facts = tables.facts(prepared).cache()
    repeated = tables.repeated(tables.per_message(prepared, split)).cache()
    frames = {"facts": facts, "repeats": tables.repeats(repeated),
              "over_time": tables.over_time(prepared, facts, split),
              "top_poison": tables.top_poison(prepared, repeated, split)}
    if args.replay_candidates:
        frames["replay_candidates"] = tables.replay_candidates(prepared, repeated, split)
    fetched = tables.collect_all(frames)
    fact_rows, (repeats,) = fetched.pop("facts"), fetched.pop("repeats").to_pylist()
    fetched.update(fact_tables.from_facts(fact_rows, split))
    totals = fact_tables.totals(fact_rows, split)
    summary = fact_tables.summary(totals, repeats["repeats"], repeats["died_again_after_redrive"])
    summary["archived"] = count_archived(archived)
    unit = bucket_unit(totals["first"], totals["last"])
    facts.unpersist()
    repeated.unpersist()
    if spark_done is not None:
        spark_done()

    progress("writing the report")
    out: Path = args.out
    written = write_tables(out / "tables", {name: fetched[name] for name in ORDER
                                            if name in fetched})
    replay_path = out / REPLAY_FILE
    replay_path.unlink(missing_ok=True)  # never one from an earlier run
    if args.replay_candidates:
        write_replay_file(replay_path, written["replay_candidates"])
        summary["replay_candidates"] = len(written["replay_candidates"].rows)
        again = sum(1 for row in written["replay_candidates"].dicts() if row["expires_again"])
        summary["replay_candidates_expiring_again"] = again
        if again:
            notes.append(report.expiring_again_note(again))
    summary["queues"] = len({(row["vhost"], row["queue"])
                             for row in written["reasons_per_queue"].dicts()})
    summary["nodes"] = len(written["by_node"].rows)
    if summary["events"] == 0:
        notes.append("0 dead letters" + (" match the filters" if filters != tables.Filters()
                                         else " in the log"))
    summary.update(bucket=unit, by_node=split.by_node, notes=notes, filters={
        "since": _iso(args.since), "until": _iso(args.until), "vhost": args.vhost,
        "queue": args.queue, "node": args.node})
    report.write_summary(out / "summary.json", summary)
    (out / "report.html").write_text(report.render_html(summary, written))
    summary["_run"] = {"compacted_files": sum(len(files) for _, files in todo),
                       "seconds": round(time.monotonic() - started, 3)}
    progress(f"done: {report.headline(summary)}")
    return summary


def _iso(moment) -> str | None:
    return moment.isoformat() if moment is not None else None
