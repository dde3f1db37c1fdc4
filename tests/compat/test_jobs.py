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
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.cli import main
from tests.compat.tables import (
    FILES,
    NAMESPACE,
    SNAPSHOTS,
    Rows,
    delta_rows,
    delta_source,
    expected_rows,
    one,
    plant_orphans,
    pyiceberg_rows,
    pyiceberg_table,
    spark_rows,
    written,
)
from tests.conftest import SQL_CATALOG
from tests.support.java_deletes import EqualityDelete, commit_equality_delete_files

pytestmark = pytest.mark.spark

ORPHANS = 3


class Table:
    """One table of the chain: the line's Iceberg Spark and PyIceberg reading it after each job."""

    def __init__(self, spark: Any, warehouse: Path, version: int) -> None:
        self.spark = spark
        self.ident = f"{NAMESPACE}.t{version}"
        self.name = written(spark, f"t{version}", version)
        self.warehouse = warehouse

    def pyiceberg(self) -> Any:
        return pyiceberg_table(self.warehouse, self.ident)

    def assert_rows(self, want: Rows, after: str) -> None:
        """Iceberg Spark and PyIceberg both read exactly ``want``."""
        assert spark_rows(self.spark, self.name) == want, f"Iceberg Spark after {after}"
        assert pyiceberg_rows(self.warehouse, self.ident) == want, f"PyIceberg after {after}"

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
        assert result["ledger"]["written"] is True, result  # the run was recorded
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
    assert table.count("snapshots") == SNAPSHOTS
    data_files = table.count("data_files")
    assert data_files == FILES
    position_deletes = table.count("delete_files", "file_format <> 'PUFFIN'")
    run = Runner(capsys, conf_file, f"{NAMESPACE}.runs_v{version}")
    ident = ["--table", table.ident]

    health = run("health", *ident)
    (judged,) = run.runs[-1]["tables"]
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

    # A change-data-capture writer's equality delete (Iceberg Java's, partition a's ids under 6),
    # then resolved into positions: the rows stay those Iceberg Spark read with the delete.
    commit_equality_delete_files(
        spark, table.name, [EqualityDelete(("id",), partition=("a",), matching=("lessThan", "id", 6))]
    )
    want = [r for r in want if not (r[0] < 6 and r[1] == "a")]
    assert spark_rows(spark, table.name) == want, "Iceberg Spark after Iceberg Java's equality delete"
    resolved = run("rewrite-equality-deletes", *ident)
    assert resolved["removed_equality_delete_files_count"] == 1, resolved
    assert table.count("delete_files", "content = 2") == 0
    table.assert_rows(want, "rewrite-equality-deletes")

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

    orphans = plant_orphans(table.location(), ORPHANS)
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
    delta_source(spark, source)
    run = Runner(capsys, conf_file, f"{NAMESPACE}.runs_convert_v{version}")
    target = f"{NAMESPACE}.orders_v{version}"
    name = f"{SQL_CATALOG}.{target}"
    args = ["--source", source, "--target", target, "--format-version", str(version)]

    converted = run("convert-delta", *args)
    assert converted["delta_version"] == 1 and converted["delete_files"] >= 1, converted
    assert_reads_like_delta(spark, warehouse, name, target, source)
    run("validate-conversion", "--source", source, "--target", target, "--delta-version", "1")

    spark.sql(f"INSERT INTO delta.`{source}` VALUES (1000, 'x', 1.25), (1001, 'z', 2.50)")
    again = run("convert-delta", *args, "--mode", "incremental")
    assert again["delta_version"] == 2, again
    assert_reads_like_delta(spark, warehouse, name, target, source)
    checked = run("validate-conversion", "--source", source, "--target", target, "--delta-version", "2")
    assert checked["delta_rows"] == checked["iceberg_rows"] == 50, checked


def assert_reads_like_delta(spark: Any, warehouse: Path, name: str, target: str, source: str) -> None:
    delta = delta_rows(spark, source)
    assert spark_rows(spark, name) == delta, "Iceberg Spark"
    assert pyiceberg_rows(warehouse, target) == delta, "PyIceberg"
