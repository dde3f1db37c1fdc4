"""Every job end to end on a v2 and a v3 table, run in the line's session through the CLI's
``main()`` as `tablekeeper <job>` runs them.

After each job the line's Iceberg Spark (the session's catalog) reads exactly the rows the table
held before it, PyIceberg reads the same rows, and the job's claims (files rewritten, snapshots
expired, orphans removed, row ids assigned, statistics registered) are checked against the table
as Iceberg Spark's metadata tables show it. Every run lands in a ledger table, which ``history``
and Iceberg Spark read back alike. convert-delta and validate-conversion take a table the line's
delta-spark wrote, with deletion vectors.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.cli import main
from tests.conftest import SQL_CATALOG

pytestmark = pytest.mark.spark

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


def written(spark: Any, table: str, version: int) -> str:
    """``tk.compat.<table>`` as the line's Iceberg Spark writes it: partitioned, one small file
    per partition and append, deletes by merge-on-read. v2: two DELETEs of position delete files.
    v3: the way most v3 tables come to be: written as v2 (appends and a DELETE of position delete
    files), upgraded by Iceberg Spark, then appends with row lineage and a DELETE of deletion
    vectors."""
    name = f"{SQL_CATALOG}.{NAMESPACE}.{table}"
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


class Table:
    """One table of the chain: the line's Iceberg Spark and PyIceberg reading it after each job."""

    def __init__(self, spark: Any, warehouse: Path, version: int) -> None:
        self.spark = spark
        self.ident = f"{NAMESPACE}.t{version}"
        self.name = written(spark, f"t{version}", version)
        self.warehouse = warehouse

    def pyiceberg(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog(
            SQL_CATALOG,
            uri=f"sqlite:///{self.warehouse}/catalog.db",
            warehouse=f"file://{self.warehouse}/sql",
        )
        return catalog.load_table(self.ident)

    def assert_rows(self, want: Rows, after: str) -> None:
        """Iceberg Spark and PyIceberg both read exactly ``want``."""
        assert spark_rows(self.spark, self.name) == want, f"Iceberg Spark after {after}"
        got = self.pyiceberg().scan().to_arrow()
        assert sorted(tuple(r.values()) for r in got.to_pylist()) == want, f"PyIceberg after {after}"

    def count(self, metadata_table: str, where: str = "true") -> int:
        self.spark.sql(f"REFRESH TABLE {self.name}")  # the session's catalog caches the table
        return int(one(self.spark, f"SELECT count(*) FROM {self.name}.{metadata_table} WHERE {where}"))

    def location(self) -> Path:
        return Path(str(self.pyiceberg().location()).removeprefix("file://"))


class Runner:
    """Jobs through the CLI (each printed result checked against the published schema: see
    tests/conftest.py), every run recorded in one ledger table."""

    def __init__(self, capsys: pytest.CaptureFixture[str], conf_file: Path, ledger: str) -> None:
        self.capsys = capsys
        self.conf_file = conf_file
        self.ledger = ledger
        self.runs: list[dict[str, Any]] = []

    def __call__(self, job: str, *args: str) -> dict[str, Any]:
        self.capsys.readouterr()
        argv = [job, *args, "--conf-file", str(self.conf_file)]
        argv += ["--ledger-catalog", SQL_CATALOG, "--ledger-table", self.ledger]
        code = main(argv)
        out = self.capsys.readouterr()
        result: dict[str, Any] = json.loads(out.out.strip().splitlines()[-1])
        assert code == 0 and result["status"] == "ok", (argv, result, out.err[-3000:])
        assert "ledger" in result, result  # the run was recorded
        self.runs.append(result)
        metrics: dict[str, Any] = result["metrics"]
        return metrics

    def history(self) -> dict[str, Any]:
        self.capsys.readouterr()
        argv = ["history", "--json", "--limit", "0", "--conf-file", str(self.conf_file)]
        assert main([*argv, "--ledger-catalog", SQL_CATALOG, "--ledger-table", self.ledger]) == 0
        body: dict[str, Any] = json.loads(self.capsys.readouterr().out)
        return body


@pytest.mark.parametrize("version", [2, 3])
def test_every_job_keeps_the_rows_and_does_what_it_says(
    spark: Any, warehouse: Path, conf_file: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    table = Table(spark, warehouse, version)
    want = expected_rows()
    table.assert_rows(want, "the writes")
    assert table.count("snapshots") == APPENDS + 2
    data_files = table.count("data_files")
    assert data_files == APPENDS * 2
    position_deletes = table.count("delete_files", "file_format <> 'PUFFIN'")
    run = Runner(capsys, conf_file, f"{NAMESPACE}.runs_v{version}")
    ident = ["--table", table.ident]

    health = run("health", *ident)
    (judged,) = health_tables(run.runs[-1])
    assert judged["table"] == table.ident and judged["metrics"]["data_files"] == data_files, judged
    assert {r["job"] for r in judged["recommendations"]} >= {"compact"}, judged
    table.assert_rows(want, "health")
    assert health["tables_checked"] == 1

    stats = run("compute-stats", *ident)
    distinct = spark.sql(
        f"SELECT count(DISTINCT id), count(DISTINCT cat), count(DISTINCT ts), count(DISTINCT amount) "
        f"FROM {table.name}"
    ).collect()[0]
    assert stats["ndv"] == dict(zip(["id", "cat", "ts", "amount"], distinct, strict=True)), stats
    (registered,) = table.pyiceberg().metadata.statistics
    assert registered.statistics_path == stats["statistics_file"]
    assert registered.snapshot_id == stats["snapshot_id"]
    table.assert_rows(want, "compute-stats")

    rewritten = run("rewrite-position-deletes", *ident, "--rewrite-all")
    assert rewritten["rewritten_position_delete_files_count"] == position_deletes, rewritten
    if version == 2:  # merged: one position delete file per partition
        assert table.count("delete_files") == rewritten["added_delete_files_count"] == 2
    else:  # every position delete file now a deletion vector: one per data file with deletes
        assert table.count("delete_files", "file_format <> 'PUFFIN'") == 0
        dvs = one(spark, f"SELECT count(DISTINCT referenced_data_file) FROM {table.name}.delete_files")
        assert table.count("delete_files") == dvs and rewritten["added_dvs_count"] >= 1, rewritten
    table.assert_rows(want, "rewrite-position-deletes")

    compacted = run("compact", *ident, "--rewrite-all")
    assert compacted["rewritten_data_files_count"] == data_files, compacted
    assert table.count("data_files") == compacted["added_data_files_count"] == 2  # one per partition
    table.assert_rows(want, "compact")

    manifests = run("rewrite-manifests", *ident, "--rewrite-all")
    assert table.count("manifests") == manifests["manifests_after"], manifests
    assert manifests["manifests_after"] < manifests["manifests_before"], manifests
    table.assert_rows(want, "rewrite-manifests")

    snapshots = table.count("snapshots")
    expired = run("expire-snapshots", *ident, "--older-than", "0s")
    assert expired["expired_snapshots_count"] == snapshots - 1, expired
    assert table.count("snapshots") == 1
    assert expired["deleted_data_files_count"] == data_files, expired
    assert table.count("all_data_files") == 2  # only the compacted files are left anywhere
    table.assert_rows(want, "expire-snapshots")

    data = table.location() / "data"
    orphans = [data / f"orphan-{i}.parquet" for i in range(ORPHANS)]
    for orphan in orphans:
        orphan.write_bytes(b"left behind by a failed writer")
        os.utime(orphan, (WEEK_AGO, WEEK_AGO))
    removed = run("remove-orphans", *ident)
    assert removed["orphan_file_count"] == removed["deleted_files_count"] == ORPHANS, removed
    assert not any(o.exists() for o in orphans)
    table.assert_rows(want, "remove-orphans")

    backfilled = run("backfill-row-lineage", *ident)
    assert backfilled["format_version_before"] == version and backfilled["format_version_after"] == 3
    spark.sql(f"REFRESH TABLE {table.name}")
    lineage = spark.sql(f"SELECT _row_id, _last_updated_sequence_number FROM {table.name}").collect()
    ids = [r[0] for r in lineage]
    assert None not in ids and len(set(ids)) == len(want), lineage
    assert None not in {r[1] for r in lineage}
    table.assert_rows(want, "backfill-row-lineage")

    # The ledger: history lists every run, newest first, as Iceberg Spark reads the table.
    history = run.history()
    assert [r["run_id"] for r in history["runs"]] == [r["ledger"]["run_id"] for r in reversed(run.runs)]
    assert [(r["job"], r["status"]) for r in history["runs"]] == [
        (r["job"], "ok") for r in reversed(run.runs)
    ]
    ledger = f"{SQL_CATALOG}.{run.ledger}"
    spark.sql(f"REFRESH TABLE {ledger}")
    assert sorted(tuple(r) for r in spark.sql(f"SELECT run_id, job, table_name FROM {ledger}").collect()) == (
        sorted((r["run_id"], r["job"], r["table_name"]) for r in history["runs"])
    )


def health_tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    tables: list[dict[str, Any]] = result["tables"]
    return tables


@pytest.mark.parametrize("version", [2, 3])
def test_convert_delta_written_by_the_lines_delta_spark(
    spark: Any,
    warehouse: Path,
    conf_file: Path,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    version: int,
) -> None:
    """A partitioned Delta table with deletion vectors, written by the line's delta-spark, converted
    (then a later version converted incrementally) and validated: Iceberg Spark and PyIceberg read
    exactly delta-spark's rows."""
    source = str(tmp_path / "orders")
    spark.sql(
        f"CREATE TABLE delta.`{source}` (id BIGINT, cat STRING, amount DECIMAL(10, 2)) USING delta "
        "PARTITIONED BY (cat) TBLPROPERTIES ('delta.enableDeletionVectors'='true')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO delta.`{source}` SELECT id, IF(id % 3 = 0, 'x', 'y'), "
            f"CAST(id AS DECIMAL(10, 2)) / 8 FROM range({i * 20}, {(i + 1) * 20})"
        )
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 5 = 1")
    run = Runner(capsys, conf_file, f"{NAMESPACE}.runs_convert_v{version}")
    target = f"{NAMESPACE}.orders_v{version}"
    name = f"{SQL_CATALOG}.{target}"
    args = ["--source", source, "--target", target, "--format-version", str(version)]

    converted = run("convert-delta", *args)
    assert converted["delta_version"] == 4 and converted["delete_files"] >= 1, converted
    assert_reads_like_delta(spark, warehouse, name, target, source)
    run("validate-conversion", "--source", source, "--target", target, "--delta-version", "4")

    spark.sql(f"INSERT INTO delta.`{source}` VALUES (1000, 'x', 1.25), (1001, 'z', 2.50)")
    again = run("convert-delta", *args, "--mode", "incremental")
    assert again["delta_version"] == 5, again
    assert_reads_like_delta(spark, warehouse, name, target, source)
    checked = run("validate-conversion", "--source", source, "--target", target, "--delta-version", "5")
    assert checked["delta_rows"] == checked["iceberg_rows"] == 50, checked


def assert_reads_like_delta(spark: Any, warehouse: Path, name: str, target: str, source: str) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    delta = sorted(tuple(r) for r in spark.read.format("delta").load(source).collect())
    assert spark_rows(spark, name) == delta
    catalog = SqlCatalog(
        SQL_CATALOG, uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}/sql"
    )
    got = catalog.load_table(target).scan().to_arrow().to_pylist()
    assert sorted(tuple(r.values()) for r in got) == delta
