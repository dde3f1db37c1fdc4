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
from typing import Any

from tablekeeper.commit.summary import SummaryDelta, build_summary
from tablekeeper.errors import CommitConflict, ManifestsChanged, UnsupportedFeatureError
from tablekeeper.iceberg.content import (
    ADDED,
    DATA,
    DELETED,
    EXISTING,
    MANIFEST_DATA,
    MANIFEST_DELETES,
    POSITION_DELETES,
    DataFile,
    ManifestEntry,
    ManifestFile,
)
from tablekeeper.iceberg.delete_index import referenced_file
from tablekeeper.iceberg.manifest import write_manifest, write_manifest_list
from tablekeeper.iceberg.metadata import MAIN_BRANCH, Snapshot, TableMetadata
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.updates import add_snapshot
from tablekeeper.io import FileIO
from tablekeeper.tables.iceberg import load_manifests, read_entries, with_counts

log = logging.getLogger(__name__)


def _counted(io: FileIO, base: TableMetadata, manifests: list[ManifestFile]) -> list[ManifestFile]:
    """The manifests to list, each with its file and row counts: a v1 list may leave them null, but
    v2 and v3 lists require them (and v3 row ids are assigned from them), so a table upgraded from
    such a v1 table has them taken from the manifests themselves when it is next written."""
    if base.format_version < 2 or all(m.has_counts() for m in manifests):
        return manifests
    return with_counts(io, base, manifests)


@dataclass(frozen=True)
class SnapshotChange:
    operation: str  # append | overwrite | delete | replace
    added_files: tuple[DataFile, ...] = ()  # data and delete files; the driver writes their manifests
    added_manifests: tuple[ManifestFile, ...] = ()  # already written (e.g. on executors) for this commit
    added_manifests_delta: SummaryDelta = field(default_factory=SummaryDelta)
    # (spec id, partition key) of the files in ``added_manifests``, when the writer knows them.
    added_manifests_partitions: frozenset[tuple[int, Any]] | None = None
    removed_paths: frozenset[str] = frozenset()
    # Removing a file that is no longer live is a conflict (someone else rewrote or deleted it).
    validate_removed_live: bool = True
    branch: str = MAIN_BRANCH
    summary: Mapping[str, str] = field(default_factory=dict, hash=False)
    # Data files whose live position deletes and DVs this commit removes (the data files stay):
    # how a deletion vector is replaced without touching other DVs sharing its Puffin file.
    removed_deletes_for: frozenset[str] = frozenset()
    # Data files whose live DVs this commit replaces (and nothing else: a position delete file
    # naming them stays unless ``removed_paths`` has it, since only a file that was read may go).
    removed_dvs_for: frozenset[str] = frozenset()
    # Schema/spec/property changes made in the same commit, applied to every attempt's base.
    prepare: Callable[[TableMetadata, int], TableMetadata] | None = field(default=None, hash=False)
    # The snapshot's own time when it records an event from elsewhere (a Delta commit); the
    # metadata's last-updated time stays the commit's wall clock.
    snapshot_timestamp_ms: int | None = None
    # Rewrites: the added files keep this data sequence number (the starting snapshot's), so
    # equality deletes committed since still apply to them.
    data_sequence_number: int | None = None
    # Rewrites: fail when a delete file committed after this snapshot applies to a removed data
    # file (its rows would come back); equality deletes count only without a data sequence number.
    validate_deletes_since: int | None = None
    # Rewrites: also remove delete files that can no longer apply to any live data file (older
    # than every data file, or naming a removed file), as Iceberg's rewrite commit does.
    drop_obsolete_deletes: bool = False
    # Row-id backfill: data manifests without row counts (v1 lists) are rewritten with their live
    # entries as EXISTING, so the manifest list can give them a row-id range.
    rewrite_uncounted_manifests: bool = False
    # Row lineage carried from elsewhere (Delta's row tracking): added files' own data sequence
    # numbers by path, the least sequence number the snapshot takes (never below a file's), and
    # the least next-row-id the table reaches (above the ids the added files carry explicitly).
    data_sequence_numbers: Mapping[str, int] = field(default_factory=dict, hash=False)
    sequence_number_at_least: int | None = None
    next_row_id_at_least: int | None = None


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
    data_sequence_number: int | None = None,
    data_sequence_numbers: Mapping[str, int] | None = None,
) -> list[ManifestFile]:
    """One manifest per (content kind, spec) for files added by this commit; a file's data
    sequence number is its own in ``data_sequence_numbers``, else ``data_sequence_number``. An
    own number is the file's file sequence number too: the commit that first added it elsewhere
    (Iceberg Java 1.11 reads ``_last_updated_sequence_number`` from it)."""
    own = data_sequence_numbers or {}
    groups: dict[tuple[int, int], list[DataFile]] = {}
    for f in files:
        kind = MANIFEST_DATA if f.content == DATA else MANIFEST_DELETES
        if kind == MANIFEST_DELETES and base.format_version < 2:
            raise UnsupportedFeatureError("delete files need format version 2 or later: upgrade the table")
        if f.content == POSITION_DELETES and not f.is_dv and base.format_version >= 3:
            raise UnsupportedFeatureError(
                "v3 tables take deletion vectors, not position delete files: write a DV instead"
            )
        if f.is_dv and base.format_version < 3:
            raise UnsupportedFeatureError("deletion vectors need format version 3: upgrade the table")
        groups.setdefault((kind, f.spec_id), []).append(f)
    out = []
    for (kind, spec_id), group in sorted(groups.items()):
        path = manifest_location(base.location, commit_uuid, counter())
        data, manifest = write_manifest(
            path,
            [
                ManifestEntry(
                    ADDED, snapshot_id, f, own.get(f.file_path, data_sequence_number), own.get(f.file_path)
                )
                for f in group
            ],
            format_version=base.format_version,
            spec=base.spec(spec_id),
            schema=base.schema(),
            snapshot_id=snapshot_id,
            content=kind,
        )
        io.create_if_absent(path, data)
        out.append(manifest)
    return out


def _without(
    entries: Sequence[ManifestEntry], gone: Callable[[ManifestEntry], bool], snapshot_id: int
) -> list[ManifestEntry]:
    """A manifest's entries with the ``gone`` ones marked DELETED by this snapshot, the rest EXISTING.

    Sequence numbers (and v3 first_row_id, already inherited on read) are written explicitly, as
    the spec requires for entries that are not ADDED.
    """
    out = []
    for e in entries:
        if e.status == DELETED:
            continue  # deletes of older snapshots are not carried forward
        hit = gone(e)
        out.append(
            ManifestEntry(
                DELETED if hit else EXISTING,
                snapshot_id if hit else e.snapshot_id,
                e.data_file,
                e.sequence_number,
                e.file_sequence_number,
            )
        )
    return out


def _write_replacement(
    io: FileIO,
    base: TableMetadata,
    old: ManifestFile,
    entries: Sequence[ManifestEntry],
    snapshot_id: int,
    path: str,
    written: list[str],
) -> ManifestFile:
    """Write ``entries`` as the manifest that replaces ``old`` (same spec and content); its path
    joins ``written`` so a failed attempt removes it."""
    data, manifest = write_manifest(
        path,
        entries,
        format_version=base.format_version,
        spec=base.spec(old.partition_spec_id),
        schema=base.schema(),
        snapshot_id=snapshot_id,
        content=old.content,
    )
    io.create_if_absent(path, data)
    written.append(path)
    return manifest


def _apply_change(
    written: list[str],
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
    sequence_number = max(base.next_sequence_number(), change.sequence_number_at_least or 0)
    removed: list[DataFile] = []
    kept: list[ManifestFile] = []
    rewritten: list[ManifestFile] = []
    to_remove = set(change.removed_paths)
    deletes_of = set(change.removed_deletes_for)
    dvs_of = set(change.removed_dvs_for) | deletes_of
    found: set[str] = set()
    removed_data: list[ManifestEntry] = []
    # At most one DV per data file: a new DV must replace (remove) any live one for the same file.
    dv_targets = {f.referenced_data_file for f in change.added_files if f.is_dv and f.referenced_data_file}
    # A delete file older than every live data file applies to none (position deletes need a data
    # file at most as new, equality deletes an older one). Computed before this commit's removals,
    # which can only raise it: a lower bound keeps more, never less.
    floor = _min_data_sequence(parent_manifests, change, base) if change.drop_obsolete_deletes else None
    for m in parent_manifests:
        uncounted = m.added_rows_count is None or m.existing_rows_count is None
        if change.rewrite_uncounted_manifests and m.content == MANIFEST_DATA and uncounted:
            entries = [e for e in read_entries(io, base, m) if e.is_live]
            if entries:
                rewritten.append(
                    _write_replacement(
                        io,
                        base,
                        m,
                        _without(entries, lambda _: False, snapshot_id),
                        snapshot_id,
                        manifest_location(base.location, commit_uuid, counter()),
                        written,
                    )
                )
            continue
        checks_dvs = bool(dv_targets) and m.content == MANIFEST_DELETES
        obsolete = floor is not None and m.content == MANIFEST_DELETES and m.min_sequence_number < floor
        if (
            not to_remove
            and not checks_dvs
            and not obsolete
            and not (dvs_of and m.content == MANIFEST_DELETES)
        ):
            kept.append(m)
            continue
        entries = read_entries(io, base, m)
        if checks_dvs:
            clash = next(
                (
                    e.data_file
                    for e in entries
                    if e.is_live
                    and e.data_file.is_dv
                    and e.data_file.referenced_data_file in dv_targets
                    and e.data_file.file_path not in to_remove
                    and e.data_file.referenced_data_file not in dvs_of
                ),
                None,
            )
            if clash is not None:
                raise CommitConflict(
                    f"data file {clash.referenced_data_file} already has a live deletion vector "
                    f"({clash.file_path}); merge it into the new one and remove it in the same commit"
                )

        def gone(e: ManifestEntry) -> bool:
            f = e.data_file
            return e.is_live and (
                f.file_path in to_remove
                # A removed data file's DVs go with it (spec).
                or (f.is_dv and f.referenced_data_file in to_remove)
                or (f.is_dv and f.referenced_data_file in dvs_of)
                or (f.content == POSITION_DELETES and f.referenced_data_file in deletes_of)
                or (
                    floor is not None
                    and f.content != DATA
                    and (
                        (e.sequence_number is not None and e.sequence_number < floor)
                        or (f.content == POSITION_DELETES and referenced_file(f) in to_remove)
                    )
                )
            )

        hits = [e for e in entries if gone(e)]
        if not hits:
            if m.has_live_files():
                kept.append(m)
            continue
        found |= {e.data_file.file_path for e in hits}
        removed_data.extend(e for e in hits if e.data_file.content == DATA)
        new_entries = _without(entries, gone, snapshot_id)
        removed.extend(e.data_file for e in new_entries if e.status == DELETED)
        rewritten.append(
            _write_replacement(
                io,
                base,
                m,
                new_entries,
                snapshot_id,
                manifest_location(base.location, commit_uuid, counter()),
                written,
            )
        )
    missing = to_remove - found
    if missing and change.validate_removed_live:
        sample = sorted(missing)[0]
        raise CommitConflict(
            f"{len(missing)} file(s) to remove are no longer live on {change.branch} (e.g. {sample}): "
            "another commit removed them; re-plan the job"
        )
    if change.validate_deletes_since is not None and removed_data:
        _check_new_deletes(io, base, change, parent, removed_data)
    manifests = _counted(io, base, [*new_manifests, *rewritten, *kept])
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
    if change.operation == "replace" and delta.added_records > delta.deleted_records:
        # Java refuses the same: a rewrite must not add rows.
        raise ValueError(
            f"invalid replace: adds {delta.added_records} records but removes only {delta.deleted_records}"
        )
    partitions = {(f.spec_id, partition_key(f.partition)) for f in (*change.added_files, *removed)}
    known = not change.added_manifests or change.added_manifests_partitions is not None
    summary = build_summary(
        change.operation,
        delta,
        parent.summary if parent else None,
        change.summary,
        changed_partitions=len(partitions | (change.added_manifests_partitions or frozenset()))
        if known
        else None,
    )
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        timestamp_ms=timestamp_ms if change.snapshot_timestamp_ms is None else change.snapshot_timestamp_ms,
        manifest_list=list_path,
        sequence_number=sequence_number,
        parent_snapshot_id=parent.snapshot_id if parent else None,
        summary=summary,
        schema_id=base.current_schema_id,
        first_row_id=result.first_row_id,
        added_rows=_added_rows(result.first_row_id, result.added_rows, change.next_row_id_at_least),
    )
    metadata = add_snapshot(base, snapshot, branch=change.branch, timestamp_ms=timestamp_ms)
    return Attempt(metadata, snapshot, tuple(written), tuple(removed))


def _added_rows(first_row_id: int | None, added_rows: int | None, at_least: int | None) -> int | None:
    """The snapshot's row-id range, widened so next-row-id passes ``at_least``: ids files carry
    explicitly are never handed out again."""
    if first_row_id is None or added_rows is None or at_least is None:
        return added_rows
    return max(added_rows, at_least - first_row_id)


def _min_data_sequence(manifests: Sequence[ManifestFile], change: SnapshotChange, base: TableMetadata) -> int:
    seqs = [m.min_sequence_number for m in manifests if m.content == MANIFEST_DATA and m.has_live_files()]
    if any(f.content == DATA for f in change.added_files) or change.added_manifests:
        seqs.append(
            change.data_sequence_number
            if change.data_sequence_number is not None
            else base.next_sequence_number()
        )
    return min(seqs, default=0)


def _check_new_deletes(
    io: FileIO,
    base: TableMetadata,
    change: SnapshotChange,
    parent: Snapshot | None,
    removed: Sequence[ManifestEntry],
) -> None:
    """Fail when a delete file committed after ``change.validate_deletes_since`` applies to a data
    file this commit removes. A position delete file that names no single file counts for every
    file of its partition, as in Iceberg's validation."""
    start = change.validate_deletes_since
    newer: list[Snapshot] = []
    for s in base.ancestors(parent.snapshot_id if parent else None):
        if s.snapshot_id == start:
            break
        newer.append(s)
    else:
        if start is not None and parent is not None:
            raise CommitConflict(
                f"snapshot {start} is no longer an ancestor of {change.branch}: the branch was reset "
                "since the job planned; re-plan it"
            )
    if not newer:
        return
    started = base.snapshot(start) if start is not None else None
    start_seq = started.sequence_number if started is not None else 0
    unpartitioned = base.unpartitioned_spec_ids
    paths = {e.data_file.file_path for e in removed}
    scopes = {(e.data_file.spec_id, partition_key(e.data_file.partition)) for e in removed}
    for m in load_manifests(io, newer[0]):
        # Deletes committed since the start have a larger data sequence number, whether their
        # entry is still ADDED or was carried into a merged manifest as EXISTING.
        if m.content != MANIFEST_DELETES or m.sequence_number <= start_seq:
            continue
        for e in read_entries(io, base, m):
            f = e.data_file
            if not e.is_live or e.sequence_number is None or e.sequence_number <= start_seq:
                continue
            if f.content == POSITION_DELETES:
                target = referenced_file(f)
                scope = (f.spec_id, partition_key(f.partition))
                hit = target in paths if target is not None else scope in scopes
            else:
                hit = change.data_sequence_number is None and (
                    f.spec_id in unpartitioned or (f.spec_id, partition_key(f.partition)) in scopes
                )
            if hit:
                raise CommitConflict(
                    f"delete file {f.file_path} was committed after the rewrite started and applies to "
                    "files it replaces: the group is not committed; run compact again"
                )


def new_commit_uuid(prefix: str | None = None) -> str:
    """The id in a commit's file names; ``prefix`` marks every file of one run (a staging journal
    finds them by it)."""
    return f"{prefix}-{uuid.uuid4()}" if prefix else str(uuid.uuid4())


def _apply_manifest_replacement(
    written: list[str],
    io: FileIO,
    base: TableMetadata,
    *,
    branch: str,
    removed: frozenset[str],
    added: Sequence[ManifestFile],
    entries_processed: int,
    extra_summary: Mapping[str, str],
    snapshot_id: int,
    commit_uuid: str,
    attempt: int,
    timestamp_ms: int,
) -> Attempt:
    """Swap manifests for manifests holding the same live entries (operation replace): the
    branch's list keeps every other manifest, so files committed meanwhile stay. A manifest to
    replace that is gone from the branch means another commit changed its entries: re-plan."""
    parent = base.ref_snapshot(branch)
    if parent is None:
        raise ManifestsChanged(f"branch {branch!r} has no snapshot any more: re-plan the rewrite")
    parent_manifests = load_manifests(io, parent)
    present = {m.manifest_path for m in parent_manifests}
    gone = sorted(removed - present)
    if gone:
        raise ManifestsChanged(
            f"{len(gone)} manifest(s) to replace are no longer in {branch} (e.g. {gone[0]}): "
            "another commit changed them; re-plan the rewrite"
        )
    kept = [m for m in parent_manifests if m.manifest_path not in removed]
    list_path = manifest_list_location(base.location, snapshot_id, attempt, commit_uuid)
    result = write_manifest_list(
        _counted(io, base, [*added, *kept]),
        format_version=base.format_version,
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        sequence_number=base.next_sequence_number(),
        next_row_id=base.next_row_id if base.format_version >= 3 else None,
    )
    io.create_if_absent(list_path, result.data)
    written.append(list_path)
    # Iceberg's summary keys for a manifest rewrite.
    summary = build_summary(
        "replace",
        SummaryDelta(),
        parent.summary,
        {
            "manifests-created": str(len(added)),
            "manifests-kept": str(len(kept)),
            "manifests-replaced": str(len(removed)),
            "entries-processed": str(entries_processed),
            **extra_summary,
        },
    )
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        timestamp_ms=timestamp_ms,
        manifest_list=list_path,
        sequence_number=base.next_sequence_number(),
        parent_snapshot_id=parent.snapshot_id,
        summary=summary,
        schema_id=base.current_schema_id,
        first_row_id=result.first_row_id,
        added_rows=result.added_rows,
    )
    metadata = add_snapshot(base, snapshot, branch=branch, timestamp_ms=timestamp_ms)
    return Attempt(metadata, snapshot, tuple(written), ())


def apply_change(io: FileIO, base: TableMetadata, change: SnapshotChange, **kwargs: Any) -> Attempt:
    """One attempt of a snapshot change; files it wrote are removed again if it fails before the swap."""
    written: list[str] = []
    if change.prepare is not None:
        base = change.prepare(base, kwargs["timestamp_ms"])
    try:
        return _apply_change(written, io, base, change, **kwargs)
    except BaseException:
        io.delete_many(written)
        raise


def apply_manifest_replacement(io: FileIO, base: TableMetadata, **kwargs: Any) -> Attempt:
    written: list[str] = []
    try:
        return _apply_manifest_replacement(written, io, base, **kwargs)
    except BaseException:
        io.delete_many(written)
        raise
