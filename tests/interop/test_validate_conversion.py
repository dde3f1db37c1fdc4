"""validate-conversion's counts, read through delta-spark and Iceberg Spark by reader options: a
path SQL text could not hold, a Delta version and an Iceberg snapshot in the past."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tablekeeper.jobs.validate_conversion import count_rows
from tests.conftest import SQL_CATALOG


def test_counts_at_a_version_and_snapshot_of_an_awkward_path(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "odd` name' VERSION AS OF 0")
    spark.range(3).write.format("delta").save(path)
    spark.range(5).write.format("delta").mode("append").save(path)
    table = f"{SQL_CATALOG}.db.validate_counts"
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2), (3)")
    first = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").first()[0]
    spark.sql(f"INSERT INTO {table} VALUES (4)")
    name = f"`{SQL_CATALOG}`.`db`.`validate_counts`"
    try:
        assert count_rows(spark, path, 0, name, first) == (3, 3)
        assert count_rows(spark, path, 1, name, None) == (8, 4)
    finally:
        spark.sql(f"DROP TABLE {table}")
