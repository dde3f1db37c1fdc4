"""Build one new snapshot from a typed change on a given base (one commit attempt).

New files' manifests are written once per commit (by the driver here, or by Spark executors and
handed in); manifests that lose files and the manifest list are written per attempt, because
they depend on the base the attempt applies to.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tablekeeper.commit.summary import SummaryDelta, build_summary
from tablekeeper.errors import CommitConflict, UnsupportedFeatureError
from tablekeeper.iceberg.manifest import (
    ADDED,
    DATA,
    DELETED,
    EXISTING,
    MANIFEST_DATA,
    MANIFEST_DELETES,
    DataFile,
    ManifestEntry,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from tablekeeper.iceberg.metadata import MAIN_BRANCH, Snapshot, TableMetadata
from tablekeeper.iceberg.updates import add_snapshot
from tablekeeper.io import FileIO
from tablekeeper.table import load_manifests, read_entries

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotChange:
    operation: str  # append | overwrite | delete | replace
    added_files: tuple[DataFile, ...] = ()  # data and delete files; the driver writes their manifests
    added_manifests: tuple[ManifestFile, ...] = ()  # already written (e.g. on executors) for this commit
    added_manifests_delta: SummaryDelta = field(default_factory=SummaryDelta)
    removed_paths: frozenset[str] = frozenset()
    # Removing a file that is no longer live is a conflict (someone else rewrote or deleted it).
    validate_removed_live: bool = True
    branch: str = MAIN_BRANCH
    summary: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Attempt:
    metadata: TableMetadata
    snapshot: Snapshot
    written: tuple[str, ...]  # files this attempt wrote (manifest list, rewritten manifests)
    removed: tuple[DataFile, ...]


def manifest_location(table_location: str, commit_uuid: str, n: int) -> str:
    return f"{table_location.rstrip('/')}/metadata/{commit_uuid}-m{n}.avro"


def manifest_list_location(table_location: str, snapshot_id: int, attempt: int, commit_uuid: str) -> str:
    return f"{table_location.rstrip('/')}/metadata/snap-{snapshot_id}-{attempt}-{commit_uuid}.avro"


def write_new_manifests(
    io: FileIO,
    base: TableMetadata,
    files: Sequence[DataFile],
    snapshot_id: int,
    commit_uuid: str,
    counter: Callable[[], int],
) -> list[ManifestFile]:
    """One manifest per (content kind, spec) for files added by this commit."""
    groups: dict[tuple[int, int], list[DataFile]] = {}
    for f in files:
        kind = MANIFEST_DATA if f.content == DATA else MANIFEST_DELETES
        if kind == MANIFEST_DELETES and base.format_version < 2:
            raise UnsupportedFeatureError("delete files need format version 2 or later: upgrade the table")
        groups.setdefault((kind, f.spec_id), []).append(f)
    out = []
    for (kind, spec_id), group in sorted(groups.items()):
        path = manifest_location(base.location, commit_uuid, counter())
        data, manifest = write_manifest(
            path,
            [ManifestEntry(ADDED, snapshot_id, f) for f in group],
            format_version=base.format_version,
            spec=base.spec(spec_id),
            schema=base.schema(),
            snapshot_id=snapshot_id,
            content=kind,
        )
        io.create_if_absent(path, data)
        out.append(manifest)
    return out


def apply_change(
    io: FileIO,
    base: TableMetadata,
    change: SnapshotChange,
    *,
    snapshot_id: int,
    new_manifests: Sequence[ManifestFile],
    commit_uuid: str,
    attempt: int,
    counter: Callable[[], int],
    timestamp_ms: int,
) -> Attempt:
    parent = base.ref_snapshot(change.branch)
    parent_manifests = load_manifests(io, parent)
    sequence_number = base.next_sequence_number()
    written: list[str] = []
    removed: list[DataFile] = []
    kept: list[ManifestFile] = []
    rewritten: list[ManifestFile] = []
    to_remove = set(change.removed_paths)
    found: set[str] = set()
    if to_remove:
        # A data file's DVs go with it (spec: a removed data file's DV must be removed too).
        dv_targets = set(to_remove)
    for m in parent_manifests:
        if not to_remove:
            kept.append(m)
            continue
        entries = read_entries(io, base, m)
        hits = [
            e
            for e in entries
            if e.is_live
            and (
                e.data_file.file_path in to_remove
                or (e.data_file.is_dv and e.data_file.referenced_data_file in dv_targets)
            )
        ]
        if not hits:
            if m.has_live_files():
                kept.append(m)
            continue
        hit_paths = {e.data_file.file_path for e in hits}
        found |= hit_paths
        new_entries = []
        for e in entries:
            if e.status == DELETED:
                continue  # deletes of older snapshots are not carried forward
            if e.data_file.file_path in hit_paths:
                removed.append(e.data_file)
                new_entries.append(
                    ManifestEntry(
                        DELETED, snapshot_id, e.data_file, e.sequence_number, e.file_sequence_number
                    )
                )
            else:
                new_entries.append(
                    ManifestEntry(
                        EXISTING, e.snapshot_id, e.data_file, e.sequence_number, e.file_sequence_number
                    )
                )
        path = manifest_location(base.location, commit_uuid, counter())
        data, manifest = write_manifest(
            path,
            new_entries,
            format_version=base.format_version,
            spec=base.spec(m.partition_spec_id),
            schema=base.schema(),
            snapshot_id=snapshot_id,
            content=m.content,
        )
        io.create_if_absent(path, data)
        written.append(path)
        rewritten.append(manifest)
    missing = to_remove - found
    if missing and change.validate_removed_live:
        sample = sorted(missing)[0]
        raise CommitConflict(
            f"{len(missing)} file(s) to remove are no longer live on {change.branch} (e.g. {sample}): "
            "another commit removed them; re-plan the job"
        )
    manifests = [*new_manifests, *rewritten, *kept]
    list_path = manifest_list_location(base.location, snapshot_id, attempt, commit_uuid)
    result = write_manifest_list(
        manifests,
        format_version=base.format_version,
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id if parent else None,
        sequence_number=sequence_number,
        next_row_id=base.next_row_id if base.format_version >= 3 else None,
    )
    io.create_if_absent(list_path, result.data)
    written.append(list_path)
    delta = SummaryDelta.of(change.added_files, removed) + change.added_manifests_delta
    partitions = {(f.spec_id, f.partition) for f in (*change.added_files, *removed)}
    summary = build_summary(
        change.operation,
        delta,
        parent.summary if parent else None,
        change.summary,
        changed_partitions=len(partitions) if not change.added_manifests else None,
    )
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        timestamp_ms=timestamp_ms,
        manifest_list=list_path,
        sequence_number=sequence_number,
        parent_snapshot_id=parent.snapshot_id if parent else None,
        summary=summary,
        schema_id=base.current_schema_id,
        first_row_id=result.first_row_id,
        added_rows=result.added_rows,
    )
    metadata = add_snapshot(base, snapshot, branch=change.branch, timestamp_ms=timestamp_ms)
    return Attempt(metadata, snapshot, tuple(written), tuple(removed))


def new_commit_uuid() -> str:
    return str(uuid.uuid4())
