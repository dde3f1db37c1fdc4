"""The maintenance DAG under `airflow dags test`, its jobs spark-submitted to local Spark: a table of
small files and old snapshots comes out compacted and expired, with its orphan gone and every
job's result in XCom; a job that fails fails its task with the job's own one-line reason."""

from __future__ import annotations

from pathlib import Path

from tests.dags.conftest import DagTest, local_tables, task_states, xcom_results
from tests.support.spark_submit import (
    ROWS_PER_FILE,
    iceberg_table_of_small_files,
    live_data_files,
    orphan_path,
    sql_catalog,
)

JOBS = {"compact": {}, "expire-snapshots": {"older-than": "0s", "retain-last": 1}, "remove-orphans": {}}
FILES = 6


def test_maintenance_dag_compacts_expires_and_removes_orphans(
    tmp_path: Path, dags_test: DagTest, airflow_home: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    before = iceberg_table_of_small_files(warehouse, "db.events", files=FILES)
    old_files = live_data_files(before)
    orphan = orphan_path(before)
    tables = local_tables(
        tmp_path / "tables.yaml", warehouse, {"jobs": JOBS}, tables=[{"table": "db.events"}]
    )
    dag_id = "tablekeeper_maintenance__db_events"

    proc = dags_test(dag_id, tables)

    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert task_states(airflow_home, dag_id) == {
        "compact": "success",
        "expire_snapshots": "success",
        "remove_orphans": "success",
    }
    results = xcom_results(airflow_home, dag_id)
    assert {task: (r["job"], r["table"], r["status"]) for task, r in results.items()} == {
        "compact": ("compact", "db.events", "ok"),
        "expire_snapshots": ("expire-snapshots", "db.events", "ok"),
        "remove_orphans": ("remove-orphans", "db.events", "ok"),
    }
    assert results["compact"]["metrics"]["rewritten_data_files_count"] == FILES
    assert results["compact"]["metrics"]["added_data_files_count"] == 1
    # The appends' snapshots and the files only they reached: all but the compaction's snapshot.
    assert len(results["expire_snapshots"]["metrics"]["expired_snapshot_ids"]) == FILES
    assert results["expire_snapshots"]["metrics"]["deleted_data_files_count"] == FILES
    assert results["remove_orphans"]["metrics"]["orphan_file_count"] == 1
    assert results["remove_orphans"]["metrics"]["orphan_file_location_sample"] == [f"file://{orphan}"]

    after = sql_catalog(warehouse).load_table("db.events")
    assert len(live_data_files(after)) == 1
    assert [s.snapshot_id for s in after.snapshots()] == [after.current_snapshot().snapshot_id]
    assert sorted(after.scan().to_arrow().column("id").to_pylist()) == list(range(FILES * ROWS_PER_FILE))
    assert not orphan.exists()
    assert not any(Path(f.removeprefix("file://")).exists() for f in old_files)


def test_a_failing_job_fails_its_task_with_the_jobs_reason(
    tmp_path: Path, dags_test: DagTest, airflow_home: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    sql_catalog(warehouse).create_namespace("db")  # the catalog exists, the table does not
    tables = local_tables(
        tmp_path / "tables.yaml", warehouse, {"jobs": JOBS}, tables=[{"table": "db.missing"}]
    )
    dag_id = "tablekeeper_maintenance__db_missing"

    proc = dags_test(dag_id, tables)

    assert proc.returncode != 0
    assert task_states(airflow_home, dag_id) == {
        "compact": "failed",
        "expire_snapshots": "upstream_failed",
        "remove_orphans": "upstream_failed",
    }
    output = proc.stdout + proc.stderr
    reason = "compact db.missing failed (exit 2): table db.missing not found in catalog local"
    assert reason in output, output[-5000:]
    # Exit 2 is a usage error: the task fails for good instead of waiting for a retry.
    assert "AirflowFailException: " + reason in output
    assert xcom_results(airflow_home, dag_id) == {}
