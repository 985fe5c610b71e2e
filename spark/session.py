"""One SparkSession for the audit: local mode by default, a cluster with
`--master`, Spark Connect with `--remote`.  Nothing here sets memory: that
belongs on the command line (`--conf spark.driver.memory=4g`)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

# Small aggregates: a few shuffle partitions beat Spark's default 200.
SHUFFLE_PARTITIONS = "4"


def build_session(master: str | None = None, remote: str | None = None,
                  conf: dict[str, str] | None = None,
                  app_name: str = "amqp-dlq-audit") -> SparkSession:
    # Executors that ever need Python use the interpreter running the audit.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if remote:
        builder = SparkSession.builder.remote(remote)
    else:
        # The driver binds to loopback instead of guessing an interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (SparkSession.builder.master(master or "local[*]")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.ui.enabled", "false")
                   .config("spark.log.level", "ERROR")
                   .config("spark.ui.showConsoleProgress", "false"))
    builder = (builder.appName(app_name)
               .config("spark.sql.shuffle.partitions", SHUFFLE_PARTITIONS)
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
