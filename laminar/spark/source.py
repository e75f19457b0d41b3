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
from laminar.spark.errors import LaminarSparkError
from laminar.spark.options import read_options, write_options
from laminar.spark.schema import SCHEMA_DDL, check_read_schema, read_schema, write_columns
from laminar.spark.stream import LaminarStreamReader, LaminarStreamWriter


class LaminarDataSource(DataSource):
    """Topics of a laminar node as DataFrames, in batch and streaming, read and
    write (options: `laminar.spark.options`; schema: `laminar.spark.schema`)."""

    @classmethod
    def name(cls) -> str:
        return "laminar"

    def schema(self) -> str:
        """The read schema: it depends on the options (several topics, Kafka's
        columns); a write takes the DataFrame's own."""
        try:
            options = read_options(self.options)
        except LaminarSparkError:
            return SCHEMA_DDL  # a write's options; a read's errors are raised by reader()
        return read_schema(options.kafka_schema, options.topic_column)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = read_options(self.options)
        check_read_schema(schema, options.kafka_schema, options.topic_column)
        return LaminarBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = read_options(self.options)
        check_read_schema(schema, options.kafka_schema, options.topic_column)
        return LaminarStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return LaminarBatchWriter(write_options(self.options), write_columns(schema), overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return LaminarStreamWriter(write_options(self.options), write_columns(schema), overwrite)
