"""One SparkSession for the audit: local mode by default, a cluster with
`--master`, Spark Connect with `--remote`.  Nothing here sets memory: that
belongs on the command line (`--conf spark.driver.memory=4g`).

What is set is for a quick start on a small machine: the driver JVM maps a
class-data archive and logs errors only (jvm_start.py), its incubator-module
warning is left out of stderr (jvm_stderr.py), and the JVMs and
Spark compile no more than the input is worth (sizing.py), because a short
run spends more time compiling than running (measured on 2 cores: a
46-event audit used 28 s of JVM CPU with the defaults).  `quick_jit`
(decided before the driver starts) stops the JVMs at their quick C1
compiler; for a light input `tune` has Spark interpret its expressions
instead of generating Java for them, plan each query once (no adaptive
re-planning between stages) and shuffle into one partition; a medium one
generates code but is still planned once.
"""

from __future__ import annotations

import os
import re
import sys

from pyspark.sql import SparkSession

from . import jvm_start
from .jvm_stderr import without_chatter
from .sizing import Sizing

# Small aggregates: a few shuffle partitions beat Spark's default 200.
SHUFFLE_PARTITIONS = "4"
# Compaction writes a task's rows (one log file: one node, a day or two)
# to that many Parquet files at once instead of sorting them by partition
# first (Spark's default, a copy of every row); more falls back to sorting.
CONCURRENT_WRITERS = "4"
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_OPTIONS = "spark.executor.extraJavaOptions"
# C1 alone shrinks the code cache to 48 MB (HotSpot's client default); a
# session that runs many queries fills it with generated Spark code, and a
# full cache fails the JVM's own method-handle adapters (InternalError:
# "no such method: MethodHandle.linkToSpecial").  Tiered's 240 MB instead:
# reserved address space, committed as used.
QUICK_JIT = ["-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m"]
# For an input that is not light, the throughput collector: the audit is a
# batch job that needs no short pauses, and on 2 cores G1's concurrent
# threads take CPU from the tasks (1M events: JVM CPU 79.7 -> 75.1 s first
# run, 25.4 -> 23.9 s re-run).  A light input keeps the default: no gain
# measured there.
THROUGHPUT_GC = ["-XX:+UseParallelGC"]
# SQL settings for a light input and for any other (Spark's, but for the
# shuffle partitions); they can change on a live session, so run() sets them
# once it has sized the input, where --conf does not set them.
LIGHT_SQL_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    # Internal, but stable since Spark 2.4: interpreted expressions.
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
}
HEAVY_SQL_CONF = {
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS,
}


def _java_options(ours: list[str], given: str | None) -> str:
    """Ours first, so options given with --conf win where they overlap."""
    return " ".join(ours + ([given] if given else []))


# Where else a driver JVM's options come from (Spark's defaults and the
# JVM's own environment variables).
JAVA_OPTION_ENV = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")
DEFAULT_DRIVER_OPTIONS = "spark.driver.defaultJavaOptions"


def _collector_given(conf: dict[str, str]) -> bool:
    """Whether the driver's options name a garbage collector already: one
    chosen there is the one, as two make the JVM refuse to start."""
    given = [conf.get(DRIVER_OPTIONS, ""), conf.get(DEFAULT_DRIVER_OPTIONS, ""),
             *(os.environ.get(name, "") for name in JAVA_OPTION_ENV)]
    return any(re.search(r"-XX:\+Use\w*GC\b", options) for options in given)


def build_session(master: str | None = None, remote: str | None = None,
                  conf: dict[str, str] | None = None, app_name: str = "amqp-dlq-audit",
                  quick_jit: bool = False, throughput_gc: bool = False) -> SparkSession:
    conf = dict(conf or {})
    # Executors that ever need Python use the interpreter running the audit.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if remote:
        builder = SparkSession.builder.remote(remote)
    else:
        # The driver binds to loopback instead of guessing an interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        c1 = QUICK_JIT if quick_jit else []
        gc = THROUGHPUT_GC if throughput_gc and not _collector_given(conf) else []
        conf[DRIVER_OPTIONS] = _java_options(jvm_start.java_options() + gc + c1,
                                             conf.get(DRIVER_OPTIONS))
        if quick_jit:  # on a cluster, its executors too (in local mode the driver is one)
            conf[EXECUTOR_OPTIONS] = _java_options(c1, conf.get(EXECUTOR_OPTIONS))
        builder = (SparkSession.builder.master(master or "local[*]")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false"))
    builder = (builder.appName(app_name)
               .config("spark.sql.shuffle.partitions", SHUFFLE_PARTITIONS)
               .config("spark.sql.maxConcurrentOutputFileWriters", CONCURRENT_WRITERS)
               .config("spark.sql.session.timeZone", "UTC"))
    # --conf wins over the defaults above.
    for key, value in conf.items():
        builder = builder.config(key, value)
    if remote:
        return builder.getOrCreate()
    with without_chatter():  # the driver JVM starts here, and inherits stderr
        return builder.getOrCreate()


def sql_conf(sizing: Sizing | None) -> dict[str, str]:
    """The SQL settings for an input of this size (None: not sized)."""
    if sizing is None:
        return HEAVY_SQL_CONF
    if sizing.light:
        return LIGHT_SQL_CONF
    return {**HEAVY_SQL_CONF, "spark.sql.adaptive.enabled": str(sizing.adaptive).lower()}


def tune(spark: SparkSession, sizing: Sizing | None, given: dict[str, str]) -> None:
    """The SQL settings for this input; those given with --conf win."""
    for key, value in sql_conf(sizing).items():
        spark.conf.set(key, given.get(key, value))
