"""The dead-letter log's Spark schema, built from the one definition of the
event's fields in `dlx/events.py` (which the broker's writer also uses)."""

from __future__ import annotations

from pyspark.sql import types as T

from dlx.events import DEATH_FIELDS, FIELDS

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
