"""What changed between two Delta states, by data file: the unit an Iceberg snapshot records.

Delta identifies a logical file by (path, deletion vector); Iceberg by data file path, with its
deletes as separate files. So a file whose DV changed is neither added nor removed on the Iceberg
side: only its deletes are replaced. The comparison runs on Arrow columns, so two million-file
states diff without a Python object per unchanged file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.snapshot import add_files_of

# Stands in for "no DV" in a key, so a file without DV differs from any with one.
_NO_DV = "\x00"


@dataclass(frozen=True)
class FileDiff:
    # Data files new to the table (with their DVs, if any): live-file rows, as models on demand
    # (``added``), so a caller that works on columns never builds a million of them.
    added_rows: pa.Table
    removed: tuple[str, ...]  # absolute paths of data files no longer live
    dv_changed: tuple[AddFile, ...]  # data files that stay but whose DV changed (the new add; DV may be None)
    rewrite: bool  # every changed action says dataChange=false (OPTIMIZE, REORG): rows unchanged

    @cached_property
    def added(self) -> tuple[AddFile, ...]:
        return tuple(add_files_of(self.added_rows))

    @property
    def added_count(self) -> int:
        return int(self.added_rows.num_rows)

    @property
    def empty(self) -> bool:
        return not (self.added_count or self.removed or self.dv_changed)

    def operation(self) -> str:
        """The Iceberg snapshot operation that records this change."""
        if self.empty or self.rewrite:
            return "replace"
        added_dvs = self.added_count and self.added_rows.column("dv_id").null_count < self.added_count
        if self.added_count and not self.removed and not self.dv_changed and not added_dvs:
            return "append"
        if not self.added_count:
            return "delete"
        return "overwrite"


def _keys(table: pa.Table) -> pa.Array:
    dv = pc.fill_null(table.column("dv_id"), _NO_DV)
    return pc.binary_join_element_wise(table.column("absolute_path"), dv, "\x01").combine_chunks()


def diff_files(previous: pa.Table | None, current: pa.Table, tombstones: pa.Table | None = None) -> FileDiff:
    """``previous``/``current``: live files with ``absolute_path`` and ``dv_id`` columns (the
    previous state may come from elsewhere, e.g. an Iceberg table, with any DV ids);
    ``tombstones``: the removes of the one commit that led from ``previous`` to ``current`` (None
    when they are further apart): only then can the change be a rewrite (dataChange=false)."""
    if previous is None or previous.num_rows == 0:
        return FileDiff(current, (), (), rewrite=False)
    prev_paths = previous.column("absolute_path").combine_chunks()
    cur_paths = current.column("absolute_path").combine_chunks()
    is_new = pc.invert(pc.is_in(cur_paths, value_set=prev_paths))
    is_gone = pc.invert(pc.is_in(prev_paths, value_set=cur_paths))
    prev_keys = _keys(previous)
    changed_key = pc.invert(pc.is_in(_keys(current), value_set=prev_keys))
    dv_changed = pc.and_(changed_key, pc.invert(is_new))
    added_rows = current.filter(is_new)
    changed_rows = current.filter(dv_changed)
    removed = tuple(previous.filter(is_gone).column("absolute_path").to_pylist())
    flags = [*added_rows.column("data_change").to_pylist(), *changed_rows.column("data_change").to_pylist()]
    if tombstones is None:
        # Several commits apart (or adds from a checkpoint, where dataChange is always false):
        # no one commit's flags to go by, so it counts as a data change.
        rewrite = False
    else:
        # The removes that ended a previously live (path, DV): older tombstones of the same path
        # (e.g. the no-DV key a DELETE replaced) say nothing about this commit.
        ended = tombstones.filter(pc.is_in(_keys(tombstones), value_set=prev_keys))
        flags.extend(ended.column("data_change").to_pylist())
        if removed and ended.num_rows == 0:
            flags.append(True)  # no record of how they went: treat as a data change
        # A rewrite replaces files: adds alone are never one, even when flagged dataChange=false.
        rewrite = bool(removed) and bool(flags) and not any(f is None or f for f in flags)
    return FileDiff(added_rows, removed, tuple(add_files_of(changed_rows)), rewrite)
