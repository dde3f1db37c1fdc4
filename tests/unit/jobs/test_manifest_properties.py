"""Bad manifest table properties are reported by their own name: never blamed on an option that
was not given, never silently replaced by a default (no Spark)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import read_manifest_list as pyiceberg_read_manifest_list

from tablekeeper.catalog import LoadedTable
from tablekeeper.catalog.filesystem import FileSystemCatalog
from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.manifest import read_manifest_list, write_manifest_list
from tablekeeper.iceberg.updates import new_table_metadata, upgrade_format_version
from tablekeeper.jobs.health.iceberg import _manifests
from tablekeeper.jobs.health.model import Thresholds
from tablekeeper.jobs.rewrite_manifests import RewriteManifestsOptions, plan_rewrite, run_rewrite_manifests
from tablekeeper.tables.iceberg import load_manifests, read_entries
from tests.support.iceberg_writer import write_rows
from tests.support.small_tables import sql_table
from tests.unit.files.test_journal import SCHEMA


def table_with(tmp_path: Path, **properties: str) -> LoadedTable:
    sql_table(tmp_path, [("a.parquet", 1, 10), ("b.parquet", 1, 10)], format_version=2)
    loaded = SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", str(tmp_path)).load_table("db.t")
    meta = replace(loaded.metadata, properties={**loaded.metadata.properties, **properties})
    return replace(loaded, metadata=meta)


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_target_size_property_is_named(tmp_path: Path, value: str) -> None:
    table = table_with(tmp_path, **{"commit.manifest.target-size-bytes": value})
    with pytest.raises(ConfigError) as err:
        plan_rewrite(RewriteManifestsOptions(table="db.t"), table, "db.t")
    assert f"commit.manifest.target-size-bytes={value!r}" in err.value.message
    assert "must be positive" not in err.value.message  # not the option's message


def test_a_bad_target_size_option_is_named(tmp_path: Path) -> None:
    table = table_with(tmp_path)
    with pytest.raises(ConfigError, match="--target-manifest-size 0 must be positive"):
        plan_rewrite(RewriteManifestsOptions(table="db.t", target_manifest_size="0"), table, "db.t")


@pytest.mark.parametrize("value", ["abc", "-2"])
def test_health_reports_a_bad_merge_count_by_name(tmp_path: Path, value: str) -> None:
    table = table_with(tmp_path, **{"commit.manifest.min-count-to-merge": value})
    with pytest.raises(ConfigError, match=r"commit\.manifest\.min-count-to-merge"):
        Thresholds().min_manifests(table.metadata.properties)
    notes: list[str] = []
    _manifests([], table, "db.t", Thresholds(), notes)
    assert len(notes) == 1 and f"commit.manifest.min-count-to-merge={value!r}" in notes[0]
    assert Thresholds().as_keys(table.metadata.properties)["rewrite-manifests.min-manifests"] is None
    # An explicit threshold makes the property irrelevant.
    assert Thresholds(rewrite_manifests_min_manifests=3).min_manifests(table.metadata.properties) == 3


def v1_table_without_list_counts(tmp_path: Path) -> tuple[FileSystemCatalog, list[str]]:
    """A v1 table of three appends whose current manifest list leaves every count null (a v1 list
    may: "assume non-zero"); also the paths of its data files."""
    catalog = FileSystemCatalog("fs", str(tmp_path / "wh"))
    meta = new_table_metadata(
        schema=SCHEMA, location=catalog.default_table_location("db.t"), timestamp_ms=1, format_version=1
    )
    catalog.create_table("db.t", meta)
    for i in range(3):
        files = write_rows(catalog.require("db.t").metadata, [{"id": i, "s": f"r{i}"}])
        Committer(catalog, "db.t").commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
    table = catalog.require("db.t")
    snap = table.metadata.current_snapshot()
    assert snap is not None
    listed = read_manifest_list(table.io.read(snap.manifest_list))
    assert len(listed) == 3
    bare = [
        replace(
            m,
            added_files_count=None,
            existing_files_count=None,
            deleted_files_count=None,
            added_rows_count=None,
            existing_rows_count=None,
            deleted_rows_count=None,
        )
        for m in listed
    ]
    written = write_manifest_list(
        bare,
        format_version=1,
        snapshot_id=snap.snapshot_id,
        parent_snapshot_id=snap.parent_snapshot_id,
        sequence_number=0,
    )
    table.io.write(snap.manifest_list, written.data, overwrite=True)
    assert read_manifest_list(table.io.read(snap.manifest_list))[0].added_files_count is None
    paths = [e.data_file.file_path for m in listed for e in read_entries(table.io, table.metadata, m)]
    return catalog, paths


def live_paths(catalog: FileSystemCatalog) -> list[str]:
    after = catalog.require("db.t")
    manifests = load_manifests(after.io, after.metadata.current_snapshot())
    return sorted(
        e.data_file.file_path
        for m in manifests
        for e in read_entries(after.io, after.metadata, m)
        if e.is_live
    )


def test_a_v1_manifest_list_without_counts_is_rewritten(tmp_path: Path) -> None:
    """A v1 manifest list may leave its file counts null ("assume non-zero"): the manifests then
    say them, and the rewrite keeps every live file (it was refused as damaged)."""
    catalog, paths = v1_table_without_list_counts(tmp_path)
    result = run_rewrite_manifests(RewriteManifestsOptions(table="db.t", rewrite_all=True), catalog, "db.t")
    assert result.status == "ok", result
    after = catalog.require("db.t")
    manifests = load_manifests(after.io, after.metadata.current_snapshot())
    assert len(manifests) == 1 and manifests[0].existing_files_count == 3
    assert live_paths(catalog) == sorted(paths)


def test_a_table_upgraded_from_a_v1_list_without_counts_is_written_with_them(tmp_path: Path) -> None:
    """v2 lists require the counts a v1 list may leave null: the next commit after an upgrade takes
    them from the manifests (it failed writing the list: "an integer is required")."""
    catalog, paths = v1_table_without_list_counts(tmp_path)
    committer = Committer(catalog, "db.t")
    committer.update_metadata(lambda meta, now: upgrade_format_version(meta, 2, timestamp_ms=now))
    files = write_rows(catalog.require("db.t").metadata, [{"id": 9, "s": "r9"}])
    committer.commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
    after = catalog.require("db.t")
    snap = after.metadata.current_snapshot()
    assert after.metadata.format_version == 2 and snap is not None
    listed = read_manifest_list(after.io.read(snap.manifest_list))
    assert all(m.has_counts() for m in listed)
    assert sum(m.added_files_count or 0 for m in listed) == 4  # v1 appends count as added
    assert sum((m.added_rows_count or 0) + (m.existing_rows_count or 0) for m in listed) == 4
    assert live_paths(catalog) == sorted([*paths, *(f.file_path for f in files)])
    # PyIceberg reads the v2 list we wrote, with the same counts.
    theirs = list(pyiceberg_read_manifest_list(PyArrowFileIO().new_input(snap.manifest_list)))
    assert [(t.added_files_count, t.existing_files_count) for t in theirs] == [
        (m.added_files_count, m.existing_files_count) for m in listed
    ]
