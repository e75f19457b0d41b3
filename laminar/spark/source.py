"""`LaminarDataSource`: the class Spark instantiates for `format("laminar")`.

Spark pickles this class to its Python workers by reference, so it must be
importable there (`laminar` installed in the interpreter `PYSPARK_PYTHON`
names). Each method parses the options first: a wrong option fails the query
before it reaches the node.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from laminar.spark.batch import LaminarBatchReader, LaminarBatchWriter
from laminar.spark.options import read_options, write_options
from laminar.spark.schema import SCHEMA_DDL, check_read_schema, write_columns
from laminar.spark.stream import LaminarStreamReader, LaminarStreamWriter


class LaminarDataSource(DataSource):
    """Topics of a laminar node as DataFrames, in batch and streaming, read and
    write (options: `laminar.spark.options`; schema: `laminar.spark.schema`)."""

    @classmethod
    def name(cls) -> str:
        return "laminar"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        check_read_schema(schema)
        return LaminarBatchReader(read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_read_schema(schema)
        return LaminarStreamReader(read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return LaminarBatchWriter(write_options(self.options), write_columns(schema), overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return LaminarStreamWriter(write_options(self.options), write_columns(schema), overwrite)
