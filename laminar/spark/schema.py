"""The schema of a topic as a DataFrame, and the columns a write accepts.

Read schema (every record is one row):

  partition  INT                  the partition the record is in
  index      BIGINT               its index in that partition
  timestamp  TIMESTAMP            when the node appended it (ms precision)
  key        BINARY               its key; null when it has none
  value      BINARY               its value
  headers    MAP<STRING,BINARY>   its headers; null when it has none

The header `laminar.producer` that idempotent writers put on the first record
of each batch (`laminar.shards.idempotence`) belongs to the system and is not
shown. A write takes `value` (BINARY or STRING, required) and optionally
`key` (BINARY or STRING), `headers` (MAP<STRING,BINARY or STRING>) and
`partition` (an integer type); other columns are ignored, so a DataFrame read
from one topic can be written to another as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

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


_TEXT: Final = (BinaryType, StringType)
_INTEGERS: Final = (ByteType, ShortType, IntegerType, LongType)


def check_read_schema(schema: StructType) -> None:
    """A user-given read schema must be the topic schema (columns cannot be
    renamed or retyped here; select and cast after reading)."""
    if [f.name for f in schema.fields] != list(COLUMNS):
        raise LaminarSparkError(
            f"a laminar topic reads as ({SCHEMA_DDL}); got ({schema.simpleString()}). "
            "Leave .schema() out and select or cast columns after loading."
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
