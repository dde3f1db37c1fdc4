"""The Spark lines tablekeeper runs on, each one tested set of Spark, Scala, Delta and Iceberg.

One code base serves them all; what a line lacks is refused by name on that line (see
``tablekeeper.spark.compat``). ``conf/`` holds each line's pins (``conf/jars.txt`` for the default
line, ``conf/lines/<line>/`` for the others, ``conf/lines/<line>/constraints.txt`` for the Python
side); a unit test keeps them and this module one set.

Pure data and one decision function: no pyspark import, so ``tablekeeper doctor`` and the unit
tier use it without a JVM.
"""

from __future__ import annotations

from dataclasses import dataclass

from tablekeeper.errors import UnsupportedRuntime


@dataclass(frozen=True)
class Coordinate:
    """A Maven artifact as ``--packages`` names it."""

    group: str
    artifact: str
    version: str

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


@dataclass(frozen=True)
class SparkLine:
    """One supported Spark minor line and the runtimes tested with it."""

    name: str  # the Spark minor, "3.5"
    scala: str  # the Scala binary version its runtimes are built for
    pyspark_min: str  # the lowest pyspark of the line the Delta Python API accepts
    pyspark_below: str  # the first pyspark outside the line
    pyspark_tested: str  # the exact pin the tests run on (conf/lines/<line>/constraints.txt)
    delta: str
    iceberg: str
    delta_spark: Coordinate
    delta_storage: Coordinate
    iceberg_runtime: Coordinate
    # Capabilities that differ between lines (tablekeeper.spark.compat refuses by them).
    variant_type: bool  # Spark's VariantType (4.0+)
    parquet_type_widening: bool  # the Parquet reader widens int->long, float->double, decimals (4.0+)

    @property
    def packages(self) -> str:
        """The runtimes a cluster submit needs, as one ``--packages`` value."""
        return ",".join(str(c) for c in (self.iceberg_runtime, self.delta_spark, self.delta_storage))

    @property
    def pyspark_range(self) -> str:
        return f">={self.pyspark_min},<{self.pyspark_below}"


def _line(
    name: str,
    scala: str,
    pyspark: tuple[str, str, str],
    delta: str,
    delta_artifact: str,
    iceberg: str,
    *,
    newer: bool,
) -> SparkLine:
    return SparkLine(
        name=name,
        scala=scala,
        pyspark_min=pyspark[0],
        pyspark_below=pyspark[1],
        pyspark_tested=pyspark[2],
        delta=delta,
        iceberg=iceberg,
        delta_spark=Coordinate("io.delta", delta_artifact, delta),
        delta_storage=Coordinate("io.delta", "delta-storage", delta),
        iceberg_runtime=Coordinate("org.apache.iceberg", f"iceberg-spark-runtime-{name}_{scala}", iceberg),
        variant_type=newer,
        parquet_type_widening=newer,
    )


# Spark 3.5: the last Scala 2.12 line; Delta 3.3 is its newest release (Delta 4 needs Spark 4).
# Spark 4.0: Delta 4.0.x is built on it; Iceberg 1.11 is the release tested with it.
# Spark 4.1: Delta 4.4 is built on 4.1.0; Iceberg 1.11.0 (conf/jars.txt says why this trio).
LINES: tuple[SparkLine, ...] = (
    _line("3.5", "2.12", ("3.5.3", "3.6", "3.5.9"), "3.3.3", "delta-spark_2.12", "1.12.0", newer=False),
    _line("4.0", "2.13", ("4.0.1", "4.1", "4.0.5"), "4.0.1", "delta-spark_2.13", "1.11.0", newer=True),
    _line("4.1", "2.13", ("4.1.0", "4.2", "4.1.4"), "4.4.0", "delta-spark_4.1_2.13", "1.11.0", newer=True),
)
# The line `make setup` builds by default, whose jars are conf/jars.txt (the full suite runs on it).
DEFAULT_LINE = "4.1"


def line_named(name: str) -> SparkLine | None:
    return next((line for line in LINES if line.name == name), None)


def minor(version: str) -> str:
    """``4.1.4`` -> ``4.1`` (a vendor suffix such as ``3.5.1-amzn-0`` is ignored)."""
    return ".".join(version.split(".")[:2])


def _names() -> str:
    return ", ".join(line.name for line in LINES)


def check_runtime(spark: str, scala: str | None, delta: str | None, iceberg: str | None) -> SparkLine:
    """The supported line a session with these versions is, or UnsupportedRuntime naming what was
    found and the fix. ``None``: the version could not be read from the session."""
    line = line_named(minor(spark))
    if line is None:
        raise UnsupportedRuntime(
            f"Spark {spark} is not a supported line ({_names()}): run tablekeeper on one of them"
        )
    found = (
        f"Spark {spark} (Scala {scala or 'unknown'}) with Delta {delta or 'unknown'} "
        f"and Iceberg {iceberg or 'unknown'}"
    )
    if scala is not None and minor(scala) != line.scala:
        raise UnsupportedRuntime(
            f"{found}: the Spark {line.name} line is tested on Scala {line.scala} builds only: "
            f"run a Scala {line.scala} Spark {line.name} with --packages {line.packages}"
        )
    if delta != line.delta or iceberg != line.iceberg:
        raise UnsupportedRuntime(
            f"{found} is not a supported combination: on Spark {line.name} submit with "
            f"--packages {line.packages} (Delta {line.delta}, Iceberg {line.iceberg})"
        )
    return line
