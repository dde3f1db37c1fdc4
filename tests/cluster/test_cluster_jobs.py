"""Every job submitted to a Spark standalone cluster (a master and two one-core workers on loopback)
as docs/deploy/cluster.md ("Running on a cluster") says, on local tables: see
tests/support/cluster_submit.py for what
each submit ships and what it keeps from reaching the executors implicitly.

Tables are written by Iceberg Spark (the shared local session) into the session's warehouse, and
read back by it after each job: the reference engine judges the result, the event log of each
submit says which executors did the work."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FS_CATALOG, SQL_CATALOG
from tests.support.cluster_submit import Submission, local_catalog_file
from tests.support.spark_cluster import StandaloneCluster
from tests.support.spark_submit import (
    REPO_ROOT,
    delta_table_in_versions,
    iceberg_table_of_small_files,
    live_data_files,
    sql_catalog,
)

pytestmark = pytest.mark.spark

FILES = 12
# One group, cut into this many bins by input bytes (one Spark task each). Rewritten, the rows take
# about a third of their input bytes (ids and names written plain, the inputs dictionary-encoded), so
# at an eighth of the input as the target the output still needs two files or more.
BINS = 8
WEEK_AGO = time.time() - 7 * 86_400


@pytest.fixture(scope="module")
def conf_file(warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The catalogs of the shared session (tests/conftest.py), as a cluster job's --conf-file."""
    path = tmp_path_factory.mktemp("cluster-conf") / "catalogs.yaml"
    path.write_text(
        f"default: {SQL_CATALOG}\ncatalogs:\n"
        f"  {SQL_CATALOG}:\n    type: sql\n    uri: sqlite:///{warehouse}/catalog.db\n"
        f"    warehouse: {warehouse}/sql\n"
        f"  {FS_CATALOG}:\n    type: filesystem\n    warehouse: {warehouse}/files\n"
    )
    return path


def rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(tuple(r) for r in spark.table(table).collect())


def appended(spark: Any, table: str, commits: int, *, partitioned: bool = False, props: str = "") -> str:
    """``tk.db.<table>`` written by Iceberg Spark in ``commits`` appends of 10 rows each."""
    name = f"{SQL_CATALOG}.db.{table}"
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, cat STRING) USING iceberg "
        + ("PARTITIONED BY (cat) " if partitioned else "")
        + f"TBLPROPERTIES ('format-version'='2'{props})"
    )
    for i in range(commits):
        ids = f"range({i * 10}, {(i + 1) * 10})"
        spark.sql(
            f"INSERT INTO {name} SELECT id, IF(id % 2 = 0, 'a', 'b') AS cat FROM {ids}"
            + (" ORDER BY cat" if partitioned else "")
        )
    return name


def session_catalog(warehouse: Path) -> Any:
    """PyIceberg on the shared session's sql catalog (same sqlite file, same catalog name)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        SQL_CATALOG, uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}/sql"
    )


def table_location(spark: Any, name: str) -> Path:
    detail = spark.sql(f"SELECT file_path FROM {name}.files LIMIT 1").collect()[0][0]
    return Path(detail.removeprefix("file:")).parent.parent


def test_readme_standalone_line_then_expire_run_on_both_workers(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """README's standalone block as written (compact; the catalog file by --files), then
    expire-snapshots with --engine spark."""
    warehouse = tmp_path / "warehouse"
    # Rows enough that their bytes, not each file's footer, make the size: compact sizes its
    # output by the bytes written, and ten rows a file would merge into one file (one task).
    rows = 500
    table = iceberg_table_of_small_files(warehouse, "db.events", files=FILES, rows_per_file=rows)
    total = sum(task.file.file_size_in_bytes for task in table.scan().plan_files())
    # The README's line takes the table's target size: one group cut into BINS bins.
    with table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": str(total // BINS)})
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    catalog_file = local_catalog_file(conf_dir / "catalogs.yaml", warehouse)
    originals = live_data_files(table)
    submission = Submission.under(cluster, tmp_path, "compact")
    compacted = submission.run_shell(submission.readme_command(catalog_file))
    assert f"{REPO_ROOT}/dist/tablekeeper.zip/tablekeeper/" in compacted.log  # the driver ran the zip's code
    metrics = compacted.metrics
    assert metrics["rewritten_data_files_count"] == FILES, compacted.result
    assert metrics["failed_data_files_count"] == 0, compacted.result
    assert metrics["added_data_files_count"] >= 2, compacted.result
    after = sql_catalog(warehouse).load_table("db.events")
    assert len(live_data_files(after)) == metrics["added_data_files_count"]
    ids = sorted(after.scan().to_arrow().column("id").to_pylist())
    assert ids == list(range(FILES * rows))
    compacted.assert_both_workers_ran_tasks()

    # Expiring on Spark: the files of the expired snapshots found and deleted by executor tasks.
    expired = Submission.under(cluster, tmp_path, "expire").run(
        "expire_snapshots.py",
        *("--table", "db.events", "--conf-file", str(catalog_file)),
        *("--older-than", "0s", "--engine", "spark"),
    )
    assert expired.metrics["engine"] == "spark", expired.result
    assert len(expired.metrics["expired_snapshot_ids"]) == FILES, expired.result
    assert expired.metrics["deleted_data_files_count"] == FILES, expired.result
    assert len(sql_catalog(warehouse).load_table("db.events").snapshots()) == 1
    assert not any(Path(f.removeprefix("file://")).exists() for f in originals)
    expired.assert_both_workers_ran_tasks()


def test_convert_delta_with_packages_and_the_catalog_file_shipped_by_files(
    cluster: StandaloneCluster, spark: Any, conf_file: Path, tmp_path: Path
) -> None:
    """The README's YARN form in client mode: --packages resolved by spark-submit, the catalog file
    shipped with --files and named by its base name (the driver's working directory has no such
    file), the executors writing the manifests."""
    source = tmp_path / "delta" / "orders"
    delta_table_in_versions(source, 6)
    from deltalake import DeltaTable

    expected = sorted(tuple(r.values()) for r in DeltaTable(str(source)).to_pyarrow_table().to_pylist())
    converted = Submission.under(cluster, tmp_path, "convert").run(
        "convert_delta.py",
        *("--source", str(source), "--target", "db.cluster_orders", "--engine", "spark"),
        *("--conf-file", conf_file.name),
        packages=True,
        files=[conf_file],
    )
    assert converted.metrics["delta_version"] == 5, converted.result
    assert converted.metrics["data_files"] == 6, converted.result
    assert rows(spark, f"{SQL_CATALOG}.db.cluster_orders") == expected
    assert converted.tasks().succeeded, "no executor wrote a manifest"


def test_the_other_jobs_on_executors_in_one_application(
    cluster: StandaloneCluster, spark: Any, warehouse: Path, conf_file: Path, tmp_path: Path
) -> None:
    """remove-orphans, rewrite-manifests and rewrite-position-deletes on executor tasks, the v3
    upgrade (metadata only, on the driver), statistics computed by executor tasks and health over
    the namespace, one table per executor task: one application running each job script as
    spark-submit runs it alone (tests/support/submit_jobs.py), each job's tasks on both workers."""
    orphaned = appended(spark, "cluster_orphans", 6)
    location = table_location(spark, orphaned)
    orphans = [location / "data" / f"left-by-a-failed-write-{i}.parquet" for i in range(5)]
    for orphan in orphans:
        orphan.write_bytes(b"not referenced")
        os.utime(orphan, (WEEK_AGO, WEEK_AGO))
    manifested = appended(spark, "cluster_manifests", 8, partitioned=True)
    props = ", 'write.delete.mode'='merge-on-read', 'write.delete.granularity'='file'"
    deleted = appended(spark, "cluster_deletes", 4, partitioned=True, props=props)
    for k in range(3):
        spark.sql(f"DELETE FROM {deleted} WHERE id % 7 = {k}")
    deletes = spark.sql(f"SELECT count(*) FROM {deleted}.delete_files").collect()[0][0]
    counted = appended(spark, "cluster_stats", 6)
    before = {name: rows(spark, name) for name in (orphaned, manifested, deleted, counted)}

    conf = ("--conf-file", str(conf_file))
    spark_conf = (*conf, "--engine", "spark")
    plan: list[tuple[str, list[str]]] = [
        ("remove_orphans.py", ["--table", "db.cluster_orphans", *conf, "--engine", "spark"]),
        ("rewrite_manifests.py", ["--table", "db.cluster_manifests", *conf, "--engine", "spark"]),
        ("rewrite_position_deletes.py", ["--table", "db.cluster_deletes", *conf, "--rewrite-all"]),
        ("backfill_row_lineage.py", ["--table", "db.cluster_stats", *conf]),
        ("compute_stats.py", ["--table", "db.cluster_stats", *conf]),
        ("health.py", ["--catalog", SQL_CATALOG, "--namespace", "db", "--tables", "cluster_*", *spark_conf]),
    ]
    submitted = Submission.under(cluster, tmp_path, "jobs").run_plan(plan)
    removed, manifests, rewritten, backfilled, stats, health = runs = submitted.runs()
    for name, rows_before in before.items():
        assert rows(spark, name) == rows_before, name  # every job kept every row

    assert removed["result"]["metrics"]["engine"] == "spark", removed
    assert removed["result"]["metrics"]["orphan_file_count"] == len(orphans), removed
    assert not any(o.exists() for o in orphans)

    metrics = manifests["result"]["metrics"]
    assert metrics["rewritten_manifests_count"] == 8 and metrics["added_manifests_count"] < 8, manifests
    count = spark.sql(f"SELECT count(*) FROM {manifested}.manifests").collect()[0][0]
    assert count == metrics["added_manifests_count"]

    metrics = rewritten["result"]["metrics"]
    assert metrics["rewritten_delete_files_count"] == deletes, rewritten
    assert metrics["added_delete_files_count"] == 2, rewritten  # one per partition
    assert spark.sql(f"SELECT count(*) FROM {deleted}.delete_files").collect()[0][0] == 2

    assert backfilled["result"]["job"] == "backfill-row-lineage"
    lineage = {r[0] for r in spark.sql(f"SELECT _row_id FROM {counted}").collect()}
    assert len(lineage) == len(before[counted]) and None not in lineage

    assert stats["result"]["metrics"]["ndv"] == {"id": 60, "cat": 2}, stats
    # PyIceberg reads the statistics file the table now points at, and its theta sketch blobs.
    reloaded = session_catalog(warehouse).load_table("db.cluster_stats")
    (registered,) = reloaded.metadata.statistics
    assert registered.statistics_path == stats["result"]["metrics"]["statistics_file"]
    assert registered.snapshot_id == reloaded.metadata.current_snapshot_id
    assert {b.type for b in registered.blob_metadata} == {"apache-datasketches-theta-v1"}

    judged = {t["table"] for t in health["result"]["tables"]}
    assert {"db.cluster_stats", "db.cluster_manifests"} <= judged, health
    for run in (removed, manifests, rewritten, stats, health):
        submitted.assert_both_workers_ran_tasks_of(run)
    assert [r["script"] for r in runs] == [script for script, _ in plan]
