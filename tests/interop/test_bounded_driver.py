"""What the maintenance jobs bring to the driver stays bounded by distinct files, not by their
history: one row per distinct manifest from the manifest lists, and dry runs that count on the
executors, list at most ``LISTED_FILES`` locations in the JSON and stream the rest to
``--file-list`` in sorted order."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import tablekeeper.jobs.common.options as job_options
import tablekeeper.spark.maintenance as spark_maintenance
from tablekeeper.catalog import catalog_for
from tablekeeper.files.engine import MetadataOnly
from tablekeeper.files.local import IndexCache, LocalEngine
from tablekeeper.files.manifests import seeds
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.reachable import MANIFEST, MANIFEST_LIST
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tablekeeper.spark import reachability
from tablekeeper.spark.maintenance import SparkEngine
from tablekeeper.spark.reachability import index_manifests, listed_files
from tests.conftest import FS_CATALOG
from tests.interop.test_expire_snapshots import _build, _files
from tests.interop.test_remove_orphans import _age, _plant

pytestmark = pytest.mark.spark

APPENDS = 8


@pytest.fixture
def capped_listing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Three paths in a dry run's JSON, and two per partition streamed to ``--file-list`` (so
    the sorted listing spans several partitions)."""
    monkeypatch.setattr(job_options, "LISTED_FILES", 3)
    monkeypatch.setattr(spark_maintenance, "PATHS_PER_PART", 2)
    yield


def test_manifest_lists_bring_one_row_per_distinct_file(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.bounded_index"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'commit.manifest-merge.enabled'='false')"
    )
    for i in range(APPENDS):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")
    meta = catalog_for(catalogs.get(FS_CATALOG)).require("db.bounded_index").metadata
    rules = PathRules()
    ids = [s.snapshot_id for s in meta.snapshots]
    # The n-th snapshot lists n manifests: 36 listings of 8 manifests, plus 8 lists.
    rows = listed_files(spark, seeds(meta, ids), rules).collect()
    kinds = sorted(r[2] for r in rows)
    assert kinds == sorted([MANIFEST] * APPENDS + [MANIFEST_LIST] * APPENDS)
    assert len({(r[1], r[2]) for r in rows}) == len(rows)
    assert all(r[4] == 1 for r in rows if r[2] == MANIFEST)  # every list agrees: one live file
    on_executors = index_manifests(spark, meta, ids, rules)
    on_driver = IndexCache().index(meta, ids, rules)
    assert sorted(on_executors.rows) == sorted(on_driver.rows)
    assert sorted(on_executors.manifests) == sorted(on_driver.manifests)


@pytest.mark.parametrize("buckets", ["one", "many"])
def test_executors_doom_the_files_the_driver_dooms(  # type: ignore[no-untyped-def]
    spark, catalogs, monkeypatch: pytest.MonkeyPatch, buckets: str
) -> None:
    """The expired snapshots' files the kept ones do not reach, compared in a shuffle of keys,
    are the driver engine's set, row for row, whether a bucket holds every key or a few; so is
    the table's own metadata alone (``MetadataOnly``)."""
    if buckets == "many":
        monkeypatch.setattr(reachability, "ROWS_PER_BUCKET", 3)
    name = f"doomed_{buckets}"
    _build(spark, name, 2)
    meta = catalog_for(catalogs.get(FS_CATALOG)).require(f"db.{name}").metadata
    rules = PathRules()
    ordered = sorted(meta.snapshots, key=lambda s: s.timestamp_ms)
    current = meta.current_snapshot_id
    gone_ids = [s.snapshot_id for s in ordered[:4] if s.snapshot_id != current]
    kept_ids = [s.snapshot_id for s in meta.snapshots if s.snapshot_id not in gone_ids]
    local, executors = LocalEngine(), SparkEngine(spark, "test")
    gone, kept = local.index(meta, gone_ids, rules), local.index(meta, kept_ids, rules)
    on_driver = local.doomed(gone, kept, rules)
    on_executors = executors.doomed(gone, kept, rules)
    assert len(on_driver.files) > 4  # the comparison has files to decide on
    assert sorted(on_executors.files.collect()) == sorted(on_driver.files)
    assert on_executors.tally() == on_driver.tally()
    assert list(on_executors.paths()) == list(on_driver.paths())
    only = MetadataOnly(rules.prefix(meta.location.rstrip("/") + "/metadata"))
    metadata_only = local.doomed(gone, kept, rules, only).files
    assert metadata_only and len(metadata_only) < len(on_driver.files)
    assert sorted(executors.doomed(gone, kept, rules, only).files.collect()) == sorted(metadata_only)


@pytest.mark.parametrize("engine", ["driver", "spark"])
def test_expire_dry_run_lists_at_most_the_cap_and_streams_the_file_list(  # type: ignore[no-untyped-def]
    spark, catalogs, warehouse: Path, tmp_path: Path, capped_listing: None, engine: str
) -> None:
    name = f"bounded_expire_{engine}"
    _build(spark, name, 2)
    root = warehouse / "files" / "db" / name
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    base = ExpireSnapshotsOptions(
        table=f"db.{name}", older_than=str(int(time.time() * 1000)), retain_last=1, engine=engine
    )
    before = _files(root)
    capped = run_expire(replace(base, dry_run=True), catalog, f"db.{name}", spark)
    listing = tmp_path / "expire.txt"
    full = run_expire(
        replace(base, dry_run=True, file_list=str(listing)),
        catalog,
        f"db.{name}",
        spark,
    )
    assert _files(root) == before
    paths = listing.read_text().splitlines()
    assert paths == sorted(paths) and len(paths) > 3
    assert capped.files == paths[:3] and full.files is None
    assert capped.metrics["files_truncated"] is True and capped.metrics["files_listed"] == 3
    counted = sum(v for k, v in capped.metrics.items() if k.startswith("deleted_") and k.endswith("_count"))
    assert counted == len(paths)
    assert capped.metrics["bytes_to_free"] == sum(Path(p.removeprefix("file:")).stat().st_size for p in paths)
    run_expire(base, catalog, f"db.{name}", spark)
    assert before - _files(root) == {p.removeprefix("file:") for p in paths}


@pytest.mark.parametrize("engine", ["driver", "spark"])
def test_orphans_dry_run_lists_at_most_the_cap_and_streams_the_file_list(  # type: ignore[no-untyped-def]
    spark, catalogs, warehouse: Path, tmp_path: Path, capped_listing: None, engine: str
) -> None:
    name = f"bounded_orphans_{engine}"
    _build(spark, name, 2)
    root = warehouse / "files" / "db" / name
    _age(root, 5)
    planted = {str(_plant(root / "data" / f"cat=a/lost-{i:02d}.parquet", 5, b"x" * i)) for i in range(7)}
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    base = RemoveOrphansOptions(table=f"db.{name}", engine=engine)
    capped = run_orphans(replace(base, dry_run=True), catalog, f"db.{name}", spark)
    listing = tmp_path / "orphans.txt"
    run_orphans(
        replace(base, dry_run=True, file_list=str(listing)),
        catalog,
        f"db.{name}",
        spark,
    )
    paths = listing.read_text().splitlines()
    assert [p.removeprefix("file:") for p in paths] == sorted(planted)
    assert capped.files == paths[:3]
    assert capped.metrics["orphan_file_count"] == 7 and capped.metrics["files_truncated"] is True
    assert capped.metrics["bytes_to_free"] == sum(range(7))
    done = tmp_path / "deleted.txt"
    real = run_orphans(replace(base, file_list=str(done)), catalog, f"db.{name}", spark)
    assert real.metrics["deleted_files_count"] == 7 and done.read_text().splitlines() == paths
    assert not any(Path(p).exists() for p in planted)


def test_vacuum_check_on_executors_brings_only_files_the_current_snapshot_lacks(  # type: ignore[no-untyped-def]
    spark, catalogs, tmp_path: Path, monkeypatch
) -> None:
    """A converted history whose old manifest holds four files, one of them since removed by Delta
    (past a zero retention): the executors compare the old manifest with the current snapshot's,
    so the one removed file alone reaches the driver, and the same snapshot is found at risk as
    when the driver reads every file."""
    from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert, vacuum
    from tablekeeper.spark.reachability import unlisted_data_files
    from tablekeeper.tables.delta import load_snapshot
    from tests.conftest import SQL_CATALOG

    source = tmp_path / "vac"
    spark.range(0, 40).repartition(4).write.format("delta").option(
        "delta.deletedFileRetentionDuration", "interval 0 seconds"
    ).save(str(source))  # v0: four files
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id = 0")  # v1: one file rewritten
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    target = "bounded.vacuum_check"
    options = ConvertDeltaOptions(source=str(source), target=target, history="all", format_version=2)
    import tablekeeper.jobs.convert_delta as convert_module

    monkeypatch.setattr(convert_module, "expire_broken", lambda *a, **k: None)  # keep the history
    run_convert(options, catalog)
    monkeypatch.undo()
    table = catalog.require(target)
    assert len(table.metadata.snapshots) == 2
    delta = load_snapshot(str(source))
    removed = set(delta.tombstones.column("absolute_path").to_pylist())
    assert len(removed) == 1

    on_driver = vacuum.broken_snapshots(table, 1, lambda paths: delta, int(time.time() * 1000) + 1)
    asked: list[list[str]] = []

    def lookup(paths):  # type: ignore[no-untyped-def]
        asked.append(list(paths))
        return delta.restricted(paths)

    monkeypatch.setattr(vacuum, "DRIVER_MAX_FILES", 0)
    on_executors = vacuum.broken_snapshots(table, 1, lookup, int(time.time() * 1000) + 1, spark)
    first = next(s for s in table.metadata.snapshots if s.snapshot_id != table.metadata.current_snapshot_id)
    assert on_driver == on_executors == {first.snapshot_id: next(iter(removed))}
    assert asked == [sorted(removed)]
    assert [p for p, _ in unlisted_data_files(spark, [], [])] == []
