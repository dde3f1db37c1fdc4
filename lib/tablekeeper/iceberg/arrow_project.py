"""A data file's Arrow record batches as the table's current schema, the way Iceberg reads them.

Columns resolve by Parquet field id; a file without any ids (written before the table became
Iceberg) resolves through the name mapping. A field the file lacks reads as null, a promoted
column is cast (int to long, float to double, wider decimals), and struct fields resolve the
same way one level down. Pure: batches in, arrays out; the caller reads and writes the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.name_mapping import NameMapping
from tablekeeper.iceberg.parquet import FIELD_ID_KEY
from tablekeeper.iceberg.types import DecimalType, IcebergType, NestedField, PrimitiveType, StructType

# Primitive types this path writes; strings and binaries stay 32-bit offset arrays because each
# batch is one Parquet page run, far below 2 GiB.
_PRIMITIVES: Mapping[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
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
        try:
            # Timestamps written as INT96 or nanoseconds read truncated to microseconds, as Iceberg
            # reads them; every other cast is a promotion and must be exact.
            return source.cast(target, safe=not pa.types.is_timestamp(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise CorruptMetadataError(
                f"column {f.name} (id {f.id}) is {source.type} in the file and cannot read as {f.type}: {err}"
            ) from err


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


def kept(offset: int, n: int, deleted: pa.Array) -> pa.Array | None:
    """A mask of the batch rows not in ``deleted`` (sorted positions), or None if none is."""
    if len(deleted) == 0:
        return None
    lo = pc.greater_equal(deleted, offset)
    hi = pc.less(deleted, offset + n)
    inside = deleted.filter(pc.and_(lo, hi))
    if len(inside) == 0:
        return None
    return pc.invert(pc.is_in(positions(offset, n), value_set=inside))


def fill(column: pa.Array, value: Any) -> pa.Array:
    """``column`` with its nulls replaced by ``value`` (a partition value in its Arrow form)."""
    if value is None or column.null_count == 0:
        return column
    return pc.coalesce(column, pa.scalar(value, type=column.type))
