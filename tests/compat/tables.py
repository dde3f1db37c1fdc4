"""The tables of the compatibility tier, written by the line's own engines, and the rows they must
read as: computed without any engine, so every reader is judged against the same answer."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.conftest import SQL_CATALOG

NAMESPACE = "compat"
APPENDS = 6
ROWS_PER_APPEND = 10
BEFORE_UPGRADE = APPENDS - 2  # appends before the first DELETE (and, on v3, the upgrade)
DELETED = (0, 3)  # id % 7: the two DELETEs, the first before the last two appends
ORPHANS = 3
WEEK_AGO = time.time() - 7 * 86_400
Rows = list[tuple[Any, ...]]


def expected_rows() -> Rows:
    """The rows the table holds after its appends and deletes, computed without any engine."""
    start = datetime(2026, 1, 1)
    return sorted(
        (i, "a" if i % 2 == 0 else "b", start + timedelta(hours=i), Decimal(i * 25) / 100)
        for i in range(APPENDS * ROWS_PER_APPEND)
        if not ((i % 7 == DELETED[0] and i < BEFORE_UPGRADE * ROWS_PER_APPEND) or i % 7 == DELETED[1])
    )


def written(spark: Any, table: str, version: int, namespace: str = NAMESPACE) -> str:
    """``tk.<namespace>.<table>`` as the line's Iceberg Spark writes it: partitioned, one small file
    per partition and append, deletes by merge-on-read. v2: two DELETEs of position delete files.
    v3: the way most v3 tables come to be: written as v2 (appends and a DELETE of position delete
    files), upgraded by Iceberg Spark, then appends with row lineage and a DELETE of deletion
    vectors."""
    name = f"{SQL_CATALOG}.{namespace}.{table}"
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, cat STRING, ts TIMESTAMP_NTZ, amount DECIMAL(10, 2)) "
        "USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.delete.granularity'='file')"
    )

    def append(i: int) -> None:
        lo, hi = i * ROWS_PER_APPEND, (i + 1) * ROWS_PER_APPEND
        spark.sql(
            f"INSERT INTO {name} SELECT id, IF(id % 2 = 0, 'a', 'b'), "
            "TIMESTAMP_NTZ'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, CAST(id AS INT)), "
            f"CAST(id * 25 AS DECIMAL(10, 2)) / 100 FROM range({lo}, {hi}) ORDER BY 2"
        )

    for i in range(BEFORE_UPGRADE):
        append(i)
    spark.sql(f"DELETE FROM {name} WHERE id % 7 = {DELETED[0]}")
    if version == 3:
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('format-version'='3')")
    for i in range(BEFORE_UPGRADE, APPENDS):
        append(i)
    spark.sql(f"DELETE FROM {name} WHERE id % 7 = {DELETED[1]}")
    return name


def spark_rows(spark: Any, name: str) -> Rows:
    spark.sql(f"REFRESH TABLE {name}")
    return sorted(tuple(r) for r in spark.table(name).collect())


def one(spark: Any, sql: str) -> Any:
    return spark.sql(sql).collect()[0][0]


def plant_orphans(location: Path, count: int) -> list[Path]:
    """Files under the table's data/ no metadata references, older than remove-orphans' floor."""
    orphans = [location / "data" / f"orphan-{i}.parquet" for i in range(count)]
    for orphan in orphans:
        orphan.write_bytes(b"left behind by a failed writer")
        os.utime(orphan, (WEEK_AGO, WEEK_AGO))
    return orphans


def delta_source(spark: Any, path: str) -> None:
    """A partitioned Delta table with deletion vectors, written by the line's delta-spark in five
    versions: three appends of 20 rows, then a DELETE of 12 (50 rows live)."""
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, cat STRING, amount DECIMAL(10, 2)) USING delta "
        "PARTITIONED BY (cat) TBLPROPERTIES ('delta.enableDeletionVectors'='true')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO delta.`{path}` SELECT id, IF(id % 3 = 0, 'x', 'y'), "
            f"CAST(id AS DECIMAL(10, 2)) / 8 FROM range({i * 20}, {(i + 1) * 20})"
        )
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 1")


def delta_rows(spark: Any, path: str) -> Rows:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
