"""Jobs submitted to a Spark standalone cluster (a master and two one-core workers on loopback, see
tests/support/spark_cluster.py) as README "Running on a cluster" says: the script, the zip through
--py-files, the runtime jars (conf/jars.txt's delta, iceberg and jdbc roles) through --jars, the
README's confs, and the catalog file named by the job's --conf-file.

Nothing reaches the executors implicitly: the submit runs from a directory that is not the checkout,
with no TABLEKEEPER_*, SPARK_* or PYSPARK_* variables, and the executors' Python
(spark.pyspark.python) holds tablekeeper's dependencies but not tablekeeper itself (the .venv has it
as an editable install; the wrapper below runs it without site, so that install is not on its
path): tasks import tablekeeper from the submitted zip or fail. The event log and the workers' work
directories show that both workers' executors ran tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from tablekeeper.settings import PACKAGE_ROLES, jar_specs, jars_dir
from tablekeeper.spark.session import DELTA_CATALOG, DELTA_EXTENSION, ICEBERG_EXTENSION
from tests.support.spark_cluster import HOST, LEAN_JVM, StandaloneCluster
from tests.support.spark_submit import (
    REPO_ROOT,
    ROWS_PER_FILE,
    VENV_BIN,
    build_package,
    iceberg_table_of_small_files,
    last_json_line,
    live_data_files,
    sql_catalog,
)

FILES = 12
OUTPUT_FILES = 4  # one group, cut into this many bins: one Spark task each


def executor_python(directory: Path) -> Path:
    """The venv's interpreter and its site-packages without site's .pth files (the editable
    tablekeeper install among them): the README's "Python holding tablekeeper's dependencies"."""
    wrapper = directory / "executor-python"
    site_packages = sysconfig.get_paths()["purelib"]
    wrapper.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site_packages}" exec {VENV_BIN / "python"} -S "$@"\n'
    )
    wrapper.chmod(0o755)
    probe = subprocess.run(
        [str(wrapper), "-c", "import pyarrow, pyspark\nimport tablekeeper"],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode != 0 and "No module named 'tablekeeper'" in probe.stderr, probe.stderr
    return wrapper


def submit_env() -> dict[str, str]:
    """The caller's environment without anything tablekeeper or Spark would read from it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TABLEKEEPER_", "SPARK_", "PYSPARK_"))}
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(VENV_BIN.parent),
        SPARK_SUBMIT_OPTS=LEAN_JVM,  # the driver JVM: test economy, not the command's business
    )
    return env


def submit(
    cluster: StandaloneCluster, workdir: Path, events: Path, script: str, *args: str
) -> tuple[dict[str, Any], str]:
    """spark-submit in client mode from ``workdir``: the job's JSON result and Spark's log."""
    jars = [jars_dir() / s.file_name for s in jar_specs() if s.role in PACKAGE_ROLES]
    cmd = [
        str(VENV_BIN / "spark-submit"),
        *("--master", cluster.url, "--deploy-mode", "client"),
        *("--jars", ",".join(str(j) for j in jars)),
        *("--conf", f"spark.sql.extensions={DELTA_EXTENSION},{ICEBERG_EXTENSION}"),
        *("--conf", f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}"),
        *("--conf", "spark.sql.session.timeZone=UTC"),
        *("--conf", f"spark.pyspark.python={executor_python(workdir)}"),
        *("--conf", f"spark.pyspark.driver.python={VENV_BIN / 'python'}"),
        # Loopback, small executors, and the cluster's: not the test machine's.
        *("--conf", f"spark.driver.host={HOST}", "--conf", f"spark.driver.bindAddress={HOST}"),
        *("--conf", "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false"),
        *("--conf", f"spark.executor.extraJavaOptions={LEAN_JVM}"),
        # No task before both executors registered: each one gets the first offer.
        *("--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"),
        *("--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=60s"),
        *("--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events.as_uri()}"),
        # One plain JSON-lines file per application (Spark 4 rolls and zstd-compresses by default).
        *("--conf", "spark.eventLog.rolling.enabled=false", "--conf", "spark.eventLog.compress=false"),
        *("--py-files", str(REPO_ROOT / "dist" / "tablekeeper.zip")),
        str(REPO_ROOT / "jobs" / script),
        *args,
    ]
    proc = subprocess.run(
        cmd, cwd=workdir, env=submit_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = last_json_line(proc.stdout)
    assert result["status"] == "ok", result
    return result, proc.stderr


def task_executors(events: Path) -> dict[str, dict[str, int]]:
    """Per application in the event log: tasks ended successfully, by executor id."""
    apps: dict[str, dict[str, int]] = {}
    for log in events.iterdir():
        if log.name.startswith("."):  # a checksum file Hadoop's local filesystem may write
            continue
        counts = apps.setdefault(log.name.removesuffix(".inprogress"), {})
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerTaskEnd" and event["Task End Reason"]["Reason"] == "Success":
                executor = event["Task Info"]["Executor ID"]
                assert event["Task Info"]["Host"] == HOST
                counts[executor] = counts.get(executor, 0) + 1
    return apps


def assert_both_workers_ran_tasks(cluster: StandaloneCluster, events: Path) -> None:
    """The one application in ``events`` ran tasks on two executors, each on its own worker (one
    core each, so one executor each): that worker's work directory holds <app id>/<executor id>."""
    (app, by_executor), *others = task_executors(events).items()
    assert not others
    assert len(by_executor) == 2, by_executor
    for worker in cluster.workers:
        launched = [p.name for p in (worker.work_dir / app).iterdir()]
        assert len(launched) == 1 and launched[0] in by_executor, (worker.name, launched, by_executor)


def test_compact_and_expire_on_standalone_cluster_run_on_both_workers(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    build_package()
    warehouse = tmp_path / "warehouse"
    table = iceberg_table_of_small_files(warehouse, "db.events", files=FILES)
    catalog_file = tmp_path / "catalogs.yaml"
    catalog_file.write_text(
        "default: local\ncatalogs:\n  local:\n    type: sql\n"
        f"    uri: sqlite:///{warehouse}/catalog.db\n    warehouse: {warehouse}/sql\n"
    )
    workdir = tmp_path / "submit"
    workdir.mkdir()
    events = tmp_path / "events"
    (events / "compact").mkdir(parents=True)
    (events / "expire").mkdir()

    originals = live_data_files(table)
    total = sum(task.file.file_size_in_bytes for task in table.scan().plan_files())
    compacted, log = submit(
        cluster,
        workdir,
        events / "compact",
        "compact.py",
        *("--table", "db.events", "--conf-file", str(catalog_file)),
        *("--target-file-size", str(total // OUTPUT_FILES)),
    )
    assert f"{REPO_ROOT}/dist/tablekeeper.zip/tablekeeper/" in log  # the driver ran the zip's code
    metrics = compacted["metrics"]
    assert metrics["rewritten_data_files_count"] == FILES, compacted
    assert metrics["failed_data_files_count"] == 0, compacted
    assert metrics["added_data_files_count"] >= 2, compacted
    after = sql_catalog(warehouse).load_table("db.events")
    assert len(live_data_files(after)) == metrics["added_data_files_count"]
    ids = sorted(after.scan().to_arrow().column("id").to_pylist())
    assert ids == list(range(FILES * ROWS_PER_FILE))

    assert_both_workers_ran_tasks(cluster, events / "compact")

    # Expiring on Spark: the files of the expired snapshots found and deleted by executor tasks.
    expired, _ = submit(
        cluster,
        workdir,
        events / "expire",
        "expire_snapshots.py",
        *("--table", "db.events", "--conf-file", str(catalog_file)),
        *("--older-than", "0s", "--engine", "spark"),
    )
    assert expired["metrics"]["engine"] == "spark", expired
    assert len(expired["metrics"]["expired_snapshot_ids"]) == FILES, expired
    assert expired["metrics"]["deleted_data_files_count"] == FILES, expired
    assert len(sql_catalog(warehouse).load_table("db.events").snapshots()) == 1
    assert not any(Path(f.removeprefix("file://")).exists() for f in originals)
    assert_both_workers_ran_tasks(cluster, events / "expire")
