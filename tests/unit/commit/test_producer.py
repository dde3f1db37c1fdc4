"""Rules the commit layer enforces before anything reaches the catalog."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import CommitConflict, UnsupportedFeatureError
from tablekeeper.iceberg.content import DATA, POSITION_DELETES, DataFile
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata, upgrade_format_version
from tablekeeper.tables.iceberg import live_files

SCHEMA = Schema(0, (NestedField(1, "id", LONG, True),))


def table(tmp_path: Path, version: int) -> tuple[SqlCatalog, str, str]:
    catalog = SqlCatalog("rules", f"sqlite:///{tmp_path}/c.db", str(tmp_path / "wh"))
    ident = "db.t"
    location = catalog.default_table_location(ident)
    meta = new_table_metadata(
        schema=SCHEMA, location=location, timestamp_ms=int(time.time() * 1000), format_version=version
    )
    catalog.create_table(ident, meta)
    return catalog, ident, location


def data(location: str, n: int, rows: int = 10) -> DataFile:
    return DataFile(DATA, f"{location}/data/{n}.parquet", "PARQUET", (), rows, 100)


def dv(location: str, target: DataFile, n: int) -> DataFile:
    return DataFile(
        POSITION_DELETES,
        f"{location}/data/dv{n}.puffin",
        "PUFFIN",
        (),
        1,
        50,
        referenced_data_file=target.file_path,
        content_offset=4,
        content_size_in_bytes=30,
    )


def test_a_second_live_dv_for_one_file_is_refused_unless_the_first_goes(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 3)
    committer = Committer(catalog, ident)
    f = data(location, 1)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f,)))
    first = dv(location, f, 1)
    committer.commit_snapshot(SnapshotChange("delete", added_files=(first,)))
    with pytest.raises(CommitConflict, match=r"already has a live deletion vector .*dv1\.puffin"):
        committer.commit_snapshot(SnapshotChange("delete", added_files=(dv(location, f, 2),)))
    # Replacing it (remove the old DV in the same commit) is the allowed way.
    committer.commit_snapshot(
        SnapshotChange(
            "delete", added_files=(dv(location, f, 3),), removed_paths=frozenset({first.file_path})
        )
    )
    loaded = catalog.load_table(ident)
    live = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    assert [e.data_file.file_path for e in live.deletes] == [f"{location}/data/dv3.puffin"]


def test_removing_a_data_file_removes_its_dv(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 3)
    committer = Committer(catalog, ident)
    f, g = data(location, 1), data(location, 2)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f, g)))
    committer.commit_snapshot(SnapshotChange("delete", added_files=(dv(location, f, 1),)))
    result = committer.commit_snapshot(SnapshotChange("delete", removed_paths=frozenset({f.file_path})))
    assert result.snapshot is not None
    assert result.snapshot.summary["removed-dvs"] == "1"
    loaded = catalog.load_table(ident)
    live = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    assert [e.data_file.file_path for e in live.data] == [g.file_path]
    assert live.deletes == ()


@pytest.mark.parametrize(
    ("version", "kind", "message"),
    [
        (1, "dv", "delete files need format version 2"),
        (2, "dv", "deletion vectors need format version 3"),
        (3, "pos", "v3 tables take deletion vectors, not position delete files"),
    ],
)
def test_delete_file_kinds_must_match_the_format_version(
    tmp_path: Path, version: int, kind: str, message: str
) -> None:
    catalog, ident, location = table(tmp_path, version)
    committer = Committer(catalog, ident)
    f = data(location, 1)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f,)))
    delete = (
        dv(location, f, 1)
        if kind == "dv"
        else DataFile(POSITION_DELETES, f"{location}/data/pos.parquet", "PARQUET", (), 1, 10)
    )
    with pytest.raises(UnsupportedFeatureError, match=message):
        committer.commit_snapshot(SnapshotChange("delete", added_files=(delete,)))


def test_removing_a_file_that_is_not_live_is_a_conflict(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 2)
    committer = Committer(catalog, ident)
    committer.commit_snapshot(SnapshotChange("append", added_files=(data(location, 1),)))
    with pytest.raises(CommitConflict, match="no longer live"):
        committer.commit_snapshot(
            SnapshotChange("delete", removed_paths=frozenset({f"{location}/data/9.parquet"}))
        )
    assert len(catalog.load_table(ident).metadata.snapshots) == 1


def test_replace_may_not_add_rows(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 2)
    committer = Committer(catalog, ident)
    small = data(location, 1, rows=10)
    committer.commit_snapshot(SnapshotChange("append", added_files=(small,)))
    with pytest.raises(ValueError, match="invalid replace: adds 11 records but removes only 10"):
        committer.commit_snapshot(
            SnapshotChange(
                "replace",
                added_files=(data(location, 2, rows=11),),
                removed_paths=frozenset({small.file_path}),
            )
        )
    # Nothing the failed commit wrote is left behind.
    snapshot = catalog.load_table(ident).metadata.snapshots[-1]
    avro = {str(p) for p in Path(location, "metadata").glob("*.avro")}
    assert snapshot.manifest_list in avro and len(avro) == 2


def test_replacing_dvs_by_data_file_keeps_position_delete_files_naming_it(tmp_path: Path) -> None:
    """``removed_dvs_for`` replaces a data file's DV and nothing else: a position delete file naming
    the same data file goes only by path (a job removes only what it read)."""
    catalog, ident, location = table(tmp_path, 2)
    committer = Committer(catalog, ident)
    f = data(location, 1)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f,)))
    named = DataFile(
        POSITION_DELETES, f"{location}/data/p.orc", "ORC", (), 1, 10, referenced_data_file=f.file_path
    )
    committer.commit_snapshot(SnapshotChange("delete", added_files=(named,)))
    committer.update_metadata(lambda m, ts: upgrade_format_version(m, 3, timestamp_ms=ts))
    committer.commit_snapshot(SnapshotChange("delete", added_files=(dv(location, f, 1),)))
    committer.commit_snapshot(
        SnapshotChange("delete", added_files=(dv(location, f, 2),), removed_dvs_for=frozenset({f.file_path}))
    )
    loaded = catalog.load_table(ident)
    live = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    assert sorted(e.data_file.file_path for e in live.deletes) == [
        f"{location}/data/dv2.puffin",
        named.file_path,
    ]
