"""Converted metrics are safe: filters at and around each column's min and max, and IS NULL, return
the same rows from the Iceberg table (where Iceberg prunes files by our bounds and null counts) as
from delta-spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tablekeeper.catalog import catalog_for
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tests.conftest import SQL_CATALOG
from tests.support.delta_tables import copy_table

pytestmark = pytest.mark.spark

SKIP_TYPES = ("struct", "array", "map")
# Values Delta's stats are lossy about: both zeros compare equal to Spark, NaN is in no min/max.
FLOAT_SPECIALS = (0.0, -0.0, float("nan"))


def check_filters(spark, iceberg: DataFrame, delta: DataFrame) -> int:  # type: ignore[no-untyped-def]
    checked = 0
    for field in delta.schema.fields:
        kind = field.dataType.typeName()
        if kind in SKIP_TYPES or field.name not in iceberg.columns:
            continue
        col = F.col(f"`{field.name}`")
        lo, hi = delta.agg(F.min(col), F.max(col)).first()
        predicates = [col.isNull(), col.isNotNull()]
        for bound in (lo, hi):
            if bound is not None:
                value = F.lit(bound)
                predicates += [col == value, col < value, col <= value, col > value, col >= value]
        if kind in ("float", "double"):
            for special in FLOAT_SPECIALS:
                value = F.lit(special).cast(kind)
                predicates += [col == value, col < value, col <= value, col > value, col >= value]
        # delta-spark is the oracle: all of a column's predicates counted in one pass over its rows
        # (no filter pushed to its scan); each Iceberg count is its own filtered scan, the pruning
        # under test.
        sums = delta.agg(*(F.sum(F.when(p, 1).otherwise(0)) for p in predicates)).first()
        for predicate, summed in zip(predicates, sums, strict=True):
            expected = summed or 0
            got = iceberg.where(predicate).count()
            assert got == expected, f"{field.name}: {predicate} -> iceberg {got}, delta {expected}"
            checked += 1
    return checked


def convert(spark, catalogs, source: Path, target: str) -> DataFrame:  # type: ignore[no-untyped-def]
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    run_convert(ConvertDeltaOptions(source=str(source), target=target, format_version=3), catalog)
    return spark.table(f"{SQL_CATALOG}.{target}")


def test_all_primitive_types_written_by_delta_spark(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "primitives"
    base = dt.datetime(2026, 1, 1, 12, 0, 0)
    rows = [
        (
            i,
            i % 120 - 60,
            (i * 7) % 300 - 150,
            i * 1000 - 5000,
            i * 100_000 - 300_000,
            float(i) / 3,
            i * 1.25 - 8,
            Decimal(i * 125 - 999).scaleb(-2),
            f"s{i:03d}-" + "x" * (i % 40),
            dt.date(2025, 12, 1) + dt.timedelta(days=i),
            base + dt.timedelta(minutes=i * 37, microseconds=i * 111),
            base + dt.timedelta(hours=i, microseconds=999),
            None if i % 7 == 0 else f"n{i}",
            f"p{i % 3}",
            i % 5 == 0,
            bytes([i % 7, 255 - i]) + b"\x00" * (i % 3),
        )
        for i in range(60)
    ]
    # Lossy stats: Delta's min/max take -0.0 and 0.0 as equal and skip NaN; Iceberg must not
    # prune a file holding either.
    specials = [(-0.0, 0.0), (0.0, -0.0), (float("nan"), 1.5), (2.5, float("nan")), (-0.0, float("nan"))]
    for n, (f, d) in enumerate(specials):
        row = list(rows[n])
        row[0], row[5], row[6] = 100 + n, f, d
        rows.append(tuple(row))
    schema = (
        "id INT, b BYTE, s SHORT, i INT, l LONG, f FLOAT, d DOUBLE, dec DECIMAL(10,2), str STRING, "
        "dt DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, maybe STRING, p STRING, bo BOOLEAN, bin BINARY"
    )
    df = spark.createDataFrame(rows, schema).repartition(6, "id")
    df.write.format("delta").partitionBy("p").option("delta.enableDeletionVectors", "true").save(str(source))
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 11 = 0")
    iceberg = convert(spark, catalogs, source, "metrics.primitives")
    delta = spark.read.format("delta").load(str(source))
    assert check_filters(spark, iceberg, delta) > 100


@pytest.mark.parametrize(
    "name", ["delta-2.2.0-partitioned-types", "table_with_edge_timestamps", "partition-type-primitives"]
)
def test_shared_tables(spark, catalogs, tmp_path: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    source = copy_table(name, tmp_path)
    target = "metrics." + "".join(c if c.isalnum() else "_" for c in name).lower()
    iceberg = convert(spark, catalogs, source, target)
    delta = spark.read.format("delta").load(str(source))
    assert check_filters(spark, iceberg, delta) > 0
