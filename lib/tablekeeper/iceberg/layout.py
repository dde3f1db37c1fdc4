"""Layout quality: how many data files a point lookup on a column must open, from the files' bounds.

File sizes can look healthy while the rows are laid out so that every file spans the whole range
of the sort key: a lookup then opens every file of the partition, and bin-pack compaction never
fixes it. This module measures that from the lower and upper bounds manifests keep per column and
predicts what a sort (or Z-order) rewrite leaves.

The model, per partition (queries filter the partition first; sort compaction works within one):
each file's rows are spread evenly over its ``[lower, upper]`` range, a lookup asks for the key of
a row drawn at random from the partition, and it opens every file whose range holds that key. So
the expected files per lookup is ``sum_f rows_f * E_f / rows`` with ``E_f`` the mean, over ``f``'s
range, of how many files cover a point (the integral of the coverage depth over ``f``'s range
divided by its width). Discrete types (integers, dates, timestamps, decimals' unscaled values)
cover ``[lower, upper + 1)``, so two files sharing one key overlap by exactly that key; strings,
binaries and UUIDs are placed by their first eight bytes, floats by their value. A file without
bounds for the column (no metrics kept, or a type Iceberg keeps none for) is opened by every
lookup, unless it holds only nulls, which a lookup on a value never opens.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np

from tablekeeper.iceberg.content import DATA, ManifestEntry
from tablekeeper.iceberg.conversions import from_bytes, json_value, type_kind
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.types import DecimalType, IcebergType, is_primitive

Scope = tuple[int, tuple[object, ...]]

_DISCRETE = frozenset(
    {"int", "long", "date", "time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns", "boolean"}
)
_PREFIXED = frozenset({"string", "binary", "fixed", "uuid"})
# Partitions listed by name in the result: the worst few, so a user knows where to start.
WORST_PARTITIONS = 5


def placeable(t: IcebergType) -> bool:
    """Whether bounds of ``t`` can be placed on a line (primitive, ordered)."""
    if not is_primitive(t):
        return False
    return discrete(t) or type_kind(t) in _PREFIXED or type_kind(t) in ("float", "double")


def _position(t: IcebergType, raw: bytes) -> float:
    """A bound's place on the line; discrete values are whole numbers."""
    if isinstance(t, DecimalType):
        return float(int.from_bytes(bytes(raw), "big", signed=True))
    kind = type_kind(t)
    if kind in _PREFIXED:
        # Iceberg orders these bytewise (strings by code point, which UTF-8 keeps).
        return float(int.from_bytes(bytes(raw)[:8].ljust(8, b"\x00"), "big"))
    value = from_bytes(t, raw)
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float, Decimal)):
        return float(value)
    raise ValueError(f"no position for {t}")


def discrete(t: IcebergType) -> bool:
    return isinstance(t, DecimalType) or type_kind(t) in _DISCRETE


@dataclass
class _Files:
    """One partition's files: their ranges and rows, and the files a lookup always opens."""

    low: list[float] = field(default_factory=list)
    high: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    unbounded_rows: int = 0
    unbounded: int = 0
    nulls_only: int = 0
    data_bytes: int = 0
    partition: tuple[object, ...] = ()
    spec_id: int = 0

    @property
    def files(self) -> int:
        return len(self.rows) + self.unbounded + self.nulls_only


@dataclass(frozen=True)
class PartitionLayout:
    spec_id: int
    partition: tuple[object, ...]
    files: int
    rows: int
    data_bytes: int
    files_per_lookup: float
    overlap_depth: float


class LayoutTally:
    """Bounds of one column gathered per partition; ``measure`` turns them into figures."""

    def __init__(self, field_id: int, column_type: IcebergType) -> None:
        self.field_id = field_id
        self.type = column_type
        self.width = 1.0 if discrete(column_type) else 0.0
        self.partitions: dict[Scope, _Files] = {}

    def add(self, entry: ManifestEntry) -> None:
        f = entry.data_file
        if f.content != DATA or not entry.is_live:
            return
        key: Scope = (f.spec_id, partition_key(f.partition))
        files = self.partitions.get(key)
        if files is None:
            files = self.partitions[key] = _Files(partition=tuple(f.partition), spec_id=f.spec_id)
        files.data_bytes += f.file_size_in_bytes
        low = (f.lower_bounds or {}).get(self.field_id)
        high = (f.upper_bounds or {}).get(self.field_id)
        if low is None or high is None:
            nulls = (f.null_value_counts or {}).get(self.field_id)
            if nulls is not None and nulls >= f.record_count:
                files.nulls_only += 1
            else:
                files.unbounded += 1
                files.unbounded_rows += f.record_count
            return
        try:
            lo, hi = _position(self.type, low), _position(self.type, high)
        except Exception:  # a bound that does not decode: the file is opened by every lookup
            files.unbounded += 1
            files.unbounded_rows += f.record_count
            return
        files.low.append(lo)
        files.high.append(max(lo, hi))
        files.rows.append(f.record_count)

    def merge(self, other: LayoutTally) -> None:
        """Add the files of another tally of the same column (manifests read apart)."""
        for key, theirs in other.partitions.items():
            mine = self.partitions.get(key)
            if mine is None:
                self.partitions[key] = theirs
                continue
            mine.low.extend(theirs.low)
            mine.high.extend(theirs.high)
            mine.rows.extend(theirs.rows)
            mine.unbounded_rows += theirs.unbounded_rows
            mine.unbounded += theirs.unbounded
            mine.nulls_only += theirs.nulls_only
            mine.data_bytes += theirs.data_bytes

    def measure(self) -> list[PartitionLayout]:
        return [self._partition(files) for files in self.partitions.values()]

    def _partition(self, p: _Files) -> PartitionLayout:
        rows = sum(p.rows) + p.unbounded_rows
        per_lookup, depth = lookup_cost(p.low, p.high, p.rows, self.width)
        bounded_rows = sum(p.rows)
        # Files without bounds are opened by every lookup; their own rows' lookups open them all.
        if rows:
            per_lookup = (
                bounded_rows * (per_lookup + p.unbounded) + p.unbounded_rows * (len(p.rows) + p.unbounded)
            ) / rows
        return PartitionLayout(p.spec_id, p.partition, p.files, rows, p.data_bytes, per_lookup, depth)


def lookup_cost(
    low: Sequence[float], high: Sequence[float], rows: Sequence[int], width: float
) -> tuple[float, float]:
    """(expected files a point lookup opens, average overlap depth) of files with these ranges;
    ``width`` is added to every upper bound (1 for discrete types)."""
    n = len(low)
    if n == 0:
        return 0.0, 0.0
    lo = np.asarray(low, dtype=np.float64)
    hi = np.asarray(high, dtype=np.float64) + width
    weight = np.asarray(rows, dtype=np.float64)
    span = hi - lo
    wide = span > 0
    # Coverage depth as a step function over the sorted end points, and its running integral.
    points = np.unique(np.concatenate((lo[wide], hi[wide])))
    if len(points):
        starts = np.searchsorted(np.sort(lo[wide]), points, side="right")
        ends = np.searchsorted(np.sort(hi[wide]), points, side="right")
        depth = (starts - ends)[:-1].astype(np.float64)  # on [points[i], points[i+1])
        steps = np.diff(points)
        integral = np.concatenate(([0.0], np.cumsum(depth * steps)))
        covered = float(np.sum(steps[depth > 0]))
        overlap_depth = float(integral[-1] / covered) if covered > 0 else 1.0
    else:
        integral = np.zeros(1)
        overlap_depth = 1.0
    each = np.empty(n, dtype=np.float64)
    if wide.any():
        a = np.searchsorted(points, lo[wide])
        b = np.searchsorted(points, hi[wide])
        each[wide] = (integral[b] - integral[a]) / span[wide]
    points_only = ~wide
    if points_only.any():
        # A file of one value (continuous types): a lookup of that value opens every file
        # whose closed range holds it.
        lo_sorted, hi_sorted = np.sort(lo), np.sort(hi - width)
        at = lo[points_only]
        each[points_only] = np.searchsorted(lo_sorted, at, side="right") - np.searchsorted(
            hi_sorted, at, side="left"
        )
    # A file's own range may hold points only it covers: it is always among the files opened.
    each = np.maximum(each, 1.0)
    total = float(weight.sum())
    mean = float((weight * each).sum() / total) if total > 0 else float(each.mean())
    return mean, overlap_depth


def sorted_lookup(
    files_after: int, data_bytes: int, max_file_bytes: int, distinct: int | None, columns: int = 1
) -> float:
    """Files a lookup opens after a sort rewrite of a partition of ``data_bytes`` into about
    ``files_after`` files. The rewrite range-partitions by the key, so a key's rows stay in one
    task, written as one file unless they pass the maximum file size: with ``distinct`` keys of
    equal size a lookup opens ``ceil(bytes per key / maximum)`` files (unknown: every key
    distinct, one file). Z-order on ``columns`` columns keeps each column's order only in part: a
    lookup on one opens about ``files ** (1 - 1/columns)`` of them."""
    k = max(1, files_after)
    if columns > 1:
        return float(min(k, max(1.0, k ** (1 - 1 / columns))))
    if not distinct:
        return 1.0
    return float(min(k, max(1, math.ceil(data_bytes / distinct / max(1, max_file_bytes)))))


@dataclass(frozen=True)
class ColumnLayout:
    """One column's layout over the table: partitions weighted by their rows."""

    column: str
    field_id: int
    files: int
    rows: int
    files_per_lookup: float
    lookup_share: float  # of a partition's files, the share a lookup opens
    overlap_depth: float
    files_without_bounds: int
    worst: tuple[PartitionLayout, ...] = ()

    def to_json(self, names: Mapping[int, tuple[str, ...]]) -> dict[str, object]:
        return {
            "column": self.column,
            "files_per_lookup": round(self.files_per_lookup, 3),
            "lookup_share": round(self.lookup_share, 4),
            "overlap_depth": round(self.overlap_depth, 3),
            "files_without_bounds": self.files_without_bounds,
            "worst_partitions": [
                {
                    "spec_id": p.spec_id,
                    "partition": {
                        n: json_value(v) for n, v in zip(names.get(p.spec_id, ()), p.partition, strict=False)
                    },
                    "files": p.files,
                    "files_per_lookup": round(p.files_per_lookup, 3),
                }
                for p in self.worst
            ],
        }


def summarize(
    column: str, field_id: int, partitions: Iterable[PartitionLayout], unbounded: int
) -> ColumnLayout:
    parts = list(partitions)
    rows = sum(p.rows for p in parts)
    files = sum(p.files for p in parts)

    def weighted(values: Iterable[tuple[int, float]]) -> float:
        pairs = list(values)
        total = sum(w for w, _ in pairs)
        return sum(w * v for w, v in pairs) / total if total else 0.0

    per_lookup = weighted((p.rows, p.files_per_lookup) for p in parts)
    share = weighted((p.rows, p.files_per_lookup / p.files) for p in parts if p.files)
    depth = weighted((p.rows, p.overlap_depth) for p in parts)
    worst = tuple(sorted(parts, key=lambda p: (-p.files_per_lookup, -p.files))[:WORST_PARTITIONS])
    return ColumnLayout(column, field_id, files, rows, per_lookup, share, depth, unbounded, worst)
