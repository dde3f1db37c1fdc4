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
# Java's default metrics mode: truncate(16) for string and binary bounds.
DEFAULT_TRUNCATE = 16

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
    if isinstance(value, (str, bytes)) and len(value) > width:
        return value[:width]
    return value


def data_file_from_footer(
    footer: pq.FileMetaData,
    schema: Schema,
    *,
    path: str,
    file_size: int,
    spec_id: int = 0,
    partition: tuple[Any, ...] = (),
    truncate: int = DEFAULT_TRUNCATE,
) -> DataFile:
    """A DataFile with Iceberg metrics computed from a Parquet footer (columns matched by field id)."""
    ids_by_path: dict[str, int] = {}
    arrow_schema = footer.schema.to_arrow_schema()

    def walk(field: pa.Field, prefix: str) -> None:
        meta = field.metadata or {}
        name = f"{prefix}{field.name}"
        if FIELD_ID_KEY in meta:
            ids_by_path[name] = int(meta[FIELD_ID_KEY])
        t = field.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i), name + ".")
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            walk(t.value_field, name + ".list.")
        elif pa.types.is_map(t):
            walk(t.key_field, name + ".key_value.")
            walk(t.item_field, name + ".key_value.")

    for f in arrow_schema:
        walk(f, "")
    sizes: dict[int, int] = {}
    values: dict[int, int] = {}
    nulls: dict[int, int] = {}
    lows: dict[int, Any] = {}
    highs: dict[int, Any] = {}
    stats_ok: dict[int, bool] = {}  # bounds from every row group
    counts_ok: dict[int, bool] = {}  # null counts from every row group
    for rg in range(footer.num_row_groups):
        group = footer.row_group(rg)
        for c in range(group.num_columns):
            col = group.column(c)
            fid = ids_by_path.get(col.path_in_schema)
            if fid is None:
                continue
            sizes[fid] = sizes.get(fid, 0) + col.total_compressed_size
            values[fid] = values.get(fid, 0) + col.num_values
            st = col.statistics
            if st is None or not st.has_null_count:
                stats_ok[fid] = counts_ok[fid] = False
                continue
            nulls[fid] = nulls.get(fid, 0) + st.null_count
            if st.has_min_max and stats_ok.get(fid, True):
                lo, hi = st.min, st.max
                if fid not in lows or lo < lows[fid]:
                    lows[fid] = lo
                if fid not in highs or hi > highs[fid]:
                    highs[fid] = hi
            elif st.num_values > 0:
                stats_ok[fid] = False
    # A count over some row groups only would claim fewer nulls than the file holds, and an
    # IS NULL filter could then skip it: no count unless every row group gave one.
    nulls = {fid: n for fid, n in nulls.items() if counts_ok.get(fid, True)}
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    for fid, low in lows.items():
        t = schema.find_type(fid)
        if (
            t is None
            or not stats_ok.get(fid, True)
            or not isinstance(t, (PrimitiveType, DecimalType, FixedType))
        ):
            continue
        if isinstance(t, PrimitiveType) and t.name in ("float", "double"):
            continue  # NaN handling of Parquet float stats is unreliable; omit rather than guess
        lo = _truncate_lower(t, native_to_value(t, low), truncate)
        hi = _truncate_upper(t, native_to_value(t, highs[fid]), truncate)
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
        value_counts=values,
        null_value_counts=nulls,
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
