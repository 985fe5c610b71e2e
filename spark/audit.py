"""`amqp-dlq-audit`: what died, where, why, and what to replay.

    amqp-dlq-audit --data-dir ./amqp-data --out ./audit

reads the dead-letter log the broker wrote under `--data-dir` (compacting
sealed files to Parquet first, so a re-run reads only what is new) and
writes report.html, summary.json and every table as Parquet and CSV under
`--out`.  Local mode by default; `--master spark://host:7077` or
`--remote sc://host:15002` for a cluster.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

from . import report, tables
from .compact import compact, read_events

EXIT_USAGE = 2
EXIT_NO_LOG = 66  # rabbitmqctl's EX_NOINPUT


def _moment(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a date or time (use ISO 8601, e.g. 2026-11-23 or "
            "2026-11-23T14:00:00+00:00)") from None


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"'{text}' is not KEY=VALUE")
    return key, value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amqp-dlq-audit", description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", required=True, type=Path,
                   help="the broker's data directory (its dead-letters/ log is read)")
    p.add_argument("--out", required=True, type=Path, help="where the report and tables go")
    p.add_argument("--warehouse", type=Path,
                   help="compacted Parquet and its checkpoint (default: "
                        "<data-dir>/dead-letters-parquet)")
    p.add_argument("--since", type=_moment, help="only events at or after this time (UTC)")
    p.add_argument("--until", type=_moment, help="only events before this time (UTC)")
    p.add_argument("--vhost", help="only this virtual host")
    p.add_argument("--queue", help="only messages that died in this queue")
    p.add_argument("--replay-candidates", action="store_true",
                   help="also write the messages safe to move back, with their original "
                        "exchange and routing keys")
    p.add_argument("--no-compact", action="store_true", help="read the log as it is")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", help="a Spark master URL (default local[*])")
    where.add_argument("--remote", help="a Spark Connect URL, sc://host:port")
    p.add_argument("--conf", type=_conf, action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting, e.g. spark.driver.memory=4g (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no summary on the terminal")
    return p


def run(spark, args) -> dict:
    """The whole audit on an existing session; returns the summary."""
    data_dir: Path = args.data_dir
    warehouse: Path = args.warehouse or data_dir / "dead-letters-parquet"
    out: Path = args.out
    started = time.monotonic()
    compacted = 0 if args.no_compact else compact(spark, data_dir, warehouse)
    filters = tables.Filters(args.since, args.until, args.vhost, args.queue)
    events = tables.prepare(filters.apply(read_events(spark, data_dir, warehouse))).cache()
    summary = tables.summary(events)
    unit = tables.bucket_unit(summary.pop("first_event_micros"),
                              summary.pop("last_event_micros"))
    frames = {"over_time": tables.over_time(events, unit)}
    frames.update({name: build(events) for name, build in tables.TABLES.items()})
    if args.replay_candidates:
        frames["replay_candidates"] = tables.replay_candidates(events)
    table_dir = out / "tables"
    if table_dir.exists():
        shutil.rmtree(table_dir)
    table_dir.mkdir(parents=True)
    collected: dict[str, report.Table] = {}
    for name, frame in frames.items():
        rows = frame.collect()  # small aggregates, computed once
        (spark.createDataFrame(rows, frame.schema).coalesce(1)
         .write.mode("overwrite").parquet(str(table_dir / f"{name}.parquet")))
        collected[name] = report.Table(frame.columns, [tuple(row) for row in rows])
        report.write_csv(table_dir / f"{name}.csv", collected[name])
    events.unpersist()
    if args.replay_candidates:
        summary["replay_candidates"] = len(collected["replay_candidates"].rows)
    summary["bucket"] = unit
    summary["filters"] = {"since": _text(args.since), "until": _text(args.until),
                          "vhost": args.vhost, "queue": args.queue}
    report.write_summary(out / "summary.json", summary)
    (out / "report.html").write_text(report.render_html(summary, collected))
    summary["_run"] = {"compacted_files": compacted,
                       "seconds": round(time.monotonic() - started, 3)}
    return summary


def _text(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    log_dir = args.data_dir / "dead-letters"
    if not log_dir.is_dir():
        print(f"amqp-dlq-audit: no dead-letter log in {args.data_dir} (expected "
              f"{log_dir}); is it the broker's --data-dir?", file=sys.stderr)
        return EXIT_NO_LOG
    args.out.mkdir(parents=True, exist_ok=True)
    from .session import build_session

    spark = build_session(args.master, args.remote, dict(args.conf))
    try:
        summary = run(spark, args)
    finally:
        spark.stop()
    if not args.quiet:
        print(report.terminal_summary(summary, args.out), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
