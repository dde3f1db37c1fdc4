"""Parquet <-> Iceberg: Arrow schemas carrying field ids, and data-file metrics from footers.

Works on pyarrow objects (a schema, a footer already read), never on paths, so the engine layer
decides where bytes come from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.conversions import native_to_value, to_bytes
from tablekeeper.iceberg.metrics import FloatStats, MetricsConfig, MetricsMode
from tablekeeper.iceberg.types import (
    UNKNOWN,
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    PrimitiveType,
    Schema,
    StructType,
)

FIELD_ID_KEY = b"PARQUET:field_id"
# Options every pyarrow writer of data files passes. The spec's Parquet appendix stores decimals
# of precision up to 9 as int32 and up to 18 as int64 (fixed_len_byte_array above), as Iceberg
# Java and Spark write them; pyarrow writes fixed_len_byte_array at every precision unless told.
WRITER_OPTIONS: Mapping[str, Any] = {"store_decimal_as_integer": True}

ARROW_PRIMITIVES: Mapping[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestamp_ns": pa.timestamp("ns"),
    "timestamptz_ns": pa.timestamp("ns", tz="UTC"),
    "string": pa.large_string(),
    "uuid": pa.binary(16),
    "binary": pa.large_binary(),
    "unknown": pa.null(),
}


def _field(fid: int, name: str, t: IcebergType, required: bool) -> pa.Field:
    return pa.field(name, to_arrow_type(t), nullable=not required, metadata={FIELD_ID_KEY: str(fid).encode()})


def to_arrow_type(t: IcebergType) -> pa.DataType:
    if isinstance(t, PrimitiveType):
        try:
            return ARROW_PRIMITIVES[t.name]
        except KeyError:
            raise ValueError(f"no Arrow type for Iceberg {t}") from None
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, FixedType):
        return pa.binary(t.length)
    if isinstance(t, StructType):
        return pa.struct([_field(f.id, f.name, f.type, f.required) for f in t.fields])
    if isinstance(t, ListType):
        return pa.large_list(_field(t.element_id, "element", t.element, t.element_required))
    assert isinstance(t, MapType)
    return pa.map_(
        _field(t.key_id, "key", t.key, True), _field(t.value_id, "value", t.value, t.value_required)
    )


def to_arrow_schema(schema: Schema) -> pa.Schema:
    # Columns of type unknown are always null and are not written to data files (v3 spec).
    return pa.schema([_field(f.id, f.name, f.type, f.required) for f in schema.fields if f.type != UNKNOWN])


def _truncate_upper(t: IcebergType, value: Any, width: int) -> Any | None:
    if isinstance(t, PrimitiveType) and t.name == "string" and isinstance(value, str) and len(value) > width:
        chars = list(value[:width])
        for i in range(len(chars) - 1, -1, -1):
            code = ord(chars[i]) + 1
            if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
                return "".join(chars[:i]) + chr(code)
        return None  # no shorter string is an upper bound
    if (
        isinstance(t, PrimitiveType)
        and t.name == "binary"
        and isinstance(value, bytes)
        and len(value) > width
    ):
        prefix = bytearray(value[:width])
        for i in range(len(prefix) - 1, -1, -1):
            if prefix[i] < 0xFF:
                prefix[i] += 1
                return bytes(prefix[: i + 1])
        return None
    return value


def _truncate_lower(t: IcebergType, value: Any, width: int) -> Any:
    # Only strings and binaries are cut, as Java does (fixed keeps its length).
    if isinstance(t, PrimitiveType) and t.name in ("string", "binary") and len(value) > width:
        return value[:width]
    return value


def _leaf_ids(footer: pq.FileMetaData) -> tuple[dict[str, int], set[int]]:
    """Field ids of the footer's leaf columns by path, and those inside a list or map."""
    ids_by_path: dict[str, int] = {}
    repeated: set[int] = set()

    def walk(field: pa.Field, prefix: str, nested: bool) -> None:
        meta = field.metadata or {}
        name = f"{prefix}{field.name}"
        t = field.type
        if FIELD_ID_KEY in meta and not (
            pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t)
        ):
            fid = int(meta[FIELD_ID_KEY])
            ids_by_path[name] = fid
            if nested:
                repeated.add(fid)
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i), name + ".", nested)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            walk(t.value_field, name + ".list.", True)
        elif pa.types.is_map(t):
            walk(t.key_field, name + ".key_value.", True)
            walk(t.item_field, name + ".key_value.", True)

    for f in footer.schema.to_arrow_schema():
        walk(f, "", False)
    return ids_by_path, repeated


def _stat_value(t: IcebergType, st: Any, which: str) -> Any:
    # Nanosecond timestamps lose digits as Python datetimes: take the raw int64.
    if isinstance(t, PrimitiveType) and t.name.endswith("_ns"):
        return getattr(st, f"{which}_raw")
    return native_to_value(t, getattr(st, which))


def data_file_from_footer(
    footer: pq.FileMetaData,
    schema: Schema,
    *,
    path: str,
    file_size: int,
    spec_id: int = 0,
    partition: tuple[Any, ...] = (),
    metrics: MetricsConfig | None = None,
    floats: Mapping[int, FloatStats] | None = None,
) -> DataFile:
    """A DataFile with Iceberg metrics computed from a Parquet footer (columns matched by field
    id), under the table's metrics modes (``metrics``) as Iceberg Java applies them. ``floats``
    gives float and double columns measured while writing; without it they get no bounds."""
    config = metrics or MetricsConfig()
    ids_by_path, repeated = _leaf_ids(footer)
    modes: dict[int, MetricsMode] = {}
    sizes: dict[int, int] = {}
    values: dict[int, int] = {}
    nulls: dict[int, int] = {}
    lows: dict[int, Any] = {}
    highs: dict[int, Any] = {}
    complete: dict[int, bool] = {}  # statistics in every row group
    unbounded: set[int] = set()
    for rg in range(footer.num_row_groups):
        group = footer.row_group(rg)
        for c in range(group.num_columns):
            col = group.column(c)
            fid = ids_by_path.get(col.path_in_schema)
            if fid is None:
                continue
            if fid not in modes:
                modes[fid] = config.mode(schema.column_name(fid))
            if modes[fid].none:
                continue
            sizes[fid] = sizes.get(fid, 0) + col.total_compressed_size
            st = col.statistics
            if st is None or not st.has_null_count:
                complete[fid] = False
                continue
            values[fid] = values.get(fid, 0) + col.num_values
            nulls[fid] = nulls.get(fid, 0) + st.null_count
            t = schema.find_type(fid)
            if st.has_min_max and t is not None:
                lo, hi = _stat_value(t, st, "min"), _stat_value(t, st, "max")
                if fid not in lows or lo < lows[fid]:
                    lows[fid] = lo
                if fid not in highs or hi > highs[fid]:
                    highs[fid] = hi
            elif col.num_values > st.null_count:
                unbounded.add(fid)  # values without a min and max: no bound holds them all
    # Java keeps no counts for a column missing statistics in any row group (a partial null
    # count would let an IS NULL filter skip the file), and none for fields in lists and maps.
    counted = {fid for fid in values if complete.get(fid, True) and fid not in repeated}
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    nans: dict[int, int] = {}
    for fid in counted:
        t = schema.find_type(fid)
        if t is None or not isinstance(t, (PrimitiveType, DecimalType, FixedType)):
            continue
        width = modes[fid].bounds
        if isinstance(t, PrimitiveType) and t.name in ("float", "double"):
            measured = (floats or {}).get(fid)
            if measured is None:
                continue  # Parquet float statistics are unreliable about NaN: no bounds
            nans[fid] = measured.nan_count
            if width and measured.lower is not None and measured.upper is not None:
                lower[fid] = to_bytes(t, measured.lower)
                upper[fid] = to_bytes(t, measured.upper)
            continue
        if not width or fid not in lows or fid in unbounded:
            continue
        lo = _truncate_lower(t, lows[fid], width)
        hi = _truncate_upper(t, highs[fid], width)
        lower[fid] = to_bytes(t, lo)
        if hi is not None:
            upper[fid] = to_bytes(t, hi)
    return DataFile(
        content=DATA,
        file_path=path,
        file_format="PARQUET",
        partition=partition,
        record_count=footer.num_rows,
        file_size_in_bytes=file_size,
        spec_id=spec_id,
        column_sizes=sizes,
        value_counts={fid: values[fid] for fid in counted},
        null_value_counts={fid: nulls[fid] for fid in counted},
        nan_value_counts=nans or None,
        lower_bounds=lower,
        upper_bounds=upper,
        split_offsets=tuple(
            sorted(
                footer.row_group(i).column(0).dictionary_page_offset
                or footer.row_group(i).column(0).data_page_offset
                for i in range(footer.num_row_groups)
            )
        )
        if footer.num_row_groups and footer.num_columns
        else None,
    )
