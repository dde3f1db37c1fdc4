"""The ledger of runs after concurrent writers: every run lands once, and Iceberg Spark, PyIceberg
and tablekeeper's own reader see the same rows.

Writers, all at once: four `tablekeeper expire-snapshots --dry-run` processes and one failing job
(each appends its result through the CLI's hook), and four processes appending five runs each
through the ledger's append function.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.jobs.common.ledger import SCHEMA, HistoryQuery, LedgerRow, append_rows, read_runs
from tablekeeper.jobs.common.result import JobClock
from tablekeeper.spark.compat import to_arrow
from tests.conftest import REPO_ROOT, SQL_CATALOG
from tests.support.iceberg_writer import write_rows

pytestmark = pytest.mark.spark

LEDGER = "ledger.runs"
SOURCE = "ledger_src.events"
JOBS = 4
WORKERS = 4
APPENDS = 5
COLUMNS = [f.name for f in SCHEMA.fields]


def append_worker(uri: str, warehouse: str, worker: int) -> tuple[list[str], int]:
    """One writer process: APPENDS runs, each its own commit. Returns their ids and the attempts."""
    catalog = SqlCatalog(SQL_CATALOG, uri, warehouse)
    ids, attempts = [], 0
    for i in range(APPENDS):
        result = JobClock().result(
            "compact", f"db.t{worker}", dry_run=False, metrics={"rewritten_data_files_count": i}
        )
        row = LedgerRow.from_result(result, exit_code=0)
        attempts += append_rows(catalog, LEDGER, [row]).attempts
        ids.append(row.run_id)
    return ids, attempts


def conf_file(tmp_path: Path, catalogs: Any) -> Path:
    conf = catalogs.get(SQL_CATALOG)
    path = tmp_path / "catalogs.yaml"
    path.write_text(
        f"default: {SQL_CATALOG}\ncatalogs:\n  {SQL_CATALOG}:\n    type: sql\n"
        f"    uri: {conf.uri}\n    warehouse: {conf.warehouse}\n"
    )
    return path


def source_table(catalogs: Any) -> None:
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    meta = new_table_metadata(
        schema=Schema(0, (NestedField(1, "id", LONG, True),)),
        location=catalog.default_table_location(SOURCE),
        timestamp_ms=int(time.time() * 1000),
    )
    catalog.create_table(SOURCE, meta)
    for i in range(3):
        files = write_rows(catalog.load_table(SOURCE).metadata, [{"id": i}])
        Committer(catalog, SOURCE).commit_snapshot(SnapshotChange("append", added_files=tuple(files)))


def start_job(conf: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "tablekeeper", *argv, "--conf-file", str(conf)),
            *("--ledger-catalog", SQL_CATALOG, "--ledger-table", LEDGER),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(proc: subprocess.Popen[str], code: int) -> dict[str, Any]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == code, err[-2000:]
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert result["ledger"]["written"] is True, result["ledger"]
    assert result["ledger"]["table"] == f"{SQL_CATALOG}.{LEDGER}"
    return result


def normalised(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows as tuples in the ledger's column order, times as epoch microseconds, by run id."""
    table = table.select(COLUMNS)
    started = COLUMNS.index("started_at")
    table = table.set_column(started, "started_at", pc.cast(table.column(started), pa.int64()))
    return sorted(tuple(r[c] for c in COLUMNS) for r in table.to_pylist())


def test_concurrent_runs_all_land_and_every_engine_reads_them(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source_table(catalogs)
    conf = conf_file(tmp_path, catalogs)
    sql = catalogs.get(SQL_CATALOG)
    # spawn: the parent holds the Spark JVM's threads, which a fork would copy half-alive.
    pool = multiprocessing.get_context("spawn").Pool(WORKERS)
    try:
        pending = [pool.apply_async(append_worker, (sql.uri, sql.warehouse, w)) for w in range(WORKERS)]
        jobs = [
            start_job(conf, "expire-snapshots", "--table", SOURCE, "--dry-run", "--retain-last", "1")
            for _ in range(JOBS)
        ]
        failing = start_job(conf, "remove-orphans", "--table", "ledger_src.missing")
        appended = [p.get(timeout=600) for p in pending]
    finally:
        pool.close()
        pool.join()
    results = [finished(p, 0) for p in jobs]
    failed = finished(failing, 2)

    expected = {r["ledger"]["run_id"] for r in [*results, failed]}
    expected |= {run_id for ids, _ in appended for run_id in ids}
    assert len(expected) == JOBS + 1 + WORKERS * APPENDS

    catalog = catalog_for(sql)
    loaded = catalog.load_table(LEDGER)
    ours = read_runs(loaded, HistoryQuery(limit=None))
    assert {r.run_id for r in ours} == expected  # every append landed, none twice
    assert len(ours) == len(expected)
    # One snapshot per run: nothing was merged or lost on the way.
    assert len(loaded.metadata.ancestors(loaded.metadata.current_snapshot_id)) == len(expected)
    by_id = {r.run_id: r for r in ours}
    assert by_id[failed["ledger"]["run_id"]].status == "failed"
    assert by_id[failed["ledger"]["run_id"]].exit_code == 2
    assert {by_id[r["ledger"]["run_id"]].status for r in results} == {"dry_run"}

    spark_rows = normalised(to_arrow(spark.table(f"{SQL_CATALOG}.{LEDGER}")))
    from pyiceberg.catalog.sql import SqlCatalog as PyIcebergSqlCatalog

    pyiceberg = PyIcebergSqlCatalog(SQL_CATALOG, uri=sql.uri, warehouse=sql.warehouse)
    pyiceberg_rows = normalised(pyiceberg.load_table(LEDGER).scan().to_arrow())
    tablekeeper_rows = sorted(astuple(r) for r in ours)
    assert spark_rows == tablekeeper_rows
    assert pyiceberg_rows == tablekeeper_rows

    # The partitions and metrics the readers prune with hold: Spark filters by time and by job.
    counted = spark.sql(
        f"SELECT job, count(*) AS n FROM {SQL_CATALOG}.{LEDGER} "
        "WHERE started_at >= current_timestamp() - INTERVAL 1 DAY GROUP BY job ORDER BY job"
    ).collect()
    assert [(r["job"], r["n"]) for r in counted] == [
        ("compact", WORKERS * APPENDS),
        ("expire-snapshots", JOBS),
        ("remove-orphans", 1),
    ]
