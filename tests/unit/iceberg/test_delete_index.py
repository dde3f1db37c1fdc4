"""The spec's scan-planning rules for which delete files apply to a data file."""

from __future__ import annotations

import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.content import DATA, EQUALITY_DELETES, POSITION_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.delete_index import DELETE_FILE_PATH_ID, DeleteIndex

PARTITIONED, UNPARTITIONED = 1, 0


def _entry(
    path: str, seq: int, content: int = DATA, part: tuple[object, ...] = (1,), **kw: object
) -> ManifestEntry:
    spec = kw.pop("spec_id", PARTITIONED if part else UNPARTITIONED)
    f = DataFile(content, path, str(kw.pop("fmt", "PARQUET")), part, 10, 100, spec_id=int(spec), **kw)  # type: ignore[arg-type]
    return ManifestEntry(1, 1, f, seq, seq)


def _index(*deletes: ManifestEntry) -> DeleteIndex:
    return DeleteIndex(deletes, frozenset({UNPARTITIONED}))


def _paths(entries: tuple[ManifestEntry, ...]) -> list[str]:
    return sorted(e.data_file.file_path for e in entries)


def test_position_deletes_apply_at_equal_or_later_sequence_in_the_same_partition() -> None:
    index = _index(
        _entry("pos-older", 4, POSITION_DELETES),
        _entry("pos-same", 5, POSITION_DELETES),
        _entry("pos-newer", 6, POSITION_DELETES),
        _entry("pos-other-partition", 9, POSITION_DELETES, part=(2,)),
    )
    applied = index.for_data_file(_entry("data", 5))
    assert _paths(applied.positions) == ["pos-newer", "pos-same"]
    assert applied.dv is None and applied.equalities == ()


def test_equality_deletes_apply_only_at_later_sequence_and_globally_from_unpartitioned_specs() -> None:
    index = _index(
        _entry("eq-same", 5, EQUALITY_DELETES, equality_ids=(1,)),
        _entry("eq-newer", 6, EQUALITY_DELETES, equality_ids=(1,)),
        _entry("eq-other-partition", 7, EQUALITY_DELETES, part=(2,), equality_ids=(1,)),
        _entry("eq-global", 8, EQUALITY_DELETES, part=(), equality_ids=(1,)),
        _entry("eq-global-old", 3, EQUALITY_DELETES, part=(), equality_ids=(1,)),
    )
    assert _paths(index.for_data_file(_entry("data", 5)).equalities) == ["eq-global", "eq-newer"]


def test_a_dv_replaces_position_delete_files_for_its_file() -> None:
    dv = _entry("dv.puffin", 7, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="data")
    index = _index(dv, _entry("pos", 6, POSITION_DELETES))
    applied = index.for_data_file(_entry("data", 5))
    assert applied.dv is dv and applied.positions == ()
    assert _paths(index.for_data_file(_entry("other", 5)).positions) == ["pos"]


def test_position_delete_files_naming_one_file_apply_only_to_it() -> None:
    one = {DELETE_FILE_PATH_ID: b"a.parquet"}
    spread = ({DELETE_FILE_PATH_ID: b"a.parquet"}, {DELETE_FILE_PATH_ID: b"z.parquet"})
    index = _index(
        _entry("by-reference", 6, POSITION_DELETES, referenced_data_file="a.parquet"),
        _entry("by-bounds", 6, POSITION_DELETES, lower_bounds=one, upper_bounds=one),
        # A range is never trusted to rule a file out: a wrongly pruned delete revives rows.
        _entry("by-range", 6, POSITION_DELETES, lower_bounds=spread[0], upper_bounds=spread[1]),
    )
    assert _paths(index.for_data_file(_entry("a.parquet", 5)).positions) == [
        "by-bounds",
        "by-range",
        "by-reference",
    ]
    assert _paths(index.for_data_file(_entry("b.parquet", 5)).positions) == ["by-range"]
    assert _paths(index.for_data_file(_entry("0.parquet", 5)).positions) == ["by-range"]


def test_a_dv_older_than_its_data_file_or_in_another_partition_fails_closed() -> None:
    """Readers disagree on such a DV (the spec's wording leaves it unapplied, Iceberg Java fails
    the scan for an older one and, up to 1.11, applies one of another partition): a job that
    picked one reading would change another engine's rows, so the lookup refuses it."""
    pos = _entry("pos", 6, POSITION_DELETES)
    older = _entry("dv.puffin", 3, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="data")
    with pytest.raises(CorruptMetadataError, match=r"older \(data sequence number 3\)"):
        _index(older, pos).for_data_file(_entry("data", 5))
    moved = _entry("dv.puffin", 6, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="data", part=(2,))
    with pytest.raises(CorruptMetadataError, match="in another partition"):
        _index(moved, pos).for_data_file(_entry("data", 5))
    other_spec = _entry(
        "dv.puffin", 6, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="data", spec_id=7
    )
    with pytest.raises(CorruptMetadataError, match="in another partition"):
        _index(other_spec).for_data_file(_entry("data", 5))
    same = _entry("dv.puffin", 5, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="data")
    assert _index(same, pos).for_data_file(_entry("data", 5)).dv is same  # equal numbers apply
    # Only the data file a DV names is checked: the others read as before.
    assert _paths(_index(older, pos).for_data_file(_entry("other", 5)).positions) == ["pos"]


def test_a_delete_file_naming_a_data_file_of_another_partition_fails_closed() -> None:
    """Iceberg Java looks a position delete file that names one data file up by that path: up to
    1.11 it applies it whatever its partition, later versions fail the scan. Older than the data
    file, it applies to no reader and is not an error."""
    one = {DELETE_FILE_PATH_ID: b"data"}
    by_reference = _entry("by-ref", 6, POSITION_DELETES, referenced_data_file="data", part=(2,))
    by_bounds = _entry("by-bounds", 6, POSITION_DELETES, part=(2,), lower_bounds=one, upper_bounds=one)
    for named in (by_reference, by_bounds):
        with pytest.raises(CorruptMetadataError, match=r"by-.* deletes rows of data but is in another"):
            _index(named).for_data_file(_entry("data", 5))
        assert _index(named).for_data_file(_entry("data", 7)).positions == ()  # older: no reader applies it
    # In its own partition it applies, and a delete file spanning paths is scoped by partition.
    spread = _entry("spread", 6, POSITION_DELETES, part=(2,))
    assert _index(spread).for_data_file(_entry("data", 5)).positions == ()
    assert _paths(_index(by_reference).for_data_file(_entry("data", 5, part=(2,))).positions) == ["by-ref"]


def test_two_dvs_for_one_data_file_fail_closed() -> None:
    twice = _entry("dv2.puffin", 6, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="data")
    with pytest.raises(CorruptMetadataError, match="two deletion vectors"):
        _index(_entry("dv.puffin", 6, POSITION_DELETES, fmt="PUFFIN", referenced_data_file="data"), twice)


def test_equality_deletes_java_skips_by_statistics_do_not_apply() -> None:
    """Iceberg Java's planning (``canContainEqDeletesForFile``) skips an equality delete file for
    a data file whose value ranges or null counts rule out every common value, so a reader never
    applies it there; NaN is left out of float bounds, so a NaN row is not deleted by a NaN."""
    import struct

    from tablekeeper.iceberg.delete_index import field_lookup
    from tablekeeper.iceberg.types import DOUBLE, LONG, NestedField, Schema

    schema = Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "x", DOUBLE)))
    fields = field_lookup([schema])

    def q(v: int) -> bytes:
        return struct.pack("<q", v)

    def d(v: float) -> bytes:
        return struct.pack("<d", v)

    def stats(lo: dict[int, bytes], hi: dict[int, bytes], nulls: dict[int, int]) -> dict[str, object]:
        return {
            "lower_bounds": lo,
            "upper_bounds": hi,
            "null_value_counts": nulls,
            "value_counts": {1: 10, 2: 10},
        }

    data = _entry("d", 1, **stats({1: q(1), 2: d(1.0)}, {1: q(10), 2: d(1.0)}, {2: 0}))
    overlapping = _entry("eq-in", 5, EQUALITY_DELETES, equality_ids=(1,), **stats({1: q(5)}, {1: q(20)}, {}))
    beyond = _entry("eq-out", 5, EQUALITY_DELETES, equality_ids=(1,), **stats({1: q(11)}, {1: q(20)}, {}))
    nan_only = _entry(
        "eq-nan", 5, EQUALITY_DELETES, equality_ids=(2,), **stats({2: d(5.0)}, {2: d(5.0)}, {2: 0})
    )
    nulls = _entry("eq-null", 5, EQUALITY_DELETES, equality_ids=(2,), **stats({}, {}, {2: 10}))
    unbounded = _entry("eq-?", 5, EQUALITY_DELETES, equality_ids=(1,))
    deletes = (overlapping, beyond, nan_only, nulls, unbounded)
    pruned = DeleteIndex(deletes, frozenset({UNPARTITIONED}), fields).for_data_file(data)
    assert _paths(pruned.equalities) == ["eq-?", "eq-in"]  # the null-only one: the data has no null
    assert _paths(_index(*deletes).for_data_file(data).equalities) == sorted(
        e.data_file.file_path for e in deletes
    )


def test_equality_delete_ranges_compare_strings_by_code_point_as_java() -> None:
    """Java's ``Comparators.charSequences`` puts a surrogate pair (a character above U+FFFF)
    above every other UTF-16 unit: code point order. By UTF-16 units, U+1F600 would fall inside
    a data range ending at U+E000; Java skips the delete file there, so it must not apply."""
    from tablekeeper.iceberg.delete_index import field_lookup
    from tablekeeper.iceberg.types import STRING, NestedField, Schema

    fields = field_lookup([Schema(0, (NestedField(1, "s", STRING, True),))])

    def bounds(lo: str, hi: str) -> dict[str, object]:
        return {"lower_bounds": {1: lo.encode()}, "upper_bounds": {1: hi.encode()}}

    data = _entry("d", 1, **bounds("a", "\ue000"))
    emoji = _entry("eq-emoji", 5, EQUALITY_DELETES, equality_ids=(1,), **bounds("\U0001f600", "\U0001f600"))
    inside = _entry("eq-in", 5, EQUALITY_DELETES, equality_ids=(1,), **bounds("b", "b"))
    applied = DeleteIndex((emoji, inside), frozenset({UNPARTITIONED}), fields).for_data_file(data)
    assert _paths(applied.equalities) == ["eq-in"]
