"""A worker lost in the middle of a job: SIGKILL to the worker and everything it started (its
executor and that executor's Python workers), at the moment its executor starts its first task.
Spark reruns the lost tasks on the other worker; the job must end ``ok`` with the result an
undisturbed run has, or fail closed. The worker is then replaced, so the cluster is whole again."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.cluster_submit import Submission, Submitted, local_catalog_file, submit_env, task_log
from tests.support.spark_cluster import StandaloneCluster, Worker
from tests.support.spark_submit import (
    ROWS_PER_FILE,
    iceberg_table_of_small_files,
    live_data_files,
    sql_catalog,
)

FILES = 16
OUTPUT_FILES = 8


def first_task_started(worker: Worker, earlier: set[Path]) -> bool:
    """An executor of a new application on the worker logged the start of a task (Spark's executor
    log is at INFO); ``earlier``: the applications to ignore."""
    logs = (log for app in worker.work_dir.iterdir() if app not in earlier for log in app.glob("*/stderr"))
    return any("Running task" in log.read_text(errors="replace") for log in logs)


def run_losing_a_worker(submission: Submission, victim: Worker, script: str, *args: str) -> Submitted:
    """Submit, kill ``victim`` as soon as its executor runs a task, and wait for the job."""
    cmd = submission.command(script, args)
    cluster = submission.cluster
    earlier = set(victim.work_dir.iterdir())
    with subprocess.Popen(
        cmd,
        cwd=submission.workdir,
        env=submit_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        deadline = time.monotonic() + 240
        while not first_task_started(victim, earlier):
            assert proc.poll() is None, f"the job ended before {victim.name} ran a task"
            assert time.monotonic() < deadline, f"{victim.name} ran no task"
            time.sleep(0.02)
        cluster.kill_worker(victim)
        out, err = proc.communicate(timeout=300)
    return submission.finished(" ".join(cmd), proc.returncode, out, err)


def assert_lost_and_rerun(done: Submitted, survivor: Worker) -> None:
    """The event log: the victim's executor was removed with tasks in flight, which failed as
    lost and ran again, to success, on the survivor's executor."""
    log = task_log(done.submission.events)
    assert log.executors_removed == 1, log
    assert log.failed.get("ExecutorLostFailure", 0) >= 1, log
    (survivor_executor,) = [p.name for p in (survivor.work_dir / log.app).iterdir()]
    assert log.succeeded.get(survivor_executor, 0) >= 1, log


def test_a_worker_killed_mid_job_leaves_compact_and_expire_results_whole(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    table = iceberg_table_of_small_files(warehouse, "db.events", files=FILES)
    conf = local_catalog_file(tmp_path / "catalogs.yaml", warehouse)
    originals = live_data_files(table)
    total = sum(task.file.file_size_in_bytes for task in table.scan().plan_files())
    common = ("--table", "db.events", "--conf-file", str(conf))

    victim, survivor = cluster.workers
    compacted = run_losing_a_worker(
        Submission.under(cluster, tmp_path, "compact"),
        victim,
        "compact.py",
        *common,
        *("--target-file-size", str(total // OUTPUT_FILES)),
    )
    assert_lost_and_rerun(compacted, survivor)
    metrics: dict[str, Any] = compacted.metrics
    assert metrics["rewritten_data_files_count"] == FILES, compacted.result
    assert metrics["failed_data_files_count"] == 0, compacted.result
    after = sql_catalog(warehouse).load_table("db.events")
    # Exactly the files the commit names: none of the lost attempt's outputs is live.
    assert len(live_data_files(after)) == metrics["added_data_files_count"]
    assert sorted(after.scan().to_arrow().column("id").to_pylist()) == list(range(FILES * ROWS_PER_FILE))

    victim = cluster.replace_worker(victim)
    expired = run_losing_a_worker(
        Submission.under(cluster, tmp_path, "expire"),
        victim,
        "expire_snapshots.py",
        *common,
        *("--older-than", "0s", "--engine", "spark"),
    )
    assert_lost_and_rerun(expired, survivor)
    # Files a lost delete attempt removed are found gone by its rerun: counted as already missing.
    counted = expired.metrics["deleted_data_files_count"]
    assert counted == FILES or counted + expired.metrics["already_missing_count"] >= FILES, expired.result
    assert not any(Path(f.removeprefix("file://")).exists() for f in originals)
    left = sql_catalog(warehouse).load_table("db.events")
    assert len(left.snapshots()) == 1
    assert sorted(left.scan().to_arrow().column("id").to_pylist()) == list(range(FILES * ROWS_PER_FILE))
    cluster.replace_worker(victim)
