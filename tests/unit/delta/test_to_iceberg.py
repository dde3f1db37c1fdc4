"""Pure pieces of the Delta -> Iceberg conversion: file diffs, the oldest reconstructable version,
name-mapping merges, schema id assignment, and the commit-layer options conversion relies on."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.delta.diff import diff_files
from tablekeeper.delta.models import AddFile, DeletionVector
from tablekeeper.delta.reconcile import Reconciled, reconcile
from tablekeeper.delta.replay import CommitActions
from tablekeeper.delta.schema import DeltaStruct, column_mapping, parse_schema_string
from tablekeeper.delta.segment import LogEntry, oldest_reconstructable
from tablekeeper.delta.to_iceberg import ids_by_name_path, map_schema, metrics_from_stats
from tablekeeper.delta.values import parse_stats
from tablekeeper.errors import CommitConflict, ConfigError, CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg import types as it
from tablekeeper.iceberg.content import POSITION_DELETES, DataFile
from tablekeeper.iceberg.name_mapping import (
    MappedField,
    NameMapping,
    merge_name_mappings,
    name_mapping_to_json,
    parse_name_mapping,
)
from tablekeeper.tables.iceberg import live_files
from tests.unit.commit.test_producer import data, table

ROOT = "file:///lake/t"

# =================================================================================================
# diff_files / FileDiff.operation


def dv(name: str, offset: int | None = 1, cardinality: int = 2) -> dict[str, Any]:
    return {
        "storageType": "u",
        "pathOrInlineDv": name,
        "offset": offset,
        "sizeInBytes": 36,
        "cardinality": cardinality,
    }


def add(path: str, *, dv_: Mapping[str, Any] | None = None, data_change: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "path": path,
        "partitionValues": {},
        "size": 100,
        "modificationTime": 1_700_000_000_000,
        "dataChange": data_change,
        "stats": '{"numRecords":10}',
    }
    if dv_ is not None:
        body["deletionVector"] = dict(dv_)
    return body


def remove(path: str, *, dv_: Mapping[str, Any] | None = None, data_change: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"path": path, "deletionTimestamp": 1_700_000_000_001, "dataChange": data_change}
    if dv_ is not None:
        body["deletionVector"] = dict(dv_)
    return body


class Log:
    """File actions in commit order; each ``commit`` returns the replay of everything so far."""

    def __init__(self) -> None:
        self.actions = CommitActions()

    def commit(self, *actions: tuple[str, dict[str, Any]]) -> Reconciled:
        for kind, body in actions:
            self.actions.add(body, kind == "add", len(self.actions))
        return reconcile([self.actions.table()], ROOT)


def a(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "add", body


def r(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "remove", body


def abs_path(name: str) -> str:
    return f"{ROOT}/{name}"


def paths(files: Sequence[AddFile]) -> list[str]:
    return sorted(f.absolute_path for f in files)


def test_first_state_adds_every_live_file_as_an_append() -> None:
    state = Log().commit(a(add("p1.parquet")), a(add("p2.parquet")))
    diff = diff_files(None, state.files)
    assert paths(diff.added) == [abs_path("p1.parquet"), abs_path("p2.parquet")]
    assert diff.removed == () and diff.dv_changed == ()
    assert not diff.empty
    assert diff.operation() == "append"
    # The AddFile carries the row's own values.
    first = next(f for f in diff.added if f.path == "p1.parquet")
    assert first.size == 100 and first.stats == '{"numRecords":10}' and first.deletion_vector is None


def test_first_state_from_a_checkpoint_is_still_an_append() -> None:
    # Checkpoint adds say dataChange=false; with no previous state that is no rewrite.
    state = Log().commit(a(add("p1.parquet", data_change=False)))
    diff = diff_files(None, state.files, state.tombstones)
    assert not diff.rewrite
    assert diff.operation() == "append"


def test_first_state_with_an_empty_previous_table_is_like_none() -> None:
    state = Log().commit(a(add("p1.parquet")))
    empty = pa.table({"absolute_path": pa.array([], pa.string()), "dv_id": pa.array([], pa.string())})
    diff = diff_files(empty, state.files)
    assert paths(diff.added) == [abs_path("p1.parquet")]
    assert diff.operation() == "append"


def test_first_state_with_a_dv_is_an_overwrite() -> None:
    state = Log().commit(a(add("p1.parquet", dv_=dv("abc"))), a(add("p2.parquet")))
    diff = diff_files(None, state.files)
    with_dv = next(f for f in diff.added if f.path == "p1.parquet")
    assert with_dv.deletion_vector == DeletionVector("u", "abc", 36, 2, 1)
    assert diff.operation() == "overwrite"


def test_pure_append_adds_only_the_new_file() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet")))
    after = log.commit(a(add("p2.parquet")))
    diff = diff_files(before.files, after.files, after.tombstones)
    assert paths(diff.added) == [abs_path("p2.parquet")]
    assert diff.removed == () and diff.dv_changed == ()
    assert not diff.rewrite
    assert diff.operation() == "append"


def test_removed_file_is_a_delete() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet")), a(add("p2.parquet")))
    after = log.commit(r(remove("p1.parquet")))
    diff = diff_files(before.files, after.files, after.tombstones)
    assert diff.removed == (abs_path("p1.parquet"),)
    assert diff.added == () and diff.dv_changed == ()
    assert not diff.rewrite
    assert diff.operation() == "delete"


def test_removing_every_file_is_a_delete() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet")), a(add("p2.parquet")))
    after = log.commit(r(remove("p1.parquet")), r(remove("p2.parquet")))
    assert after.files.num_rows == 0
    diff = diff_files(before.files, after.files, after.tombstones)
    assert sorted(diff.removed) == [abs_path("p1.parquet"), abs_path("p2.parquet")]
    assert diff.operation() == "delete"


def test_new_dv_on_a_file_changes_its_deletes_only() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet")), a(add("p2.parquet")))
    after = log.commit(r(remove("p1.parquet")), a(add("p1.parquet", dv_=dv("d1"))))
    diff = diff_files(before.files, after.files, after.tombstones)
    assert diff.added == () and diff.removed == ()
    assert [f.absolute_path for f in diff.dv_changed] == [abs_path("p1.parquet")]
    assert diff.dv_changed[0].deletion_vector is not None
    assert diff.dv_changed[0].deletion_vector.path_or_inline_dv == "d1"
    assert diff.operation() == "delete"


def test_replaced_dv_is_a_dv_change_and_the_newest_dv_wins() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet", dv_=dv("d1"))))
    after = log.commit(
        r(remove("p1.parquet", dv_=dv("d1"))), a(add("p1.parquet", dv_=dv("d2", cardinality=5)))
    )
    diff = diff_files(before.files, after.files, after.tombstones)
    assert diff.added == () and diff.removed == ()
    assert len(diff.dv_changed) == 1
    new_dv = diff.dv_changed[0].deletion_vector
    assert new_dv is not None and new_dv.path_or_inline_dv == "d2" and new_dv.cardinality == 5
    assert diff.operation() == "delete"


def test_same_dv_location_at_another_offset_is_a_change() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet", dv_=dv("d1", offset=1))))
    after = log.commit(r(remove("p1.parquet", dv_=dv("d1", offset=1))), a(add("p1.parquet", dv_=dv("d1", 9))))
    diff = diff_files(before.files, after.files, after.tombstones)
    assert [f.absolute_path for f in diff.dv_changed] == [abs_path("p1.parquet")]


def test_dropped_dv_is_a_dv_change_without_a_dv() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet", dv_=dv("d1"))), a(add("p2.parquet")))
    after = log.commit(r(remove("p1.parquet", dv_=dv("d1"))), a(add("p1.parquet")))
    diff = diff_files(before.files, after.files, after.tombstones)
    assert diff.added == () and diff.removed == ()
    assert len(diff.dv_changed) == 1
    assert diff.dv_changed[0].absolute_path == abs_path("p1.parquet")
    assert diff.dv_changed[0].deletion_vector is None
    assert not diff.empty
    assert diff.operation() == "delete"


def test_append_plus_dv_change_is_an_overwrite() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet")))
    after = log.commit(r(remove("p1.parquet")), a(add("p1.parquet", dv_=dv("d1"))), a(add("p2.parquet")))
    diff = diff_files(before.files, after.files, after.tombstones)
    assert paths(diff.added) == [abs_path("p2.parquet")]
    assert len(diff.dv_changed) == 1
    assert diff.operation() == "overwrite"


def _compaction(p2_data_change: bool = False) -> tuple[Any, Any]:
    """p1 and p2 rewritten into big (OPTIMIZE: every action dataChange=false, unless asked)."""
    log = Log()
    before = log.commit(a(add("p1.parquet")), a(add("p2.parquet")))
    after = log.commit(
        r(remove("p1.parquet", data_change=False)),
        r(remove("p2.parquet", data_change=p2_data_change)),
        a(add("big.parquet", data_change=False)),
    )
    return before, after


def test_optimize_is_a_replace_when_the_commit_tombstones_are_known() -> None:
    before, after = _compaction()
    diff = diff_files(before.files, after.files, after.tombstones)
    assert paths(diff.added) == [abs_path("big.parquet")]
    assert sorted(diff.removed) == [abs_path("p1.parquet"), abs_path("p2.parquet")]
    assert diff.rewrite
    assert diff.operation() == "replace"


def test_optimize_several_commits_apart_is_not_a_replace() -> None:
    before, after = _compaction()
    diff = diff_files(before.files, after.files, None)
    assert not diff.rewrite
    assert diff.operation() == "overwrite"


def test_rewrite_with_one_data_changing_remove_is_not_a_replace() -> None:
    before, after = _compaction(p2_data_change=True)
    diff = diff_files(before.files, after.files, after.tombstones)
    assert not diff.rewrite
    assert diff.operation() == "overwrite"


def test_rewrite_with_one_data_changing_add_is_not_a_replace() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet")))
    after = log.commit(
        r(remove("p1.parquet", data_change=False)),
        a(add("big.parquet", data_change=True)),
    )
    diff = diff_files(before.files, after.files, after.tombstones)
    assert not diff.rewrite


def test_removes_without_a_tombstone_record_count_as_data_change() -> None:
    log = Log()
    before = log.commit(a(add("p1.parquet")))
    after = log.commit(r(remove("p1.parquet", data_change=False)), a(add("big.parquet", data_change=False)))
    no_tombstones = after.tombstones.slice(0, 0)
    diff = diff_files(before.files, after.files, no_tombstones)
    assert not diff.rewrite
    assert diff.operation() == "overwrite"


def test_dv_purge_without_data_change_is_a_replace() -> None:
    # REORG ... APPLY (PURGE): a file with a DV is rewritten without the deleted rows.
    log = Log()
    before = log.commit(a(add("p1.parquet", dv_=dv("d1"))))
    after = log.commit(
        r(remove("p1.parquet", dv_=dv("d1"), data_change=False)),
        a(add("p1-purged.parquet", data_change=False)),
    )
    diff = diff_files(before.files, after.files, after.tombstones)
    assert diff.rewrite
    assert diff.operation() == "replace"


def test_optimize_of_a_file_that_once_got_a_dv_is_a_replace() -> None:
    log = Log()
    log.commit(a(add("p1.parquet")))
    # DELETE with deletion vectors: the file is re-added with a DV.
    before = log.commit(r(remove("p1.parquet")), a(add("p1.parquet", dv_=dv("d1"))))
    # OPTIMIZE / REORG PURGE of that file: nothing but a rewrite.
    after = log.commit(
        r(remove("p1.parquet", dv_=dv("d1"), data_change=False)),
        a(add("p1-rewritten.parquet", data_change=False)),
    )
    diff = diff_files(before.files, after.files, after.tombstones)
    assert diff.operation() == "replace"


def test_no_change_is_an_empty_replace() -> None:
    log = Log()
    state = log.commit(a(add("p1.parquet", dv_=dv("d1"))), a(add("p2.parquet")))
    for tombstones in (None, state.tombstones):
        diff = diff_files(state.files, state.files, tombstones)
        assert diff.empty
        assert (diff.added, diff.removed, diff.dv_changed, diff.rewrite) == ((), (), (), False)
        assert diff.operation() == "replace"


def test_previous_state_with_only_path_and_dv_id_columns() -> None:
    # The previous state can come from the Iceberg target: paths plus an opaque marker for files
    # that have deletes there.
    previous = pa.table(
        {
            "absolute_path": pa.array(
                [abs_path("p1.parquet"), abs_path("p2.parquet"), abs_path("gone.parquet")], pa.string()
            ),
            "dv_id": pa.array(["iceberg-deletes", None, None], pa.string()),
        }
    )
    current = Log().commit(
        a(add("p1.parquet", dv_=dv("d1"))),  # has deletes on both sides: DV ids never match
        a(add("p2.parquet")),  # unchanged
        a(add("p3.parquet")),  # new
    )
    diff = diff_files(previous, current.files)
    assert paths(diff.added) == [abs_path("p3.parquet")]
    assert diff.removed == (abs_path("gone.parquet"),)
    assert [f.absolute_path for f in diff.dv_changed] == [abs_path("p1.parquet")]
    assert diff.operation() == "overwrite"


def test_previous_marker_dv_dropped_on_the_delta_side() -> None:
    previous = pa.table(
        {
            "absolute_path": pa.array([abs_path("p1.parquet")], pa.string()),
            "dv_id": pa.array(["iceberg-deletes"], pa.string()),
        }
    )
    current = Log().commit(a(add("p1.parquet")))
    diff = diff_files(previous, current.files)
    assert diff.added == () and diff.removed == ()
    assert [(f.absolute_path, f.deletion_vector) for f in diff.dv_changed] == [(abs_path("p1.parquet"), None)]


def test_paths_are_compared_absolute_and_decoded() -> None:
    previous = pa.table(
        {
            "absolute_path": pa.array([abs_path("a b/p 1.parquet")], pa.string()),
            "dv_id": pa.array([None], pa.string()),
        }
    )
    current = Log().commit(a(add("a%20b/p%201.parquet")))
    diff = diff_files(previous, current.files)
    assert diff.empty


# =================================================================================================
# oldest_reconstructable


def commit(v: int) -> LogEntry:
    return LogEntry(f"{v:020d}.json", 100, 1_000 + v)


def checkpoint(v: int, size: int = 5_000) -> LogEntry:
    return LogEntry(f"{v:020d}.checkpoint.parquet", size, 1_000 + v)


def part(v: int, i: int, n: int) -> LogEntry:
    return LogEntry(f"{v:020d}.checkpoint.{i:010d}.{n:010d}.parquet", 5_000, 1_000 + v)


def commits(versions: Sequence[int]) -> list[LogEntry]:
    return [commit(v) for v in versions]


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param(commits(range(7)), 0, id="full-log"),
        pytest.param([commit(0)], 0, id="single-commit"),
        pytest.param([*commits(range(7)), checkpoint(3)], 0, id="full-log-with-checkpoint"),
        pytest.param([*commits(range(4, 7)), checkpoint(4)], 4, id="cleaned-up-to-checkpoint"),
        pytest.param([*commits(range(3, 7)), checkpoint(3)], 3, id="checkpoint-at-first-kept"),
        pytest.param([*commits(range(3, 7)), checkpoint(5)], 5, id="checkpoint-inside-run"),
        pytest.param([*commits(range(3, 7)), checkpoint(5), checkpoint(6)], 5, id="oldest-checkpoint-wins"),
        # A checkpoint just before the run (its own commit cleaned up) still rebuilds the run's start.
        pytest.param([*commits(range(3, 7)), checkpoint(2)], 3, id="checkpoint-before-run"),
        pytest.param([*commits([0, 1, 2, 4, 5, 6]), checkpoint(5)], 5, id="gap-then-checkpoint"),
        pytest.param(
            [*commits([0, 1, 2, 4, 5, 6]), checkpoint(2), checkpoint(5)], 5, id="gap-old-checkpoint"
        ),
        pytest.param([*commits(range(4, 7)), part(4, 1, 2), part(4, 2, 2)], 4, id="multi-part-checkpoint"),
        pytest.param([*commits(range(4, 7)), checkpoint(4, size=0), checkpoint(6)], 6, id="empty-checkpoint"),
    ],
)
def test_oldest_reconstructable(entries: list[LogEntry], expected: int) -> None:
    assert oldest_reconstructable(entries) == expected


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param(commits(range(3, 7)), id="no-checkpoint"),
        pytest.param([*commits(range(3, 7)), checkpoint(1)], id="checkpoint-too-old"),
        pytest.param(commits([0, 1, 2, 4, 5, 6]), id="gap-without-checkpoint"),
        pytest.param([*commits(range(4, 7)), checkpoint(4, size=0)], id="only-an-empty-checkpoint"),
        pytest.param([*commits(range(4, 7)), part(4, 1, 2)], id="incomplete-multi-part"),
        # A checkpoint past the newest commit has no commit file of its own.
        pytest.param([*commits(range(3, 6)), checkpoint(7)], id="checkpoint-without-commit"),
    ],
)
def test_oldest_reconstructable_refuses_a_broken_log(entries: list[LogEntry]) -> None:
    with pytest.raises(CorruptMetadataError, match="can be reconstructed"):
        oldest_reconstructable(entries, table="t1")


def test_oldest_reconstructable_needs_commit_files() -> None:
    with pytest.raises(CorruptMetadataError, match="t1 has no commit files"):
        oldest_reconstructable([checkpoint(4)], table="t1")
    with pytest.raises(CorruptMetadataError, match="no commit files"):
        oldest_reconstructable([])


def test_oldest_reconstructable_ignores_unrelated_files() -> None:
    entries = [
        *commits(range(2, 5)),
        checkpoint(3),
        LogEntry("_last_checkpoint", 50, 1),
        LogEntry("00000000000000000001.crc", 50, 1),
        LogEntry(".00000000000000000002.json.tmp", 50, 1),
    ]
    assert oldest_reconstructable(entries) == 3


# =================================================================================================
# merge_name_mappings


def mf(names: str | tuple[str, ...], fid: int | None, *children: MappedField) -> MappedField:
    return MappedField((names,) if isinstance(names, str) else names, fid, tuple(children))


def nm(*fields: MappedField) -> NameMapping:
    return NameMapping(tuple(fields))


def round_trips(mapping: NameMapping) -> None:
    assert parse_name_mapping(name_mapping_to_json(mapping)) == mapping


def test_merge_keeps_a_dropped_column() -> None:
    newer = nm(mf("id", 1))
    older = nm(mf("id", 1), mf("gone", 2))
    merged = merge_name_mappings(newer, older)
    assert merged == nm(mf("id", 1), mf("gone", 2))
    assert merged.find(("gone",)) == mf("gone", 2)
    round_trips(merged)


def test_merge_keeps_a_former_name_as_alias() -> None:
    newer = nm(mf("renamed", 1), mf("other", 2))
    older = nm(mf("original", 1), mf("other", 2))
    merged = merge_name_mappings(newer, older)
    assert merged.fields == (mf(("renamed", "original"), 1), mf("other", 2))
    assert merged.find(("original",)) is merged.find(("renamed",))
    round_trips(merged)


def test_merge_does_not_repeat_names_the_field_already_has() -> None:
    newer = nm(mf(("col-1", "a"), 1))
    older = nm(mf(("col-1", "a", "older"), 1))
    assert merge_name_mappings(newer, older).fields == (mf(("col-1", "a", "older"), 1),)


def test_merge_name_clash_newer_field_wins() -> None:
    # Column 1 was renamed from "a" to "b" and a new column 3 took the name "a".
    newer = nm(mf("b", 1), mf("a", 3))
    older = nm(mf("a", 1), mf("x", 2))
    merged = merge_name_mappings(newer, older)
    assert merged.fields == (mf("b", 1), mf("a", 3), mf("x", 2))
    found = merged.find(("a",))
    assert found is not None and found.field_id == 3
    round_trips(merged)


def test_merge_dropped_column_whose_name_was_reused_is_left_out() -> None:
    newer = nm(mf("id", 1), mf("v", 3))
    older = nm(mf("id", 1), mf("v", 2))
    assert merge_name_mappings(newer, older) == newer


def test_merge_dropped_column_keeps_only_its_free_names() -> None:
    newer = nm(mf("v", 3))
    older = nm(mf(("col-2", "v"), 2))
    assert merge_name_mappings(newer, older).fields == (mf("v", 3), mf("col-2", 2))


def test_merge_skips_old_fields_whose_id_moved() -> None:
    # Id 2 was a top-level column and is now nested: it is mapped once, where newer has it.
    newer = nm(mf("s", 1, mf("inner", 2)))
    older = nm(mf("s", 1), mf("inner_old", 2))
    merged = merge_name_mappings(newer, older)
    assert merged == newer
    assert merged.find_by_id(2) == mf("inner", 2)


def test_merge_nested_children() -> None:
    newer = nm(
        mf("id", 1),
        mf("s", 2, mf("x2", 3), mf("n", 6)),
        mf("m", 7, mf("key", 8), mf("value", 9, mf("z", 11))),
    )
    older = nm(
        mf("id", 1),
        mf("s", 2, mf("x", 3), mf("y", 4)),
        mf("m", 7, mf("key", 8), mf("value", 9, mf("z", 11), mf("w", 10))),
        mf("old", 12, mf("inner", 13)),
    )
    merged = merge_name_mappings(newer, older)
    assert merged == nm(
        mf("id", 1),
        mf("s", 2, mf(("x2", "x"), 3), mf("n", 6), mf("y", 4)),
        mf("m", 7, mf("key", 8), mf("value", 9, mf("z", 11), mf("w", 10))),
        mf("old", 12, mf("inner", 13)),
    )
    assert merged.find(("s", "x")) == mf(("x2", "x"), 3)
    assert merged.find(("m", "value", "w")) == mf("w", 10)
    assert merged.find(("old", "inner")) == mf("inner", 13)
    round_trips(merged)


def test_merge_leaves_out_a_dropped_struct_whose_child_id_lives_on() -> None:
    newer = nm(mf("moved", 3))
    older = nm(mf("s", 2, mf("moved", 3)))
    merged = merge_name_mappings(newer, older)
    assert merged == newer  # a field id may appear only once


def test_merge_with_an_empty_side() -> None:
    mapping = nm(mf("id", 1), mf("s", 2, mf("x", 3)))
    assert merge_name_mappings(mapping, nm()) == mapping
    assert merge_name_mappings(nm(), mapping) == mapping
    assert merge_name_mappings(mapping, mapping) == mapping


def test_merge_result_round_trips_through_json() -> None:
    newer = parse_name_mapping(
        json.dumps(
            [
                {"names": ["col-a", "a"], "field-id": 1},
                {"names": ["tags"], "field-id": 4, "fields": [{"names": ["element"], "field-id": 5}]},
            ]
        )
    )
    older = parse_name_mapping(
        json.dumps(
            [
                {"names": ["col-a", "old_a"], "field-id": 1},
                {"names": ["dropped"], "field-id": 2},
                {"names": ["no_id"]},
            ]
        )
    )
    merged = merge_name_mappings(newer, older)
    text = name_mapping_to_json(merged)
    assert json.loads(text) == [
        {"names": ["col-a", "a", "old_a"], "field-id": 1},
        {"names": ["tags"], "field-id": 4, "fields": [{"names": ["element"], "field-id": 5}]},
        {"names": ["dropped"], "field-id": 2},
        {"names": ["no_id"]},
    ]
    assert parse_name_mapping(text) == merged


# =================================================================================================
# map_schema


def delta_schema(*fields: Mapping[str, Any]) -> DeltaStruct:
    return parse_schema_string(json.dumps({"type": "struct", "fields": list(fields)}))


def fld(name: str, type_: Any, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": True, "metadata": dict(metadata or {})}


def cm(fid: int, physical: str, nested: Mapping[str, int] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": physical}
    if nested is not None:
        meta["delta.columnMapping.nested.ids"] = dict(nested)
    return meta


ARRAY_OF_STRING = {"type": "array", "elementType": "string", "containsNull": True}
MAP_OF_STRING_LONG = {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}
NO_CM = column_mapping({}, supports_column_mapping=False)
CM_CONFIG = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "10"}
NAME_CM = column_mapping(CM_CONFIG, supports_column_mapping=True)


def all_ids(schema: it.Schema) -> list[int]:
    return sorted(ids_by_name_path(schema).values())


def test_ids_by_name_path_covers_list_and_map_children() -> None:
    schema = it.Schema(
        0,
        (
            it.NestedField(1, "id", it.LONG),
            it.NestedField(2, "tags", it.ListType(5, it.StructType((it.NestedField(6, "t", it.STRING),)))),
            it.NestedField(3, "m", it.MapType(7, it.STRING, 8, it.ListType(9, it.INT))),
        ),
    )
    assert ids_by_name_path(schema) == {
        ("id",): 1,
        ("tags",): 2,
        ("tags", "element"): 5,
        ("tags", "element", "t"): 6,
        ("m",): 3,
        ("m", "key"): 7,
        ("m", "value"): 8,
        ("m", "value", "element"): 9,
    }


def test_fresh_ids_without_column_mapping_are_top_level_first() -> None:
    struct = delta_schema(
        fld("id", "long"),
        fld("tags", ARRAY_OF_STRING),
        fld("m", MAP_OF_STRING_LONG),
        fld("s", {"type": "struct", "fields": [fld("x", "integer")]}),
    )
    mapped = map_schema(struct, NO_CM, {})
    assert ids_by_name_path(mapped.schema) == {
        ("id",): 1,
        ("tags",): 2,
        ("m",): 3,
        ("s",): 4,
        ("tags", "element"): 5,
        ("m", "key"): 6,
        ("m", "value"): 7,
        ("s", "x"): 8,
    }
    assert mapped.ids_by_path[("s", "x")] == 8
    assert mapped.physical_by_path[("s", "x")] == ("s", "x")
    assert mapped.name_mapping.find(("m", "value")) == MappedField(("value",), 7)


def test_previous_ids_are_kept_by_name_path_and_new_ones_go_above_last_column_id() -> None:
    previous = it.Schema(
        3,
        (
            it.NestedField(1, "id", it.LONG),
            it.NestedField(4, "tags", it.ListType(5, it.STRING)),
            it.NestedField(6, "name", it.STRING),
        ),
    )
    struct = delta_schema(
        fld("id", "long"),
        fld("extra", "string"),  # new
        fld("tags", ARRAY_OF_STRING),
        fld("m", MAP_OF_STRING_LONG),  # new, with new key/value ids
        fld("name", "string"),
    )
    mapped = map_schema(struct, NO_CM, {}, previous=previous, last_column_id=9)
    assert ids_by_name_path(mapped.schema) == {
        ("id",): 1,
        ("extra",): 10,
        ("tags",): 4,
        ("tags", "element"): 5,
        ("m",): 11,
        ("m", "key"): 12,
        ("m", "value"): 13,
        ("name",): 6,
    }
    ids = all_ids(mapped.schema)
    assert len(ids) == len(set(ids))


def test_new_children_of_an_existing_column_get_fresh_ids() -> None:
    previous = it.Schema(0, (it.NestedField(1, "s", it.StructType((it.NestedField(2, "x", it.INT),))),))
    struct = delta_schema(fld("s", {"type": "struct", "fields": [fld("x", "integer"), fld("y", "long")]}))
    mapped = map_schema(struct, NO_CM, {}, previous=previous, last_column_id=2)
    assert ids_by_name_path(mapped.schema) == {("s",): 1, ("s", "x"): 2, ("s", "y"): 3}


def test_column_mapping_ids_come_from_the_delta_schema() -> None:
    struct = delta_schema(
        fld("id", "long", cm(1, "col-a")),
        fld("s", {"type": "struct", "fields": [fld("x", "integer", cm(7, "col-x"))]}, cm(3, "col-s")),
    )
    mapped = map_schema(struct, NAME_CM, CM_CONFIG)
    assert ids_by_name_path(mapped.schema) == {("id",): 1, ("s",): 3, ("s", "x"): 7}
    assert mapped.physical_by_path[("s", "x")] == ("col-s", "col-x")
    # Files are read by physical name only, as Delta reads them.
    assert mapped.name_mapping.find(("col-s", "col-x")) == MappedField(("col-x",), 7)
    assert mapped.name_mapping.find(("s", "x")) is None


def test_a_column_added_again_after_a_drop_does_not_read_the_dropped_ones_values() -> None:
    """Mapping enabled in place makes each name its physical name; ``a`` dropped and added again
    gets a physical name of its own. Files of before hold the old ``a``, which Delta reads as null
    for the new column: the name mapping must not lead the logical name to it."""
    from tablekeeper.iceberg.name_mapping import merge_name_mappings

    first = map_schema(
        delta_schema(fld("id", "long"), fld("a", "string")),
        NO_CM,
        {},
    )
    enabled = map_schema(
        delta_schema(fld("id", "long", cm(1, "id")), fld("a", "string", cm(2, "a"))),
        NAME_CM,
        CM_CONFIG,
        previous=first.schema,
        last_column_id=2,
    )
    again = map_schema(
        delta_schema(fld("id", "long", cm(1, "id")), fld("a", "string", cm(3, "col-9b1e"))),
        NAME_CM,
        CM_CONFIG,
        previous=enabled.schema,
        last_column_id=2,
    )
    assert ids_by_name_path(again.schema) == {("id",): 1, ("a",): 3}
    names = merge_name_mappings(again.name_mapping, enabled.name_mapping)
    found = names.find(("a",))
    assert found is not None and found.field_id == 2  # the dropped column's id, in no schema now
    assert names.find(("col-9b1e",)) == MappedField(("col-9b1e",), 3)


def test_enabling_column_mapping_that_moves_a_columns_id_is_refused_by_name() -> None:
    """Without column mapping the target numbers a struct's own fields first (s=1, b=2, s.x=3);
    Delta, enabling mapping in place, numbers depth first (s=1, s.x=2, b=3). Under the new ids the
    target's earlier metrics would describe the other column: refused, naming the fix."""
    nested = {"type": "struct", "fields": [fld("x", "string")]}
    before = map_schema(
        delta_schema(fld("s", nested), fld("b", "string")),
        NO_CM,
        {},
    )
    assert ids_by_name_path(before.schema) == {("s",): 1, ("b",): 2, ("s", "x"): 3}
    moved = delta_schema(
        fld("s", {"type": "struct", "fields": [fld("x", "string", cm(2, "x"))]}, cm(1, "s")),
        fld("b", "string", cm(3, "b")),
    )
    with pytest.raises(UnsupportedFeatureError, match=r"b 2 -> 3.*--mode full --history latest"):
        map_schema(moved, NAME_CM, CM_CONFIG, previous=before.schema, last_column_id=3)
    # Ids that agree convert as before.
    kept = delta_schema(
        fld("s", {"type": "struct", "fields": [fld("x", "string", cm(3, "x"))]}, cm(1, "s")),
        fld("b", "string", cm(2, "b")),
    )
    same = map_schema(kept, NAME_CM, CM_CONFIG, previous=before.schema, last_column_id=3)
    assert ids_by_name_path(same.schema) == ids_by_name_path(before.schema)
    # Renamed too before the next run: the physical names still say which column moved.
    renamed = delta_schema(
        fld("s", {"type": "struct", "fields": [fld("y", "string", cm(2, "x"))]}, cm(1, "s")),
        fld("c", "string", cm(3, "b")),
    )
    with pytest.raises(UnsupportedFeatureError, match=r"c 2 -> 3"):
        map_schema(
            renamed,
            NAME_CM,
            CM_CONFIG,
            previous=before.schema,
            previous_names=before.name_mapping,
            last_column_id=3,
        )


def test_a_column_renamed_back_to_its_first_name_keeps_its_id_and_converts() -> None:
    """Mapping enabled in place (a: id 1, physical a), a renamed to a_old and a new a added
    (physical col-u, id 3), then the new a dropped and a_old renamed back to a: the physical name
    a still has id 1, so nothing moved."""
    middle = map_schema(
        delta_schema(fld("a_old", "string", cm(1, "a")), fld("a", "string", cm(3, "col-u"))),
        NAME_CM,
        CM_CONFIG,
    )
    back = map_schema(
        delta_schema(fld("a", "string", cm(1, "a"))),
        NAME_CM,
        CM_CONFIG,
        previous=middle.schema,
        previous_names=middle.name_mapping,
        last_column_id=3,
    )
    assert ids_by_name_path(back.schema) == {("a",): 1}


@pytest.mark.parametrize(
    ("type_", "part"),
    [
        pytest.param(ARRAY_OF_STRING, "element", id="array"),
        pytest.param(MAP_OF_STRING_LONG, "key", id="map"),
        pytest.param(
            {"type": "map", "keyType": "string", "valueType": ARRAY_OF_STRING, "valueContainsNull": True},
            "key",
            id="map-of-array",
        ),
    ],
)
def test_column_mapping_refuses_collections_without_nested_ids(type_: Any, part: str) -> None:
    struct = delta_schema(fld("id", "long", cm(1, "col-a")), fld("tags", type_, cm(2, "col-b")))
    with pytest.raises(
        ConfigError, match=rf"'tags'.*its {part}s have no column-mapping id.*--rewrite-unreadable-files"
    ):
        map_schema(struct, NAME_CM, CM_CONFIG)
    # With the option the column maps, with fresh ids for its children, and is named as needing
    # a rewrite of the files that hold it.
    mapped = map_schema(struct, NAME_CM, CM_CONFIG, rewrite_unreadable=True)
    assert [u.path for u in mapped.unreadable][:1] == [("tags",)]
    assert all(u.widened_from is None for u in mapped.unreadable)
    assert mapped.schema.highest_field_id() > 2


def test_column_mapping_refuses_a_partial_set_of_nested_ids() -> None:
    struct = delta_schema(fld("m", MAP_OF_STRING_LONG, cm(2, "col-m", {"col-m.key": 100})))
    with pytest.raises(ConfigError, match=r"'m'.*values have no column-mapping id"):
        map_schema(struct, NAME_CM, CM_CONFIG)


def test_column_mapping_refuses_a_nested_collection_in_a_struct() -> None:
    inner = {"type": "struct", "fields": [fld("tags", ARRAY_OF_STRING, cm(4, "col-t"))]}
    struct = delta_schema(fld("s", inner, cm(3, "col-s")))
    with pytest.raises(ConfigError, match=r"'s\.tags'"):
        map_schema(struct, NAME_CM, CM_CONFIG)


def test_column_mapping_uses_nested_ids_for_map_and_array_children() -> None:
    nested_array = {"type": "array", "elementType": ARRAY_OF_STRING, "containsNull": False}
    struct = delta_schema(
        fld("m", MAP_OF_STRING_LONG, cm(2, "col-m", {"col-m.key": 100, "col-m.value": 101})),
        fld("aa", nested_array, cm(3, "col-aa", {"col-aa.element": 102, "col-aa.element.element": 103})),
    )
    mapped = map_schema(struct, NAME_CM, CM_CONFIG)
    m = mapped.schema.find_field(2)
    assert m is not None and isinstance(m.type, it.MapType)
    assert (m.type.key_id, m.type.value_id) == (100, 101)
    assert ids_by_name_path(mapped.schema) == {
        ("m",): 2,
        ("m", "key"): 100,
        ("m", "value"): 101,
        ("aa",): 3,
        ("aa", "element"): 102,
        ("aa", "element", "element"): 103,
    }
    aa = mapped.schema.find_field(3)
    assert aa is not None and isinstance(aa.type, it.ListType) and aa.type.element_required
    assert mapped.name_mapping.find(("col-m", "value")) == MappedField(("value",), 101)


def test_column_mapping_array_of_structs_needs_no_element_id() -> None:
    element = {"type": "struct", "fields": [fld("x", "integer", cm(5, "col-x"))]}
    struct = delta_schema(
        fld("arr", {"type": "array", "elementType": element, "containsNull": True}, cm(4, "col-arr"))
    )
    # Fresh ids start above the highest Delta id (maxColumnId 10) and the target's last id.
    mapped = map_schema(struct, NAME_CM, CM_CONFIG, last_column_id=12)
    assert ids_by_name_path(mapped.schema) == {
        ("arr",): 4,
        ("arr", "element"): 13,
        ("arr", "element", "x"): 5,
    }


def test_column_mapping_fresh_ids_start_above_nested_ids() -> None:
    element = {"type": "struct", "fields": [fld("x", "integer", cm(5, "col-x"))]}
    struct = delta_schema(
        fld("m", MAP_OF_STRING_LONG, cm(2, "col-m", {"col-m.key": 100, "col-m.value": 101})),
        fld("arr", {"type": "array", "elementType": element, "containsNull": True}, cm(4, "col-arr")),
    )
    mapped = map_schema(struct, NAME_CM, CM_CONFIG)
    assert ids_by_name_path(mapped.schema)[("arr", "element")] == 102


def test_column_mapping_reuses_a_previous_id_only_for_children_without_ids() -> None:
    element = {"type": "struct", "fields": [fld("x", "integer", cm(5, "col-x"))]}
    struct = delta_schema(
        fld("id", "long", cm(1, "col-a")),
        fld("arr", {"type": "array", "elementType": element, "containsNull": True}, cm(4, "col-arr")),
    )
    previous = it.Schema(
        0,
        (
            # A name's old id is not reused when Delta now gives that id to another column.
            it.NestedField(4, "id", it.LONG),
            it.NestedField(1, "arr", it.ListType(20, it.StructType((it.NestedField(5, "x", it.INT),)))),
        ),
    )
    mapped = map_schema(struct, NAME_CM, CM_CONFIG, previous=previous, last_column_id=20)
    assert ids_by_name_path(mapped.schema) == {
        ("id",): 1,
        ("arr",): 4,
        ("arr", "element"): 20,
        ("arr", "element", "x"): 5,
    }


def test_column_mapping_does_not_reuse_a_previous_id_that_is_now_a_nested_id() -> None:
    def element(physical: str, fid: int) -> dict[str, Any]:
        return {"type": "struct", "fields": [fld("x", "integer", cm(fid, physical))]}

    struct = delta_schema(
        fld("a1", {"type": "array", "elementType": element("c-x1", 5), "containsNull": True}, cm(3, "c-a1")),
        fld("a2", {"type": "array", "elementType": element("c-x2", 6), "containsNull": True}, cm(4, "c-a2")),
        fld("m", MAP_OF_STRING_LONG, cm(11, "c-m", {"c-m.key": 12, "c-m.value": 13})),
    )
    # The elements got fresh ids 11 and 12 when Delta's highest id was 10.
    previous = it.Schema(
        0,
        (
            it.NestedField(3, "a1", it.ListType(11, it.StructType((it.NestedField(5, "x", it.INT),)))),
            it.NestedField(4, "a2", it.ListType(12, it.StructType((it.NestedField(6, "x", it.INT),)))),
        ),
    )
    config = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "13"}
    mapped = map_schema(
        struct,
        column_mapping(config, supports_column_mapping=True),
        config,
        previous=previous,
        last_column_id=12,
    )
    ids = ids_by_name_path(mapped.schema)
    assert (ids[("m",)], ids[("m", "key")], ids[("m", "value")]) == (11, 12, 13)
    assert len(set(ids.values())) == len(ids)


def test_column_mapping_is_ignored_when_the_protocol_lacks_it() -> None:
    # The property without protocol support: plain names, fresh ids, collections allowed.
    struct = delta_schema(fld("id", "long", cm(7, "col-a")), fld("tags", ARRAY_OF_STRING, cm(8, "col-b")))
    mapped = map_schema(struct, column_mapping(CM_CONFIG, supports_column_mapping=False), CM_CONFIG)
    assert ids_by_name_path(mapped.schema) == {("id",): 1, ("tags",): 2, ("tags", "element"): 3}
    assert mapped.physical_by_path[("id",)] == ("id",)


# =================================================================================================
# SnapshotChange.removed_deletes_for / snapshot_timestamp_ms


def puffin_dv(location: str, name: str, target: DataFile, offset: int, cardinality: int = 1) -> DataFile:
    return DataFile(
        POSITION_DELETES,
        f"{location}/data/{name}.puffin",
        "PUFFIN",
        (),
        cardinality,
        200,
        referenced_data_file=target.file_path,
        content_offset=offset,
        content_size_in_bytes=30,
    )


def live_deletes(catalog: Any, ident: str) -> list[tuple[str, str | None, int | None]]:
    loaded = catalog.load_table(ident)
    live = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    return sorted(
        (e.data_file.file_path, e.data_file.referenced_data_file, e.data_file.content_offset)
        for e in live.deletes
    )


def test_replacing_one_dv_keeps_the_other_dv_of_the_same_puffin_file(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 3)
    committer = Committer(catalog, ident)
    f, g = data(location, 1), data(location, 2)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f, g)))
    shared_f, shared_g = puffin_dv(location, "shared", f, 4), puffin_dv(location, "shared", g, 34)
    committer.commit_snapshot(SnapshotChange("delete", added_files=(shared_f, shared_g)))
    assert live_deletes(catalog, ident) == [
        (shared_f.file_path, f.file_path, 4),
        (shared_g.file_path, g.file_path, 34),
    ]
    # Without removing the old one, a second DV for f is refused.
    newer_f = puffin_dv(location, "newer", f, 4, cardinality=3)
    with pytest.raises(CommitConflict, match="already has a live deletion vector"):
        committer.commit_snapshot(SnapshotChange("delete", added_files=(newer_f,)))
    result = committer.commit_snapshot(
        SnapshotChange("delete", added_files=(newer_f,), removed_deletes_for=frozenset({f.file_path}))
    )
    assert result.snapshot is not None
    assert result.snapshot.summary["added-dvs"] == "1"
    assert result.snapshot.summary["removed-dvs"] == "1"
    assert live_deletes(catalog, ident) == [
        (newer_f.file_path, f.file_path, 4),
        (shared_g.file_path, g.file_path, 34),
    ]
    loaded = catalog.load_table(ident)
    live = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    assert sorted(e.data_file.file_path for e in live.data) == [f.file_path, g.file_path]


def test_dropping_one_dv_of_a_shared_puffin_file(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 3)
    committer = Committer(catalog, ident)
    f, g = data(location, 1), data(location, 2)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f, g)))
    shared_f, shared_g = puffin_dv(location, "shared", f, 4), puffin_dv(location, "shared", g, 34)
    committer.commit_snapshot(SnapshotChange("delete", added_files=(shared_f, shared_g)))
    committer.commit_snapshot(SnapshotChange("overwrite", removed_deletes_for=frozenset({g.file_path})))
    assert live_deletes(catalog, ident) == [(shared_f.file_path, f.file_path, 4)]


def test_removed_deletes_for_a_file_without_deletes_is_no_conflict(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 3)
    committer = Committer(catalog, ident)
    f, g = data(location, 1), data(location, 2)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f, g)))
    committer.commit_snapshot(SnapshotChange("delete", added_files=(puffin_dv(location, "d", f, 4),)))
    fresh = puffin_dv(location, "d2", g, 4)
    committer.commit_snapshot(
        SnapshotChange("delete", added_files=(fresh,), removed_deletes_for=frozenset({g.file_path}))
    )
    assert live_deletes(catalog, ident) == [
        (f"{location}/data/d.puffin", f.file_path, 4),
        (fresh.file_path, g.file_path, 4),
    ]


def test_v2_position_deletes_of_a_data_file_are_removed(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 2)
    committer = Committer(catalog, ident)
    f, g = data(location, 1), data(location, 2)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f, g)))

    def pos(name: str, target: DataFile | None) -> DataFile:
        return DataFile(
            POSITION_DELETES,
            f"{location}/data/{name}.parquet",
            "PARQUET",
            (),
            1,
            10,
            referenced_data_file=None if target is None else target.file_path,
        )

    of_f, of_g, shared = pos("pos-f", f), pos("pos-g", g), pos("pos-any", None)
    committer.commit_snapshot(SnapshotChange("delete", added_files=(of_f, of_g, shared)))
    result = committer.commit_snapshot(
        SnapshotChange(
            "delete", added_files=(pos("pos-f2", f),), removed_deletes_for=frozenset({f.file_path})
        )
    )
    assert result.snapshot is not None
    assert result.snapshot.summary["removed-position-delete-files"] == "1"
    # Only the delete file that names f as its one data file can be known to be f's.
    assert [p for p, _, _ in live_deletes(catalog, ident)] == sorted(
        [f"{location}/data/pos-f2.parquet", of_g.file_path, shared.file_path]
    )
    loaded = catalog.load_table(ident)
    live = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    assert len(live.data) == 2


def test_snapshot_timestamp_is_the_source_time_and_metadata_keeps_the_clock(tmp_path: Path) -> None:
    catalog, ident, location = table(tmp_path, 2)
    now = time.time() + 60
    committer = Committer(catalog, ident, clock=lambda: now)
    source_ms = 1_600_000_000_000
    result = committer.commit_snapshot(
        SnapshotChange("append", added_files=(data(location, 1),), snapshot_timestamp_ms=source_ms)
    )
    assert result.snapshot is not None
    assert result.snapshot.timestamp_ms == source_ms
    meta = catalog.load_table(ident).metadata
    current = meta.current_snapshot()
    assert current is not None and current.timestamp_ms == source_ms
    assert meta.last_updated_ms == int(now * 1000)
    assert meta.snapshot_log[-1].timestamp_ms == source_ms
    # Without it, the snapshot takes the commit clock.
    plain = committer.commit_snapshot(SnapshotChange("append", added_files=(data(location, 2),)))
    assert plain.snapshot is not None and plain.snapshot.timestamp_ms == int(now * 1000)


def test_variant_and_void_map_to_v3_types() -> None:
    struct = delta_schema(
        fld("id", "long"),
        fld("v", "variant"),
        {**fld("n", "void"), "nullable": False},  # unknown is always optional in Iceberg
        fld("s", {"type": "struct", "fields": [fld("inner", "variant")]}),
        fld("vs", {"type": "array", "elementType": "variant", "containsNull": True}),
    )
    mapped = map_schema(struct, NO_CM, {}, format_version=3)
    fields = {f.name: f for f in mapped.schema.fields}
    assert fields["v"].type == it.VARIANT
    assert fields["n"].type == it.UNKNOWN and not fields["n"].required
    assert fields["s"].type == it.StructType((it.NestedField(6, "inner", it.VARIANT),))
    assert fields["vs"].type == it.ListType(7, it.VARIANT)
    assert it.type_from_json(it.type_to_json(it.VARIANT)) == it.VARIANT


@pytest.mark.parametrize(("type_", "iceberg"), [("variant", "variant"), ("void", "unknown")])
def test_variant_and_void_on_v2_are_refused_naming_the_fix(type_: str, iceberg: str) -> None:
    struct = delta_schema(fld("id", "long"), fld("c", type_))
    with pytest.raises(
        UnsupportedFeatureError, match=rf"'c' of type {type_} needs Iceberg's {iceberg}.*--format-version 3"
    ):
        map_schema(struct, NO_CM, {}, format_version=2)


def test_variant_and_unknown_columns_get_null_counts_but_never_bounds() -> None:
    # Iceberg variant bounds are keyed by shredded path and unknown has no values: a min/max a
    # writer put in the stats must not become a bound.
    struct = delta_schema(fld("id", "long"), fld("v", "variant"), fld("n", "void"))
    mapped = map_schema(struct, NO_CM, {}, format_version=3)
    stats = parse_stats(
        json.dumps(
            {
                "numRecords": 2,
                "minValues": {"id": 1, "v": "a", "n": "a"},
                "maxValues": {"id": 2, "v": "b", "n": "b"},
                "nullCount": {"id": 0, "v": 1, "n": 2},
            }
        )
    )
    m = metrics_from_stats(stats, struct, mapped, has_dv=False)
    assert set(m["lower"]) == set(m["upper"]) == {1}
    assert m["nulls"] == {1: 0, 2: 1, 3: 2}


def test_a_dotted_column_beside_the_struct_field_it_spells_is_refused_by_name() -> None:
    """Delta takes a column ``a.b`` beside a struct ``a`` holding ``b``; Iceberg Java indexes
    fields by full name and refuses the schema, so the target would load nowhere."""
    from tablekeeper.iceberg.updates import new_table_metadata

    struct = delta_schema(fld("a.b", "string"), fld("a", {"type": "struct", "fields": [fld("b", "long")]}))
    schema = map_schema(struct, NO_CM, {}).schema
    with pytest.raises(UnsupportedFeatureError, match=r"full name 'a\.b'.*rename one"):
        new_table_metadata(schema=schema, location="file:///t", timestamp_ms=1)
    fine = delta_schema(fld("a.b", "string"), fld("a", {"type": "struct", "fields": [fld("c", "long")]}))
    schema = map_schema(fine, NO_CM, {}).schema
    assert new_table_metadata(schema=schema, location="file:///t", timestamp_ms=1).schema() == schema


def test_timestamp_bounds_from_before_1972_widen_by_the_minute_an_offset_may_have_lost() -> None:
    """Delta Spark 3.2/3.3 wrote offsets cut to minutes (LMT -07:52:58 as -07:52), so an old value
    may be 58 s off: its bounds widen by 59 s. A later value, and a zone-less one, only get the
    999 µs of the millisecond truncation."""
    import struct as st

    schema = delta_schema(fld("ts", "timestamp"), fld("ntz", "timestamp_ntz"))
    mapped = map_schema(schema, NO_CM, {})
    stats = parse_stats(
        json.dumps(
            {
                "numRecords": 2,
                "minValues": {"ts": "1880-01-01T00:00:00.000-07:52", "ntz": "1880-01-01T00:00:00.000"},
                "maxValues": {"ts": "2020-01-01T00:00:00.000Z", "ntz": "1880-01-01T00:00:01.000"},
            }
        )
    )
    m = metrics_from_stats(stats, schema, mapped, has_dv=False)

    def micros(b: bytes) -> int:
        return int(st.unpack("<q", b)[0])

    old = -2840140800 * 1_000_000 + (7 * 60 + 52) * 60_000_000  # 1880-01-01T07:52Z
    assert micros(m["lower"][1]) == old - 59_000_000
    assert micros(m["upper"][1]) == 1577836800 * 1_000_000 + 999
    wall = -2840140800 * 1_000_000
    assert (micros(m["lower"][2]), micros(m["upper"][2])) == (wall, wall + 1_000_000 + 999)
    late = parse_stats(json.dumps({"numRecords": 1, "maxValues": {"ts": "1900-01-01T00:00:00.000-07:52"}}))
    upper = micros(metrics_from_stats(late, schema, mapped, has_dv=False)["upper"][1])
    assert upper == -2208988800 * 1_000_000 + (7 * 60 + 52) * 60_000_000 + 999 + 59_000_000
