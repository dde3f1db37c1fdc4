"""expire-snapshots against Iceberg's own procedure on the same table state, and the anchor scenarios.

Oracle: a table built by Iceberg Spark (appends, an overwrite, deletes, partition evolution, a
branch, a tag, a staged then cherry-picked WAP snapshot, a statistics file, a manifest rewrite) is
saved; Iceberg's ``expire_snapshots`` runs on it; the files are restored; tablekeeper runs with the
same options. The deleted sets must be equal, and Iceberg Spark must read every retained snapshot
and ref of tablekeeper's result with the rows it read before.
"""

from __future__ import annotations

import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.errors import CommitStateUnknown, CorruptMetadataError, SafetyRefusal
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tests.conftest import FS_CATALOG

pytestmark = pytest.mark.spark


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}


def _rows(spark, sql: str) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    return sorted(tuple(r) for r in spark.sql(sql).collect())


def _snapshot_ids(spark, table: str) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    rows = spark.sql(
        f"SELECT snapshot_id, committed_at FROM {table}.snapshots ORDER BY committed_at"
    ).collect()
    return [(int(r[0]), int(r[1].timestamp() * 1000)) for r in rows]


def _build(spark, name: str, version: int) -> str:  # type: ignore[no-untyped-def]
    """A table whose history exercises every kind of file expire-snapshots can delete."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v DOUBLE) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.wap.enabled'='true')"
    )

    def step(sql: str) -> None:
        spark.sql(sql)
        time.sleep(0.02)  # distinct commit times

    for i in range(3):
        step(f"INSERT INTO {table} VALUES ({i}, 'a', {i}.5), ({i + 10}, 'b', 1.0), ({i + 20}, 'c', 2.0)")
    step(f"ALTER TABLE {table} CREATE TAG old_tag")
    step(f"DELETE FROM {table} WHERE id = 1")
    step(f"INSERT OVERWRITE {table} SELECT * FROM {table} WHERE cat = 'b'")
    step(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(2, id)")
    step(f"INSERT INTO {table} VALUES (100, 'a', 9.0), (101, 'd', 9.5)")
    step(f"ALTER TABLE {table} CREATE BRANCH side")
    step(f"INSERT INTO {table}.branch_side VALUES (200, 'z', 0.0)")
    step(f"DELETE FROM {table}.branch_side WHERE id = 100")
    spark.conf.set("spark.wap.id", f"wap-{name}")
    try:
        step(f"INSERT INTO {table} VALUES (300, 'w', 3.0)")
    finally:
        spark.conf.unset("spark.wap.id")
    staged = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots WHERE summary['wap.id'] = 'wap-{name}'"
    ).collect()[0][0]
    step(f"CALL {FS_CATALOG}.system.cherrypick_snapshot('db.{name}', {staged})")
    step(f"DELETE FROM {table} WHERE id = 300")
    step(f"CALL {FS_CATALOG}.system.rewrite_manifests('db.{name}')")
    step(f"CALL {FS_CATALOG}.system.compute_table_stats(table => 'db.{name}')")
    step(f"INSERT INTO {table} VALUES (400, 'a', 4.0)")
    return table


def _reads(spark, table: str, ids: list[int]) -> dict[str, list[tuple[Any, ...]]]:  # type: ignore[no-untyped-def]
    out = {f"snapshot {i}": _rows(spark, f"SELECT * FROM {table} VERSION AS OF {i}") for i in ids}
    for ref in spark.sql(f"SELECT name FROM {table}.refs").collect():
        out[f"ref {ref[0]}"] = _rows(spark, f"SELECT * FROM {table} VERSION AS OF '{ref[0]}'")
    return out


@pytest.mark.parametrize("version", [2, 3])
def test_same_files_deleted_as_iceberg_and_reads_unchanged(
    spark, catalogs, warehouse: Path, version: int
) -> None:  # type: ignore[no-untyped-def]
    name = f"expire_oracle_v{version}"
    table = _build(spark, name, version)
    root = warehouse / "files" / "db" / name
    backup = warehouse / f"backup_{name}"
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(root, backup)
    snapshots = _snapshot_ids(spark, table)
    cutoff = snapshots[len(snapshots) // 2][1] + 1  # about half the history is old enough
    before = _files(root)
    reads_before = _reads(spark, table, [s for s, _ in snapshots])

    iceberg = spark.sql(
        f"CALL {FS_CATALOG}.system.expire_snapshots(table => 'db.{name}', "
        f"older_than => TIMESTAMP '{_utc_literal(cutoff)}', retain_last => 2)"
    ).collect()[0]
    deleted_by_iceberg = before - _files(root)

    shutil.rmtree(root)
    shutil.copytree(backup, root)
    spark.sql(f"REFRESH TABLE {table}")
    assert _files(root) == before

    catalog = catalog_for(catalogs.get(FS_CATALOG))
    result = run_expire(
        ExpireSnapshotsOptions(table=f"db.{name}", older_than=str(cutoff), retain_last=2),
        catalog,
        f"db.{name}",
        spark,
    )
    deleted_by_us = before - _files(root)
    assert deleted_by_iceberg, "the oracle deleted nothing: the scenario is too weak"
    assert deleted_by_us == deleted_by_iceberg
    m = result.metrics
    assert m["deleted_data_files_count"] == iceberg["deleted_data_files_count"]
    assert m["deleted_position_delete_files_count"] == iceberg["deleted_position_delete_files_count"]
    assert m["deleted_manifest_files_count"] == iceberg["deleted_manifest_files_count"]
    assert m["deleted_manifest_lists_count"] == iceberg["deleted_manifest_lists_count"]
    assert m["deleted_statistics_files_count"] == iceberg["deleted_statistics_files_count"]
    assert m["bytes_freed"] > 0

    spark.sql(f"REFRESH TABLE {table}")
    retained = [s for s, _ in _snapshot_ids(spark, table)]
    assert len(retained) < len(snapshots)
    reads_after = _reads(spark, table, retained)
    for key, rows in reads_after.items():
        assert rows == reads_before[key], key

    second = run_expire(
        ExpireSnapshotsOptions(table=f"db.{name}", older_than=str(cutoff), retain_last=2),
        catalog,
        f"db.{name}",
        spark,
    )
    assert second.metrics["expired_snapshots_count"] == 0 and _files(root) == _files(root)


def test_dry_run_lists_exactly_what_a_run_deletes(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    name = "expire_dry"
    table = _build(spark, name, 2)
    root = warehouse / "files" / "db" / name
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = ExpireSnapshotsOptions(
        table=f"db.{name}", older_than=str(int(time.time() * 1000)), retain_last=1
    )
    before = _files(root)
    dry = run_expire(
        ExpireSnapshotsOptions(**{**options.__dict__, "dry_run": True}), catalog, f"db.{name}", spark
    )
    assert _files(root) == before
    assert dry.status == "dry_run" and dry.files
    real = run_expire(options, catalog, f"db.{name}", spark)
    deleted = before - _files(root)
    assert {p.removeprefix("file:") for p in dry.files} == deleted
    assert real.metrics["expired_snapshot_ids"] == dry.metrics["expired_snapshot_ids"]
    # Still readable at the branch and the tag, which kept their own history.
    assert spark.sql(f"SELECT count(*) FROM {table} VERSION AS OF 'side'").collect()[0][0] > 0
    assert spark.sql(f"SELECT count(*) FROM {table} VERSION AS OF 'old_tag'").collect()[0][0] == 9


def test_gc_disabled_is_refused(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    name = "expire_nogc"
    table = _build(spark, name, 2)
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('gc.enabled'='false')")
    root = warehouse / "files" / "db" / name
    before = _files(root)
    with pytest.raises(SafetyRefusal, match=r"gc\.enabled=false"):
        run_expire(
            ExpireSnapshotsOptions(table=f"db.{name}", older_than="0d"),
            catalog_for(catalogs.get(FS_CATALOG)),
            f"db.{name}",
            spark,
        )
    assert _files(root) == before


def test_expiring_a_ref_target_is_refused(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    name = "expire_ref"
    table = _build(spark, name, 2)
    tagged = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'old_tag'").collect()[0][0]
    with pytest.raises(SafetyRefusal, match="still referenced by old_tag"):
        run_expire(
            ExpireSnapshotsOptions(table=f"db.{name}", snapshot_ids=(tagged,)),
            catalog_for(catalogs.get(FS_CATALOG)),
            f"db.{name}",
            spark,
        )


@pytest.mark.parametrize("engine", ["driver", "spark"])
@pytest.mark.parametrize("damage", ["old manifest", "current manifest truncated", "current list missing"])
def test_unreadable_manifest_deletes_nothing(
    spark, catalogs, warehouse: Path, engine: str, damage: str
) -> None:  # type: ignore[no-untyped-def]
    """Everything the expiry decides by (the manifests of the snapshots it expires and of those it
    keeps) is read before the commit: any of them unreadable refuses the run, table untouched."""
    name = f"expire_corrupt_{engine}_{damage.split(maxsplit=1)[0]}_{damage.rsplit(maxsplit=1)[-1]}"
    table = _build(spark, name, 2)
    root = warehouse / "files" / "db" / name
    manifests = sorted((root / "metadata").glob("*-m*.avro"), key=lambda p: p.stat().st_mtime)
    if damage == "old manifest":
        manifests[0].write_bytes(b"not avro")
    elif damage == "current manifest truncated":
        current = spark.sql(f"SELECT path FROM {table}.manifests").collect()[0][0]
        data = Path(current.removeprefix("file:")).read_bytes()
        Path(current.removeprefix("file:")).write_bytes(data[: len(data) // 2])
    else:
        listed = spark.sql(
            f"SELECT manifest_list FROM {table}.snapshots ORDER BY committed_at DESC"
        ).collect()
        Path(listed[0][0].removeprefix("file:")).unlink()
    before = {p: Path(p).read_bytes() for p in _files(root)}
    with pytest.raises(CorruptMetadataError, match="nothing expired, nothing deleted"):
        run_expire(
            ExpireSnapshotsOptions(table=f"db.{name}", older_than="0s", retain_last=1, engine=engine),
            catalog_for(catalogs.get(FS_CATALOG)),
            f"db.{name}",
            spark,
        )
    # A refusal is decided before the commit: not one file of the table changed.
    assert {p: Path(p).read_bytes() for p in _files(root)} == before


def test_unknown_commit_state_deletes_nothing(
    spark, catalogs, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    name = "expire_unknown"
    _build(spark, name, 2)
    root = warehouse / "files" / "db" / name
    catalog = catalog_for(catalogs.get(FS_CATALOG))

    def unknown(*_: object, **__: object) -> None:
        raise CommitStateUnknown("the catalog did not answer")

    monkeypatch.setattr(type(catalog), "commit", unknown)
    before = _files(root)
    with pytest.raises(CommitStateUnknown):
        run_expire(
            ExpireSnapshotsOptions(table=f"db.{name}", older_than="0s", retain_last=1),
            catalog,
            f"db.{name}",
            spark,
        )
    assert before - _files(root) == set()


def test_a_failed_delete_is_reported_and_the_rest_proceed(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    name = "expire_partial"
    _build(spark, name, 2)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = ExpireSnapshotsOptions(
        table=f"db.{name}", older_than=str(int(time.time() * 1000)), retain_last=1
    )
    dry = run_expire(
        ExpireSnapshotsOptions(**{**options.__dict__, "dry_run": True}), catalog, f"db.{name}", spark
    )
    assert dry.files
    doomed = [Path(p.removeprefix("file:")) for p in dry.files]
    stuck = next(p for p in doomed if p.suffix == ".parquet")
    stuck.unlink()
    (stuck / "inside").mkdir(parents=True)  # a directory where the file was: its delete fails
    result = run_expire(options, catalog, f"db.{name}", spark)
    assert result.metrics["failed_deletes_count"] == 1
    assert str(stuck) in result.metrics["failed_deletes"][0]  # type: ignore[index]
    assert stuck.exists() and not any(p.exists() for p in doomed if p != stuck)


def test_a_file_deleted_then_re_added_stays(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.commit import Committer, SnapshotChange
    from tablekeeper.iceberg.metadata import TableMetadata
    from tests.support.iceberg_writer import write_rows

    name = "expire_readded"
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    meta: TableMetadata = catalog.require(f"db.{name}").metadata
    (kept,) = write_rows(meta, [{"id": 1}, {"id": 2}])
    committer = Committer(catalog, f"db.{name}")
    committer.commit_snapshot(SnapshotChange("append", added_files=(kept,)))
    committer.commit_snapshot(SnapshotChange("delete", removed_paths=frozenset({kept.file_path})))
    committer.commit_snapshot(SnapshotChange("append", added_files=(kept,)))
    spark.sql(f"REFRESH TABLE {table}")
    result = run_expire(
        ExpireSnapshotsOptions(table=f"db.{name}", older_than=str(int(time.time() * 1000)), retain_last=1),
        catalog,
        f"db.{name}",
        spark,
    )
    assert result.metrics["expired_snapshots_count"] == 2
    assert result.metrics["deleted_data_files_count"] == 0
    assert Path(kept.file_path.removeprefix("file:")).exists()
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect()) == [1, 2]


def test_metadata_files_that_leave_the_log_are_deleted_when_asked(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    name = "expire_metadata_log"
    table = _build(spark, name, 2)
    spark.sql(
        f"ALTER TABLE {table} SET TBLPROPERTIES ('write.metadata.delete-after-commit.enabled'='true', "
        "'write.metadata.previous-versions-max'='3')"
    )
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    before = catalog.require(f"db.{name}")
    logged = [e.metadata_file for e in before.metadata.metadata_log]
    result = run_expire(
        ExpireSnapshotsOptions(table=f"db.{name}", older_than=str(int(time.time() * 1000)), retain_last=1),
        catalog,
        f"db.{name}",
        spark,
    )
    after = catalog.require(f"db.{name}")
    kept = {e.metadata_file for e in after.metadata.metadata_log} | {after.metadata_location}
    dropped = [m for m in [*logged, before.metadata_location] if m not in kept]
    assert dropped and result.metrics["deleted_metadata_files_count"] == len(dropped)
    assert not any(Path(m.removeprefix("file:")).exists() for m in dropped)
    assert all(Path(m.removeprefix("file:")).exists() for m in kept)


def _utc_literal(millis: int) -> str:
    """A timestamp literal for a CALL argument: Iceberg's Spark 3.5 procedures take literals only
    (no TIMESTAMP_MILLIS(...)); the zone is in the literal, so the session's time zone is moot."""
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") + "Z"
