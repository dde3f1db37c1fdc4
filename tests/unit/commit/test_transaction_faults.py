"""Fault injection around the catalog swap: retries leave one snapshot, unknown states keep files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.catalog.filesystem import FileSystemCatalog
from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import CommitConflict, CommitFailed, CommitStateUnknown
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.tables.iceberg import load_manifests

SCHEMA = Schema(0, (NestedField(1, "id", LONG, True),))


class Flaky(Catalog):
    """The real catalog, with failures injected around its commit."""

    def __init__(self, inner: Catalog, fail_before: int = 0, unknown_after_commit: bool = False) -> None:
        self.inner = inner
        self.name = inner.name
        self.fail_before = fail_before
        self.unknown_after_commit = unknown_after_commit
        self.calls = 0

    def load_table(self, identifier: str) -> LoadedTable:
        return self.inner.load_table(identifier)

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        return self.inner.create_table(identifier, metadata)

    def table_exists(self, identifier: str) -> bool:
        return self.inner.table_exists(identifier)

    def default_table_location(self, identifier: str) -> str:
        return self.inner.default_table_location(identifier)

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        self.calls += 1
        if self.calls <= self.fail_before:
            raise CommitFailed("injected conflict")
        result = self.inner.commit(base, new_metadata)
        if self.unknown_after_commit:
            raise CommitStateUnknown("injected: connection lost after the swap")
        return result


def make_catalog(kind: str, tmp_path: Path) -> Catalog:
    if kind == "sql":
        return SqlCatalog("faults", f"sqlite:///{tmp_path}/c.db", str(tmp_path / "wh"))
    return FileSystemCatalog("faults", str(tmp_path / "wh"))


def data_file(location: str, n: int) -> DataFile:
    return DataFile(DATA, f"{location}/data/f{n}.parquet", "PARQUET", (), 10, 1000)


def create(catalog: Catalog, version: int = 2, **props: str) -> str:
    ident = "db.t"
    meta = new_table_metadata(
        schema=SCHEMA,
        location=catalog.default_table_location(ident),
        timestamp_ms=int(time.time() * 1000),
        properties={"commit.retry.min-wait-ms": "1", "commit.retry.max-wait-ms": "2", **props},
        format_version=version,
    )
    catalog.create_table(ident, meta)
    return ident


def metadata_files(table_location: str, suffix: str) -> set[str]:
    return {str(p) for p in Path(table_location, "metadata").glob(f"*{suffix}")}


@pytest.mark.parametrize("kind", ["sql", "filesystem"])
@pytest.mark.parametrize("failures", [1, 3])
def test_retried_commit_leaves_one_snapshot_and_no_stray_lists(
    kind: str, failures: int, tmp_path: Path
) -> None:
    inner = make_catalog(kind, tmp_path)
    ident = create(inner, version=3)
    location = inner.default_table_location(ident)
    flaky = Flaky(inner, fail_before=failures)
    result = Committer(flaky, ident).commit_snapshot(
        SnapshotChange("append", added_files=(data_file(location, 1),))
    )
    assert result.attempts == failures + 1
    meta = inner.load_table(ident).metadata
    assert len(meta.snapshots) == 1
    snapshot = meta.snapshots[0]
    lists = {p for p in metadata_files(location, ".avro") if Path(p).name.startswith("snap-")}
    assert lists == {snapshot.manifest_list}
    manifests = {p for p in metadata_files(location, ".avro") if not Path(p).name.startswith("snap-")}
    assert manifests == {m.manifest_path for m in load_manifests(inner.load_table(ident).io, snapshot)}
    # v3 accounting still adds up after retries: ids 0..9 were assigned once.
    assert snapshot.first_row_id == 0 and snapshot.added_rows == 10 and meta.next_row_id == 10


@pytest.mark.parametrize("kind", ["sql", "filesystem"])
def test_exhausted_retries_are_a_conflict_and_clean_up(kind: str, tmp_path: Path) -> None:
    inner = make_catalog(kind, tmp_path)
    ident = create(inner, **{"commit.retry.num-retries": "2"})
    location = inner.default_table_location(ident)
    before = metadata_files(location, "")
    with pytest.raises(CommitConflict, match="still conflicting after 3 attempts"):
        Committer(Flaky(inner, fail_before=99), ident).commit_snapshot(
            SnapshotChange("append", added_files=(data_file(location, 1),))
        )
    assert metadata_files(location, "") == before
    assert inner.load_table(ident).metadata.snapshots == ()


@pytest.mark.parametrize("kind", ["sql", "filesystem"])
def test_unknown_commit_state_deletes_nothing(kind: str, tmp_path: Path) -> None:
    inner = make_catalog(kind, tmp_path)
    ident = create(inner)
    location = inner.default_table_location(ident)
    before = metadata_files(location, "")
    with pytest.raises(CommitStateUnknown):
        Committer(Flaky(inner, unknown_after_commit=True), ident).commit_snapshot(
            SnapshotChange("append", added_files=(data_file(location, 1),))
        )
    after = metadata_files(location, "")
    written = after - before
    # A manifest, the manifest list and the new metadata file all stay: the commit did land.
    assert sum(1 for p in written if Path(p).name.startswith("snap-")) == 1
    assert sum(1 for p in written if p.endswith("-m0.avro")) == 1
    assert sum(1 for p in written if p.endswith(".metadata.json")) == 1
    meta = inner.load_table(ident).metadata
    snapshot = meta.current_snapshot()
    assert snapshot is not None and snapshot.manifest_list in written


def test_unknown_state_before_the_swap_also_keeps_files(tmp_path: Path) -> None:
    inner = make_catalog("sql", tmp_path)
    ident = create(inner)
    location = inner.default_table_location(ident)

    class Lost(Flaky):
        def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
            raise CommitStateUnknown("injected: timeout while the catalog was answering")

    before = metadata_files(location, ".avro")
    with pytest.raises(CommitStateUnknown):
        Committer(Lost(inner), ident).commit_snapshot(
            SnapshotChange("append", added_files=(data_file(location, 2),))
        )
    assert len(metadata_files(location, ".avro") - before) == 2  # manifest + manifest list kept


def _rewrite_ready(catalog: Catalog) -> tuple[str, frozenset[str], int, list[Any]]:
    """A v3 table of 4 single-file appends, its manifests rewritten (not committed) into one:
    the identifier, the manifests to replace, the new snapshot id and the new manifests."""
    from tablekeeper.iceberg.updates import new_snapshot_id
    from tablekeeper.jobs import rewrite_manifests as job

    ident = create(catalog, 3)
    committer = Committer(catalog, ident)
    location = catalog.require(ident).metadata.location
    for n in range(4):
        committer.commit_snapshot(SnapshotChange("append", added_files=(data_file(location, n),)))
    loaded = catalog.require(ident)
    plan, _ = job.plan_rewrite(job.RewriteManifestsOptions(ident), loaded, ident)
    snapshot_id = new_snapshot_id()
    written = job._write(loaded, plan, snapshot_id, "t-", None)
    return ident, frozenset(m.manifest_path for m in plan.rewritten), snapshot_id, written


def _row_ids(catalog: Catalog, ident: str) -> dict[str, int | None]:
    from tablekeeper.tables.iceberg import live_files

    table = catalog.require(ident)
    live = live_files(table.io, table.metadata, table.metadata.current_snapshot())
    return {e.data_file.file_path: e.data_file.first_row_id for e in live.data}


@pytest.mark.parametrize("kind", ["sql", "fs"])
def test_manifest_rewrite_retries_lost_races_and_keeps_row_ids(kind: str, tmp_path: Path) -> None:
    inner = make_catalog(kind, tmp_path)
    ident, removed, snapshot_id, written = _rewrite_ready(inner)
    before = _row_ids(inner, ident)
    result = Committer(Flaky(inner, fail_before=2), ident).replace_manifests(
        removed=removed, added=written, snapshot_id=snapshot_id, entries_processed=4
    )
    assert result.attempts == 3
    table = inner.require(ident)
    assert len(load_manifests(table.io, table.metadata.current_snapshot())) == 1
    assert _row_ids(inner, ident) == before and None not in before.values()


@pytest.mark.parametrize("kind", ["sql", "fs"])
def test_manifest_rewrite_removes_its_manifests_only_on_known_failures(kind: str, tmp_path: Path) -> None:
    inner = make_catalog(kind, tmp_path)
    ident, removed, snapshot_id, written = _rewrite_ready(inner)
    with pytest.raises(CommitConflict):
        Committer(Flaky(inner, fail_before=99), ident).replace_manifests(
            removed=removed, added=written, snapshot_id=snapshot_id, entries_processed=4
        )
    assert not any(Path(m.manifest_path).exists() for m in written)

    other = make_catalog(kind, tmp_path / "unknown")
    ident, removed, snapshot_id, written = _rewrite_ready(other)
    with pytest.raises(CommitStateUnknown):
        Committer(Flaky(other, unknown_after_commit=True), ident).replace_manifests(
            removed=removed, added=written, snapshot_id=snapshot_id, entries_processed=4
        )
    assert all(Path(m.manifest_path).exists() for m in written)
