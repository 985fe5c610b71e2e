"""What the driver JVM starts with, beyond Spark's defaults, to start quick
and quiet; both live in a cache directory.

A class-data sharing archive (Java's AppCDS): the JVM maps the classes
Spark loads at start from one file instead of reading and verifying them
from some 280 jars.  Measured on 2 cores: session start 7.5 -> 4 s and the
first query 4.6 -> 2 s.  The first run on a machine (for one Java and one
pyspark install) writes the archive as its JVM exits
(-XX:ArchiveClassesAtExit, about 170 MB, a few seconds once); later runs
map it (-XX:SharedArchiveFile).  The JVM outlives the Python process while
it writes, so it writes under a temporary name, and a later run puts the
file in place once no process names it on its command line any more.  An
archive the JVM cannot use is ignored by it: the audit then only starts
slower.

A log configuration that keeps Spark's start-up chatter (its default
profile, the native-library warning) off the terminal, where the audit's
own progress goes: errors only.

AMQP_DLQ_AUDIT_CACHE names the directory (default ~/.cache/amqp-dlq-audit);
set it empty to turn both off.  Linux only (it reads /proc).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

ENV = "AMQP_DLQ_AUDIT_CACHE"
# CDS explains itself at length (classes it skips, mismatches); none of it
# matters to the audit.
QUIET = "-Xlog:cds*=off"
# HotSpot's dynamic archive magic (0xf00baba8), little-endian: a file that
# does not start with it is not one the JVM could map.
DYNAMIC_ARCHIVE_MAGIC = bytes.fromhex("a8ab0bf0")
# Beside each archive: the Java binary and pyspark install it was made
# from, one path per line, so that one of a removed install can be deleted.
OWNER_SUFFIX = ".install"


def cache_dir() -> Path | None:
    configured = os.environ.get(ENV)
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "amqp-dlq-audit"


def _java() -> str | None:
    """The java that Spark's launcher will run (JAVA_HOME first)."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def _install() -> list[str]:
    """The files an archive was made from: Java, then pyspark."""
    import pyspark

    java = _java()
    return [java, pyspark.__file__] if java else []


def archive_name(install: list[str] | None = None) -> str | None:
    """Names one archive per Java binary and pyspark install (`_install()`
    unless given)."""
    import pyspark

    if install is None:
        install = _install()
    if not install:
        return None
    java, package = install
    stat = os.stat(java)
    identity = f"{java}:{stat.st_size}:{stat.st_mtime_ns}:{package}:{pyspark.__version__}"
    return f"spark-{pyspark.__version__}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def _being_written(path: Path) -> bool:
    """Whether a running process names `path` on its command line."""
    needle = str(path).encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if needle in handle.read():
                        return True
            except OSError:
                continue
    return False


LOG_CONFIG = """\
# amqp-dlq-audit: Spark's own log, errors only (see spark/jvm_start.py)
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# PySpark starts Spark as a shell, whose level this is: the same as the
# root's, or Spark announces that it differs.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def java_options() -> list[str]:
    directory = cache_dir()
    if directory is None:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    return [*_log_options(directory), *_archive_options(directory)]


def _log_options(directory: Path) -> list[str]:
    path = directory / "log4j2.properties"
    if not path.exists() or path.read_text() != LOG_CONFIG:
        temporary = directory / f"log4j2.{uuid.uuid4().hex}.tmp"
        temporary.write_text(LOG_CONFIG)
        os.replace(temporary, path)
    return [f"-Dlog4j2.configurationFile={path}"]


def _forget_other_installs(directory: Path, current: str, install: list[str]) -> None:
    """An archive is some 170 MB and every pyspark install (a virtualenv, a
    CI clone) has its own: those of installs that are gone, or that were
    upgraded in place (the same files now give another name), are deleted.
    Archives from before these records are left alone."""
    for owner in directory.glob(f"spark-*{OWNER_SUFFIX}"):
        name = owner.name[:-len(OWNER_SUFFIX)]
        if name == current:
            continue
        try:
            made_from = owner.read_text().splitlines()
        except OSError:
            continue
        if made_from != install and all(os.path.exists(path) for path in made_from):
            continue
        for stale in directory.glob(f"{name}.*"):
            if not _being_written(stale):
                stale.unlink(missing_ok=True)


def _settle(directory: Path, name: str) -> None:
    """Archives written under a temporary name whose JVM has exited: a
    complete one is put in place, one whose JVM died before it got far is
    dropped."""
    for written in directory.glob(f"{name}.*.tmp"):
        if _being_written(written):
            continue
        with open(written, "rb") as handle:
            complete = handle.read(4) == DYNAMIC_ARCHIVE_MAGIC
        if complete:
            os.replace(written, directory / f"{name}.jsa")
        else:
            written.unlink(missing_ok=True)


def _archive_options(directory: Path) -> list[str]:
    """The options that use the archive, or write it when there is none."""
    install = _install()
    name = archive_name(install)
    if name is None or not os.path.isdir("/proc"):
        return []
    _forget_other_installs(directory, name, install)
    # Every install's, so that no complete archive waits under a temporary
    # name for its own install's next run.
    for other in {path.name.rsplit(".", 2)[0] for path in directory.glob("spark-*.tmp")}:
        _settle(directory, other)
    owner = directory / f"{name}{OWNER_SUFFIX}"
    if not owner.exists():
        # Whole or not at all: another install reading half of it would
        # take this one for gone.
        part = directory / f"{owner.name}.{uuid.uuid4().hex}.part"
        part.write_text("\n".join(install) + "\n")
        os.replace(part, owner)
    final = directory / f"{name}.jsa"
    if final.exists():
        return [f"-XX:SharedArchiveFile={final}", QUIET]
    return [f"-XX:ArchiveClassesAtExit={directory / f'{name}.{uuid.uuid4().hex}.tmp'}", QUIET]
