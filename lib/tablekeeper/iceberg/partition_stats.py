"""Iceberg partition statistics files (spec: "Partition Statistics"): their schema, rows, and the
Parquet bytes that hold them, read and written.

One row per partition tuple of one spec: counts of data and delete files and records, and the
newest snapshot that added or removed a file there. The ``partition`` struct is the table's
unified partition type (every partition field of every spec whose source column is still in the
schema, by field id; Iceberg Java's ``Partitioning.partitionType``), so a tuple of an older spec
has nulls for the fields it lacks; two specs' tuples that read the same there stay two rows (each
row says its ``spec_id``), as Java keeps them.

Field ids, order and optionality are Java's ``PartitionStatsHandler.schema`` (1.11): v3 makes the
delete counts required and adds ``dv_count`` (13, last). Files are written as Parquet whatever the
table's default format (the spec allows any data file format; Java's reader takes the format from
the name); Java's Avro files are read too.
"""

from __future__ import annotations

import io
import math
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.conversions import native_to_value
from tablekeeper.iceberg.manifest import id_names, open_avro, record_type
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.parquet import FIELD_ID_KEY, WRITER_OPTIONS, to_arrow_schema, to_arrow_type
from tablekeeper.iceberg.transforms import UnknownTransform, parse_transform
from tablekeeper.iceberg.types import (
    INT,
    LONG,
    IcebergType,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
)

PARTITION_FIELD_ID = 1
PARTITION_FIELD_NAME = "partition"
# (field id, name, type, required in v1/v2): v3 requires every count but the last three.
_COLUMNS: tuple[tuple[int, str, PrimitiveType, bool], ...] = (
    (2, "spec_id", INT, True),
    (3, "data_record_count", LONG, True),
    (4, "data_file_count", INT, True),
    (5, "total_data_file_size_in_bytes", LONG, True),
    (6, "position_delete_record_count", LONG, False),
    (7, "position_delete_file_count", INT, False),
    (8, "equality_delete_record_count", LONG, False),
    (9, "equality_delete_file_count", INT, False),
    (10, "total_record_count", LONG, False),
    (11, "last_updated_at", LONG, False),
    (12, "last_updated_snapshot_id", LONG, False),
)
_V3_REQUIRED = frozenset({6, 7, 8, 9})
DV_COUNT_ID = 13
_NAMES = {fid: name for fid, name, _, _ in _COLUMNS} | {DV_COUNT_ID: "dv_count"}
PARQUET_MAGIC = b"PAR1"
AVRO_MAGIC = b"Obj\x01"


@dataclass(frozen=True)
class PartitionStats:
    """One row of a partition statistics file. ``partition`` maps the unified partition type's
    field names, in its order, to values in tablekeeper's convention (dates as days, timestamps as
    microseconds, decimals as Decimal); a field the row's spec lacks is None."""

    partition: Mapping[str, Any] = field(hash=False)
    spec_id: int
    data_record_count: int
    data_file_count: int
    total_data_file_size_in_bytes: int
    # Optional in v1/v2 files (Java fills them with counts, zero included); required in v3.
    position_delete_record_count: int | None = 0  # position delete files and DVs together
    position_delete_file_count: int | None = 0  # without DVs
    equality_delete_record_count: int | None = 0
    equality_delete_file_count: int | None = 0
    # Rows left after deletes: needs the data read, so Java leaves it null, and so do we.
    total_record_count: int | None = None
    last_updated_at: int | None = None  # ms: the newest snapshot adding or removing a file here
    last_updated_snapshot_id: int | None = None
    dv_count: int = 0  # v3; 0 (the spec's initial default) in files without the column

    @property
    def delete_file_count(self) -> int:
        return (self.position_delete_file_count or 0) + (self.equality_delete_file_count or 0) + self.dv_count


# -----------------------------------------------------------------------------------------------
# The unified partition type and the file's schema


def is_partitioned(meta: TableMetadata) -> bool:
    """Java's ``Partitioning.isPartitioned``: any spec, current or older, with a non-void field."""
    return any(not spec.is_unpartitioned for spec in meta.partition_specs)


def unified_partition_type(meta: TableMetadata) -> StructType:
    """Java's ``Partitioning.partitionType(table)``: every partition field of every spec whose
    source is in the current schema, by ascending field id, named as the newest spec names it
    and typed by the current schema (a void field takes the type of a non-void one of its id)."""
    schema = meta.schema()
    chosen: dict[int, tuple[NestedField, str, str]] = {}  # id: (typed field, transform, newest name)
    for spec in sorted(meta.partition_specs, key=lambda s: s.spec_id, reverse=True):
        typed = {f.id: f for f in spec.partition_type(schema).fields}
        for pf in spec.fields:
            transform = parse_transform(pf.transform)
            if isinstance(transform, UnknownTransform):
                raise UnsupportedFeatureError(
                    f"partition spec {spec.spec_id} has the transform {pf.transform!r}, which "
                    "tablekeeper does not know: no partition statistics (Java refuses too: "
                    "'Cannot build table partition type, unknown transforms')"
                )
            if schema.find_field(pf.source_id) is None:
                continue  # the source column was dropped: Java leaves the field out
            seen = chosen.get(pf.field_id)
            if seen is None:
                chosen[pf.field_id] = (typed[pf.field_id], pf.transform, typed[pf.field_id].name)
            elif pf.transform != seen[1] and "void" not in (pf.transform, seen[1]):
                raise UnsupportedFeatureError(
                    f"partition field {pf.field_id} has the transforms {pf.transform!r} and "
                    f"{seen[1]!r} in different specs: no unified partition type (Java: "
                    "'Conflicting partition fields')"
                )
            elif seen[1] == "void" and pf.transform != "void":
                chosen[pf.field_id] = (typed[pf.field_id], pf.transform, seen[2])
    fields = tuple(
        NestedField(fid, name, typed.type, required=False) for fid, (typed, _, name) in sorted(chosen.items())
    )
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise UnsupportedFeatureError(
            f"the table's partition fields reuse names ({sorted(n for n in names if names.count(n) > 1)}) "
            "across specs: no unified partition type (Java's schema refuses duplicate names too)"
        )
    return StructType(fields)


def stats_schema(partition_type: StructType, format_version: int) -> Schema:
    """Java's ``PartitionStatistics.schema(unifiedPartitionType, formatVersion)``."""
    if not partition_type.fields:
        raise UnsupportedFeatureError("the table is unpartitioned: partition statistics need a partition")
    v3 = format_version >= 3
    columns = [NestedField(PARTITION_FIELD_ID, PARTITION_FIELD_NAME, partition_type, required=True)]
    columns += [
        NestedField(fid, name, t, required=required or (v3 and fid in _V3_REQUIRED))
        for fid, name, t, required in _COLUMNS
    ]
    if v3:
        columns.append(
            NestedField(DV_COUNT_ID, "dv_count", INT, required=True, initial_default=0, write_default=0)
        )
    return Schema(0, tuple(columns))


# -----------------------------------------------------------------------------------------------
# Row order: the spec's "ascending, nulls first" by partition, with Java's comparators


def _order(t: IcebergType, value: Any) -> Any:
    if isinstance(value, float):
        # Double.compare: -0.0 before 0.0, NaN after everything.
        return (math.isnan(value), 0.0 if math.isnan(value) else value, math.copysign(1.0, value) > 0)
    if isinstance(value, uuid.UUID):
        # java.util.UUID.compareTo: the two halves as signed longs.
        return struct.unpack(">qq", value.bytes)
    return value


def sort_key(partition_type: StructType, values: Sequence[Any], spec_id: int) -> tuple[Any, ...]:
    # Rows of one partition tuple from two specs tie in Java (their order is its hash map's);
    # the spec id makes ours fixed.
    key = tuple(
        (0,) if v is None else (1, _order(f.type, v))
        for f, v in zip(partition_type.fields, values, strict=True)
    )
    return (*key, spec_id)


# -----------------------------------------------------------------------------------------------
# Writing


def _arrow_value(t: IcebergType, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(t, PrimitiveType) and t.name == "uuid":
        return value.bytes if isinstance(value, uuid.UUID) else bytes(value)
    return value


def write_partition_stats(
    rows: Sequence[PartitionStats], partition_type: StructType, format_version: int
) -> bytes:
    """The Parquet bytes of a partition statistics file holding ``rows`` in the order given
    (``sort_key`` order is the spec's), zstd as Java's writer, field ids on every column."""
    schema = stats_schema(partition_type, format_version)
    arrow = to_arrow_schema(schema)
    names = [f.name for f in partition_type.fields]
    part_type = to_arrow_type(partition_type)
    partitions = pa.array(
        [
            {
                n: _arrow_value(f.type, r.partition.get(n))
                for n, f in zip(names, partition_type.fields, strict=True)
            }
            for r in rows
        ],
        type=part_type,
    )
    columns: list[pa.Array] = [partitions]
    for f in schema.fields[1:]:
        attr = f.name
        values = [getattr(r, attr) for r in rows]
        columns.append(pa.array(values, type=to_arrow_type(f.type)))
    table = pa.Table.from_arrays(columns, schema=arrow)
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd", **WRITER_OPTIONS)
    return out.getvalue()


# -----------------------------------------------------------------------------------------------
# Reading


def _field_id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(FIELD_ID_KEY)
    return None if raw is None else int(raw)


def _plain_column(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    # Temporal values as the integers tablekeeper keeps them in (no datetime round trip).
    t = array.type
    if pa.types.is_date32(t):
        array = array.cast(pa.int32())
    elif pa.types.is_timestamp(t) or pa.types.is_time64(t):
        array = array.cast(pa.int64())
    elif pa.types.is_time32(t):
        array = array.cast(pa.int32())
    values: list[Any] = array.to_pylist()
    return values


def _typed(t: IcebergType, value: Any) -> Any:
    if value is None:
        return None
    out = native_to_value(t, value)
    if isinstance(t, PrimitiveType) and t.name == "uuid" and isinstance(out, bytes):
        return uuid.UUID(bytes=out)
    return out


def _rows(
    partition_type: StructType,
    partition_values: Mapping[int, list[Any]],
    columns: Mapping[int, list[Any]],
    count: int,
) -> tuple[PartitionStats, ...]:
    for fid in (2, 3, 4, 5):
        if fid not in columns:
            raise CorruptMetadataError(f"the file has no required column {fid} ({_NAMES[fid]})")
    out = []
    none = [None] * count
    for i in range(count):
        partition = {
            f.name: _typed(f.type, partition_values.get(f.id, none)[i]) for f in partition_type.fields
        }

        def col(fid: int, i: int = i) -> Any:
            return columns.get(fid, none)[i]

        out.append(
            PartitionStats(
                partition=partition,
                spec_id=int(col(2)),
                data_record_count=int(col(3)),
                data_file_count=int(col(4)),
                total_data_file_size_in_bytes=int(col(5)),
                position_delete_record_count=col(6),
                position_delete_file_count=col(7),
                equality_delete_record_count=col(8),
                equality_delete_file_count=col(9),
                total_record_count=col(10),
                last_updated_at=col(11),
                last_updated_snapshot_id=col(12),
                dv_count=int(col(DV_COUNT_ID) or 0),
            )
        )
    return tuple(out)


def _read_parquet(data: bytes, partition_type: StructType) -> tuple[PartitionStats, ...]:
    table = pq.read_table(pa.BufferReader(data))
    columns: dict[int, list[Any]] = {}
    partition_values: dict[int, list[Any]] = {}
    for i, f in enumerate(table.schema):
        fid = _field_id(f)
        if fid == PARTITION_FIELD_ID and pa.types.is_struct(f.type):
            struct_column = table.column(i).combine_chunks()
            for j in range(f.type.num_fields):
                child = _field_id(f.type.field(j))
                if child is not None:
                    partition_values[child] = _plain_column(struct_column.field(j))
        elif fid is not None:
            columns[fid] = _plain_column(table.column(i))
    return _rows(partition_type, partition_values, columns, table.num_rows)


def _read_avro(data: bytes, partition_type: StructType, source: str) -> tuple[PartitionStats, ...]:
    reader = open_avro(data, f"partition statistics file {source}")
    top = id_names(reader.writer_schema)
    part_name = top.get(PARTITION_FIELD_ID)
    part_names: dict[int, str] = {}
    if part_name is not None:
        part_schema = next(f["type"] for f in reader.writer_schema["fields"] if f["name"] == part_name)
        part_names = id_names(record_type(part_schema))
    records = list(reader)
    columns = {fid: [r.get(name) for r in records] for fid, name in top.items() if fid != PARTITION_FIELD_ID}
    partition_values = {
        fid: [(r.get(part_name) or {}).get(name) for r in records] for fid, name in part_names.items()
    }
    return _rows(partition_type, partition_values, columns, len(records))


def read_partition_stats_bytes(
    data: bytes, partition_type: StructType, source: str = "partition statistics file"
) -> tuple[PartitionStats, ...]:
    """The rows of a partition statistics file (Parquet or Avro, told by its bytes), their
    partition projected onto ``partition_type`` by field id (fields the file lacks are None),
    as Java's reader projects the file onto the table's current unified type."""
    try:
        if data[:4] == PARQUET_MAGIC:
            return _read_parquet(data, partition_type)
        if data[:4] == AVRO_MAGIC:
            return _read_avro(data, partition_type, source)
    except CorruptMetadataError as err:
        raise CorruptMetadataError(f"{source}: {err.message}") from err
    except (pa.ArrowException, ValueError, TypeError, KeyError, EOFError, StopIteration) as err:
        raise CorruptMetadataError(
            f"{source} is truncated or corrupt ({err.__class__.__name__}: {err})"
        ) from err
    raise UnsupportedFeatureError(f"{source} is neither Parquet nor Avro: tablekeeper reads only those")
