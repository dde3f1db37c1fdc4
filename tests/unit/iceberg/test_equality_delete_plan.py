"""Which data files rewrite-equality-deletes resolves, and which equality delete files may go."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tablekeeper.errors import ConfigError, CorruptMetadataError
from tablekeeper.iceberg.content import DATA, EQUALITY_DELETES, POSITION_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.equality_delete_plan import plan_equality_deletes
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import STRING, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata

pytestmark = pytest.mark.unit

PARTITIONED, UNPARTITIONED = 1, 0
SPECS = frozenset({UNPARTITIONED})  # the spec ids whose equality deletes are global


def _entry(
    path: str, seq: int, content: int = DATA, part: tuple[object, ...] = ("a",), **kw: object
) -> ManifestEntry:
    spec = kw.pop("spec_id", PARTITIONED if part else UNPARTITIONED)
    f = DataFile(content, path, str(kw.pop("fmt", "PARQUET")), part, 10, 100, spec_id=int(spec), **kw)  # type: ignore[arg-type]
    return ManifestEntry(1, 1, f, seq, seq)


def _eq(path: str, seq: int, part: tuple[object, ...] = ("a",)) -> ManifestEntry:
    return _entry(path, seq, EQUALITY_DELETES, part=part, equality_ids=(1,))


def test_targets_are_the_older_data_files_of_the_deletes_scope_grouped_per_partition() -> None:
    data = [_entry("a1", 1), _entry("a2", 2), _entry("a-new", 9), _entry("b1", 1, part=("b",))]
    deletes = [_eq("eq-a", 5), _eq("eq-b", 5, part=("b",))]
    plan = plan_equality_deletes(data, deletes, SPECS)
    assert [[t.file.file_path for t in g.targets] for g in plan.groups] == [["a1", "a2"], ["b1"]]
    assert plan.removable == {"eq-a": frozenset({0}), "eq-b": frozenset({1})}
    assert plan.kept == () and plan.target_files == 3


def test_a_global_delete_reaches_every_partition_and_a_delete_on_nothing_may_go_at_once() -> None:
    data = [_entry("a1", 1), _entry("b1", 1, part=("b",)), _entry("u1", 1, part=())]
    deletes = [_eq("global", 5, part=()), _eq("on-nothing", 1)]
    plan = plan_equality_deletes(data, deletes, SPECS)
    assert sorted(t.file.file_path for g in plan.groups for t in g.targets) == ["a1", "b1", "u1"]
    assert plan.removable["global"] == frozenset(g.index for g in plan.groups)
    assert plan.removable["on-nothing"] == frozenset()


def test_a_delete_reaching_files_the_run_leaves_out_stays_with_a_reason() -> None:
    data = [_entry("a1", 1), _entry("b1", 1, part=("b",))]
    plan = plan_equality_deletes(
        data, [_eq("global", 5, part=()), _eq("eq-a", 5)], SPECS, matches=lambda f: f.partition == ("a",)
    )
    assert [t.file.file_path for g in plan.groups for t in g.targets] == ["a1"]
    assert list(plan.removable) == ["eq-a"]
    [kept] = plan.kept
    assert kept.path == "global" and "1 data file(s) in partitions left out" in kept.reason


def test_each_target_carries_the_deletes_a_new_dv_must_hold_and_the_dv_it_replaces() -> None:
    dv = _entry("dv", 3, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="a1")
    positions = _entry("pos", 4, POSITION_DELETES)
    data = [_entry("a1", 2), _entry("a2", 2)]
    plan = plan_equality_deletes(data, [_eq("eq", 5), dv, positions], SPECS)
    by_path = {t.file.file_path: t for g in plan.groups for t in g.targets}
    assert by_path["a1"].dv is dv and by_path["a1"].positions == ()
    assert by_path["a2"].dv is None and by_path["a2"].positions == (positions,)
    # A DV older than the file it names: readers disagree on it (Iceberg Java fails the scan).
    stale = _entry("stale", 1, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="a2")
    with pytest.raises(CorruptMetadataError, match="older"):
        plan_equality_deletes(data, [_eq("eq", 5), dv, stale, positions], SPECS)
    # Outside the run (--where), a data file is read for what applies to it, not checked.
    kept = plan_equality_deletes(
        data, [_eq("eq", 5), dv, stale, positions], SPECS, matches=lambda f: f.file_path == "a1"
    )
    assert [t.file.file_path for g in kept.groups for t in g.targets] == ["a1"]


def test_groups_hold_at_most_max_group_files() -> None:
    data = [_entry(f"a{i}", 1) for i in range(5)]
    plan = plan_equality_deletes(data, [_eq("eq", 5)], SPECS, max_group_files=2)
    assert [len(g.targets) for g in plan.groups] == [2, 2, 1]
    assert plan.removable["eq"] == frozenset({0, 1, 2})
    with pytest.raises(ConfigError):
        plan_equality_deletes(data, [_eq("eq", 5)], SPECS, max_group_files=0)


def test_no_equality_deletes_no_plan_and_one_without_ids_is_corrupt() -> None:
    assert plan_equality_deletes([_entry("a1", 1)], [], SPECS).groups == ()
    bad = _entry("bad", 5, EQUALITY_DELETES)
    with pytest.raises(CorruptMetadataError, match="no equality ids"):
        plan_equality_deletes([_entry("a1", 1)], [bad], SPECS)


def test_a_delete_under_a_spec_of_void_fields_is_global_as_in_java() -> None:
    """A v1 table's dropped partition field stays in its spec as a void one. Java's
    ``PartitionSpec.isUnpartitioned`` calls such a spec unpartitioned, so an equality delete
    written under it applies to every partition's older data files: all are resolved, and the
    delete goes only with the last of them."""
    void = 2
    identity = PartitionSpec(PARTITIONED, (PartitionField(1, 1000, "cat", "identity"),))
    dropped = PartitionSpec(void, (PartitionField(1, 1000, "cat", "void"),))
    specs = (PartitionSpec(UNPARTITIONED), identity, dropped)
    schema = Schema(0, (NestedField(1, "cat", STRING),))
    meta = new_table_metadata(schema=schema, location="file:///t", timestamp_ms=1, spec=identity)
    meta = replace(meta, partition_specs=specs, default_spec_id=void)
    assert meta.unpartitioned_spec_ids == frozenset({UNPARTITIONED, void})

    data = [_entry("a1", 1), _entry("b1", 1, part=("b",)), _entry("v-new", 9, part=(None,), spec_id=void)]
    deletes = [_entry("eq-void", 5, EQUALITY_DELETES, part=(None,), spec_id=void, equality_ids=(1,))]
    plan = plan_equality_deletes(data, deletes, meta.unpartitioned_spec_ids)
    assert sorted(t.file.file_path for g in plan.groups for t in g.targets) == ["a1", "b1"]
    assert plan.removable["eq-void"] == frozenset(g.index for g in plan.groups) and len(plan.groups) == 2
