"""remove-orphans against Iceberg's own procedure on the same table state, and the anchor scenarios."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.errors import CorruptMetadataError, SafetyRefusal
from tablekeeper.files.rules import PathRules
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, _check, run_orphans
from tests.conftest import FS_CATALOG
from tests.interop.test_expire_snapshots import _build, _files, _reads, _snapshot_ids, _utc_literal

pytestmark = pytest.mark.spark

DAY_MS = 86_400_000


def _age(root: Path, days: float) -> None:
    """Make every file look ``days`` old, so only references decide what is an orphan."""
    stamp = time.time() - days * 86_400
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (stamp, stamp))


def _plant(path: Path, days: float, data: bytes = b"orphan") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - days * 86_400
    os.utime(path, (stamp, stamp))
    return path


def _table(spark, warehouse: Path, name: str, version: int = 2) -> tuple[str, Path, set[Path]]:  # type: ignore[no-untyped-def]
    table = _build(spark, name, version)
    root = warehouse / "files" / "db" / name
    spark.sql(f"DELETE FROM {table} WHERE id = 400")  # leaves files only old snapshots reference
    _age(root, 5)
    orphans = {
        _plant(root / "data" / "cat=a" / "lost-task-00001.parquet", 5),
        _plant(root / "data" / "stray.parquet", 4),
        _plant(root / "metadata" / "00099-crashed.metadata.json", 5, b"{}"),
        _plant(root / "metadata" / "snap-crashed-1-abc.avro", 5),
    }
    _plant(root / "data" / "cat=a" / "in-flight-writer.parquet", 0.01)  # younger than older-than
    _plant(root / "data" / "_temporary" / "0" / "task.parquet", 5)  # hidden
    _plant(root / "data" / ".staging.parquet.crc", 5)  # hidden
    return table, root, orphans


def test_same_orphans_as_iceberg_and_reads_unchanged(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    name = "orphans_oracle"
    table, root, planted = _table(spark, warehouse, name)
    snapshots = [s for s, _ in _snapshot_ids(spark, table)]
    reads_before = _reads(spark, table, snapshots)
    backup = warehouse / f"backup_{name}"
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(root, backup)
    cutoff = int(time.time() * 1000) - 2 * DAY_MS
    before = _files(root)

    spark.sql(
        f"CALL {FS_CATALOG}.system.remove_orphan_files("
        f"table => 'db.{name}', older_than => TIMESTAMP '{_utc_literal(cutoff)}')"
    ).collect()
    by_iceberg = before - _files(root)

    shutil.rmtree(root)
    shutil.copytree(backup, root)
    spark.sql(f"REFRESH TABLE {table}")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    result = run_orphans(
        RemoveOrphansOptions(table=f"db.{name}", older_than=str(cutoff)), catalog, f"db.{name}", spark
    )
    by_us = before - _files(root)
    assert {str(p) for p in planted} <= by_us
    assert by_us == by_iceberg
    assert result.metrics["deleted_files_count"] == len(by_us) and result.metrics["bytes_freed"] > 0
    assert (root / "data" / "cat=a" / "in-flight-writer.parquet").exists()
    spark.sql(f"REFRESH TABLE {table}")
    assert _reads(spark, table, snapshots) == reads_before

    again = run_orphans(
        RemoveOrphansOptions(table=f"db.{name}", older_than=str(cutoff)), catalog, f"db.{name}", spark
    )
    assert again.metrics["orphan_file_count"] == 0


@pytest.mark.parametrize("engine", ["auto", "spark"])
def test_dry_run_lists_what_a_run_deletes_and_neighbours_survive(
    spark, catalogs, warehouse: Path, engine: str
) -> None:  # type: ignore[no-untyped-def]
    name = f"orphans_dry_{engine}"
    _, root, planted = _table(spark, warehouse, name)
    # Other tables nested under the location, two levels down and one (where the Spark engine's
    # tasks start listing; tests/unit/spark/test_listing_plan.py puts them at every depth), and a
    # sibling whose name extends this one's.
    nested = [
        _plant(root / "data" / "nested_t" / "metadata" / "v1.metadata.json", 5, b"{}"),
        _plant(root / "data" / "nested_t" / "data" / "f.parquet", 5),
        _plant(root / "data" / "delta_t" / "_delta_log" / "00000000000000000000.json", 5, b"{}"),
        _plant(root / "data" / "delta_t" / "part-0.parquet", 5),
        _plant(root / "side_t" / "metadata" / "v1.metadata.json", 5, b"{}"),
        _plant(root / "side_t" / "data" / "g.parquet", 5),
        _plant(root / "side_t" / "h.parquet", 5),
    ]
    sibling = _plant(root.parent / f"{name}_2" / "data" / "x.parquet", 5)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = RemoveOrphansOptions(table=f"db.{name}", engine=engine)
    before = _files(root)
    dry = run_orphans(
        RemoveOrphansOptions(table=f"db.{name}", dry_run=True, engine=engine), catalog, f"db.{name}", spark
    )
    assert _files(root) == before
    assert dry.files is not None
    listed = {p.removeprefix("file:") for p in dry.files}
    assert listed == {str(p) for p in planted}
    run_orphans(options, catalog, f"db.{name}", spark)
    assert before - _files(root) == listed
    assert all(p.exists() for p in nested) and sibling.exists()


def test_refusals_delete_nothing(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    name = "orphans_refused"
    _, root, _ = _table(spark, warehouse, name)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    before = _files(root)
    with pytest.raises(SafetyRefusal, match="under 24 hours"):
        run_orphans(RemoveOrphansOptions(table=f"db.{name}", older_than="1h"), catalog, f"db.{name}", spark)
    with pytest.raises(SafetyRefusal, match="outside the table location"):
        run_orphans(
            RemoveOrphansOptions(table=f"db.{name}", location=str(root.parent)), catalog, f"db.{name}", spark
        )
    with pytest.raises(SafetyRefusal, match="never orphans"):
        run_orphans(
            RemoveOrphansOptions(
                table=f"db.{name}", location=str(root / "metadata" / "_tablekeeper" / "journals")
            ),
            catalog,
            f"db.{name}",
            spark,
        )
    manifest = next((root / "metadata").glob("*-m0.avro"))
    manifest.write_bytes(b"not avro")
    with pytest.raises(CorruptMetadataError, match="nothing deleted"):
        run_orphans(RemoveOrphansOptions(table=f"db.{name}"), catalog, f"db.{name}", spark)
    assert before - _files(root) == set()


def test_a_table_copied_as_files_is_refused_and_neither_copy_loses_a_file(
    spark, catalogs, warehouse: Path
) -> None:  # type: ignore[no-untyped-def]
    """A copy keeps the original's location in its metadata: its orphans would be listed in the
    original's directory, where every file the copy does not reference looks orphaned."""
    name = "orphans_original"
    _build(spark, name, 2)
    root = warehouse / "files" / "db" / name
    copy = root.parent / f"{name}_copy"
    shutil.copytree(root, copy)
    _age(root, 5)
    _age(copy, 5)
    extra = _plant(root / "data" / "written-after-the-copy.parquet", 5)
    before = _files(root) | _files(copy)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    # No session given: the refusal comes from the metadata alone, before any Spark work.
    with pytest.raises(SafetyRefusal, match="copied or moved"):
        run_orphans(RemoveOrphansOptions(table=f"db.{name}_copy"), catalog, f"db.{name}_copy", None)
    assert _files(root) | _files(copy) == before and extra.exists()
    # The original itself is fine: its extra file is an orphan there.
    dry = run_orphans(RemoveOrphansOptions(table=f"db.{name}", dry_run=True), catalog, f"db.{name}", None)
    assert dry.files is not None and str(extra) in {p.removeprefix("file:") for p in dry.files}
    # With write.metadata.path, metadata written there (by Iceberg Java) or under
    # <location>/metadata (by catalogs that ignore the property, tablekeeper's among them) is the
    # table's own; anywhere else it is a copy's.
    table = catalog.require(f"db.{name}")
    meta = replace(
        table.metadata, properties={**table.metadata.properties, "write.metadata.path": f"{root}/m2"}
    )
    options = RemoveOrphansOptions(table=f"db.{name}")
    now = int(time.time() * 1000)
    for own in (table.metadata_location, f"{root}/m2/00003-x.metadata.json"):
        _check(options, replace(table, metadata_location=own, metadata=meta), PathRules(), now)
    with pytest.raises(SafetyRefusal, match="copied or moved"):
        elsewhere = f"{copy}/metadata/00003-x.metadata.json"
        _check(options, replace(table, metadata_location=elsewhere, metadata=meta), PathRules(), now)


@pytest.mark.parametrize("engine", ["driver", "spark"])
def test_gc_disabled_cleans_only_the_metadata_location(spark, catalogs, warehouse: Path, engine: str) -> None:  # type: ignore[no-untyped-def]
    """A table whose data files may belong to another table (gc.enabled=false, e.g. a converted
    Delta table) gets only its own metadata leftovers removed, never a data file."""
    name = f"orphans_gc_off_{engine}"
    table, root, planted = _table(spark, warehouse, name)
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('gc.enabled'='false')")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    with pytest.raises(SafetyRefusal, match="only cleans its metadata location"):
        run_orphans(
            RemoveOrphansOptions(table=f"db.{name}", location=str(root / "data"), engine=engine),
            catalog,
            f"db.{name}",
            spark,
        )
    result = run_orphans(
        RemoveOrphansOptions(table=f"db.{name}", engine=engine), catalog, f"db.{name}", spark
    )
    assert result.metrics["mode"] == "metadata-only"
    gone = {p for p in planted if not p.exists()}
    assert gone == {p for p in planted if p.parent.name == "metadata"}
    assert all(p.exists() for p in planted if p.parent.name != "metadata")
    assert result.metrics["deleted_files_count"] == len(gone)


def test_short_retention_when_forced(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    name = "orphans_forced"
    _, root, planted = _table(spark, warehouse, name)
    young = root / "data" / "cat=a" / "in-flight-writer.parquet"
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    result = run_orphans(
        RemoveOrphansOptions(table=f"db.{name}", older_than="1s", force_short_retention=True),
        catalog,
        f"db.{name}",
        spark,
    )
    assert not young.exists() and not any(p.exists() for p in planted)
    assert result.metrics["deleted_files_count"] == len(planted) + 1
