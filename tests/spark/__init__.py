"""Tests of the PySpark connector (`laminar.spark`); skipped without pyspark."""
