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
ROWS = 60
FIRST = 40  # rows of the first INSERT, before the first DELETE (and, on v3, the upgrade)
FILES = 12  # data files: each INSERT's tasks write one file per partition (8, then 4)
SNAPSHOTS = 4  # two INSERTs, two DELETEs
DELETED = (0, 3)  # id % 7: the two DELETEs, the first before the second INSERT
WEEK_AGO = time.time() - 7 * 86_400
Rows = list[tuple[Any, ...]]


def expected_rows() -> Rows:
    """The rows the table holds after its writes and deletes, computed without any engine."""
    start = datetime(2026, 1, 1)
    return sorted(
        (i, "a" if i % 2 == 0 else "b", start + timedelta(hours=i), Decimal(i * 25) / 100)
        for i in range(ROWS)
        if not ((i % 7 == DELETED[0] and i < FIRST) or i % 7 == DELETED[1])
    )


def written(spark: Any, table: str, version: int, namespace: str = NAMESPACE) -> str:
    """``tk.<namespace>.<table>`` as the line's Iceberg Spark writes it: partitioned, small files
    (each task of an INSERT writes one per partition, the fanout writer, no shuffle), deletes by
    merge-on-read. v2: two DELETEs of position delete files. v3: the way most v3 tables come to
    be: written as v2 (an INSERT and a DELETE of position delete files), upgraded by Iceberg
    Spark, then an INSERT with row lineage and a DELETE of deletion vectors."""
    name = f"{SQL_CATALOG}.{namespace}.{table}"
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, cat STRING, ts TIMESTAMP_NTZ, amount DECIMAL(10, 2)) "
        "USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.delete.granularity'='file', "
        "'write.distribution-mode'='none', 'write.spark.fanout.enabled'='true')"
    )

    def insert(lo: int, hi: int, tasks: int) -> None:
        # range(..., tasks): contiguous slices, each holding both partitions' rows.
        spark.sql(
            f"INSERT INTO {name} SELECT id, IF(id % 2 = 0, 'a', 'b'), "
            "TIMESTAMP_NTZ'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, CAST(id AS INT)), "
            f"CAST(id * 25 AS DECIMAL(10, 2)) / 100 FROM range({lo}, {hi}, 1, {tasks})"
        )

    insert(0, FIRST, 4)
    spark.sql(f"DELETE FROM {name} WHERE id % 7 = {DELETED[0]}")
    if version == 3:
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('format-version'='3')")
    insert(FIRST, ROWS, 2)
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


def pyiceberg_table(warehouse: Path, ident: str) -> Any:
    """PyIceberg's view of ``ident`` in the session's sql catalog (same sqlite file, same name)."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri, files = f"sqlite:///{warehouse}/catalog.db", f"file://{warehouse}/sql"
    return SqlCatalog(SQL_CATALOG, uri=uri, warehouse=files).load_table(ident)


def pyiceberg_rows(warehouse: Path, ident: str) -> Rows:
    return sorted(tuple(r.values()) for r in pyiceberg_table(warehouse, ident).scan().to_arrow().to_pylist())


def delta_source(spark: Any, path: str) -> None:
    """A partitioned Delta table with deletion vectors, written by the line's delta-spark in two
    versions: 60 rows written by three tasks, then a DELETE of 12 (48 rows live)."""
    spark.sql(
        f"CREATE TABLE delta.`{path}` USING delta PARTITIONED BY (cat) "
        "TBLPROPERTIES ('delta.enableDeletionVectors'='true') AS SELECT id, IF(id % 3 = 0, 'x', 'y') AS cat, "
        "CAST(CAST(id AS DECIMAL(10, 2)) / 8 AS DECIMAL(10, 2)) AS amount FROM range(0, 60, 1, 3)"
    )
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 1")


def delta_rows(spark: Any, path: str) -> Rows:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
