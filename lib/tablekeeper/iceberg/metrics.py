"""Which column metrics a data file records, and the ones a Parquet footer cannot give.

Iceberg Java decides per column from the table properties (its ``MetricsConfig``):
``write.metadata.metrics.default`` (``truncate(16)`` unless set), overridden per column by
``write.metadata.metrics.column.<full name>``; a table wider than
``write.metadata.metrics.max-inferred-column-defaults`` (100) top-level columns without a
configured default keeps metrics for the first 100 only; columns of the sort order get
``truncate(16)`` at least. Modes: ``none`` (nothing, not even the column size), ``counts``
(value and null counts, NaN counts for floats), ``truncate(N)`` (and bounds, strings and binaries
cut to N), ``full`` (bounds untruncated). Fields inside lists and maps get no counts or bounds.

Footers hold no NaN counts, and Parquet's float statistics do not say how NaN and signed zeros
were handled, so float and double columns are measured from the rows as they are written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.iceberg.types import (
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
    walk_fields,
)

DEFAULT_MODE_KEY = "write.metadata.metrics.default"
COLUMN_MODE_PREFIX = "write.metadata.metrics.column."
MAX_INFERRED_KEY = "write.metadata.metrics.max-inferred-column-defaults"
MAX_INFERRED_DEFAULT = 100
_TRUNCATE = re.compile(r"^truncate\((\d+)\)$", re.IGNORECASE)


@dataclass(frozen=True)
class MetricsMode:
    counts: bool
    # 0: no bounds; otherwise strings and binaries are cut to this many characters or bytes.
    bounds: int

    @property
    def none(self) -> bool:
        return not self.counts


NONE = MetricsMode(False, 0)
COUNTS = MetricsMode(True, 0)
FULL = MetricsMode(True, 1 << 62)
TRUNCATE_16 = MetricsMode(True, 16)


def parse_mode(text: str) -> MetricsMode | None:
    """A mode as Java parses it, or None when Java would ignore it (it logs and falls back)."""
    value = text.strip().lower()
    if value == "none":
        return NONE
    if value == "counts":
        return COUNTS
    if value == "full":
        return FULL
    match = _TRUNCATE.match(value)
    if match and int(match.group(1)) > 0:
        return MetricsMode(True, int(match.group(1)))
    return None


@dataclass(frozen=True)
class MetricsConfig:
    default: MetricsMode = TRUNCATE_16
    columns: Mapping[str, MetricsMode] = field(default_factory=dict)

    def mode(self, column: str | None) -> MetricsMode:
        return self.columns.get(column, self.default) if column is not None else self.default

    @classmethod
    def for_table(
        cls, properties: Mapping[str, str], schema: Schema, sorted_columns: Sequence[str] = ()
    ) -> MetricsConfig:
        columns: dict[str, MetricsMode] = {}
        configured = properties.get(DEFAULT_MODE_KEY)
        try:
            limit = int(properties.get(MAX_INFERRED_KEY, MAX_INFERRED_DEFAULT))
        except ValueError:
            limit = MAX_INFERRED_DEFAULT
        if limit < 0:
            limit = MAX_INFERRED_DEFAULT
        if configured is not None:
            default = parse_mode(configured) or TRUNCATE_16
        elif len(schema.fields) <= limit:
            default = TRUNCATE_16
        else:
            for f in schema.fields[:limit]:
                for name in _names(f):
                    columns[name] = TRUNCATE_16
            default = NONE
        sorted_mode = TRUNCATE_16 if default.bounds == 0 else default
        for name in sorted_columns:
            columns[name] = sorted_mode
        for key, value in properties.items():
            if key.startswith(COLUMN_MODE_PREFIX):
                columns[key[len(COLUMN_MODE_PREFIX) :]] = parse_mode(value) or default
        return cls(default, columns)


def _names(f: NestedField) -> list[str]:
    schema = Schema(0, (f,))
    return [n for fid in [f.id, *(c.id for c in walk_fields(f.type))] if (n := schema.column_name(fid))]


@dataclass
class FloatStats:
    """NaN count and non-NaN bounds of one float or double column, with -0.0 below +0.0."""

    nan_count: int = 0
    lower: float | None = None
    upper: float | None = None


def _float_leaves(
    fields: Sequence[NestedField], prefix: tuple[int, ...] = ()
) -> list[tuple[tuple[int, ...], int]]:
    """(child index path, field id) of float and double fields outside lists and maps."""
    out: list[tuple[tuple[int, ...], int]] = []
    for i, f in enumerate(fields):
        if isinstance(f.type, PrimitiveType) and f.type.name in ("float", "double"):
            out.append(((*prefix, i), f.id))
        elif isinstance(f.type, StructType):
            out.extend(_float_leaves(f.type.fields, (*prefix, i)))
    return out


class FloatCollector:
    """Float metrics of the rows written to one file, batch by batch."""

    def __init__(self, fields: Sequence[NestedField]) -> None:
        self.leaves = _float_leaves(fields)
        self.stats: dict[int, FloatStats] = {fid: FloatStats() for _, fid in self.leaves}

    def update(self, batch: pa.RecordBatch) -> None:
        for path, fid in self.leaves:
            column: pa.Array = batch.column(path[0])
            for i in path[1:]:
                assert isinstance(column, pa.StructArray)
                column = column.flatten()[i]  # carries the parent's nulls
            self._add(self.stats[fid], column)

    @staticmethod
    def _add(stats: FloatStats, column: pa.Array) -> None:
        if column.null_count == len(column):
            return
        nan = pc.is_nan(column)
        stats.nan_count += int(pc.sum(nan).as_py() or 0)
        values = column.filter(pc.invert(pc.fill_null(nan, True)))
        if len(values) == 0:
            return
        found = pc.min_max(values).as_py()
        low, high = float(found["min"]), float(found["max"])
        bits = values.view(pa.int64() if values.type == pa.float64() else pa.int32())
        sign = -(1 << 63) if values.type == pa.float64() else -(1 << 31)
        if low == 0.0:
            low = -0.0 if pc.any(pc.equal(bits, sign)).as_py() else 0.0
        if high == 0.0:
            high = 0.0 if pc.any(pc.equal(bits, 0)).as_py() else -0.0
        if stats.lower is None or _below(low, stats.lower):
            stats.lower = low
        if stats.upper is None or _below(stats.upper, high):
            stats.upper = high


def _below(a: float, b: float) -> bool:
    """Java's Float.compare order for non-NaN values: -0.0 sorts below +0.0."""
    if a == b == 0.0:
        return str(a).startswith("-") and not str(b).startswith("-")
    return a < b
