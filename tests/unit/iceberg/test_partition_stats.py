"""The partition statistics file's schema (Java's field ids and optionality per format version), the
unified partition type across specs, the spec's row order, and Parquet/Avro bytes read back."""

from __future__ import annotations

import io
import math
import uuid
from decimal import Decimal

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.parquet import FIELD_ID_KEY
from tablekeeper.iceberg.partition_stats import (
    PartitionStats,
    is_partitioned,
    read_partition_stats_bytes,
    sort_key,
    stats_schema,
    unified_partition_type,
    write_partition_stats,
)
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIMESTAMPTZ,
    UUID,
    DecimalType,
    NestedField,
    Schema,
    StructType,
)
from tablekeeper.iceberg.updates import new_table_metadata

SCHEMA = Schema(
    0, (NestedField(1, "id", LONG, True), NestedField(2, "cat", STRING), NestedField(3, "d", DATE))
)


def _meta(*specs: PartitionSpec, schema: Schema = SCHEMA) -> TableMetadata:
    from dataclasses import replace

    meta = new_table_metadata(schema=schema, location="file:///t", timestamp_ms=1, spec=specs[0])
    return replace(
        meta,
        partition_specs=specs,
        default_spec_id=specs[-1].spec_id,
        last_partition_id=max(s.last_assigned_field_id() for s in specs),
    )


def test_schema_has_javas_ids_order_and_optionality() -> None:
    ptype = StructType((NestedField(1000, "cat", STRING),))
    v2 = stats_schema(ptype, 2)
    assert [(f.id, f.name, f.required) for f in v2.fields] == [
        (1, "partition", True),
        (2, "spec_id", True),
        (3, "data_record_count", True),
        (4, "data_file_count", True),
        (5, "total_data_file_size_in_bytes", True),
        (6, "position_delete_record_count", False),
        (7, "position_delete_file_count", False),
        (8, "equality_delete_record_count", False),
        (9, "equality_delete_file_count", False),
        (10, "total_record_count", False),
        (11, "last_updated_at", False),
        (12, "last_updated_snapshot_id", False),
    ]
    v3 = stats_schema(ptype, 3)
    # v3: the delete counts are required and dv_count (13) comes last, defaulting to 0.
    assert [f.id for f in v3.fields] == [*range(1, 14)]
    assert [f.id for f in v3.fields if f.required] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 13]
    assert v3.fields[-1].initial_default == 0
    assert [f.type for f in v3.fields[1:]] == [
        INT,
        LONG,
        INT,
        LONG,
        LONG,
        INT,
        LONG,
        INT,
        LONG,
        LONG,
        LONG,
        INT,
    ]
    with pytest.raises(UnsupportedFeatureError, match="unpartitioned"):
        stats_schema(StructType(()), 2)


def test_unified_type_is_every_field_by_id_named_by_the_newest_spec() -> None:
    spec0 = PartitionSpec(0, (PartitionField(2, 1000, "cat", "identity"),))
    spec1 = PartitionSpec(
        1, (PartitionField(2, 1000, "category", "identity"), PartitionField(1, 1001, "id_b", "bucket[4]"))
    )
    # Spec 2 drops the bucket (v1 style: a void field keeping its id) and adds a day field.
    spec2 = PartitionSpec(
        2,
        (
            PartitionField(2, 1000, "category", "identity"),
            PartitionField(1, 1001, "id_b_gone", "void"),
            PartitionField(3, 1002, "d_day", "day"),
        ),
    )
    ptype = unified_partition_type(_meta(spec0, spec1, spec2))
    assert [(f.id, f.name, f.type, f.required) for f in ptype.fields] == [
        (1000, "category", STRING, False),
        (1001, "id_b_gone", INT, False),  # named by spec 2, typed by the bucket (a void keeps the source's)
        (1002, "d_day", DATE, False),
    ]
    assert is_partitioned(_meta(spec0))
    assert not is_partitioned(_meta(PartitionSpec(0, ())))
    assert not is_partitioned(_meta(PartitionSpec(0, (PartitionField(2, 1000, "c", "void"),))))
    # A field whose source column is gone is left out, as Java leaves it out.
    narrow = Schema(1, (NestedField(1, "id", LONG, True), NestedField(3, "d", DATE)))
    assert [f.id for f in unified_partition_type(_meta(spec0, spec2, schema=narrow)).fields] == [1001, 1002]
    with pytest.raises(UnsupportedFeatureError, match="unknown transforms"):
        unified_partition_type(_meta(PartitionSpec(0, (PartitionField(2, 1000, "c", "zorder"),))))


def test_rows_sort_nulls_first_then_as_java_compares() -> None:
    ptype = StructType((NestedField(1000, "f", DOUBLE), NestedField(1001, "s", STRING)))
    rows = [
        ((math.nan, "a"), 0),
        ((0.0, "b"), 0),
        ((-0.0, "b"), 0),
        ((None, "z"), 1),
        ((1.5, None), 0),
        ((1.5, "\U0001f600"), 0),
        ((1.5, "\uffff"), 0),
        ((-math.inf, "a"), 1),
        ((None, "z"), 0),
    ]
    ordered = sorted(rows, key=lambda r: sort_key(ptype, r[0], r[1]))
    assert [(repr(v[0]), v[1], s) for v, s in ordered] == [
        ("None", "z", 0),
        ("None", "z", 1),
        ("-inf", "a", 1),
        ("-0.0", "b", 0),
        ("0.0", "b", 0),
        ("1.5", None, 0),
        ("1.5", "\uffff", 0),  # code point order: Java's surrogate-aware comparator agrees
        ("1.5", "\U0001f600", 0),
        ("nan", "a", 0),
    ]


PTYPE = StructType(
    (
        NestedField(1000, "s", STRING),
        NestedField(1001, "d", DATE),
        NestedField(1002, "ts", TIMESTAMPTZ),
        NestedField(1003, "amt", DecimalType(9, 2)),
        NestedField(1004, "u", UUID),
        NestedField(1005, "bin", BINARY),
        NestedField(1006, "flag", BOOLEAN),
        NestedField(1007, "n", LONG),
    )
)


def _row(i: int, **kw: object) -> PartitionStats:
    values = {
        "s": f"v{i}",
        "d": 19_000 + i,
        "ts": 1_700_000_000_000_000 + i,
        "amt": Decimal("12.34") + i,
        "u": uuid.UUID(int=i + 1),
        "bin": bytes([i, 255]),
        "flag": i % 2 == 0,
        "n": -i,
    }
    return PartitionStats(
        partition={k: (None if k in kw.get("nulls", ()) else v) for k, v in values.items()},  # type: ignore[operator]
        spec_id=i,
        data_record_count=10 * i,
        data_file_count=i,
        total_data_file_size_in_bytes=1000 * i,
        position_delete_record_count=i,
        position_delete_file_count=1,
        equality_delete_record_count=0,
        equality_delete_file_count=0,
        last_updated_at=1_700_000_000_000 + i,
        last_updated_snapshot_id=(1 << 62) + i,
        dv_count=int(kw.get("dvs", 0)),  # type: ignore[call-overload]
    )


@pytest.mark.parametrize("version", [2, 3])
def test_parquet_round_trip_with_field_ids(version: int) -> None:
    rows = (_row(0, nulls=("s", "u", "amt")), _row(1, dvs=version - 2), _row(2))
    data = write_partition_stats(rows, PTYPE, version)
    footer = pq.read_metadata(pa.BufferReader(data))
    assert footer.row_group(0).column(0).compression == "ZSTD"
    arrow = footer.schema.to_arrow_schema()
    assert [int(f.metadata[FIELD_ID_KEY]) for f in arrow] == [*range(1, 13 if version == 2 else 14)]
    assert [int(f.metadata[FIELD_ID_KEY]) for f in arrow.field("partition").type] == [*range(1000, 1008)]
    assert not arrow.field("partition").nullable
    assert arrow.field("position_delete_file_count").nullable == (version == 2)
    back = read_partition_stats_bytes(data, PTYPE)
    assert back == rows
    assert [list(r.partition.items()) for r in back] == [list(r.partition.items()) for r in rows]
    # Projected by id onto a type that lost a field and gained one: the new one reads as null.
    other = StructType((NestedField(1007, "n_renamed", LONG), NestedField(1099, "new", INT)))
    assert [dict(r.partition) for r in read_partition_stats_bytes(data, other)] == [
        {"n_renamed": 0, "new": None},
        {"n_renamed": -1, "new": None},
        {"n_renamed": -2, "new": None},
    ]


def test_avro_files_as_java_writes_them_for_avro_tables_are_read() -> None:
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {
                "name": "partition",
                "field-id": 1,
                "type": {
                    "type": "record",
                    "name": "r1",
                    "fields": [
                        {"name": "cat", "field-id": 1000, "type": ["null", "string"], "default": None},
                        {
                            "name": "d",
                            "field-id": 1001,
                            "type": ["null", {"type": "int", "logicalType": "date"}],
                            "default": None,
                        },
                    ],
                },
            },
            {"name": "spec_id", "field-id": 2, "type": "int"},
            {"name": "data_record_count", "field-id": 3, "type": "long"},
            {"name": "data_file_count", "field-id": 4, "type": "int"},
            {"name": "total_data_file_size_in_bytes", "field-id": 5, "type": "long"},
            {
                "name": "position_delete_record_count",
                "field-id": 6,
                "type": ["null", "long"],
                "default": None,
            },
            {"name": "last_updated_at", "field-id": 11, "type": ["null", "long"], "default": None},
        ],
    }
    out = io.BytesIO()
    fastavro.writer(
        out,
        fastavro.parse_schema(schema),
        [
            {
                "partition": {"cat": "a", "d": 19_000},
                "spec_id": 0,
                "data_record_count": 5,
                "data_file_count": 1,
                "total_data_file_size_in_bytes": 99,
                "position_delete_record_count": None,
                "last_updated_at": 7,
            }
        ],
    )
    ptype = StructType((NestedField(1000, "cat", STRING), NestedField(1001, "d", DATE)))
    (row,) = read_partition_stats_bytes(out.getvalue(), ptype)
    assert row.partition == {"cat": "a", "d": 19_000}
    assert (row.spec_id, row.data_record_count, row.data_file_count, row.total_data_file_size_in_bytes) == (
        0,
        5,
        1,
        99,
    )
    assert row.position_delete_record_count is None and row.position_delete_file_count is None
    assert row.last_updated_at == 7 and row.last_updated_snapshot_id is None and row.dv_count == 0


def test_unreadable_bytes_are_named() -> None:
    data = write_partition_stats((_row(1),), PTYPE, 2)
    with pytest.raises(CorruptMetadataError, match=r"stats\.parquet is truncated or corrupt"):
        read_partition_stats_bytes(data[:-20], PTYPE, "stats.parquet")
    with pytest.raises(UnsupportedFeatureError, match="neither Parquet nor Avro"):
        read_partition_stats_bytes(b"ORC....", PTYPE)
    # A file without a required count column is not a partition statistics file.
    bare = io.BytesIO()
    pq.write_table(pa.table({"x": [1]}), bare)
    with pytest.raises(CorruptMetadataError, match="no required column 2"):
        read_partition_stats_bytes(bare.getvalue(), PTYPE)
