"""`amqp-dlq-audit`: what died, where, why, and what to replay, for one
broker or a fleet.

    amqp-dlq-audit --data-dir ./amqp-data --out ./audit
    amqp-dlq-audit --data-dir '/srv/brokers/*/data' --parquet-dir /shared/dlq --out ./audit

reads the dead-letter logs the brokers wrote under each `--data-dir`
(compacting sealed files to Parquet first, so a re-run reads only what is
new) and writes report.html, summary.json and every table as Parquet and
CSV under `--out`.  Local mode by default; `--master spark://host:7077` or
`--remote sc://host:15002` for a cluster.

This module imports nothing but the standard library until the arguments
are read, so `--help` and the message about a missing `audit` extra work
without Spark installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import threading
from datetime import datetime
from pathlib import Path

EXIT_USAGE = 2
EXIT_NO_LOG = 66  # rabbitmqctl's EX_NOINPUT
EXIT_NO_EXTRA = 69  # EX_UNAVAILABLE
# What the `audit` extra brings; an ImportError naming another module is a bug.
EXTRA_MODULES = ("pyspark", "py4j", "pyarrow", "pandas", "grpc", "matplotlib", "rich")
# The package is not on PyPI: the extra comes from where the broker came.
INSTALL_HINT = ("pip install '.[audit]' in a checkout of amqp-server, or pip install "
                "'amqp_server-*.whl[audit]' with its wheel")
# The report's charts (matplotlib, half a second to import): imported on a
# thread while the JVM starts, which leaves this process idle.
CHARTS = f"{__package__ or 'spark'}.charts"


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
    p.add_argument("--data-dir", required=True, action="append", metavar="DIR",
                   help="a broker's data directory (its dead-letters/ log is read); "
                        "repeatable, a glob, or a URI Spark reads (file://, hdfs://, s3a://)")
    p.add_argument("--out", required=True, type=Path, help="where the report and tables go")
    p.add_argument("--parquet-dir", "--warehouse", dest="parquet_dir", metavar="DIR",
                   help="the compacted Parquet dataset and its checkpoint, partitioned by "
                        "node and day; a path or a URI (default, for one data directory: "
                        "<data-dir>/dead-letters-parquet)")
    p.add_argument("--since", type=_moment, help="only events at or after this time (UTC)")
    p.add_argument("--until", type=_moment, help="only events before this time (UTC)")
    p.add_argument("--vhost", help="only this virtual host")
    p.add_argument("--queue", help="only messages that died in this queue")
    p.add_argument("--node", help="only this broker (its node_name)")
    p.add_argument("--by-node", action="store_true",
                   help="split every table and chart by broker (node)")
    p.add_argument("--replay-candidates", action="store_true",
                   help="also write the messages safe to move back, with their original "
                        "exchange and routing keys (replay-candidates.ndjson, for "
                        "`amqpctl redrive --from-file`)")
    p.add_argument("--no-compact", action="store_true", help="read the log as it is")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", help="a Spark master URL (default local[*])")
    where.add_argument("--remote", help="a Spark Connect URL, sc://host:port")
    p.add_argument("--conf", type=_conf, action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting, e.g. spark.driver.memory=4g (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    return p


def _fail(message: str, code: int) -> int:
    print(f"amqp-dlq-audit: {message}", file=sys.stderr)
    return code


def _no_extra(exc: ImportError) -> int:
    if (exc.name or "").split(".")[0] not in EXTRA_MODULES:
        raise exc
    return _fail(f"needs the audit extra ({exc.name} is missing): {INSTALL_HINT}",
                 EXIT_NO_EXTRA)


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules as None: blocked
        return False


class _Preload(threading.Thread):
    """Imports a module on a thread; `error()` waits and gives its ImportError."""

    def __init__(self, module: str) -> None:
        super().__init__(daemon=True)
        self.module, self._error = module, None
        self.start()

    def run(self) -> None:
        try:
            importlib.import_module(self.module)
        except ImportError as exc:
            self._error = exc

    def error(self) -> ImportError | None:
        self.join()
        return self._error


class _Stopping(threading.Thread):
    """Stops the Spark session on a thread, so the JVM winds down (0.3-0.5
    s) while the report is drawn; `finish()` stops it here if that has not
    begun, and waits."""

    def __init__(self, spark) -> None:
        super().__init__(daemon=True)
        self.spark, self.begun, self._error = spark, False, None

    def start(self) -> None:
        super().start()
        self.begun = True

    def run(self) -> None:
        try:
            self.spark.stop()
        except Exception as exc:  # raised by finish(), on the main thread
            self._error = exc

    def finish(self) -> None:
        if self.begun:
            self.join()
        else:
            self.run()
        if self._error is not None:
            raise self._error


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        from . import job, report
        from .progress import Progress
        from .session import build_session
        from .sources import DataDirError

        # Imported later: matplotlib on a thread (CHARTS), rich for the
        # terminal's table once the report is written.
        for later in ("matplotlib", "rich"):
            if not _findable(later):
                raise ModuleNotFoundError(f"No module named '{later}'", name=later)
    except ImportError as exc:
        return _no_extra(exc)
    charts = _Preload(CHARTS)
    progress = Progress(quiet=args.quiet)
    try:
        # Plain paths are checked before Spark starts: a typo fails at once.
        sizing = job.size_local_input(args)
    except DataDirError as exc:
        return _fail(str(exc), EXIT_NO_LOG)
    except job.UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    args.out.mkdir(parents=True, exist_ok=True)
    progress("starting Spark")
    spark = build_session(args.master, args.remote, dict(args.conf),
                          quick_jit=sizing is not None and sizing.quick_jit,
                          throughput_gc=sizing is not None and not sizing.light)
    stopping = _Stopping(spark)
    progress.follow(spark)

    def spark_done() -> None:
        progress.unfollow()
        stopping.start()

    try:
        missing = charts.error()
        if missing is not None:
            return _no_extra(missing)
        summary = job.run(spark, args, progress, spark_done=spark_done)
    except DataDirError as exc:
        return _fail(str(exc), EXIT_NO_LOG)
    except job.UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    finally:
        progress.unfollow()
        stopping.finish()
    if not args.quiet:
        print(report.terminal_summary(summary, args.out), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
