"""Zone-less timestamp partition values: delta-spark writes them in its session zone; converted
with that zone stated, Iceberg Spark reads the same instants and prunes by them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tests.conftest import SQL_CATALOG

pytestmark = pytest.mark.spark

SESSION_ZONE = "spark.sql.session.timeZone"
# delta-spark writes ISO UTC values unless this is off (what older writers always did).
UTC_VALUES = "spark.databricks.delta.write.utcTimestampPartitionValues"
# New York wall times around both 2021 DST changes; 01:30 on 2021-11-07 happens twice (Spark
# takes the earlier, EDT).
WALL_TIMES = ["2021-03-14 01:30:00", "2021-03-14 03:30:00", "2021-07-01 12:00:00", "2021-11-07 01:30:00"]


def test_zoneless_partition_values_convert_in_the_writers_zone(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "ny"
    saved = {key: spark.conf.get(key, None) for key in (SESSION_ZONE, UTC_VALUES)}
    spark.conf.set(SESSION_ZONE, "America/New_York")
    spark.conf.set(UTC_VALUES, "false")
    try:
        literals = ", ".join(f"({i}, TIMESTAMP '{t}')" for i, t in enumerate(WALL_TIMES))
        spark.sql(f"SELECT * FROM VALUES {literals} AS v(id, ts)").write.format("delta").partitionBy(
            "ts"
        ).save(str(source))
        # The instants delta-spark reads back in the zone it wrote them in.
        expected = sorted(
            tuple(r)
            for r in spark.read.format("delta")
            .load(str(source))
            .selectExpr("id", "unix_micros(ts)")
            .collect()
        )
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    commit = (source / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    values = sorted(json.loads(line)["add"]["partitionValues"]["ts"] for line in commit if '"add"' in line)
    assert values == sorted(WALL_TIMES)  # the premise: no zone in the log
    catalog = catalog_for(catalogs.get(SQL_CATALOG))

    # Stated, on the executors (the path large tables take), verified.
    options = ConvertDeltaOptions(
        str(source), "conv.ny_zone", engine="spark", verify="metadata", partition_timezone="America/New_York"
    )
    result = run_convert(options, catalog, spark)
    assert result.metrics["manifest_writer"] == "executors"
    assert result.metrics["partition_timezone_assumed"] is None
    table = f"{SQL_CATALOG}.conv.ny_zone"
    got = sorted(tuple(r) for r in spark.table(table).selectExpr("id", "unix_micros(ts)").collect())
    assert got == expected
    # Pruned by the instant: 01:30 EST is 06:30 UTC (the session is UTC again).
    assert spark.conf.get(SESSION_ZONE) == "UTC"
    hit = spark.table(table).where("ts = TIMESTAMP '2021-03-14 06:30:00'").select("id").collect()
    assert [r.id for r in hit] == [0]
    scanned = spark.sql(
        f"SELECT count(*) FROM {table}.files WHERE partition.ts = TIMESTAMP '2021-11-07 05:30:00'"
    ).first()[0]
    assert scanned == 1

    # Not stated (on the driver): read as UTC, and the result says so.
    unzoned = run_convert(ConvertDeltaOptions(str(source), "conv.ny_unzoned"), catalog)
    assumed = unzoned.metrics["partition_timezone_assumed"]
    assert assumed.startswith("UTC: timestamp partition column(s) ts ") and "--partition-timezone" in assumed
    shifted = spark.table(f"{SQL_CATALOG}.conv.ny_unzoned").selectExpr("id", "unix_micros(ts)").collect()
    assert sorted(tuple(r) for r in shifted) != expected
