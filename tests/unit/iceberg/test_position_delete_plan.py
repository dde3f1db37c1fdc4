"""Planning rewrite-position-deletes: which position delete files are grouped, and what a group
carries (the partition's live data files with sequence numbers, its DVs on v3)."""

from __future__ import annotations

import pytest

from tablekeeper.errors import ConfigError, CorruptMetadataError
from tablekeeper.iceberg.content import ADDED, DATA, POSITION_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.position_delete_plan import DeletePlanOptions, plan_position_deletes

MB = 1024 * 1024
OPTIONS = DeletePlanOptions(target_file_size=64 * MB)


def data(path: str, part: str, seq: int, spec: int = 0) -> ManifestEntry:
    f = DataFile(DATA, path, "PARQUET", (part,), 10, 1000, spec_id=spec)
    return ManifestEntry(ADDED, 1, f, seq, seq)


def pos(
    path: str,
    part: str,
    seq: int,
    size: int = 1000,
    spec: int = 0,
    fmt: str = "PARQUET",
    referenced_data_file: str | None = None,
) -> ManifestEntry:
    f = DataFile(
        POSITION_DELETES, path, fmt, (part,), 3, size, spec_id=spec, referenced_data_file=referenced_data_file
    )
    return ManifestEntry(ADDED, 1, f, seq, seq)


def dv(path: str, target: str, part: str, seq: int) -> ManifestEntry:
    f = DataFile(
        POSITION_DELETES,
        path,
        "PUFFIN",
        (part,),
        2,
        500,
        referenced_data_file=target,
        content_offset=4,
        content_size_in_bytes=40,
    )
    return ManifestEntry(ADDED, 1, f, seq, seq)


DATA_FILES = [data("a1", "a", 1), data("a2", "a", 2), data("b1", "b", 1)]


def test_v2_groups_small_files_of_a_partition_once_there_are_enough() -> None:
    deletes = [pos(f"da{i}", "a", i + 1) for i in range(5)] + [pos(f"db{i}", "b", 2) for i in range(4)]
    plan = plan_position_deletes(DATA_FILES, deletes, 2, OPTIONS)
    assert [(g.partition, len(g.deletes)) for g in plan.groups] == [(("a",), 5)]
    group = plan.groups[0]
    assert group.sequence_number == 5  # the largest of its inputs, as Java keeps
    assert dict(group.data_files) == {"a1": 1, "a2": 2}  # only the partition's data files
    assert not group.to_dvs and plan.position_delete_files == 9


def test_v2_rewrite_all_takes_every_file_and_sizes_in_range_stay_otherwise() -> None:
    in_range = 60 * MB  # between 75% and 180% of the target
    deletes = [pos(f"da{i}", "a", 1, size=in_range) for i in range(6)] + [pos("db", "b", 1)]
    assert plan_position_deletes(DATA_FILES, deletes, 2, OPTIONS).groups == ()
    everything = plan_position_deletes(DATA_FILES, deletes, 2, DeletePlanOptions(rewrite_all=True))
    assert sorted(len(g.deletes) for g in everything.groups) == [1, 6]


def test_v2_min_input_files_and_more_than_a_target_of_content() -> None:
    deletes = [pos("d1", "a", 1, size=40 * MB), pos("d2", "a", 1, size=40 * MB)]
    # Two small files holding more than one target file's bytes are worth merging (Java's rule).
    assert len(plan_position_deletes(DATA_FILES, deletes, 2, OPTIONS).groups) == 1
    few = [pos("d1", "a", 1), pos("d2", "a", 1)]
    assert plan_position_deletes(DATA_FILES, few, 2, OPTIONS).groups == ()
    two = DeletePlanOptions(min_input_files=2)
    assert len(plan_position_deletes(DATA_FILES, few, 2, two).groups) == 1


def test_specs_are_separate_groups_and_every_format_is_planned() -> None:
    deletes = [pos(f"s0-{i}", "a", 1, spec=0) for i in range(5)] + [
        pos(f"s1-{i}", "a", 1, spec=1) for i in range(5)
    ]
    deletes.append(pos("avro", "a", 1, fmt="AVRO"))
    plan = plan_position_deletes(DATA_FILES, deletes, 2, OPTIONS)
    assert sorted((g.spec_id, len(g.deletes)) for g in plan.groups) == [(0, 6), (1, 5)]


def test_v3_plans_orc_and_avro_position_deletes_beside_parquet() -> None:
    """A DV the group writes for a1 shadows every position delete file naming a1: each of them,
    whatever its format, must be in the group (read, merged, and only then removed)."""
    deletes = [pos("p.parquet", "a", 2), pos("o.orc", "a", 2, fmt="ORC"), pos("v.avro", "a", 2, fmt="AVRO")]
    plan = plan_position_deletes(DATA_FILES, deletes, 3, OPTIONS)
    assert [sorted(d.file.file_path for d in g.deletes) for g in plan.groups] == [
        ["o.orc", "p.parquet", "v.avro"]
    ]
    assert plan.position_delete_files == 3


@pytest.mark.parametrize("version", [2, 3])
def test_a_dv_or_named_delete_file_readers_disagree_on_fails_the_plan(version: int) -> None:
    """A DV older than its data file, or a DV or delete file naming a data file of another
    partition: readers disagree on what it deletes, so no rewrite keeps every reader's rows."""
    older = dv("p-old", "a2", "a", 1)  # a2's data sequence number is 2
    moved = dv("p-moved", "a1", "b", 3)
    named = pos("named", "b", 3, referenced_data_file="a1")
    for bad in (older, moved, named):
        with pytest.raises(CorruptMetadataError):
            plan_position_deletes(DATA_FILES, [pos("da", "a", 3), bad], version, OPTIONS)
    applies = plan_position_deletes(DATA_FILES, [pos("da", "a", 3), dv("p", "a2", "a", 2)], 3, OPTIONS)
    assert [d.file.file_path for d in applies.groups[0].dvs] == ["p"]
    # --where leaving the data file's partition out: a filtered scan never meets it either.
    outside = plan_position_deletes(
        DATA_FILES, [pos("db", "b", 3), older], version, OPTIONS, matches=lambda f: f.partition == ("b",)
    )
    assert outside.position_delete_files == 1


def test_v3_converts_every_position_delete_file_whatever_its_size_and_brings_the_dvs() -> None:
    deletes = [pos("da", "a", 2), pos("db", "b", 1), dv("p1", "a1", "a", 3), dv("p1", "b1", "b", 3)]
    plan = plan_position_deletes(DATA_FILES, deletes, 3, OPTIONS)
    assert [(g.partition, len(g.deletes), g.to_dvs) for g in plan.groups] == [
        (("a",), 1, True),
        (("b",), 1, True),
    ]
    assert [d.file.referenced_data_file for d in plan.groups[0].dvs] == ["a1"]
    assert plan.dvs == 2


def test_where_narrows_and_two_dvs_for_one_file_are_refused() -> None:
    deletes = [pos(f"da{i}", "a", 1) for i in range(5)] + [pos(f"db{i}", "b", 1) for i in range(5)]
    plan = plan_position_deletes(DATA_FILES, deletes, 2, OPTIONS, lambda f: f.partition == ("b",))
    assert [g.partition for g in plan.groups] == [("b",)]
    with pytest.raises(CorruptMetadataError):
        plan_position_deletes(DATA_FILES, [dv("p1", "a1", "a", 3), dv("p2", "a1", "a", 4)], 3, OPTIONS)
    with pytest.raises(ConfigError):
        DeletePlanOptions(target_file_size=0)
