"""Metrics modes as Iceberg Java's MetricsConfig decides them, and the metrics a footer gives
under them (nothing for fields in lists and maps, floats measured while writing)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.iceberg.arrow_project import write_schema
from tablekeeper.iceberg.metrics import (
    COUNTS,
    FULL,
    NONE,
    TRUNCATE_16,
    FloatCollector,
    MetricsConfig,
    MetricsMode,
    parse_mode,
)
from tablekeeper.iceberg.parquet import data_file_from_footer
from tablekeeper.iceberg.types import ListType, NestedField, PrimitiveType, Schema, StructType

LONG, STRING, DOUBLE = PrimitiveType("long"), PrimitiveType("string"), PrimitiveType("double")


def test_modes_parse_as_java_parses_them() -> None:
    assert parse_mode("None") is NONE and parse_mode("counts") is COUNTS and parse_mode("FULL") is FULL
    assert parse_mode("truncate(4)") == MetricsMode(True, 4)
    assert parse_mode("truncate(0)") is None and parse_mode("sometimes") is None


def _schema(columns: int) -> Schema:
    fields = [NestedField(i + 1, f"c{i}", LONG) for i in range(columns)]
    fields.append(NestedField(1000, "s", StructType((NestedField(1001, "inner", STRING),))))
    return Schema(0, tuple(fields))


def test_defaults_overrides_wide_tables_and_sorted_columns() -> None:
    narrow = MetricsConfig.for_table({}, _schema(3))
    assert narrow.mode("c0") == TRUNCATE_16 and narrow.mode("s.inner") == TRUNCATE_16
    props = {
        "write.metadata.metrics.default": "counts",
        "write.metadata.metrics.column.s.inner": "full",
        "write.metadata.metrics.column.c1": "bogus",  # ignored: falls back to the default
    }
    config = MetricsConfig.for_table(props, _schema(3), sorted_columns=("c2",))
    assert config.mode("c0") == COUNTS and config.mode("s.inner") == FULL
    assert config.mode("c1") == COUNTS and config.mode("c2") == TRUNCATE_16
    # Wider than the inferred limit and no default configured: the first columns only.
    wide = MetricsConfig.for_table({"write.metadata.metrics.max-inferred-column-defaults": "2"}, _schema(3))
    assert wide.mode("c0") == TRUNCATE_16 and wide.mode("c1") == TRUNCATE_16
    assert wide.mode("c2") == NONE and wide.mode("s.inner") == NONE


def _file(schema: Schema, table: pa.Table) -> tuple[pq.FileMetaData, FloatCollector]:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, store_schema=False)
    collector = FloatCollector(schema.fields)
    for batch in table.to_batches():
        collector.update(batch)
    return pq.read_metadata(pa.BufferReader(buffer.getvalue())), collector


def test_footer_metrics_follow_the_modes() -> None:
    schema = Schema(
        0,
        (
            NestedField(1, "id", LONG),
            NestedField(2, "name", STRING),
            NestedField(3, "tags", ListType(4, STRING)),
            NestedField(5, "x", DOUBLE),
            NestedField(6, "hidden", LONG),
        ),
    )
    arrow = write_schema(schema.fields)
    table = pa.table(
        {
            "id": [1, 2, None],
            "name": ["a" * 20, "b", None],
            "tags": [["x"], None, []],
            "x": [float("nan"), -0.0, 0.0],
            "hidden": [1, 2, 3],
        },
        schema=arrow,
    )
    footer, floats = _file(schema, table)
    config = MetricsConfig.for_table(
        {"write.metadata.metrics.column.name": "truncate(4)", "write.metadata.metrics.column.hidden": "none"},
        schema,
    )
    f = data_file_from_footer(footer, schema, path="f", file_size=1, metrics=config, floats=floats.stats)
    assert f.value_counts == {1: 3, 2: 3, 5: 3} and f.null_value_counts == {1: 1, 2: 1, 5: 0}
    assert f.nan_value_counts == {5: 1}
    assert 4 in (f.column_sizes or {}) and 6 not in (f.column_sizes or {})  # none: not even a size
    assert (f.lower_bounds or {})[2] == b"aaaa" and (f.upper_bounds or {})[2] == b"b"
    assert (f.lower_bounds or {})[5] == b"\x00" * 7 + b"\x80"  # -0.0, NaN left out
    assert (f.upper_bounds or {})[5] == b"\x00" * 8  # +0.0
    assert 4 not in (f.lower_bounds or {}) and 6 not in (f.lower_bounds or {})
