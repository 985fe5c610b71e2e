"""The dead-letter log's Spark schema, built from the one definition of the
event's fields in `dlx/events.py` (which the broker's writer also uses)."""

from __future__ import annotations

from pyspark.sql import types as T

from dlx.events import DEATH_FIELDS, FIELDS

from .derived import DERIVED_FIELDS

_SIMPLE = {
    "long": T.LongType(),
    "string": T.StringType(),
    "boolean": T.BooleanType(),
    "strings": T.ArrayType(T.StringType()),
    "string_map": T.MapType(T.StringType(), T.StringType()),
}


def spark_type(kind: str) -> T.DataType:
    if kind == "deaths":
        return T.ArrayType(T.StructType(
            [T.StructField(name, spark_type(inner)) for name, inner in DEATH_FIELDS]))
    return _SIMPLE[kind]


EVENT_SCHEMA = T.StructType([T.StructField(name, spark_type(kind)) for name, kind in FIELDS])

# The compacted dataset: the event's fields, the columns derived from them
# (derived.py), the batch that wrote each row (checkpoint.py), and the
# partition columns node and day last, as Spark reads a partitioned dataset.
PARTITIONS = ("node", "day")
COMPACTED_SCHEMA = T.StructType(
    [field for field in EVENT_SCHEMA if field.name not in PARTITIONS]
    + list(DERIVED_FIELDS)
    + [T.StructField("batch", T.StringType()), T.StructField("node", T.StringType()),
       T.StructField("day", T.DateType())])
# What reading the events gives, compacted or not: the fields and the derived.
EVENTS_SCHEMA = T.StructType(list(EVENT_SCHEMA) + list(DERIVED_FIELDS))
