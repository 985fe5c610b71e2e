"""Which dead-letter logs the audit reads.

Each `--data-dir` is a broker's data directory, a glob of them, or a
Hadoop-compatible URI (`file://`, `hdfs://`, `s3a://` where the site has
the connector), globs included.  Plain paths are looked at here, before
Spark starts, so a mistyped directory fails at once; URIs are listed by
Spark, which is the only one that can read them.

A data directory whose `dead-letters/` is missing or empty belongs to a
broker that has not dead-lettered anything yet: it counts as zero events,
with a note.  A path that matches nothing at all is an error.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

LOG_DIR = "dead-letters"
LOG_SUFFIX = ".ndjson"
# Retention's archive (the broker's storage/archive.py): Parquet files of the
# log's fields (and the content header, which the audit leaves out), outcome
# `archived`, partitioned node=/day=; each file written whole, then renamed
# into place.  Already Parquet: read as it is, never compacted.
ARCHIVE_DIR = "dead-letter-archive"
# A stream's segments (stream_dead_letters.py reads the dead letters in them).
STREAM_SEGMENTS = "streams/[0-9a-f]*/[0-9a-f]*/*.seg"
ARCHIVE_PATTERN = "archive-*.parquet"
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class DataDirError(Exception):
    """A --data-dir that names nothing: the message says which."""


@dataclass(frozen=True)
class LogSource:
    """One broker's log: its data directory (an absolute path or a URI, as
    the checkpoint records it) and its files, oldest first (their names sort
    by time); the newest may still be written to."""
    data_dir: str
    files: tuple[str, ...]
    sizes: tuple[int, ...] = ()  # of each file, in bytes
    archived: tuple[str, ...] = ()  # the archive's files (all sealed)
    archived_sizes: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        """The data directory's own name: the node of events written before
        brokers wrote `node` (see the README)."""
        return self.data_dir.rstrip("/").rsplit("/", 1)[-1]

    @property
    def sealed(self) -> tuple[str, ...]:
        """The log files that can be compacted: all but the newest."""
        return self.files[:-1]


def is_uri(spec: str) -> bool:
    return _URI.match(spec) is not None


def no_log_note(data_dir: str) -> str:
    return (f"{data_dir}: no dead letters yet (no {LOG_DIR}/ log files; the broker "
            "starts its log at its first dead letter)")


def local_sources(specs: list[str]) -> tuple[list[LogSource], list[str]]:
    """The plain-path specs as sources, with a note for each log not there yet."""
    sources, notes = [], []
    for spec in specs:
        # A directory by that very name is taken as it is, though its name
        # holds a glob's characters ("broker[1]").
        matches = ([spec] if Path(spec).exists() or not glob.has_magic(spec)
                   else sorted(glob.glob(spec)))
        matches = [m for m in matches if Path(m).exists()]
        if not matches:
            raise DataDirError(f"no such data directory: {spec}")
        for match in matches:
            path = Path(match).absolute()
            if not path.is_dir():
                raise DataDirError(f"{spec}: {path} is not a directory (give the broker's "
                                   "--data-dir)")
            files = sorted((path / LOG_DIR).glob(f"*{LOG_SUFFIX}"))
            archived = sorted((path / ARCHIVE_DIR).rglob(ARCHIVE_PATTERN), key=lambda f: f.name)
            if not files and not archived and not any(path.glob(STREAM_SEGMENTS)):
                notes.append(no_log_note(str(path)))
            sources.append(LogSource(str(path), tuple(map(str, files)),
                                     tuple(f.stat().st_size for f in files),
                                     tuple(map(str, archived)),
                                     tuple(f.stat().st_size for f in archived)))
    return sources, notes


def uri_sources(spark, specs: list[str]) -> tuple[list[LogSource], list[str]]:
    """The URI specs as sources, listed by Spark (file names only, no content)."""
    sources, notes = [], []
    for spec in specs:
        base = spec.rstrip("/")
        paths = _list(spark, f"{base}/{LOG_DIR}", f"*{LOG_SUFFIX}")
        if not paths:
            if _list(spark, base, "*") is None:
                raise DataDirError(f"no such data directory: {spec}")
            notes.append(no_log_note(base))
            if not glob.has_magic(base):
                sources.append(LogSource(_local_if_file(base), ()))
            continue
        by_dir: dict[str, dict[str, int]] = {}
        for path, size in paths.items():
            path = _local_if_file(path)
            data_dir = path.rsplit("/", 2)[0]  # <data-dir>/dead-letters/<file>
            by_dir.setdefault(data_dir, {})[path] = size
        for data_dir, sizes in sorted(by_dir.items()):
            files = sorted(sizes, key=_file_name)
            sources.append(LogSource(data_dir, tuple(files), tuple(map(sizes.get, files))))
    return sources, notes


def _local_if_file(path: str) -> str:
    """A file: URI as Spark lists it (file:/a%20b/x) as the plain path, so a
    directory given both ways is one source with one checkpoint."""
    parts = urlsplit(path)
    return unquote(parts.path) if parts.scheme == "file" else path


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _list(spark, pattern: str, names: str) -> dict[str, int] | None:
    """Paths (and sizes) of the files under `pattern` whose names match
    `names`; None when `pattern` matches nothing at all."""
    from pyspark.errors import AnalysisException

    try:
        # Recursive lookup: a data directory's subdirectories are not
        # partitions, and without it Spark would try to read them as such.
        rows = (spark.read.format("binaryFile").option("pathGlobFilter", names)
                .option("recursiveFileLookup", "true")
                .load(pattern).select("path", "length").collect())
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            return None
        raise
    return {row.path: row.length for row in rows}


def unique(sources: list[LogSource]) -> list[LogSource]:
    """A data directory given twice (or matched by two globs) is read once."""
    seen: dict[str, LogSource] = {}
    for source in sources:
        seen.setdefault(source.data_dir, source)
    return list(seen.values())
