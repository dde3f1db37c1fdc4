"""convert-delta on the Delta tables that used to convert into something Iceberg readers read
wrong: widened columns, signed zeros, renamed mapped columns, checkpoints holding typed stats
only, and unreadable checkpoints. delta-spark writes every table; Iceberg Spark reads the result.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from tablekeeper.catalog import catalog_for
from tablekeeper.errors import ConfigError
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tests.conftest import SQL_CATALOG
from tests.interop.test_convert_metrics import check_filters
from tests.support.delta_tables import copy_table

pytestmark = pytest.mark.spark


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def _convert(catalogs: Any, source: Path, target: str, **options: Any) -> Any:
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    return run_convert(ConvertDeltaOptions(source=str(source), target=target, **options), catalog)


def _same(spark: Any, target: str, source: Path) -> None:
    spark.sql(f"REFRESH TABLE {SQL_CATALOG}.{target}")
    iceberg = spark.table(f"{SQL_CATALOG}.{target}")
    delta = spark.read.format("delta").load(str(source))
    assert _rows(iceberg.select(*delta.columns)) == _rows(delta)


def test_type_widening_converts_iceberg_promotions_and_refuses_the_rest(
    spark, catalogs, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "widened"
    spark.sql(
        f"CREATE TABLE delta.`{source}` (id INT, small INT, price DECIMAL(5,2), ratio INT) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening'='true')"
    )
    spark.sql(f"INSERT INTO delta.`{source}` VALUES (1, 7, 123.45, 3), (2, -8, -99.99, 4)")
    # Iceberg promotes int to long and decimal precision: files written before stay readable.
    spark.sql(f"ALTER TABLE delta.`{source}` ALTER COLUMN small TYPE BIGINT")
    spark.sql(f"ALTER TABLE delta.`{source}` ALTER COLUMN price TYPE DECIMAL(10,2)")
    spark.sql(f"INSERT INTO delta.`{source}` VALUES (3, 5000000000, 12345678.90, 5)")
    assert _convert(catalogs, source, "exact.widened").status == "ok"
    _same(spark, "exact.widened", source)
    # int to double is Delta's, not Iceberg's: files holding ints would be read as doubles.
    spark.sql(f"ALTER TABLE delta.`{source}` ALTER COLUMN ratio TYPE DOUBLE")
    spark.sql(f"INSERT INTO delta.`{source}` VALUES (4, 1, 1.0, 0.25)")
    with pytest.raises(
        ConfigError,
        match=r"'ratio' was widened from integer to double.*--rewrite-unreadable-files.*DROP FEATURE",
    ):
        _convert(catalogs, source, "exact.widened_double")
    with pytest.raises(ConfigError, match="widened from integer to double"):
        _convert(catalogs, source, "exact.widened", mode="incremental")
    # With the option, the files the target already references in place holding ints are
    # rewritten too (replacing them in the same snapshot); the newest file holds doubles.
    live = _data_files(spark, "exact.widened")
    result = _convert(catalogs, source, "exact.widened", mode="incremental", rewrite_unreadable_files=True)
    assert result.metrics["rewritten_files"] == len(live) > 0
    _same(spark, "exact.widened", source)
    assert not set(live) & set(_data_files(spark, "exact.widened"))


def _data_files(spark: Any, target: str) -> list[str]:
    spark.sql(f"REFRESH TABLE {SQL_CATALOG}.{target}")
    return [r.file_path for r in spark.sql(f"SELECT file_path FROM {SQL_CATALOG}.{target}.files").collect()]


def test_signed_zeros_keep_every_file_a_filter_needs(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Spark's min and max call -0.0 and +0.0 equal, so the log may say +0.0 for a file holding
    -0.0; Iceberg orders -0.0 first and would skip that file for ``v = -0.0``."""
    source = tmp_path / "zeros"
    rows = [(1, 0.0, 0.0), (2, -0.0, -0.0), (3, 1.5, 1.5), (4, -0.0, -0.0), (5, 0.0, 0.0)]
    df = spark.createDataFrame(rows, "id INT, d DOUBLE, f FLOAT").coalesce(1)
    df.write.format("delta").save(str(source))
    _convert(catalogs, source, "exact.zeros")
    spark.sql(f"REFRESH TABLE {SQL_CATALOG}.exact.zeros")
    iceberg = spark.table(f"{SQL_CATALOG}.exact.zeros")
    delta = spark.read.format("delta").load(str(source))
    for column in ("d", "f"):
        col = F.col(column)
        for zero in (-0.0, 0.0):
            for predicate in (col == F.lit(zero), col <= F.lit(zero), col >= F.lit(zero)):
                assert iceberg.where(predicate).count() == delta.where(predicate).count(), (column, predicate)
    assert check_filters(spark, iceberg, delta) > 0


def test_renamed_columns_under_in_place_column_mapping(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Column mapping enabled on an existing table keeps old names as physical names; renaming a
    to a_old and c to a then gives the logical name a to one field and the physical name a to
    another. The physical name wins."""
    source = tmp_path / "renamed"
    spark.createDataFrame([(1, "x", 10), (2, "y", 20)], "id INT, a STRING, c INT").write.format("delta").save(
        str(source)
    )
    spark.sql(
        f"ALTER TABLE delta.`{source}` SET TBLPROPERTIES ('delta.columnMapping.mode'='name', "
        "'delta.minReaderVersion'='2', 'delta.minWriterVersion'='5')"
    )
    spark.sql(f"ALTER TABLE delta.`{source}` RENAME COLUMN a TO a_old")
    spark.sql(f"ALTER TABLE delta.`{source}` RENAME COLUMN c TO a")
    spark.sql(f"INSERT INTO delta.`{source}` VALUES (3, 'z', 30)")
    assert _convert(catalogs, source, "exact.renamed").status == "ok"
    _same(spark, "exact.renamed", source)


def test_checkpoints_with_typed_stats_only_give_bounds_on_either_path(
    spark, catalogs, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.tables.iceberg import live_files

    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    bounds = {}
    for engine in ("driver", "spark"):
        source = copy_table("delta-1.2.1-only-struct-stats", tmp_path / engine)
        target = f"exact.struct_stats_{engine}"
        run_convert(ConvertDeltaOptions(source=str(source), target=target, engine=engine), catalog, spark)
        table = catalog.require(target)
        files = live_files(table.io, table.metadata, table.metadata.current_snapshot()).data
        bounds[engine] = {Path(e.data_file.file_path).name: e.data_file.lower_bounds for e in files}
        assert all(bounds[engine].values()), f"{engine}: files without bounds"
        _same(spark, target, source)
    assert bounds["driver"] == bounds["spark"]


def test_an_unreadable_newest_checkpoint_falls_back_to_an_older_one(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "checkpointed"
    spark.sql(
        f"CREATE TABLE delta.`{source}` (id BIGINT) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval'='2')"
    )
    for i in range(5):
        spark.range(i * 10, i * 10 + 10).write.format("delta").mode("append").save(str(source))
    expected = _rows(spark.read.format("delta").load(str(source)))
    checkpoints = sorted((source / "_delta_log").glob("*.checkpoint*.parquet"))
    assert len(checkpoints) >= 2, checkpoints
    newest = checkpoints[-1]
    newest.write_bytes(newest.read_bytes()[:200])  # truncated: no footer
    (source / "_delta_log" / "_last_checkpoint").unlink(missing_ok=True)
    result = _convert(catalogs, source, "exact.fallback", history="all")
    assert result.status == "ok"
    assert "cannot be read" in str(result.metrics["note"]), result.metrics
    spark.sql(f"REFRESH TABLE {SQL_CATALOG}.exact.fallback")
    assert _rows(spark.table(f"{SQL_CATALOG}.exact.fallback")) == expected


def test_a_newest_checkpoint_without_older_state_is_refused(catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.errors import CorruptMetadataError

    source = copy_table("checkpoints_vacuumed", tmp_path)
    log = source / "_delta_log"
    for ck in log.glob("*.checkpoint*.parquet"):
        ck.write_bytes(b"not parquet")
    with pytest.raises(CorruptMetadataError, match="cannot be read"):
        _convert(catalogs, source, "exact.no_fallback")
    shutil.rmtree(source)


@pytest.mark.parametrize("version", [2, 3])
def test_nan_and_zero_partitions_with_dvs(spark, catalogs, tmp_path: Path, version: int) -> None:  # type: ignore[no-untyped-def]
    """delta-spark partitions by a double holding NaN, -0.0 and 0.0 and deletes with DVs: the
    conversion keeps three partitions and every delete (v2 position deletes, v3 DVs), verification
    counts them apart, and compact applies the deletes of the NaN partition."""
    from tablekeeper.jobs.compact import CompactOptions, run_compact

    source = tmp_path / f"nan_parts_v{version}"
    rows = [(i, ("NaN", "-0.0", "0.0", "1.5")[i % 4]) for i in range(80)]
    df = (
        spark.createDataFrame(rows, "id INT, v STRING")
        .selectExpr("id", "CAST(v AS DOUBLE) AS p")
        .repartition(2)
    )
    df.write.format("delta").partitionBy("p").option("delta.enableDeletionVectors", "true").save(str(source))
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 5 = 0")
    target = f"exact.nan_parts_v{version}"
    result = _convert(catalogs, source, target, format_version=version, verify="metadata")
    assert result.metrics["verified"]["partitions_verified"] == 4
    table = f"{SQL_CATALOG}.{target}"
    spark.sql(f"REFRESH TABLE {table}")
    delta = spark.read.format("delta").load(str(source))

    def by_zero_sign(df: Any) -> list[tuple[Any, ...]]:
        # Spark's = calls -0.0 and 0.0 equal: tell the rows apart by the partition value's text.
        return _rows(df.selectExpr("id", "CAST(p AS STRING)"))

    before = by_zero_sign(spark.table(table))
    assert before == by_zero_sign(delta) and len(before) == 64
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    m = run_compact(CompactOptions(table=target, min_input_files=2), catalog, target, spark).metrics
    # Every partition has several files: all are rewritten, one file per partition comes out.
    assert m["rewritten_data_files_count"] == m["live_data_files"] > 4 and m["added_data_files_count"] == 4, m
    spark.sql(f"REFRESH TABLE {table}")
    assert by_zero_sign(spark.table(table)) == before
