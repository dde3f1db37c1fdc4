"""Delta row tracking carried into Iceberg v3 row lineage, where that is sound.

Delta gives a row the id ``baseRowId + position`` unless the file holds a materialized row id for
it (written when rows are copied: UPDATE, MERGE, OPTIMIZE, ...); Iceberg gives it
``first_row_id + position`` unless the file holds a value under field id 2147483540. So a file's
``baseRowId`` carried into its ``first_row_id`` gives every row the id delta-spark reports when
the file has no materialized row-id column, or has it under Iceberg's field id (writers following
IcebergCompatV3). Likewise ``defaultRowCommitVersion`` becomes the file's data sequence number
(each snapshot's sequence number is raised to at least its Delta version, so no file's is above
its snapshot's and every delete committed later still applies), and the table's next-row-id
passes Delta's high-water mark.

Anything else gets fresh Iceberg ids, as before, and the result says why. Once a target has fresh
ids it keeps taking them: Delta's later ids could collide with the ones Iceberg handed out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.segment import LogEntry
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta_row_ids import (
    ROW_COMMIT_VERSION_FIELD_ID,
    ROW_ID_FIELD_ID,
    commit_operations,
    unsound_file,
)
from tablekeeper.iceberg.metadata import Snapshot, TableMetadata
from tablekeeper.io import FileIO

log = logging.getLogger(__name__)

ROW_IDS_PROPERTY = "tablekeeper.delta.row-ids"
CARRIED = "delta"  # ids are Delta's row ids
FRESH = "fresh"  # ids were assigned by Iceberg's inheritance


@dataclass(frozen=True)
class Lineage:
    """Whether a version's new files carry Delta's row ids, and why not."""

    carry: bool
    reason: str | None = None
    high_water_mark: int | None = None
    # Delta's materialized columns in this table -> the field id Iceberg reads each by.
    materialized: Mapping[str, int] = field(default_factory=dict, hash=False)

    def metrics(self) -> dict[str, str | None]:
        return {"row_ids": CARRIED if self.carry else FRESH, "reason": self.reason}


def plan_lineage(
    snap: DeltaSnapshot,
    target_properties: Mapping[str, str],
    has_snapshots: bool,
    format_version: int,
    files_known: bool = True,
    foreign_ids: str | None = None,
) -> Lineage | None:
    """Whether this version's files may carry Delta's ids, before looking at the files (None: a v2
    target has no row lineage). ``foreign_ids``: why ids past the last conversion's may already
    be in use in the target (``ids_handed_out_elsewhere``)."""
    if format_version < 3:
        return None
    state = target_properties.get(ROW_IDS_PROPERTY)
    if has_snapshots and state != CARRIED:
        why = (
            "an earlier run gave the target fresh row ids"
            if state == FRESH
            else "the target predates carried row ids"
        )
        return Lineage(False, why)
    if has_snapshots and foreign_ids is not None:
        return Lineage(False, foreign_ids)
    rt = snap.row_tracking
    materialized = {
        name: fid
        for name, fid in (
            (rt.materialized_row_id_column, ROW_ID_FIELD_ID),
            (rt.materialized_row_commit_version_column, ROW_COMMIT_VERSION_FIELD_ID),
        )
        if name is not None
    }
    if not (rt.supported and rt.enabled):
        return Lineage(False, "the Delta table does not track row ids (delta.enableRowTracking)")
    if rt.suspended:
        return Lineage(False, "Delta row tracking is suspended (delta.rowTrackingSuspended)")
    mark = rt.high_water_mark
    if mark is None:
        # Unknown file counts (the executors' snapshot has none) must not pass for an empty table.
        if snap.num_files or not files_known:
            return Lineage(False, "the Delta log has no row id high-water mark (delta.rowTracking domain)")
        mark = -1  # no row has an id yet
    return Lineage(True, None, mark, materialized)


def ids_handed_out_elsewhere(meta: TableMetadata, converted: Callable[[Snapshot], bool]) -> str | None:
    """Why Delta's next row ids may collide with ids the target already handed out, or None.

    A conversion leaves next-row-id at the end of its last snapshot's range; a writer that added
    rows since (any branch: every commit moves next-row-id) handed out ids from there on, which
    Delta's own next ids (above its high-water mark) would reuse. ``converted``: whether a
    snapshot is a conversion's."""
    if meta.format_version < 3 or not meta.snapshots:
        return None
    ours = [s for s in meta.snapshots if converted(s)]
    if not ours:
        return "no snapshot of an earlier conversion is left to check the target's row ids against"
    last = max(ours, key=lambda s: s.sequence_number)
    if last.first_row_id is None or last.added_rows is None:
        return "the last conversion's snapshot has no row-id range to check the target's row ids against"
    left = last.first_row_id + last.added_rows
    # A rewrite (compaction, rewrite-manifests: operation replace) may reserve a range but gives
    # no row a new id: copied rows keep theirs. Any other move, or one whose snapshot is gone,
    # may have handed ids out.
    rewrites = sum(
        s.added_rows or 0
        for s in meta.snapshots
        if s.sequence_number > last.sequence_number and s.operation == "replace" and not converted(s)
    )
    if meta.next_row_id != left + rewrites:
        return (
            f"another writer added rows to the target since the last conversion (next-row-id "
            f"{meta.next_row_id}, the conversion left {left}): Delta's next row ids could repeat theirs"
        )
    return None


def check_files(
    lineage: Lineage | None, io: FileIO, root: str, entries: Sequence[LogEntry], adds: Sequence[AddFile]
) -> Lineage | None:
    """``lineage`` after looking at the version's new files."""
    if lineage is None or not lineage.carry:
        return lineage
    operations: dict[int, str | None] = {}
    if lineage.materialized:
        versions = {a.default_row_commit_version for a in adds if a.default_row_commit_version is not None}
        operations = commit_operations(io, root, entries, versions)
    reason = unsound_file(io, adds, lineage.materialized, operations)
    if reason is None:
        return lineage
    log.info("row ids are assigned fresh: %s", reason)
    return Lineage(False, reason)
