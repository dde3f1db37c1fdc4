"""The maintenance DAG under `airflow dags test`, its jobs spark-submitted to local Spark, behind the
health gate: a table of small files, expirable snapshots and an orphan gets every job health
recommends, comes out compacted and expired, with its orphan gone and every job's result in XCom;
a healthy table's jobs are skipped with health's reason (compute-stats, which health does not
judge, still runs after them); a job that fails (here health itself) fails its task with the job's
own one-line reason and stops the chain. Every job's OpenLineage events nest under the DAG run."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.dags.conftest import DagTest, dag_run_ids, local_tables, task_states, xcom_results, xcoms
from tests.support.observe_receiver import Receiver, no_telemetry_env
from tests.support.openlineage_check import validate_event
from tests.support.spark_submit import (
    ROWS_PER_FILE,
    iceberg_table_of_small_files,
    live_data_files,
    orphan_path,
    sql_catalog,
)

JOBS = {"compact": {}, "expire-snapshots": {"older-than": "0s", "retain-last": 1}, "remove-orphans": {}}
FILES = 6


@pytest.mark.usefixtures(no_telemetry_env.__name__)
def test_maintenance_dag_runs_what_health_recommends_compacting_expiring_and_removing_orphans(
    tmp_path: Path, dags_test: DagTest, airflow_home: Path, receiver: Receiver
) -> None:
    warehouse = tmp_path / "warehouse"
    before = iceberg_table_of_small_files(warehouse, "db.events", files=FILES)
    # health judges expiry by the table's own rules, as the job's older-than 0s asks here.
    with before.transaction() as tx:
        tx.set_properties({"history.expire.max-snapshot-age-ms": "0"})
    old_files = live_data_files(before)
    orphan = orphan_path(before)
    tables = local_tables(
        tmp_path / "tables.yaml",
        warehouse,
        {"jobs": JOBS},
        # list_files: health lists the table for orphans, so remove-orphans is gated too.
        tables=[{"table": "db.events", "health": {"list_files": True}}],
        env_vars={"OPENLINEAGE_URL": receiver.url},
    )
    dag_id = "tablekeeper_maintenance__db_events"

    proc = dags_test(dag_id, tables)

    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert task_states(airflow_home, dag_id) == {
        "health": "success",
        "compact": "success",
        "expire_snapshots": "success",
        "remove_orphans": "success",
    }
    results = xcom_results(airflow_home, dag_id)
    assert {task: (r["job"], r["table"], r["status"]) for task, r in results.items()} == {
        "health": ("health", "db.events", "ok"),
        "compact": ("compact", "db.events", "ok"),
        "expire_snapshots": ("expire-snapshots", "db.events", "ok"),
        "remove_orphans": ("remove-orphans", "db.events", "ok"),
    }
    [health] = results["health"]["tables"]
    assert [r["job"] for r in health["recommendations"]] == ["compact", "expire-snapshots", "remove-orphans"]
    # Each job that ran carries health's recommendation, and nothing was skipped.
    recommended = xcoms(airflow_home, dag_id, "health")
    assert {task: r["job"] for (task, _), r in recommended.items()} == {
        "compact": "compact",
        "expire_snapshots": "expire-snapshots",
        "remove_orphans": "remove-orphans",
    }
    assert recommended[("compact", -1)]["expected"]["data_files_after"] == 1
    assert xcoms(airflow_home, dag_id, "skipped") == {}
    output = proc.stdout + proc.stderr
    assert "health recommends compact for db.events: 6 of 6 data files are below" in output, output[-5000:]

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

    # Each job's START and COMPLETE name the DAG run as their parent (no OpenLineage provider in
    # this Airflow: the DAG run's id is derived from its dag_id and run_id).
    [dag_run] = dag_run_ids(airflow_home, dag_id)
    parent = ("default", dag_id, str(uuid.uuid5(uuid.NAMESPACE_URL, f"airflow://{dag_id}/{dag_run}")))
    events = [validate_event(r.body)[0] for r in receiver.at("/api/v1/lineage")]
    by_job: dict[str, list[str]] = {}
    for event in events:
        facet = event.run.facets["parent"]  # type: ignore[index]
        assert (facet.job.namespace, facet.job.name, facet.run.runId) == parent
        by_job.setdefault(event.job.name, []).append(event.eventType.value)  # type: ignore[union-attr]
    assert by_job == {
        f"{job}.db.events": ["START", "COMPLETE"]
        for job in ("health", "compact", "expire-snapshots", "remove-orphans")
    }


def test_a_healthy_tables_jobs_are_skipped_with_healths_reason(
    tmp_path: Path, dags_test: DagTest, airflow_home: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    before = iceberg_table_of_small_files(warehouse, "db.quiet", files=1)
    jobs = {
        "compact": {},
        "rewrite-manifests": {},
        "expire-snapshots": {"older-than": "5d"},
        "compute-stats": {},
    }
    tables = local_tables(
        tmp_path / "tables.yaml",
        warehouse,
        {"jobs": jobs, "health": {"thresholds": {"compact.min-files": 2}}},
        tables=[{"table": "db.quiet"}],
    )
    dag_id = "tablekeeper_maintenance__db_quiet"

    proc = dags_test(dag_id, tables)

    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    # A skipped job does not skip the next one: compute-stats, which health does not judge, runs.
    assert task_states(airflow_home, dag_id) == {
        "health": "success",
        "compact": "skipped",
        "rewrite_manifests": "skipped",
        "expire_snapshots": "skipped",
        "compute_stats": "success",
    }
    results = xcom_results(airflow_home, dag_id)
    assert sorted(results) == ["compute_stats", "health"]
    [health] = results["health"]["tables"]
    assert (health["table"], health["recommendations"]) == ("db.quiet", [])
    skipped = {task: s for (task, _), s in xcoms(airflow_home, dag_id, "skipped").items()}
    assert {task: (s["job"], s["table"]) for task, s in skipped.items()} == {
        "compact": ("compact", "db.quiet"),
        "rewrite_manifests": ("rewrite-manifests", "db.quiet"),
        "expire_snapshots": ("expire-snapshots", "db.quiet"),
    }
    reasons = {task: s["reason"] for task, s in skipped.items()}
    assert reasons["compact"].startswith(
        "health: compact not needed for db.quiet: 1 of 1 data files are small (under "
    )
    assert "compact.min-files" in reasons["compact"]
    assert reasons["rewrite_manifests"].startswith(
        "health: rewrite-manifests not needed for db.quiet: 1 data manifests ("
    )
    assert reasons["expire_snapshots"].startswith(
        "health: expire-snapshots not needed for db.quiet: 0 of 1 snapshots are past the table's "
        "history.expire rules ("
    )
    output = proc.stdout + proc.stderr
    assert all(reason in output for reason in reasons.values()), output[-5000:]
    # Nothing was rewritten.
    after = sql_catalog(warehouse).load_table("db.quiet")
    assert live_data_files(after) == live_data_files(before)


def test_a_failing_job_fails_its_task_with_the_jobs_reason_and_stops_the_chain(
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
    # health is the first job; the jobs after it (trigger rule none_failed) do not run either.
    assert task_states(airflow_home, dag_id) == {
        "health": "failed",
        "compact": "upstream_failed",
        "expire_snapshots": "upstream_failed",
        "remove_orphans": "upstream_failed",
    }
    output = proc.stdout + proc.stderr
    reason = "health db.missing failed (exit 2): table db.missing not found in catalog local"
    assert reason in output, output[-5000:]
    # Exit 2 is a usage error: the task fails for good instead of waiting for a retry.
    assert "AirflowFailException: " + reason in output
    assert xcom_results(airflow_home, dag_id) == {}
