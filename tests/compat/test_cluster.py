"""Jobs submitted to a standalone cluster of the line (tests/compat/conftest.py: its master and one
worker on loopback, SPARK_HOME the line's pyspark) with the cluster tier's machinery
(tests/support/cluster_submit.py: submitted from outside the checkout, nothing reaching the
executors implicitly, their Python without tablekeeper). Each table is written by the line's
Iceberg Spark in the tier's session, and read back by it after the submit.

One submit, for time's sake (each costs a driver JVM, an executor and the packages' resolution): the
standalone command of docs/deploy/cluster.md as written, with the line's jars file, whose last line
runs tests/support/submit_jobs.py: the docs' own job line (compact on db.events) first, then every
other job's own script in turn, each as spark-submit runs it alone. The application's event log
says which job's tasks the worker's executor ran.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.settings import conf_dir
from tests.compat.conftest import Line
from tests.compat.tables import (
    FILES,
    NAMESPACE,
    delta_rows,
    delta_source,
    expected_rows,
    one,
    plant_orphans,
    spark_rows,
    written,
)
from tests.conftest import SQL_CATALOG
from tests.support.cluster_submit import Submission
from tests.support.java_deletes import EqualityDelete, commit_equality_delete_files
from tests.support.spark_cluster import HOST, StandaloneCluster
from tests.support.spark_submit import REPO_ROOT

pytestmark = pytest.mark.spark

ORPHANS = 2
LEDGER = f"{NAMESPACE}.runs_cluster"
TARGET = f"{NAMESPACE}.cluster_orders"
# Jobs that change metadata only, on the driver: no executor task is theirs.
DRIVER_ONLY = {"backfill_row_lineage.py"}


def line_jars_file(line: Line) -> Path:
    """The jars file of the running line, as docs/deploy/cluster.md tells a user to pick it: the
    line's own conf/lines/<line>/jars.txt where it has one, else conf/jars.txt."""
    own = conf_dir() / "lines" / line.spark_minor / "jars.txt"
    return own if own.is_file() else conf_dir() / "jars.txt"


def location(spark: Any, name: str) -> Path:
    spark.sql(f"REFRESH TABLE {name}")
    path = str(one(spark, f"SELECT file_path FROM {name}.data_files LIMIT 1"))
    return Path(path.removeprefix("file:")).parent.parent.parent  # <location>/data/cat=a/<file>


def test_every_job_submitted_with_the_docs_command_to_the_lines_cluster(
    compat_cluster: StandaloneCluster, spark: Any, conf_file: Path, line: Line, tmp_path: Path
) -> None:
    """docs/deploy/cluster.md's standalone command as written, with the line's jars file; its last
    line (compact on db.events, the catalog file shipped by --files and named by its base name) is
    the first job the driver runs, every other job follows with the same catalog file."""
    events = written(spark, "events", 2, namespace="db")  # the command's --table db.events
    chain = written(spark, "cluster_t3", 3)
    # A change-data-capture writer's equality delete (Iceberg Java's: partition a's ids under 6) on
    # a table of its own, outside health's cluster_* tables.
    cdc = written(spark, "cdc_t3", 3)
    commit_equality_delete_files(
        spark, cdc, [EqualityDelete(("id",), partition=("a",), matching=("lessThan", "id", 6))]
    )
    orphans = plant_orphans(location(spark, chain), ORPHANS)
    source = str(tmp_path / "delta-orders")
    delta_source(spark, source)

    submission = Submission.under(compat_cluster, tmp_path, "jobs")
    *options, job_line = submission.readme_command(conf_file).splitlines()
    default_jars = f"{REPO_ROOT}/conf/jars.txt"
    assert any(default_jars in o for o in options), options
    options = [o.replace(default_jars, str(line_jars_file(line))) for o in options]
    script, *docs_args = shlex.split(job_line)
    assert script == f"{REPO_ROOT}/jobs/compact.py" and docs_args[-2:] == ["--conf-file", "catalogs.yaml"]
    common = [*docs_args[-2:], "--ledger-catalog", SQL_CATALOG, "--ledger-table", LEDGER]
    table = ["--table", f"{NAMESPACE}.cluster_t3", *common]
    converted = ["--source", source, "--target", TARGET, *common]
    plan: list[tuple[str, list[str]]] = [
        ("compact.py", [*docs_args, *common[2:]]),
        ("rewrite_position_deletes.py", [*table, "--rewrite-all"]),
        ("compact.py", [*table, "--rewrite-all"]),
        ("rewrite_manifests.py", [*table, "--rewrite-all", "--engine", "spark"]),
        ("expire_snapshots.py", [*table, "--older-than", "0s", "--engine", "spark"]),
        ("remove_orphans.py", [*table, "--engine", "spark"]),
        ("backfill_row_lineage.py", table),
        ("compute_stats.py", table),
        ("convert_delta.py", [*converted, "--format-version", "3", "--engine", "spark"]),
        ("health.py", ["--namespace", NAMESPACE, "--tables", "cluster_*", "--engine", "spark", *common]),
        ("rewrite_equality_deletes.py", ["--table", f"{NAMESPACE}.cdc_t3", *common]),
    ]
    driver = REPO_ROOT / "tests" / "support" / "submit_jobs.py"
    command = [*options, f"  {driver} {REPO_ROOT / 'jobs'} {shlex.quote(json.dumps(plan))}"]
    submitted = submission.run_shell("\n".join(command))
    runs = submitted.result["runs"]
    assert [[r["script"], r["args"]] for r in runs] == [[script, args] for script, args in plan]
    results = [r["result"]["metrics"] for r in runs]

    # The line's Iceberg Spark reads what each job left.
    want = expected_rows()
    assert spark_rows(spark, events) == want
    docs_compact = results[0]
    assert docs_compact["rewritten_data_files_count"] == FILES, docs_compact
    assert count(spark, f"{events}.data_files") == docs_compact["added_data_files_count"]

    rewritten, compacted, manifests, expired, removed, backfilled, stats = results[1:8]
    assert (
        rewritten["added_dvs_count"] >= 1
        and count(spark, f"{chain}.delete_files", "file_format <> 'PUFFIN'") == 0
    )
    assert compacted["rewritten_data_files_count"] == FILES, compacted
    assert count(spark, f"{chain}.data_files") == compacted["added_data_files_count"] == 2
    assert count(spark, f"{chain}.manifests") == manifests["manifests_after"], manifests
    assert expired["expired_snapshots_count"] >= 1 and count(spark, f"{chain}.snapshots") == 1, expired
    assert removed["orphan_file_count"] == ORPHANS and not any(o.exists() for o in orphans), removed
    assert backfilled["format_version_after"] == 3, backfilled
    lineage = {r[0] for r in spark.sql(f"SELECT _row_id FROM {chain}").collect()}
    assert None not in lineage and len(lineage) == len(want)
    assert stats["ndv"]["id"] == len(want), stats
    assert spark_rows(spark, chain) == want

    converted_metrics, health = results[8], runs[9]["result"]
    assert converted_metrics["manifest_writer"] == "executors", converted_metrics
    assert spark_rows(spark, f"{SQL_CATALOG}.{TARGET}") == delta_rows(spark, source)
    assert {t["table"] for t in health["tables"]} == {f"{NAMESPACE}.cluster_t3", TARGET}, health

    resolved = results[10]
    assert resolved["removed_equality_delete_files_count"] == 1, resolved
    assert count(spark, f"{cdc}.delete_files", "content = 2") == 0
    assert spark_rows(spark, cdc) == [r for r in want if not (r[0] < 6 and r[1] == "a")]

    # Every run is in the ledger, as Iceberg Spark reads it.
    spark.sql(f"REFRESH TABLE {SQL_CATALOG}.{LEDGER}")
    ledger = spark.sql(f"SELECT run_id, job, status FROM {SQL_CATALOG}.{LEDGER}").collect()
    assert sorted((r["run_id"], r["job"], r["status"]) for r in ledger) == sorted(
        (r["result"]["ledger"]["run_id"], r["result"]["job"], "ok") for r in runs
    )

    # Each job but the metadata-only ones ran tasks on the worker's executor.
    tasks = executor_tasks(submission.events)
    for r in runs:
        start, end = r["ms"]
        ran = [t for t in tasks if start <= t <= end]
        assert bool(ran) != (r["script"] in DRIVER_ONLY), (r["script"], r["args"][1], len(ran))


def count(spark: Any, metadata_table: str, where: str = "true") -> int:
    spark.sql(f"REFRESH TABLE {metadata_table.rsplit('.', 1)[0]}")
    return int(one(spark, f"SELECT count(*) FROM {metadata_table} WHERE {where}"))


def executor_tasks(events: Path) -> list[int]:
    """Launch times (epoch ms) of the tasks that succeeded on an executor (not the driver) of the
    one application logged under ``events``."""
    (log,) = [p for p in events.iterdir() if not p.name.startswith(".")]
    launched = []
    for text in log.read_text().splitlines():
        event = json.loads(text)
        if event["Event"] != "SparkListenerTaskEnd":
            continue
        info = event["Task Info"]
        assert info["Host"] == HOST and info["Executor ID"] != "driver", info
        if event["Task End Reason"]["Reason"] == "Success":
            launched.append(int(info["Launch Time"]))
    return launched
