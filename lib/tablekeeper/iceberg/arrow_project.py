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
from tablekeeper.iceberg.name_mapping import NameMapping
from tablekeeper.iceberg.parquet import ARROW_PRIMITIVES, FIELD_ID_KEY
from tablekeeper.iceberg.types import DecimalType, IcebergType, NestedField, PrimitiveType, StructType

# Primitive types this path writes, as the format layer maps them, except that strings and
# binaries stay 32-bit offset arrays: each batch is one Parquet page run, far below 2 GiB.
_PRIMITIVES: Mapping[str, pa.DataType] = {
    **{
        name: ARROW_PRIMITIVES[name]
        for name in ("boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz")
    },
    "string": pa.string(),
    "binary": pa.binary(),
}


def supported(t: IcebergType) -> bool:
    """Whether ``t`` can be rewritten through Arrow (lists and maps are not yet)."""
    if isinstance(t, PrimitiveType):
        return t.name in _PRIMITIVES
    if isinstance(t, DecimalType):
        return True
    if isinstance(t, StructType):
        return all(supported(f.type) for f in t.fields)
    return False


def arrow_type(t: IcebergType) -> pa.DataType:
    if isinstance(t, PrimitiveType) and t.name in _PRIMITIVES:
        return _PRIMITIVES[t.name]
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, StructType):
        return pa.struct([arrow_field(f) for f in t.fields])
    raise UnsupportedFeatureError(f"type {t} cannot be rewritten through Arrow")


def arrow_field(f: NestedField) -> pa.Field:
    # Written optional, as the Spark path writes them: a required column of an old file can still
    # read as null when the file predates it, and readers accept optional columns for any field.
    return pa.field(f.name, arrow_type(f.type), nullable=True, metadata={FIELD_ID_KEY: str(f.id).encode()})


def write_schema(fields: Sequence[NestedField]) -> pa.Schema:
    return pa.schema([arrow_field(f) for f in fields])


def has_field_ids(schema: pa.Schema) -> bool:
    def walk(fields: Sequence[pa.Field]) -> bool:
        for f in fields:
            if FIELD_ID_KEY in (f.metadata or {}):
                return True
            if pa.types.is_struct(f.type) and walk([f.type.field(i) for i in range(f.type.num_fields)]):
                return True
        return False

    return walk(list(schema))


@dataclass(frozen=True)
class _Resolver:
    by_id: bool
    mapping: NameMapping | None

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
        target = arrow_type(f.type)
        if source is None or source_field is None:
            return pa.nulls(n, type=target)
        if isinstance(f.type, StructType):
            if not pa.types.is_struct(source.type):
                raise CorruptMetadataError(
                    f"column {f.name} (id {f.id}) is {source.type} in the file, not a struct"
                )
            struct = source
            assert isinstance(struct, pa.StructArray)
            children_fields = [source.type.field(i) for i in range(source.type.num_fields)]
            children = []
            for child in f.type.fields:
                i = self.find(child, children_fields)
                children.append(
                    self.column(
                        child,
                        None if i is None else struct.field(i),
                        None if i is None else children_fields[i],
                        n,
                    )
                )
            mask = source.is_null() if source.null_count else None
            return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
        if source.type == target:
            return source
        if pa.types.is_dictionary(source.type):
            source = source.dictionary_decode()
        if not promotable(source.type, target):
            raise CorruptMetadataError(
                f"column {f.name} (id {f.id}) is {source.type} in the file and cannot read as {f.type}: "
                "not an Iceberg type promotion"
            )
        try:
            if pa.types.is_timestamp(source.type) and source.type.unit == "ns":
                return _nanos_to_micros(source, target)
            return source.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise CorruptMetadataError(
                f"column {f.name} (id {f.id}) is {source.type} in the file and cannot read as {f.type}: {err}"
            ) from err


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
    file_schema: pa.Schema, fields: Sequence[NestedField], mapping: NameMapping | None, where: str
) -> tuple[list[str], Any]:
    """(top-level file columns to read, a function batch -> arrays of ``fields``)."""
    by_id = has_field_ids(file_schema)
    if not by_id and mapping is None:
        raise CorruptMetadataError(
            f"{where} has no Parquet field ids and the table has no name mapping "
            "(schema.name-mapping.default): its columns cannot be resolved"
        )
    resolver = _Resolver(by_id, mapping)
    top = list(file_schema)
    found = [resolver.find(f, top) for f in fields]
    read = sorted({top[i].name for i in found if i is not None})

    def project(batch: pa.RecordBatch) -> list[pa.Array]:
        n = batch.num_rows
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


def fill(column: pa.Array, value: Any) -> pa.Array:
    """``column`` with its nulls replaced by ``value`` (a partition value in its Arrow form)."""
    if value is None or column.null_count == 0:
        return column
    return pc.coalesce(column, pa.scalar(value, type=column.type))
