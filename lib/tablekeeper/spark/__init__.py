"""The engine layer: Spark sessions and distributed work as plain functions."""

from tablekeeper.spark.session import get_spark

__all__ = ["get_spark"]
