"""Delta row tracking carried into Iceberg v3 row lineage: where no file holds row ids Delta
copied, Iceberg Spark's ``_row_id`` and ``_last_updated_sequence_number`` equal delta-spark's
``_metadata.row_id`` and ``_metadata.row_commit_version`` for every row; once a file does (an
UPDATE without IcebergCompatV3), ids are assigned fresh and the result says why. Either way ids
stay unique, including for rows Iceberg writers add after the cut-over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tablekeeper.catalog import catalog_for
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tests.conftest import SQL_CATALOG
from tests.interop.test_convert_history import snapshots_by_version

pytestmark = pytest.mark.spark

NS = "lineage"


def _tracked_table(spark: SparkSession, source: Path) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{source}` (id BIGINT, p STRING) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true')"
    )  # v0
    spark.sql(f"INSERT INTO delta.`{source}` SELECT id, CAST(id % 3 AS STRING) FROM range(0, 40)")  # v1
    spark.sql(f"INSERT INTO delta.`{source}` SELECT id, CAST(id % 3 AS STRING) FROM range(40, 70)")  # v2
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 7 = 0")  # v3: deletion vectors
    spark.sql(f"INSERT INTO delta.`{source}` SELECT id, 'x' FROM range(70, 75)")  # v4


def _delta_ids(spark: SparkSession, source: Path, version: int | None = None) -> list[tuple[Any, ...]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(str(source)).selectExpr("id", "_metadata.row_id", "_metadata.row_commit_version")
    return sorted(tuple(r) for r in df.collect())


def _iceberg_ids(spark: SparkSession, table: str, snapshot_id: int | None = None) -> list[tuple[Any, ...]]:
    at = f" VERSION AS OF {snapshot_id}" if snapshot_id is not None else ""
    df = spark.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {table}{at}")
    return sorted(tuple(r) for r in df.collect())


def _convert(catalogs: Any, source: Path, target: str, spark: Any = None, **options: Any) -> dict[str, Any]:
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    options.setdefault("format_version", 3)
    return run_convert(
        ConvertDeltaOptions(source=str(source), target=target, **options), catalog, spark
    ).metrics


@pytest.mark.parametrize("engine", ["driver", "spark"])
def test_row_ids_equal_delta_spark(spark, catalogs, tmp_path: Path, engine: str) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "tracked"
    _tracked_table(spark, source)
    target = f"{NS}.tracked_{engine}"
    metrics = _convert(catalogs, source, target, spark, engine=engine, verify="metadata")
    assert metrics["manifest_writer"] == ("executors" if engine == "spark" else "driver")
    assert metrics["row_lineage"] == {"row_ids": "delta", "reason": None}
    table = f"{SQL_CATALOG}.{target}"
    expected = _delta_ids(spark, source)
    assert len(expected) == 65
    assert _iceberg_ids(spark, table) == expected

    # After the cut-over Iceberg writers continue past Delta's high-water mark: ids stay unique.
    spark.sql(f"INSERT INTO {table} VALUES (1000, 'y'), (1001, 'y')")
    ids = [r[1] for r in _iceberg_ids(spark, table)]
    assert len(set(ids)) == len(ids) == 67
    assert min(i for r, i in zip(_iceberg_ids(spark, table), ids, strict=True) if r[0] >= 1000) > max(
        r[1] for r in expected
    )
    # Delta's ids sit on ADDED entries as explicit first_row_ids; an Iceberg Java commit that
    # rewrites those manifests (a copy-on-write DELETE: the entries become EXISTING) keeps them.
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode' = 'copy-on-write')")
    spark.sql(f"DELETE FROM {table} WHERE id = 3")
    assert spark.sql(f"SELECT count(*) FROM {table}.entries WHERE status = 0").first()[0] > 0
    kept = {r[0]: r[1] for r in _iceberg_ids(spark, table)}
    assert {i: kept[i] for i, *_ in expected if i != 3} == {r[0]: r[1] for r in expected if r[0] != 3}


def test_history_keeps_delta_ids_until_a_file_holds_copied_ones(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "history"
    _tracked_table(spark, source)
    target = f"{NS}.history"
    table = f"{SQL_CATALOG}.{target}"
    metrics = _convert(catalogs, source, target, history="all")
    assert metrics["row_lineage"] == {"row_ids": "delta", "reason": None}
    spark.sql(f"REFRESH TABLE {table}")
    by_version = snapshots_by_version(spark, table)
    assert sorted(by_version) == [0, 1, 2, 3, 4]
    for version, snapshot_id in by_version.items():
        assert _iceberg_ids(spark, table, snapshot_id) == _delta_ids(spark, source, version), version

    # UPDATE copies rows with their ids into a column Iceberg readers cannot see: from now on
    # the target assigns its own ids, and says why.
    spark.sql(f"UPDATE delta.`{source}` SET p = 'u' WHERE id IN (1, 2)")  # v5
    updated = _convert(catalogs, source, target, mode="incremental", history="all")
    lineage = updated["row_lineage"]
    assert lineage["row_ids"] == "fresh" and "without Iceberg's field id 2147483540" in lineage["reason"]
    spark.sql(f"INSERT INTO delta.`{source}` SELECT id, 'z' FROM range(80, 85)")  # v6
    later = _convert(catalogs, source, target, mode="incremental", history="all")
    assert later["row_lineage"] == {
        "row_ids": "fresh",
        "reason": "an earlier run gave the target fresh row ids",
    }
    spark.sql(f"REFRESH TABLE {table}")
    rows = _iceberg_ids(spark, table)
    assert sorted(r[0] for r in rows) == sorted(r[0] for r in _delta_ids(spark, source))
    ids = [r[1] for r in rows]
    assert len(set(ids)) == len(ids), "row ids collide"
    # Rows untouched since the conversion keep Delta's ids.
    delta = {r[0]: r[1] for r in _delta_ids(spark, source)}
    assert all(delta[r[0]] == r[1] for r in rows if r[0] < 75 and r[0] not in (1, 2))


def test_an_iceberg_append_between_incremental_runs_never_repeats_a_row_id(
    spark, catalogs, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "between"
    spark.sql(
        f"CREATE TABLE delta.`{source}` (id BIGINT, p STRING) USING delta "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true')"
    )  # v0
    spark.sql(f"INSERT INTO delta.`{source}` SELECT id, 'd' FROM range(0, 20)")  # v1: ids 0-19
    target = f"{NS}.between"
    table = f"{SQL_CATALOG}.{target}"
    assert _convert(catalogs, source, target, mode="incremental")["row_lineage"]["row_ids"] == "delta"
    spark.sql(f"REFRESH TABLE {table}")
    spark.sql(f"INSERT INTO {table} VALUES (500, 'i'), (501, 'i')")  # Iceberg Java: ids 20, 21
    spark.sql(f"INSERT INTO delta.`{source}` SELECT id, 'd' FROM range(20, 30)")  # v2: Delta's 20-29
    lineage = _convert(catalogs, source, target, mode="incremental")["row_lineage"]
    spark.sql(f"REFRESH TABLE {table}")
    rows = _iceberg_ids(spark, table)
    assert sorted(r[0] for r in rows) == [*range(30), 500, 501]
    ids = [r[1] for r in rows]
    assert None not in ids and len(set(ids)) == len(ids), f"row ids repeat: {rows}"
    assert lineage["row_ids"] == "fresh" and "another writer added rows" in lineage["reason"]


def test_without_row_tracking_ids_are_fresh_and_said_so(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "plain"
    spark.range(0, 10).write.format("delta").save(str(source))
    metrics = _convert(catalogs, source, f"{NS}.plain")
    assert metrics["row_lineage"]["row_ids"] == "fresh"
    assert "delta.enableRowTracking" in metrics["row_lineage"]["reason"]
    assert _convert(catalogs, source, f"{NS}.plain_v2", format_version=2)["row_lineage"] is None
