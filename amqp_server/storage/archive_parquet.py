"""The dead-letter archive's file format: Parquet (zstd), one file per
batch, its schema built from the one definition of the dead-letter event
(`dlx/events.py`, as `spark/schema.py` builds the audit's) plus
`content_header`, the AMQP content header as stored, from which a
redrive rebuilds the message's properties byte for byte.

pyarrow is imported here and only here, and this module only where the
archive is written (the archive's writer process) or read (the
workbench's search, in a worker thread): the broker's event loop never
loads it.
"""

from __future__ import annotations

import logging
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from dlx.events import DEATH_FIELDS, FIELDS

from .archive_record import CONTENT_HEADER

log = logging.getLogger("amqp_server.archive")

_SIMPLE = {
    "long": pa.int64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "strings": pa.list_(pa.string()),
    "string_map": pa.map_(pa.string(), pa.string()),
}


def arrow_type(kind: str) -> pa.DataType:
    if kind == "deaths":
        return pa.list_(pa.struct([(name, arrow_type(inner)) for name, inner in DEATH_FIELDS]))
    return _SIMPLE[kind]


SCHEMA = pa.schema([(name, arrow_type(kind)) for name, kind in FIELDS]
                   + [(CONTENT_HEADER, pa.binary())])

# Values all but unique per record: a dictionary would only be built to be
# thrown away (as the audit's compaction finds, spark/compact.py).
_UNIQUE = {"time", "message_id", "body_sha256", "body", "event_id", CONTENT_HEADER}
_DICTIONARY = [name for name in SCHEMA.names if name not in _UNIQUE]


def write(handle: IO[bytes], columns: dict[str, list[Any]]) -> None:
    """Records given as columns (a column not given is null) as one
    Parquet file.  Column by column: pa.Table.from_pylist, row by row, took
    twice as long (59 ms a batch of 1,000 against 26)."""
    rows = max(map(len, columns.values()), default=0)
    table = pa.Table.from_arrays(
        [_array(columns.get(field.name, [None] * rows), field.type) for field in SCHEMA],
        schema=SCHEMA)
    pq.write_table(table, handle, compression="zstd", use_dictionary=_DICTIONARY)


def _array(values: list[Any], kind: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, type=kind)
    except (UnicodeEncodeError, OverflowError):
        # What a client sent that Parquet cannot hold: a short-string
        # property is any bytes (kept as lone surrogates when not UTF-8),
        # an x-death time any long.  One such message must not keep its
        # queue's dead letters from the archive for good: its readable
        # columns take storable values; its content header (what a
        # redrive rebuilds it from) stays byte for byte.
        return pa.array([storable(value) for value in values], type=kind)


_INT64 = range(-(1 << 63), 1 << 63)


def storable(value: Any) -> Any:
    """`value` with text that is not UTF-8 shown with U+FFFD in place of
    each bad byte, and integers past 64 bits as null, in lists and maps
    too."""
    if isinstance(value, str):
        try:
            raw = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate no undecodable byte became
            raw = value.encode("utf-8", "surrogatepass")
        return raw.decode("utf-8", "replace")
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value in _INT64 else None
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value


def read(path: str, vhost: str | None = None, queue: str | None = None) -> list[dict]:
    """A file's records, in the order written, of one queue when given;
    maps come back as dicts.  A file that is not Parquet (damaged after it
    was written: files are only ever renamed into place whole) is skipped,
    and logged, as the log's reader skips a broken line."""
    wanted = [(name, "=", value) for name, value in (("vhost", vhost), ("queue", queue))
              if value is not None]
    try:
        table = pq.read_table(path, schema=SCHEMA, filters=wanted or None,
                              partitioning=None)
    except (pa.ArrowInvalid, OSError) as exc:
        log.warning("archive file %s cannot be read, skipped: %s", path, exc)
        return []
    return table.to_pylist(maps_as_pydicts="strict")
