"""The schema of a topic as a DataFrame, and the columns a write accepts.

Read schema (every record is one row; a read of several topics adds
`topic STRING` at the end; `kafkaCompatibleSchema=true` gives Spark's Kafka
source columns instead: key, value, topic, partition, offset, timestamp,
timestampType (1: append time), headers ARRAY<STRUCT<key, value>>):

  partition  INT                  the partition the record is in
  index      BIGINT               its index in that partition
  timestamp  TIMESTAMP            when the node appended it (ms precision)
  key        BINARY               its key; null when it has none
  value      BINARY               its value; null for a null value (a Kafka tombstone)
  headers    MAP<STRING,BINARY>   its headers; null when it has none

The headers `laminar.producer` (idempotent producers,
`laminar.shards.idempotence`) and `laminar.write` (atomic writes,
`laminar.writes`) that laminar puts on the first record of a batch
belong to the system and are not shown. A write takes `value` (BINARY or
STRING, required) and optionally `key` (BINARY or STRING), `headers`
(MAP<STRING,BINARY or STRING>) and `partition` (an integer type); other
columns are ignored, so a DataFrame read from one topic can be written to another
as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from laminar.spark.errors import LaminarSparkError

SCHEMA_DDL: Final = (
    "partition INT, index BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, "
    "headers MAP<STRING,BINARY>"
)
COLUMNS: Final = ("partition", "index", "timestamp", "key", "value", "headers")

TOPIC_DDL: Final = "topic STRING"
"""Appended to laminar's columns when a read covers several topics (subscribe)."""
KAFKA_SCHEMA_DDL: Final = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
"""`kafkaCompatibleSchema=true`: the columns of Spark's Kafka source, in its order."""
KAFKA_COLUMNS: Final = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
)
LOG_APPEND_TIME: Final = 1
"""Kafka's timestampType for a time the broker set: laminar's timestamps are
append times."""


def read_schema(kafka: bool, topic_column: bool) -> str:
    """The DDL of a read's rows (see the module docstring)."""
    if kafka:
        return KAFKA_SCHEMA_DDL
    return f"{SCHEMA_DDL}, {TOPIC_DDL}" if topic_column else SCHEMA_DDL


def read_columns(kafka: bool, topic_column: bool) -> tuple[str, ...]:
    if kafka:
        return KAFKA_COLUMNS
    return (*COLUMNS, "topic") if topic_column else COLUMNS


_TEXT: Final = (BinaryType, StringType)
_INTEGERS: Final = (ByteType, ShortType, IntegerType, LongType)


def check_read_schema(schema: StructType, kafka: bool = False, topic_column: bool = False) -> None:
    """A user-given read schema must be the topic schema (columns cannot be
    renamed or retyped here; select and cast after reading)."""
    if [f.name for f in schema.fields] != list(read_columns(kafka, topic_column)):
        raise LaminarSparkError(
            f"a laminar topic reads as ({read_schema(kafka, topic_column)}); got "
            f"({schema.simpleString()}). Leave .schema() out and select or cast columns after "
            "loading."
        )


@dataclass(frozen=True, slots=True)
class WriteColumns:
    """The DataFrame's names of the columns a write uses (None: not there)."""

    value: str
    key: str | None = None
    headers: str | None = None
    partition: str | None = None


def write_columns(schema: StructType) -> WriteColumns:
    """Check a DataFrame's schema for writing; `LaminarSparkError` if unusable."""
    names = {f.name.lower(): f.name for f in schema.fields}
    types = {f.name.lower(): f.dataType for f in schema.fields}
    value = types.get("value")
    if value is None:
        raise LaminarSparkError(
            "a DataFrame written to laminar needs a `value` column (BINARY or STRING); it has "
            f"({schema.simpleString()}). Rename or build one, e.g. "
            'df.selectExpr("to_json(struct(*)) AS value")'
        )
    _expect("value", value, _TEXT, "BINARY or STRING")
    if "key" in types:
        _expect("key", types["key"], _TEXT, "BINARY or STRING")
    if "headers" in types:
        headers = types["headers"]
        if not (
            isinstance(headers, MapType)
            and isinstance(headers.keyType, StringType)
            and isinstance(headers.valueType, _TEXT)
        ):
            raise LaminarSparkError(
                f"column `headers` must be MAP<STRING,BINARY>, not {headers.simpleString()}"
            )
    if "partition" in types:
        _expect("partition", types["partition"], _INTEGERS, "an integer type")
    return WriteColumns(
        names["value"], names.get("key"), names.get("headers"), names.get("partition")
    )


def _expect(name: str, found: DataType, allowed: tuple[type, ...], words: str) -> None:
    if not isinstance(found, allowed):
        raise LaminarSparkError(f"column `{name}` must be {words}, not {found.simpleString()}")


_KAFKA_HEADERS: Final = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def reshape(batch: pa.RecordBatch, topic: str, kafka: bool, topic_column: bool) -> pa.RecordBatch:
    """A batch of laminar's read schema in the shape a read asked for: with a
    `topic` column, or with Kafka's columns (`laminar.spark.schema`)."""
    if not topic_column and not kafka:
        return batch
    n = batch.num_rows
    topics = pa.array([topic] * n, pa.string()) if n else pa.array([], pa.string())
    if not kafka:
        return pa.RecordBatch.from_arrays(
            [*batch.columns, topics], names=[*batch.schema.names, "topic"]
        )
    headers = batch.column(5)
    if headers.null_count == n:
        kafka_headers = pa.nulls(n, _KAFKA_HEADERS)
    else:
        entries = pa.StructArray.from_arrays([headers.keys, headers.items], names=["key", "value"])
        kafka_headers = pa.ListArray.from_arrays(
            headers.offsets, entries, type=_KAFKA_HEADERS, mask=headers.is_null()
        )
    return pa.RecordBatch.from_arrays(
        [
            batch.column(3),
            batch.column(4),
            topics,
            batch.column(0),
            batch.column(1),
            batch.column(2),
            pa.array(np.full(n, LOG_APPEND_TIME, np.int32)),
            kafka_headers,
        ],
        names=list(KAFKA_COLUMNS),
    )
