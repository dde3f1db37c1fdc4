"""The environment under test is one line, whole: the session's Spark, Scala, Delta and Iceberg
runtimes are the ones conf/jars.txt pins for it, and the Python packages match them. A tier run
against a mixed environment (a 4.0 pyspark with 3.5's jars) would prove nothing about either line."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pytest

from tablekeeper.settings import jar_specs
from tests.compat.conftest import Line

pytestmark = pytest.mark.spark


def test_the_session_runs_the_pinned_runtimes_of_one_line(spark: Any, line: Line) -> None:
    scala = str(spark.sparkContext._jvm.scala.util.Properties.versionNumberString())
    scala_suffix = "_" + ".".join(scala.split(".")[:2])
    by_role = {s.role: s for s in jar_specs() if s.artifact.endswith(scala_suffix)}
    iceberg, delta = by_role.get("iceberg"), by_role.get("delta")
    assert iceberg is not None and delta is not None, (scala, jar_specs())
    # iceberg-spark-runtime-<spark minor>_<scala>: the runtime built for this Spark.
    assert iceberg.artifact == f"iceberg-spark-runtime-{line.spark_minor}{scala_suffix}", iceberg
    assert iceberg.version == line.iceberg, (iceberg, line)
    assert delta.version == line.delta, (delta, line)
    assert version("pyspark") == line.spark
    assert version("delta-spark") == line.delta  # the Python API of the same Delta release
