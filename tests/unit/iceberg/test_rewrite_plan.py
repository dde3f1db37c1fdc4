"""compact's planning: which files are rewritten, in which groups, into how many files."""

from __future__ import annotations

import pytest

from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.content import DATA, EQUALITY_DELETES, POSITION_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.delete_index import DeleteIndex
from tablekeeper.iceberg.rewrite_plan import RewriteOptions, expected_files_after, pack, plan_rewrite

MB = 1024 * 1024
SPEC, OLD_SPEC = 1, 0


def _data(
    path: str, size: int, part: tuple[object, ...] = ("a",), spec: int = SPEC, rows: int = 100
) -> ManifestEntry:
    return ManifestEntry(1, 1, DataFile(DATA, path, "PARQUET", part, rows, size, spec_id=spec), 5, 5)


def _dv(target: str, rows: int, part: tuple[object, ...] = ("a",)) -> ManifestEntry:
    f = DataFile(
        POSITION_DELETES,
        f"{target}.puffin",
        "PUFFIN",
        part,
        rows,
        10,
        spec_id=SPEC,
        referenced_data_file=target,
    )
    return ManifestEntry(1, 1, f, 6, 6)


def _plan(data: list[ManifestEntry], options: RewriteOptions, *deletes: ManifestEntry):  # type: ignore[no-untyped-def]
    return plan_rewrite(data, DeleteIndex(deletes, frozenset()), options)


def _options(**kw: object) -> RewriteOptions:
    return RewriteOptions.resolve({}, target_file_size=100 * MB, **kw)  # type: ignore[arg-type]


def test_defaults_follow_the_table_property_and_icebergs_ratios() -> None:
    o = RewriteOptions.resolve({"write.target-file-size-bytes": str(128 * MB)})
    assert (o.target_file_size, o.min_file_size, o.max_file_size) == (
        128 * MB,
        int(96 * MB),
        int(128 * MB * 1.8),
    )
    assert o.write_max_file_size == int(128 * MB * 1.4)
    assert RewriteOptions.resolve({}).target_file_size == 512 * MB


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"min_file_size": 100 * MB}, "below the target"),
        ({"max_file_size": 50 * MB}, "above the target"),
        ({"min_input_files": 0}, "at least 1"),
        ({"delete_ratio_threshold": 0.0}, r"\(0, 1\]"),
    ],
)
def test_bad_options_name_the_option(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _options(**kw)


def test_bad_table_property_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"write\.target-file-size-bytes"):
        RewriteOptions.resolve({"write.target-file-size-bytes": "big"})


@pytest.mark.parametrize(
    ("size_mb", "files"),
    [
        (50, 1),  # below the target: one file
        (180, 2),  # remainder 80 MB > min 75 MB: its own file
        (205, 2),  # remainder 5 MB: spread, 102.5 MB average < 110 MB
        (350, 4),  # remainder 50 MB spread over 3 makes 116.7 MB: over 110, so one more file
        (1000, 10),
    ],
)
def test_expected_output_files(size_mb: int, files: int) -> None:
    assert _options().expected_output_files(size_mb * MB) == files


def test_split_size_stays_between_target_and_roll_over_size() -> None:
    o = _options()
    assert o.split_size(50 * MB) == 100 * MB
    assert o.split_size(205 * MB) == 205 * MB // 2 + 5 * 1024
    assert o.split_size(10_000 * MB) <= o.write_max_file_size


def test_small_files_grouped_per_partition_and_single_small_files_left() -> None:
    data = [_data(f"a{i}", MB) for i in range(6)] + [_data("b0", MB, ("b",))] + [_data("ok", 100 * MB)]
    plan = _plan(data, _options())
    assert [(g.partition, len(g.tasks)) for g in plan.groups] == [(("a",), 6)]
    assert plan.live_files == 8 and plan.files == 6
    assert expected_files_after(plan, plan.live_files) == 3


def test_min_input_files_and_enough_content() -> None:
    small = [_data(f"a{i}", 60 * MB) for i in range(2)]  # two files, 120 MB > target
    assert len(_plan(small, _options()).groups) == 1
    few = [_data(f"a{i}", MB) for i in range(3)]
    assert _plan(few, _options()).groups == ()
    assert len(_plan(few, _options(min_input_files=3)).groups) == 1


def test_a_single_oversized_file_is_rewritten() -> None:
    (g,) = _plan([_data("huge", 500 * MB)], _options()).groups
    assert g.expected_output_files == 5


def test_rewrite_all_takes_every_file_and_group() -> None:
    data = [_data("x", 100 * MB), _data("y", 100 * MB, ("b",))]
    assert _plan(data, _options()).groups == ()
    assert len(_plan(data, _options(rewrite_all=True)).groups) == 2


def test_delete_ratio_and_delete_count_make_a_good_file_a_candidate() -> None:
    good = _data("good", 100 * MB, rows=100)
    assert _plan([good], _options(), _dv("good", 29)).groups == ()
    (g,) = _plan([good], _options(), _dv("good", 30)).groups
    assert g.tasks[0].deletes.dv is not None and len(g.delete_files) == 1
    assert len(_plan([good], _options(delete_file_threshold=1), _dv("good", 1)).groups) == 1


def test_groups_pack_in_order_up_to_the_group_size() -> None:
    data = [_data(f"a{i}", 40 * MB) for i in range(5)]
    sizes = [
        sum(t.size for t in g)
        for g in pack(_plan(data, _options(rewrite_all=True)).groups[0].tasks, 100 * MB)
    ]
    assert sizes == [80 * MB, 80 * MB, 40 * MB]
    plan = _plan(data, _options(max_file_group_size=100 * MB, min_input_files=2))
    assert [len(g.tasks) for g in plan.groups] == [2, 2]  # the last lone file is left


def test_files_of_older_specs_group_by_their_own_partition() -> None:
    """Each group is written in its files' own spec: grouping by it lets a rerun converge."""
    data = [_data(f"o{i}", MB, ("x",), spec=OLD_SPEC) for i in range(5)]
    data += [_data(f"p{i}", MB, ("y",), spec=OLD_SPEC) for i in range(2)]
    data += [_data(f"q{i}", MB, ("x",)) for i in range(5)]
    plan = _plan(data, _options())
    assert sorted((g.spec_id, g.partition, len(g.tasks)) for g in plan.groups) == [
        (OLD_SPEC, ("x",), 5),
        (SPEC, ("x",), 5),
    ]


def test_max_files_to_rewrite_cuts_the_plan() -> None:
    data = [_data(f"a{i}", MB) for i in range(6)] + [_data(f"b{i}", MB, ("b",)) for i in range(6)]
    plan = _plan(data, _options(max_files_to_rewrite=8))
    assert [len(g.tasks) for g in plan.groups] == [6, 2] and plan.planned_groups == 2


def test_where_filter_keeps_only_matching_files() -> None:
    data = [_data(f"a{i}", MB) for i in range(6)]
    plan = plan_rewrite(
        data,
        DeleteIndex((), frozenset()),
        _options(),
        matches=lambda e: e.data_file.file_path < "a5",
    )
    assert [t.file.file_path for t in plan.groups[0].tasks] == ["a0", "a1", "a2", "a3", "a4"]


def test_files_spark_cannot_read_as_parquet_are_left_alone() -> None:
    orc = ManifestEntry(1, 1, DataFile(DATA, "o.orc", "ORC", ("a",), 10, MB, spec_id=SPEC), 5, 5)
    data = [_data(f"a{i}", MB) for i in range(5)] + [orc]
    plan = _plan(data, _options())
    assert plan.skipped_files == 1 and [len(g.tasks) for g in plan.groups] == [5]


@pytest.mark.parametrize("fmt", ["ORC", "AVRO"])
def test_files_with_orc_or_avro_position_deletes_are_compacted(fmt: str) -> None:
    """Compaction reads position delete files in every format the spec allows; only data files
    and equality deletes it cannot read as Parquet leave a file as it is."""
    data = [_data(f"a{i}", MB) for i in range(5)]
    positions = DataFile(POSITION_DELETES, f"d.{fmt.lower()}", fmt, ("a",), 2, 100, spec_id=SPEC)
    equalities = DataFile(
        EQUALITY_DELETES, f"e.{fmt.lower()}", fmt, ("a",), 2, 100, spec_id=SPEC, equality_ids=(1,)
    )
    plan = _plan(data, _options(), ManifestEntry(1, 1, positions, 6, 6))
    assert plan.skipped_files == 0 and [len(g.tasks) for g in plan.groups] == [5]
    assert all(t.deletes.positions for t in plan.groups[0].tasks)
    refused = _plan(data, _options(), ManifestEntry(1, 1, equalities, 6, 6))
    assert refused.skipped_files == 5 and refused.groups == ()
