"""A data file's Arrow record batches as the table's current schema, the way Iceberg reads them.

Columns resolve by Parquet field id; a file without any ids (written before the table became
Iceberg) resolves through the name mapping. A field the file lacks reads as null, a promoted
column is cast (int to long, float to double, wider decimals), and struct fields resolve the
same way one level down. Pure: batches in, arrays out; the caller reads and writes the bytes.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.conversions import from_json
from tablekeeper.iceberg.name_mapping import NameMapping
from tablekeeper.iceberg.parquet import ARROW_PRIMITIVES, FIELD_ID_KEY
from tablekeeper.iceberg.types import (
    UNKNOWN,
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    is_geospatial,
)

# Primitive types as this path reads and writes them: the format layer's mapping, except that
# strings and binaries stay 32-bit offset arrays (each batch is one Parquet page run, far below
# 2 GiB) and uuids are Arrow's uuid extension, which Parquet writes as FIXED_LEN_BYTE_ARRAY(16)
# annotated UUID, as Iceberg Java does.
_PRIMITIVES: Mapping[str, pa.DataType] = {
    **{
        name: ARROW_PRIMITIVES[name]
        for name in (
            "boolean",
            "int",
            "long",
            "float",
            "double",
            "date",
            "time",
            "timestamp",
            "timestamptz",
            "timestamp_ns",
            "timestamptz_ns",
            "unknown",
        )
    },
    "string": pa.string(),
    "binary": pa.binary(),
    "uuid": pa.uuid(),
}
# Why a type cannot be rewritten (checked before any work starts).
_REFUSED = {
    "variant": "pyarrow cannot write Parquet's VARIANT annotation (Spark's writer can: tables whose "
    "other columns Spark writes too are rewritten by it)",
}


def unsupported(t: IcebergType, where: str) -> str | None:
    """Why a column of type ``t`` (named ``where``) cannot be rewritten through Arrow, or None."""
    if isinstance(t, PrimitiveType):
        if t.name in _PRIMITIVES:
            return None
        if is_geospatial(t):
            return (
                f"column {where} has type {t.name}: tablekeeper does not write Parquet's geospatial "
                "types and their bounding-box metrics yet"
            )
        return f"column {where} has type {t.name}: " + _REFUSED.get(t.name, "not supported yet")
    if isinstance(t, (DecimalType, FixedType)):
        return None
    if isinstance(t, StructType):
        return next((r for f in t.fields if (r := unsupported(f.type, f"{where}.{f.name}"))), None)
    if isinstance(t, ListType):
        if t.element == UNKNOWN:
            return f"column {where} is a list of unknown: no Parquet type holds its elements"
        return unsupported(t.element, f"{where}.element")
    if UNKNOWN in (t.key, t.value):
        return f"column {where} is a map with unknown keys or values: no Parquet type holds them"
    return unsupported(t.key, f"{where}.key") or unsupported(t.value, f"{where}.value")


def arrow_type(t: IcebergType) -> pa.DataType:
    if isinstance(t, PrimitiveType) and t.name in _PRIMITIVES:
        return _PRIMITIVES[t.name]
    if isinstance(t, DecimalType):
        return (
            pa.decimal128(t.precision, t.scale) if t.precision <= 38 else pa.decimal256(t.precision, t.scale)
        )
    if isinstance(t, FixedType):
        return pa.binary(t.length)
    if isinstance(t, StructType):
        return pa.struct([arrow_field(f) for f in written_fields(t.fields)])
    if isinstance(t, ListType):
        return pa.list_(_child(t.element_id, "element", t.element, t.element_required))
    if isinstance(t, MapType):
        return pa.map_(
            _child(t.key_id, "key", t.key, True), _child(t.value_id, "value", t.value, t.value_required)
        )
    raise UnsupportedFeatureError(f"type {t} cannot be rewritten through Arrow")


def _child(fid: int, name: str, t: IcebergType, required: bool) -> pa.Field:
    # Map keys are required in Arrow as in Iceberg; list elements and map values are written
    # optional like every other field (see arrow_field).
    return pa.field(
        name,
        arrow_type(t),
        nullable=not (required and name == "key"),
        metadata={FIELD_ID_KEY: str(fid).encode()},
    )


def arrow_field(f: NestedField) -> pa.Field:
    # Written optional, as the Spark path writes them: a required column of an old file can still
    # read as null when the file predates it, and readers accept optional columns for any field.
    return pa.field(f.name, arrow_type(f.type), nullable=True, metadata={FIELD_ID_KEY: str(f.id).encode()})


def written_fields(fields: Sequence[NestedField]) -> tuple[NestedField, ...]:
    """The fields a data file holds: v3 ``unknown`` columns are always null and never written."""
    return tuple(f for f in fields if f.type != UNKNOWN)


def write_schema(fields: Sequence[NestedField]) -> pa.Schema:
    return pa.schema([arrow_field(f) for f in written_fields(fields)])


def has_field_ids(schema: pa.Schema) -> bool:
    def walk(fields: Sequence[pa.Field]) -> bool:
        for f in fields:
            if FIELD_ID_KEY in (f.metadata or {}):
                return True
            if pa.types.is_struct(f.type) and walk([f.type.field(i) for i in range(f.type.num_fields)]):
                return True
        return False

    return walk(list(schema))


def iceberg_unreadable(
    file_schema: pa.Schema, fields: Sequence[NestedField], mapping: NameMapping | None
) -> str | None:
    """Why Iceberg readers would not read a file of ``file_schema`` as ``fields`` (they resolve
    columns by field id, or through the name mapping in a file without any), or None when they
    would: a column they find must hold a type they promote, and a list's or map's children
    must carry their field ids where the file has ids."""
    by_id = has_field_ids(file_schema)
    resolver = _Resolver(by_id, mapping)

    def child(fid: int, t: IcebergType, source: pa.Field, where: str) -> str | None:
        if by_id and (source.metadata or {}).get(FIELD_ID_KEY) != str(fid).encode():
            return f"{where} has no field id {fid} in the file"
        return check(t, source.type, where)

    def check(t: IcebergType, source: pa.DataType, where: str) -> str | None:
        if pa.types.is_dictionary(source):
            source = source.value_type
        if isinstance(t, StructType):
            if not pa.types.is_struct(source):
                return f"{where} is {source} in the file, not a struct"
            return struct(t.fields, [source.field(i) for i in range(source.num_fields)], f"{where}.")
        if isinstance(t, ListType):
            if not (pa.types.is_list(source) or pa.types.is_large_list(source)):
                return f"{where} is {source} in the file, not a list"
            return child(t.element_id, t.element, source.value_field, f"{where}.element")
        if isinstance(t, MapType):
            if not pa.types.is_map(source):
                return f"{where} is {source} in the file, not a map"
            return child(t.key_id, t.key, source.key_field, f"{where}.key") or child(
                t.value_id, t.value, source.item_field, f"{where}.value"
            )
        try:
            target = arrow_type(t)
        except UnsupportedFeatureError:
            return None  # read by other means (variant), not a question of promotion
        if isinstance(target, pa.BaseExtensionType):
            target = target.storage_type
        if source == target or promotable(source, target):
            return None
        return f"{where} is {source} in the file, which Iceberg does not read as {t}"

    def struct(children: Sequence[NestedField], candidates: Sequence[pa.Field], prefix: str) -> str | None:
        for f in written_fields(children):
            i = resolver.find(f, candidates)
            if i is not None and (reason := check(f.type, candidates[i].type, f"{prefix}{f.name}")):
                return reason
        return None

    return struct(fields, list(file_schema), "")


@dataclass(frozen=True)
class _Resolver:
    by_id: bool
    mapping: NameMapping | None
    # Cast a primitive to its type even where Iceberg would not promote it (a writer's own
    # widening, e.g. Delta's int to double), as long as no value changes.
    widen: bool = False

    def find(self, f: NestedField, candidates: Sequence[pa.Field]) -> int | None:
        if self.by_id:
            wanted = str(f.id).encode()
            for i, c in enumerate(candidates):
                if (c.metadata or {}).get(FIELD_ID_KEY) == wanted:
                    return i
            return None
        mapped = self.mapping.find_by_id(f.id) if self.mapping is not None else None
        names = [c.name for c in candidates]
        for name in mapped.names if mapped is not None else ():
            if name in names:
                return names.index(name)
        return None

    def column(
        self, f: NestedField, source: pa.Array | None, source_field: pa.Field | None, n: int
    ) -> pa.Array:
        if source is None or source_field is None:
            return missing(f, n)
        return self.convert(f.type, source, f"{f.name} (id {f.id})")

    def convert(self, t: IcebergType, source: pa.Array, where: str) -> pa.Array:
        target = arrow_type(t)
        if pa.types.is_dictionary(source.type):
            source = source.dictionary_decode()
        mask = source.is_null() if source.null_count else None
        if isinstance(t, StructType):
            if not pa.types.is_struct(source.type):
                raise CorruptMetadataError(f"column {where} is {source.type} in the file, not a struct")
            assert isinstance(source, pa.StructArray)
            children_fields = [source.type.field(i) for i in range(source.type.num_fields)]
            children = []
            for child in written_fields(t.fields):
                i = self.find(child, children_fields)
                children.append(
                    self.column(
                        child,
                        None if i is None else source.field(i),
                        None if i is None else children_fields[i],
                        len(source),
                    )
                )
            return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
        if isinstance(t, ListType):
            if not (pa.types.is_list(source.type) or pa.types.is_large_list(source.type)):
                raise CorruptMetadataError(f"column {where} is {source.type} in the file, not a list")
            values = self.convert(t.element, source.values, f"{where}.element")
            offsets = source.offsets.cast(pa.int32())
            return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
        if isinstance(t, MapType):
            if not pa.types.is_map(source.type):
                raise CorruptMetadataError(f"column {where} is {source.type} in the file, not a map")
            assert isinstance(source, pa.MapArray)
            keys = self.convert(t.key, source.keys, f"{where}.key")
            items = self.convert(t.value, source.items, f"{where}.value")
            return pa.MapArray.from_arrays(source.offsets, keys, items, type=target, mask=mask)
        source = storage(source)
        if isinstance(target, pa.BaseExtensionType):  # uuid: 16 bytes in the file
            if source.type != target.storage_type:
                raise CorruptMetadataError(f"column {where} is {source.type} in the file, not a uuid")
            return pa.ExtensionArray.from_storage(target, source)
        if source.type == target:
            return source
        if not (self.widen or promotable(source.type, target)):
            raise CorruptMetadataError(
                f"column {where} is {source.type} in the file and cannot read as {t}: "
                "not an Iceberg type promotion"
            )
        try:
            if pa.types.is_timestamp(source.type) and source.type.unit == "ns" and target.unit != "ns":
                return _nanos_to_micros(source, target)
            return source.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise CorruptMetadataError(
                f"column {where} is {source.type} in the file and cannot read as {t}: {err}"
            ) from err


def arrow_scalar(t: IcebergType, value: Any) -> pa.Scalar:
    """A value of the project's convention (``tablekeeper.iceberg.conversions``) as an Arrow
    scalar of ``arrow_type(t)``."""
    target = arrow_type(t)
    if value is None:
        return pa.scalar(None, type=target)
    if isinstance(target, pa.BaseExtensionType):
        raw = value.bytes if hasattr(value, "bytes") else bytes(value)
        return pa.ExtensionScalar.from_storage(target, pa.scalar(raw, target.storage_type))
    if pa.types.is_date(target):
        return pa.scalar(int(value), pa.int32()).cast(target)
    if pa.types.is_time(target) or pa.types.is_timestamp(target):
        return pa.scalar(int(value), pa.int64()).cast(target)
    return pa.scalar(value, type=target)


def missing(f: NestedField, n: int) -> pa.Array:
    """Field ``f`` for ``n`` rows of a file written before it existed: its v3 ``initial-default``
    (a struct's default is made of its fields' defaults), else nulls."""
    target = arrow_type(f.type)
    if f.initial_default is None:
        return pa.nulls(n, type=target)
    if isinstance(f.type, StructType):
        children = [missing(c, n) for c in written_fields(f.type.fields)]
        return pa.StructArray.from_arrays(children, fields=list(target))
    if isinstance(f.type, (ListType, MapType)):
        raise UnsupportedFeatureError(
            f"column {f.name} (id {f.id}) has an initial default of a "
            f"{f.type.__class__.__name__}: not supported"
        )
    return pa.repeat(arrow_scalar(f.type, from_json(f.type, f.initial_default)), n)


def _int_width(t: pa.DataType) -> int:
    """Bits of a signed integer type, or of the signed type that holds an unsigned one; 0 if none."""
    if pa.types.is_signed_integer(t):
        return int(t.bit_width)
    if pa.types.is_unsigned_integer(t) and t.bit_width <= 16:
        return int(t.bit_width) * 2
    return 0


def promotable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a file column of Arrow type ``source`` reads as ``target`` under Iceberg's rules:
    the same type in another Arrow spelling, or a promotion (int to long, float to double, a wider
    decimal of the same scale, date to timestamp); never a conversion that changes values."""
    t = pa.types
    if t.is_null(source):
        return True
    if t.is_integer(target):
        return 0 < _int_width(source) <= int(target.bit_width)
    if t.is_floating(target):
        return bool(t.is_floating(source) and source.bit_width <= target.bit_width)
    if t.is_decimal(target):
        return bool(
            t.is_decimal(source) and source.scale == target.scale and source.precision <= target.precision
        )
    if t.is_string(target):
        return bool(t.is_string(source) or t.is_large_string(source) or t.is_string_view(source))
    if t.is_binary(target):
        return bool(t.is_binary(source) or t.is_large_binary(source) or t.is_binary_view(source))
    if t.is_timestamp(target):
        return bool(t.is_timestamp(source) or t.is_date32(source))
    return bool(source == target)


def _nanos_to_micros(source: pa.Array, target: pa.DataType) -> pa.Array:
    """Nanoseconds (INT96 or TIMESTAMP(NANOS)) to microseconds, rounded down as Iceberg Java does
    (a cast would round toward zero before 1970)."""
    nanos = source.cast(pa.int64())
    micros = pc.divide(nanos, 1000)
    below = pc.less(pc.subtract(nanos, pc.multiply(micros, 1000)), 0)
    micros = pc.if_else(below, pc.subtract(micros, 1), micros)
    return micros.cast(pa.timestamp("us", tz=source.type.tz)).cast(target)


def projector(
    file_schema: pa.Schema,
    fields: Sequence[NestedField],
    mapping: NameMapping | None,
    where: str,
    *,
    by_id: bool | None = None,
    widen: bool = False,
) -> tuple[list[str], Any]:
    """(top-level file columns to read, a function batch -> arrays of ``fields``). ``by_id``:
    resolve by field id (True) or name (False) whatever the file holds (None: as Iceberg does);
    ``widen``: see ``_Resolver``."""
    if by_id is None:
        by_id = has_field_ids(file_schema)
    if not by_id and mapping is None:
        raise CorruptMetadataError(
            f"{where} has no Parquet field ids and the table has no name mapping "
            "(schema.name-mapping.default): its columns cannot be resolved"
        )
    resolver = _Resolver(by_id, mapping, widen)
    top = list(file_schema)
    found = [resolver.find(f, top) for f in fields]
    read = sorted({top[i].name for i in found if i is not None})

    def project(batch: pa.RecordBatch, rows: int | None = None) -> list[pa.Array]:
        n = batch.num_rows if rows is None else rows
        out = []
        for f, i in zip(fields, found, strict=True):
            if i is None:
                out.append(resolver.column(f, None, None, n))
            else:
                name = top[i].name
                out.append(resolver.column(f, batch.column(name), batch.schema.field(name), n))
        return out

    return read, project


def positions(offset: int, n: int) -> pa.Array:
    """Row positions ``offset .. offset + n - 1`` as int64."""
    if n == 0:
        return pa.array([], pa.int64())
    return pc.add(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), offset - 1)


@dataclass(frozen=True)
class Deleted:
    """A data file's deleted row positions, sorted and unique, with a searchable copy."""

    positions: pa.Array
    index: array[int]

    @classmethod
    def of(cls, parts: Sequence[pa.Array]) -> Deleted:
        if not parts:
            return cls(pa.array([], pa.int64()), array("q"))
        values = pc.unique(pa.concat_arrays([p.cast(pa.int64()) for p in parts]))
        values = values.take(pc.sort_indices(values))
        index = array("q")
        if len(values):
            index.frombytes(
                values.buffers()[1].to_pybytes()[values.offset * 8 : (values.offset + len(values)) * 8]
            )
        return cls(values, index)

    def __len__(self) -> int:
        return len(self.index)


def kept(offset: int, n: int, deleted: Deleted) -> pa.Array | None:
    """A mask of the batch rows (positions ``offset .. offset + n - 1``) not deleted, or None if
    every row is kept."""
    lo = bisect_left(deleted.index, offset)
    hi = bisect_left(deleted.index, offset + n, lo)
    if lo == hi:
        return None
    return pc.invert(pc.is_in(positions(offset, n), value_set=deleted.positions.slice(lo, hi - lo)))


def storage(column: pa.Array) -> pa.Array:
    """An extension array (uuid) as its storage array; any other array as it is."""
    return column.storage if isinstance(column.type, pa.BaseExtensionType) else column


def partition_constant(column: pa.Array, t: IcebergType, value: Any) -> pa.Array:
    """``column`` (of Iceberg type ``t``) as Iceberg Java reads an identity partition column: the
    file's partition value (the project's convention; None for null) in every row, whatever the
    file holds (``PartitionUtil.constantsMap``: files converted from Delta hold no such column, an
    imported file may hold values its partition tuple contradicts)."""
    n = len(column)
    if value is None:
        return column if column.null_count == n else pa.nulls(n, type=column.type)
    scalar = arrow_scalar(t, value)
    if isinstance(column.type, pa.BaseExtensionType):
        storage = pa.repeat(scalar.value, n).cast(column.type.storage_type)
        return pa.ExtensionArray.from_storage(column.type, storage)
    return pa.repeat(scalar, n).cast(column.type)
