"""rewrite-manifests against Iceberg's own procedure on twin tables Iceberg Spark writes.

Both twins get the same commits (many small appends, merge-on-read deletes, a partition
evolution, later appends). tablekeeper rewrites one, ``CALL system.rewrite_manifests`` the other.
Iceberg Spark and PyIceberg must read the rows they read before, the same data and delete files
stay live, and tablekeeper's manifest count ends at or below Iceberg's. On v3 every row keeps its
``_row_id`` and ``_last_updated_sequence_number`` after tablekeeper's rewrite; Iceberg 1.11's
procedure renumbers ``_row_id`` (it carries entries without their ``first_row_id``), which the
test records rather than accepts for tablekeeper.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.cli import main
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import ManifestsChanged
from tablekeeper.iceberg.updates import new_snapshot_id
from tablekeeper.jobs import rewrite_manifests as job
from tablekeeper.jobs.rewrite_manifests import RewriteManifestsOptions, run_rewrite_manifests
from tests.conftest import FS_CATALOG
from tests.support.pyiceberg_check import assert_pyiceberg_same_rows

pytestmark = pytest.mark.spark

APPENDS = 12


def _build(spark, name: str, version: int) -> str:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v DOUBLE) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'commit.manifest-merge.enabled'='false')"
    )
    for i in range(APPENDS):
        spark.sql(
            f"INSERT INTO {table} SELECT id, CONCAT('c', CAST(id % 3 AS STRING)), id / 7.0 "
            f"FROM range({i * 10}, {(i + 1) * 10})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 11 = 0")
    spark.sql(f"UPDATE {table} SET v = -1 WHERE id % 13 = 0")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(4, id)")
    for i in range(APPENDS, APPENDS + 4):
        spark.sql(
            f"INSERT INTO {table} SELECT id, CONCAT('c', CAST(id % 3 AS STRING)), id / 7.0 "
            f"FROM range({i * 10}, {(i + 1) * 10})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 17 = 0")
    return table


def _rows(spark, table: str) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(tuple(r) for r in spark.sql(f"SELECT id, cat, v FROM {table}").collect())


def _lineage(spark, table: str) -> dict[int, tuple[int, int]]:  # type: ignore[no-untyped-def]
    rows = spark.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {table}").collect()
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


def _live(spark, table: str, kind: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.{kind}").collect()}


def _manifests(spark, table: str) -> int:  # type: ignore[no-untyped-def]
    return int(spark.sql(f"SELECT * FROM {table}.manifests").count())


def _rewrite(catalogs, name: str, spark=None, **kw: Any):  # type: ignore[no-untyped-def]
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    return run_rewrite_manifests(RewriteManifestsOptions(f"db.{name}", **kw), catalog, f"db.{name}", spark)


@pytest.mark.parametrize("version", [2, 3])
def test_rewrite_manifests_keeps_every_row_and_lineage_where_iceberg_renumbers(
    spark, catalogs, version: int
) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = (
        _build(spark, f"rm_ours_v{version}", version),
        _build(spark, f"rm_java_v{version}", version),
    )
    before = _rows(spark, ours)
    assert before == _rows(spark, theirs)
    data, deletes = _live(spark, ours, "data_files"), _live(spark, ours, "delete_files")
    lineage = _lineage(spark, ours) if version == 3 else {}
    manifests_before = _manifests(spark, ours)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    meta_before = catalog.require(f"db.rm_ours_v{version}").metadata_location

    planned = _rewrite(catalogs, f"rm_ours_v{version}", dry_run=True)
    assert planned.status == "dry_run" and planned.metrics["rewritten_manifests_count"] > 1
    assert catalog.require(f"db.rm_ours_v{version}").metadata_location == meta_before

    done = _rewrite(catalogs, f"rm_ours_v{version}")
    assert done.status == "ok", done.metrics
    m = done.metrics
    assert m["added_manifests_count"] < m["rewritten_manifests_count"]
    assert m["added_manifests_count"] == planned.metrics["added_manifests_count"]
    spark.sql(f"CALL {FS_CATALOG}.system.rewrite_manifests('db.rm_java_v{version}')")

    assert _rows(spark, ours) == before == _rows(spark, theirs)
    assert _live(spark, ours, "data_files") == data and _live(spark, ours, "delete_files") == deletes
    ours_count, theirs_count = _manifests(spark, ours), _manifests(spark, theirs)
    assert ours_count <= theirs_count < manifests_before, (ours_count, theirs_count, manifests_before)
    assert m["manifests_after"] == ours_count
    snap = spark.sql(f"SELECT operation, summary FROM {ours}.snapshots ORDER BY committed_at DESC").first()
    assert snap[0] == "replace" and snap[1]["manifests-replaced"] == str(m["rewritten_manifests_count"])
    loaded = catalog.require(f"db.rm_ours_v{version}")
    assert_pyiceberg_same_rows(spark, ours, loaded.metadata_location)
    if version == 3:
        assert _lineage(spark, ours) == lineage
        # Iceberg 1.11's own procedure carries EXISTING entries without their first_row_id, so
        # its rows get new ids; tablekeeper is held to the spec above, not to this.
        java = _lineage(spark, theirs)
        assert sorted(java) == sorted(lineage)
        assert any(java[i][0] != lineage[i][0] for i in lineage)

    again = _rewrite(catalogs, f"rm_ours_v{version}")
    assert again.metrics["added_manifests_count"] == 0 and "snapshot_id" not in again.metrics
    assert catalog.require(f"db.rm_ours_v{version}").metadata_location == loaded.metadata_location


def test_rewrite_manifests_on_the_executors_sorted_by_a_field_of_an_older_spec(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = _build(spark, "rm_exec", 3)
    before, lineage = _rows(spark, table), _lineage(spark, table)
    data = _live(spark, table, "data_files")
    # Spec 0 (cat only) holds the first appends' files: rewrite those, two entries a manifest.
    result = _rewrite(
        catalogs,
        "rm_exec",
        spec_id=0,
        sort_by=("cat",),
        target_manifest_size="1",
        rewrite_all=True,
        engine="spark",
        spark=spark,
    )
    m = result.metrics
    assert result.status == "ok" and m["engine"] == "spark" and m["spec_id"] == 0
    assert m["added_manifests_count"] > 1
    assert _rows(spark, table) == before and _lineage(spark, table) == lineage
    assert _live(spark, table, "data_files") == data
    # Each new manifest holds entries of one partition range: ordered by cat, no two overlap.
    ranges = sorted(
        (r[0][0]["lower_bound"], r[0][0]["upper_bound"])
        for r in spark.sql(
            f"SELECT partition_summaries FROM {table}.manifests "
            f"WHERE added_snapshot_id = {m['snapshot_id']} AND content = 0"
        ).collect()
    )
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges)), ranges


def test_a_concurrent_commit_that_replaced_a_manifest_makes_the_job_plan_again(
    spark, catalogs, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    table = _build(spark, "rm_race", 2)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    real = job._write
    calls = []

    def racing(*args: Any, **kw: Any):  # type: ignore[no-untyped-def]
        written = real(*args, **kw)
        if not calls:
            # Between the write and the commit: a copy-on-write delete replaces manifests the
            # rewrite read, and an append adds one.
            spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='copy-on-write')")
            spark.sql(f"DELETE FROM {table} WHERE id = {APPENDS * 10 + 1}")
            spark.sql(f"INSERT INTO {table} VALUES (100000, 'c9', 0.5)")
        calls.append(written)
        return written

    monkeypatch.setattr(job, "_write", racing)
    result = _rewrite(catalogs, "rm_race")
    assert result.status == "ok" and result.metrics["plans"] == 2
    # The first plan's manifests were removed when its commit could not apply.
    first = [m.manifest_path for m in calls[0]]
    assert not any(catalog.require("db.rm_race").io.exists(p) for p in first)
    rows = _rows(spark, table)
    assert (100000, "c9", 0.5) in rows and not any(r[0] == APPENDS * 10 + 1 for r in rows)


def test_replace_manifests_keeps_concurrent_appends_and_refuses_replaced_ones(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = _build(spark, "rm_commit", 2)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    loaded = catalog.require("db.rm_commit")
    plan, _ = job.plan_rewrite(RewriteManifestsOptions("db.rm_commit"), loaded, "db.rm_commit")
    snapshot_id = new_snapshot_id()
    written = job._write(loaded, plan, snapshot_id, "t-", None)
    spark.sql(f"INSERT INTO {table} VALUES (200000, 'c8', 0.25)")
    result = Committer(catalog, "db.rm_commit").replace_manifests(
        removed=frozenset(m.manifest_path for m in plan.rewritten),
        added=written,
        snapshot_id=snapshot_id,
        entries_processed=0,
    )
    assert result.snapshot is not None
    assert (200000, "c8", 0.25) in _rows(spark, table)

    loaded = catalog.require("db.rm_commit")
    plan, _ = job.plan_rewrite(
        RewriteManifestsOptions("db.rm_commit", rewrite_all=True, target_manifest_size="1"),
        loaded,
        "db.rm_commit",
    )
    snapshot_id = new_snapshot_id()
    written = job._write(loaded, plan, snapshot_id, "t-", None)
    spark.sql(f"CALL {FS_CATALOG}.system.rewrite_manifests('db.rm_commit')")
    with pytest.raises(ManifestsChanged):
        Committer(catalog, "db.rm_commit").replace_manifests(
            removed=frozenset(m.manifest_path for m in plan.rewritten),
            added=written,
            snapshot_id=snapshot_id,
            entries_processed=0,
        )
    assert not any(loaded.io.exists(m.manifest_path) for m in written)


def test_cli_refuses_bad_options_before_spark(spark, catalogs, capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _build(spark, "rm_cli", 2)
    conf = tmp_path / "catalogs.yaml"
    c = catalogs.get(FS_CATALOG)
    conf.write_text(f"default: fs\ncatalogs:\n  fs:\n    type: filesystem\n    warehouse: {c.warehouse}\n")
    base = ["rewrite-manifests", "--table", "db.rm_cli", "--conf-file", str(conf)]
    assert main([*base, "--spec-id", "7"]) == 2
    assert "no such partition spec" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main([*base, "--sort-by", "nope"]) == 2
    assert "not a partition field" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main([*base, "--dry-run"]) == 0
