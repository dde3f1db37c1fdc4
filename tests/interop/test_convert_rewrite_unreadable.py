"""convert-delta --rewrite-unreadable-files on tables delta-spark reads but Iceberg readers could
not read in place: column-mapped lists and maps without nested field ids, and columns widened
beyond Iceberg's promotions. Only the files Iceberg would read wrong are rewritten, into the
target; later DELETEs (files removed, deletion vectors) map onto the rewrites. delta-spark writes
every table; Iceberg Spark, through the same catalog, reads what delta-spark reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tablekeeper.errors import ConfigError, ExitCode
from tests.conftest import SQL_CATALOG
from tests.interop.test_convert_history import assert_every_version, assert_same, convert

pytestmark = pytest.mark.spark

NS = "rewrite"
OPTION = "--rewrite-unreadable-files"


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _check(spark: SparkSession, catalogs: Any, source: Path, ident: str) -> list[str]:
    """Iceberg Spark reads what delta-spark reads; returns the target's data file paths."""
    table = f"{SQL_CATALOG}.{ident}"
    spark.sql(f"REFRESH TABLE {table}")
    assert_same(spark.table(table), spark.read.format("delta").load(str(source)), ident)
    return [
        r.file_path for r in spark.sql(f"SELECT file_path FROM {table}.files WHERE content = 0").collect()
    ]


def _rewritten(paths: list[str], location: str) -> list[str]:
    return [p for p in paths if p.startswith(f"{location}/data/delta-rewritten/")]


def _refused(catalogs: Any, source: Path, ident: str, what: str) -> None:
    with pytest.raises(ConfigError, match=f"{what}.*{OPTION}") as refused:
        convert(catalogs, source, ident)
    assert refused.value.exit_code == ExitCode.USAGE


def test_lists_and_maps_without_nested_ids_are_rewritten_and_stay_exact(
    spark: SparkSession, catalogs: Any, tmp_path: Path
) -> None:
    source = tmp_path / "no_nested_ids"
    t = f"delta.`{source}`"
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, tags ARRAY<INT>, m MAP<STRING, INT>, part STRING) USING delta "
        "PARTITIONED BY (part) TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.enableDeletionVectors' = 'true')"
    )
    rows = "SELECT id, array(CAST(id AS INT), NULL), map('k', CAST(id AS INT)), CAST(id % 2 AS STRING)"
    spark.sql(f"INSERT INTO {t} {rows} FROM range(0, 20)")
    ident = f"{NS}.nested"
    _refused(catalogs, source, ident, "'tags': its elements have no column-mapping id")
    delta_files = _files(source)
    first = convert(catalogs, source, ident, rewrite_unreadable_files=True)
    assert _files(source) == delta_files  # nothing written beside the Delta files
    location = catalogs_location(spark, ident)
    paths = _check(spark, catalogs, source, ident)
    # Every file holds the list column with ids on columns only: all are rewritten, into the target.
    assert first.metrics["rewritten_files"] == len(paths) == len(_rewritten(paths, location)) > 0
    # A whole partition deleted (its files removed), then rows (deletion vectors on rewrites).
    spark.sql(f"DELETE FROM {t} WHERE part = '0'")
    spark.sql(f"DELETE FROM {t} WHERE id % 3 = 0")
    spark.sql(f"INSERT INTO {t} {rows} FROM range(20, 23)")
    second = convert(catalogs, source, ident, mode="incremental", rewrite_unreadable_files=True)
    assert second.metrics["data_files_removed"] > 0 and second.metrics["delete_files"] > 0
    paths = _check(spark, catalogs, source, ident)
    assert len(_rewritten(paths, location)) == len(paths)


def test_widened_columns_rewrite_only_the_files_written_before(
    spark: SparkSession, catalogs: Any, tmp_path: Path
) -> None:
    source = tmp_path / "widened"
    t = f"delta.`{source}`"
    spark.sql(
        f"CREATE TABLE {t} (id INT, tiny TINYINT, ratio INT) USING delta TBLPROPERTIES "
        "('delta.enableTypeWidening' = 'true', 'delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(f"INSERT INTO {t} VALUES (1, 1, 3), (2, -2, 4), (3, 127, -5), (4, NULL, NULL)")
    before = _files(source)
    spark.sql(f"ALTER TABLE {t} ALTER COLUMN tiny TYPE DOUBLE")
    spark.sql(f"ALTER TABLE {t} ALTER COLUMN ratio TYPE DOUBLE")
    spark.sql(f"INSERT INTO {t} VALUES (5, 0.5, 0.25)")
    ident = f"{NS}.widened"
    _refused(catalogs, source, ident, "'tiny' was widened from byte to double")
    first = convert(catalogs, source, ident, rewrite_unreadable_files=True)
    location = catalogs_location(spark, ident)
    paths = _check(spark, catalogs, source, ident)
    old = {p for p in before if p.suffix == ".parquet"}
    rewritten = _rewritten(paths, location)
    assert first.metrics["rewritten_files"] == len(rewritten) == len(old) > 0
    assert len(paths) > len(rewritten)  # the file written after the widening stays in place
    spark.sql(f"DELETE FROM {t} WHERE id = 2")  # a deletion vector on a rewritten file
    spark.sql(f"DELETE FROM {t} WHERE id = 5")  # the in-place file goes
    second = convert(catalogs, source, ident, mode="incremental", rewrite_unreadable_files=True)
    assert second.metrics["delete_files"] == 1
    paths = _check(spark, catalogs, source, ident)
    assert _rewritten(paths, location) == rewritten
    # Every version as a snapshot: the files converted in place before the widening are
    # rewritten at the version that widens, replacing them; each version reads as delta-spark's.
    history = f"{NS}.widened_history"
    done = convert(catalogs, source, history, history="all", rewrite_unreadable_files=True)
    assert done.metrics["expired_for_vacuum"] is None  # rewrites are the target's own
    assert_every_version(spark, f"{SQL_CATALOG}.{history}", source, range(7))


def catalogs_location(spark: SparkSession, ident: str) -> str:
    row = spark.sql(f"DESCRIBE TABLE EXTENDED {SQL_CATALOG}.{ident}").filter("col_name = 'Location'").first()
    assert row is not None
    return str(row.data_type).rstrip("/")
