"""Files a point lookup opens, from bounds: the model's figures on layouts whose answer is known."""

from __future__ import annotations

import struct

import pytest

from tablekeeper.iceberg.content import DATA, DataFile, ManifestEntry
from tablekeeper.iceberg.layout import LayoutTally, lookup_cost, sorted_lookup, summarize
from tablekeeper.iceberg.types import LONG, STRING


def test_disjoint_ranges_open_one_file() -> None:
    low = [0, 100, 200, 300]
    high = [99, 199, 299, 399]
    per_lookup, depth = lookup_cost(low, high, [10] * 4, 1.0)
    assert per_lookup == pytest.approx(1.0)
    assert depth == pytest.approx(1.0)


def test_full_overlap_opens_every_file() -> None:
    per_lookup, depth = lookup_cost([0] * 8, [999] * 8, [5] * 8, 1.0)
    assert per_lookup == pytest.approx(8.0)
    assert depth == pytest.approx(8.0)


def test_shared_key_on_a_boundary_costs_its_width() -> None:
    # [0, 9] and [9, 18] share key 9: one of ten keys of each file is in both.
    per_lookup, _ = lookup_cost([0, 9], [9, 18], [10, 10], 1.0)
    assert per_lookup == pytest.approx(1.1)


def test_half_overlap_weighted_by_rows() -> None:
    # [0, 100) and [50, 150): each file's rows meet the other file on half of their range.
    per_lookup, depth = lookup_cost([0, 50], [100, 150], [1, 3], 0.0)
    assert per_lookup == pytest.approx(1.5)
    assert depth == pytest.approx(200 / 150)


def test_single_value_files_of_a_continuous_type() -> None:
    per_lookup, _ = lookup_cost([5.0, 5.0, 0.0], [5.0, 5.0, 10.0], [1, 1, 2], 0.0)
    # Each one-value file is met by the other and by the wide one: 3; the wide one only by itself.
    assert per_lookup == pytest.approx((3 + 3 + 2 * 1) / 4)


def _entry(lower: bytes | None, upper: bytes | None, rows: int = 10, nulls: int = 0) -> ManifestEntry:
    bounds = lower is not None and upper is not None
    f = DataFile(
        content=DATA,
        file_path="f.parquet",
        file_format="PARQUET",
        partition=(),
        record_count=rows,
        file_size_in_bytes=1000,
        lower_bounds={1: lower} if bounds else None,
        upper_bounds={1: upper} if bounds else None,
        null_value_counts={1: nulls},
    )
    return ManifestEntry(status=1, snapshot_id=1, data_file=f)


def test_files_without_bounds_are_opened_by_every_lookup() -> None:
    tally = LayoutTally(1, LONG)
    for i in range(3):
        tally.add(_entry(struct.pack("<q", i * 10), struct.pack("<q", i * 10 + 9)))
    tally.add(_entry(None, None, rows=10, nulls=0))  # no metrics: always opened
    tally.add(_entry(None, None, rows=10, nulls=10))  # only nulls: never opened by a value
    (part,) = tally.measure()
    assert part.files == 5
    # 30 bounded rows open their file and the unbounded one (2); the unbounded file's 10 rows open
    # the four non-null files.
    assert part.files_per_lookup == pytest.approx((30 * 2 + 10 * 4) / 40)
    summary = summarize("id", 1, [part], 1)
    assert summary.files_without_bounds == 1


def test_strings_placed_by_their_leading_bytes() -> None:
    tally = LayoutTally(1, STRING)
    tally.add(_entry(b"apple", b"banana"))
    tally.add(_entry(b"cherry", b"date"))
    (part,) = tally.measure()
    assert part.files_per_lookup == pytest.approx(1.0)


def test_sorted_prediction() -> None:
    assert sorted_lookup(10, 10_000, 1_800, None) == 1.0  # every key distinct: one file
    # Range partitioning keeps a key's rows in one task: ten keys of 1,000 bytes, one file each.
    assert sorted_lookup(10, 10_000, 1_800, 10) == 1.0
    # Two keys of 5,000 bytes, files of at most 1,800: three files each.
    assert sorted_lookup(6, 10_000, 1_800, 2) == 3.0
    assert sorted_lookup(1, 1000, 1_800, 3) == 1.0
    assert sorted_lookup(16, 1000, 1_800, None, columns=2) == pytest.approx(4.0)


def test_tallies_read_apart_merge_to_the_same_figures() -> None:
    ranges = [(0, 50), (10, 60), (100, 150), (120, 130), (5, 5)]
    whole, first, second = LayoutTally(1, LONG), LayoutTally(1, LONG), LayoutTally(1, LONG)
    for i, (lo, hi) in enumerate(ranges):
        entry = _entry(struct.pack("<q", lo), struct.pack("<q", hi), rows=10 + i)
        whole.add(entry)
        (first if i < 2 else second).add(entry)
    first.add(_entry(None, None))
    whole.add(_entry(None, None))
    first.merge(second)
    assert first.measure() == whole.measure()
