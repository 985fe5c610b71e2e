"""Dead letters held in streams, read like the dead-letter log (issue 30):
a dead-letter exchange may route into a stream, whose log keeps each copy
long after the dead-letter log's own retention removed its line (or on a
broker whose log was cleared).  The audit reads the streams' segment
files (`<data-dir>/streams/<vhost hex>/<stream hex>/*.seg`) and counts
every dead letter once, whichever of the two holds it.

Reading: the segments are the broker's framed msgpack records
(storage/stream_log.py), decoded with the broker's own record codec
(amqp_server.storage.records, which imports nothing of the broker: the
one piece of storage the layers let the audit use, tests/test_layers.py);
dlx/stream_copies.py turns each message that carries `x-death` into a
log line.  Those lines are parsed with the log's schema, so a stream's
dead letter is an event like any other from there on.

The decoding runs in the audit's own process, not in a Python UDF: the
job uses the DataFrame API only, so it runs the same in local mode, on a
standalone cluster and through Spark Connect, whose executors need not
have this package.  A local segment is read in chunks, never whole
(segments may be up to 3 GB); one behind a URI is listed and fetched by
Spark (`binaryFile`), one file at a time.  The lines leave out the body
(its size and digest stay): no table uses it, and a stream's events are
not compacted, so it would only cost the driver memory.  A stream has
its own retention: the audit reads what the streams hold on each run.

Counting once: the stream's copy carries no event id (the log's id is
given by the log's writer, after the copy was routed), so a copy and a
log line are matched by what both record of the death: the virtual host,
the queue and reason of the latest death, that death's x-death `count`
and `time` (the count tells a message's second death in a queue from its
first; the time is when it first died there), its message id and its
body's digest.  Two messages alike in all of these (same body, no message
id, first dead in the same queue for the same reason in the same second)
are told apart by how many of them each side holds: the n-th copy of a
key matches the n-th log line of that key, so each side's count of them
stands, and the larger one is counted.  Copies of one death fanned out to
several streams (or kept by several data directories) count as one.  A
log line whose copy the stream no longer holds, or a copy whose line the
log no longer holds, counts once too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import reduce
from pathlib import Path

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window, functions as F

from amqp_server.storage.records import decode_all
from dlx.stream_copies import events_of_records

from .derived import with_derived
from .schema import EVENT_SCHEMA, EVENTS_SCHEMA
from .sources import STREAM_SEGMENTS, LogSource, is_uri

READ_CHUNK = 8 << 20  # bytes of a local segment decoded at a time
# Stream directories are hex-named; a deleted stream's files wait in
# `.trash`, which this pattern never matches.
SEGMENTS = STREAM_SEGMENTS
DEAD_LETTERED = "dead_lettered"
# What a stream's copy and the log's line of one death share (see above).
KEY = ("vhost", "queue", "reason", "death_count", "death_time", "message_id", "body_sha256")
_KEY_SQL = ("element_at(deaths, 1).`count` AS death_count",
            "element_at(deaths, 1).time AS death_time")


def read_stream_events(spark: SparkSession, sources: list[LogSource]) -> DataFrame | None:
    """Every dead letter the streams hold, as events (the log's schema and
    the derived columns) with the `data_dir` that holds it; None when the
    streams hold none."""
    data_dirs: list[str] = []
    lines: list[str] = []
    for source in sources:
        for path, records in _segments(spark, source):
            vhost, stream = _place(path)
            for event in events_of_records(vhost, stream, records, body_limit=-1):
                data_dirs.append(source.data_dir)
                lines.append(json.dumps(event, separators=(",", ":")))
    if not lines:
        return None
    table = pa.table({"data_dir": pa.array(data_dirs, pa.string()),
                      "line": pa.array(lines, pa.string())})
    events = (spark.createDataFrame(table)
              .select("data_dir", F.from_json("line", EVENT_SCHEMA).alias("event"))
              .select("data_dir", "event.*"))
    # The node: the stream knows none; the data directory's name, as for
    # log lines written before brokers wrote `node` (sources.LogSource.name).
    name = F.element_at(F.split(F.regexp_replace("data_dir", "/+$", ""), "/"), -1)
    events = events.withColumn("node", F.coalesce(F.col("node"), name))
    return with_derived(events).select("data_dir", *EVENTS_SCHEMA.fieldNames())


def _segments(spark: SparkSession, source: LogSource) -> Iterator[tuple[str, Iterable]]:
    """(path, its records) of each segment of a data directory's streams.
    A torn tail (the segment being written) is left out, as the broker's
    recovery would cut it off."""
    if not is_uri(source.data_dir):
        # Path.glob: the directory's own name is no pattern ("broker[1]").
        for path in sorted(str(found) for found in Path(source.data_dir).glob(SEGMENTS)):
            yield path, _file_records(path)
        return
    from pyspark.errors import AnalysisException

    pattern = f"{source.data_dir.rstrip('/')}/{SEGMENTS}"
    try:
        files = (spark.read.format("binaryFile").option("ignoreMissingFiles", "true")
                 .load(pattern))
        files.columns  # noqa: B018 -- analysed now: a pattern matching nothing is no stream
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            return
        raise
    # One file at a time to the driver: binaryFile reads the content of
    # the files whose path passes the filter only.
    for listed in files.select("path").collect():
        (found,) = files.where(F.col("path") == listed.path).select("content").collect()
        yield listed.path, decode_all(found.content)[0]


def _file_records(path: str) -> Iterator:
    """The records of a local segment file, decoded READ_CHUNK bytes at a
    time: what follows the last whole record waits for the next chunk."""
    pending = b""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return  # retention removed it since it was listed
    with handle:
        while chunk := handle.read(READ_CHUNK):
            pending += chunk
            found, _problems, end = decode_all(pending)
            yield from found
            pending = pending[end:]


def _place(path: str) -> tuple[str, str]:
    """(vhost, stream) of a segment file, from its directories' hex names."""
    _rest, vhost_hex, stream_hex, _file = path.rsplit("/", 3)
    return (bytes.fromhex(vhost_hex).decode("utf-8", "surrogateescape"),
            bytes.fromhex(stream_hex).decode("utf-8", "surrogateescape"))


def _null_safe(left: str, right: str, columns) -> Column:
    return reduce(lambda a, b: a & b, [F.col(f"{left}.{c}").eqNullSafe(F.col(f"{right}.{c}"))
                                       for c in columns])


def counted_once(log_events: DataFrame, stream_events: DataFrame) -> DataFrame:
    """The log's events and the streams' dead letters that no log line
    stands for (see the module's comment on how they are matched)."""
    copies = stream_events.selectExpr("*", *_KEY_SQL, "element_at(target_queues, 1) AS stream")
    # The n-th copy of a key in one stream of one data directory; the same
    # death copied to several streams has the same n in each: kept once.
    copies = copies.withColumn("n", F.row_number().over(
        Window.partitionBy(*KEY, "data_dir", "stream").orderBy("time", "event_id")))
    copies = copies.dropDuplicates([*KEY, "n"])
    keys = copies.select(*KEY).dropDuplicates()
    lines = (log_events.where(F.col("outcome") == DEAD_LETTERED)
             .selectExpr(*KEY[:3], *_KEY_SQL, *KEY[5:], "time"))
    lines = lines.alias("l").join(keys.alias("k"), _null_safe("l", "k", KEY), "left_semi")
    lines = lines.withColumn("n", F.row_number().over(Window.partitionBy(*KEY).orderBy("time")))
    unmatched = copies.alias("c").join(lines.alias("l"), _null_safe("c", "l", (*KEY, "n")),
                                       "left_anti")
    return log_events.unionByName(unmatched.select(*EVENTS_SCHEMA.fieldNames()))


def with_stream_dead_letters(spark: SparkSession, sources: list[LogSource],
                             log_events: DataFrame) -> DataFrame:
    """The log's events, and the streams' dead letters counted once."""
    stream_events = read_stream_events(spark, sources)
    if stream_events is None:
        return log_events
    return counted_once(log_events, stream_events)
