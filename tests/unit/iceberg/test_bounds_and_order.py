"""The rules that keep converted and compacted tables exact: how Iceberg Java orders and compares
values (signed zeros, NaN, UUIDs), which widened Delta columns convert, name-mapping clashes, and
null counts from footers with partial statistics."""

from __future__ import annotations

import io
import json
import math
import struct
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.delta.schema import column_mapping, parse_schema_string
from tablekeeper.delta.to_iceberg import map_schema
from tablekeeper.errors import ConfigError
from tablekeeper.iceberg import types as it
from tablekeeper.iceberg.bounds import PartitionBounds, widen_zero
from tablekeeper.iceberg.parquet import data_file_from_footer
from tablekeeper.iceberg.partitioning import partition_key


def test_partition_keys_compare_floats_by_bits() -> None:
    nan_a, nan_b = float("nan"), struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    assert (nan_a,) != (nan_b,)  # Python: a NaN partition never finds itself
    assert partition_key((nan_a,)) == partition_key((nan_b,))
    assert (-0.0,) == (0.0,)  # Python: the two zeros would share a partition
    assert partition_key((-0.0,)) != partition_key((0.0,))
    assert partition_key((1, "a", None)) == (1, "a", None)
    assert len({partition_key((x, "a")) for x in (math.nan, math.nan, -0.0, 0.0, 0.0)}) == 3


def test_partition_summaries_follow_java_order() -> None:
    double = it.StructType((it.NestedField(1000, "p", it.DOUBLE),))
    bounds = PartitionBounds(double)
    for v in (0.0, -0.0, 2.0, math.nan):
        bounds.update((v,))
    ((nulls, nans, low, high),) = bounds.build()
    assert (nulls, nans) == (False, True)
    assert low == struct.pack("<d", -0.0) and high == struct.pack("<d", 2.0)
    # UUIDs: Java compares the high then the low 64 bits as signed longs.
    uuids = PartitionBounds(it.StructType((it.NestedField(1000, "u", it.UUID),)))
    small, big = (
        uuid.UUID("00000000-0000-0000-0000-000000000001"),
        uuid.UUID("f0000000-0000-0000-0000-000000000000"),
    )
    uuids.update((small,))
    uuids.update((big,))
    ((_, _, low, high),) = uuids.build()
    assert low == big.bytes and high == small.bytes  # signed: 0xf0... is negative


def test_zero_bounds_widen_to_hold_both_zeros() -> None:
    plus, minus = struct.pack("<d", 0.0), struct.pack("<d", -0.0)
    assert widen_zero(it.DOUBLE, plus, lower=True) == minus
    assert widen_zero(it.DOUBLE, minus, lower=False) == plus
    assert widen_zero(it.DOUBLE, struct.pack("<d", 1.0), lower=True) == struct.pack("<d", 1.0)
    assert widen_zero(it.FLOAT, struct.pack("<f", 0.0), lower=True) == struct.pack("<f", -0.0)
    assert widen_zero(it.LONG, bytes(8), lower=True) == bytes(8)


def _schema(fields: list[dict[str, Any]]) -> Any:
    return parse_schema_string(json.dumps({"type": "struct", "fields": fields}))


def _widened(from_type: str, to_type: str) -> Any:
    change = {"delta.typeChanges": [{"fromType": from_type, "toType": to_type}]}
    return _schema([{"name": "c", "type": to_type, "nullable": True, "metadata": change}])


@pytest.mark.parametrize(
    ("old", "new", "version"),
    [
        ("integer", "long", 2),
        ("short", "integer", 2),
        ("byte", "long", 2),
        ("float", "double", 2),
        ("decimal(5,2)", "decimal(10,2)", 2),
        ("date", "timestamp_ntz", 3),
    ],
)
def test_widenings_iceberg_promotes_convert(old: str, new: str, version: int) -> None:
    mapped = map_schema(_widened(old, new), column_mapping({}, False), {}, format_version=version)
    assert mapped.schema.fields[0].name == "c"


@pytest.mark.parametrize(
    ("old", "new", "version"),
    [
        ("integer", "double", 2),
        ("long", "decimal(20,0)", 2),
        ("decimal(5,2)", "decimal(10,3)", 2),
        ("date", "timestamp_ntz", 2),
    ],
)
def test_other_widenings_are_refused_with_the_fix(old: str, new: str, version: int) -> None:
    fix = r"'c' was widened from .*--rewrite-unreadable-files.* DROP FEATURE typeWidening"
    with pytest.raises(ConfigError, match=fix):
        map_schema(_widened(old, new), column_mapping({}, False), {}, format_version=version)
    mapped = map_schema(
        _widened(old, new), column_mapping({}, False), {}, format_version=version, rewrite_unreadable=True
    )
    [unreadable] = mapped.unreadable
    assert unreadable.path == ("c",) and unreadable.widened_from is not None


def test_the_name_mapping_holds_physical_names_only() -> None:
    """Files hold physical names (Delta reads by them): a logical name, here another column's
    physical name, would lead a file's column to the wrong field."""
    config = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"}

    def field(name: str, physical: str, cid: int) -> dict[str, Any]:
        meta = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": physical}
        return {"name": name, "type": "string", "nullable": True, "metadata": meta}

    # Mapping enabled in place kept "a" as a physical name; then a -> a_old and c -> a.
    struct_ = _schema([field("a_old", "a", 1), field("a", "col-c", 3)])
    mapped = map_schema(struct_, column_mapping(config, True), config)
    names = {f.field_id: f.names for f in mapped.name_mapping.fields}
    assert names == {1: ("a",), 3: ("col-c",)}


def test_null_counts_only_when_every_row_group_has_them(tmp_path: Any) -> None:
    schema = it.Schema(0, (it.NestedField(1, "x", it.LONG),))
    arrow = pa.schema([pa.field("x", pa.int64(), metadata={b"PARQUET:field_id": b"1"})])
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, arrow, write_statistics=True) as writer:
        writer.write_table(pa.table({"x": [1, None, 3]}, schema=arrow))
    full = pq.read_metadata(pa.BufferReader(buffer.getvalue()))
    assert data_file_from_footer(full, schema, path="f", file_size=1).null_value_counts == {1: 1}

    class _NoStats:
        """A row group written without statistics for the column."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return None if name == "statistics" else getattr(self._inner, name)

    class _Group:
        def __init__(self, inner: Any, strip: bool) -> None:
            self._inner, self._strip = inner, strip

        def column(self, i: int) -> Any:
            col = self._inner.column(i)
            return _NoStats(col) if self._strip else col

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    class _Footer:
        def __init__(self, inner: Any) -> None:
            self._inner = inner
            self.num_row_groups = 2

        def row_group(self, i: int) -> Any:
            return _Group(self._inner.row_group(0), strip=i == 1)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    partial = data_file_from_footer(_Footer(full), schema, path="f", file_size=1)  # type: ignore[arg-type]
    assert 1 not in (partial.null_value_counts or {})  # 1 null of 2 groups would undercount
