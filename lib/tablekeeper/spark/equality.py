"""Equality deletes on the executors: an equality delete file's rows read by field id, and which
rows of a data file batch they delete (every equality column equal, nulls equal to nulls, floats
compared as Java compares them). Shared by compaction (which drops those rows) and
rewrite-equality-deletes (which turns them into positions)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.arrow_project import projector, storage, written_fields
from tablekeeper.iceberg.name_mapping import NameMapping
from tablekeeper.iceberg.types import NestedField, StructType
from tablekeeper.io import FileIO

BATCH_ROWS = 1 << 16


def path_of(fields: Sequence[NestedField], fid: int) -> tuple[int, ...] | None:
    """Child indexes leading to field ``fid`` through structs, or None."""
    for i, f in enumerate(fields):
        if f.id == fid:
            return (i,)
        if isinstance(f.type, StructType):
            inner = path_of(written_fields(f.type.fields), fid)
            if inner is not None:
                return (i, *inner)
    return None


def column_at(arrays: Sequence[pa.Array], path: Sequence[int]) -> pa.Array:
    column = arrays[path[0]]
    for i in path[1:]:
        assert isinstance(column, pa.StructArray)
        column = column.flatten()[i]
    return column


def batches(f: pq.ParquetFile, columns: list[str]) -> Iterator[tuple[int, pa.RecordBatch | None]]:
    """(rows, batch) of ``columns``; with no columns to read, only the row counts (batch None)."""
    if columns:
        for b in f.iter_batches(batch_size=BATCH_ROWS, columns=columns, use_threads=False):
            yield b.num_rows, b
    else:  # none of the table's columns is in the file: only its row count matters
        for i in range(f.metadata.num_row_groups):
            yield f.metadata.row_group(i).num_rows, None


def equality_rows(
    fields: Sequence[NestedField],
    mapping: NameMapping | None,
    location: str,
    ids: tuple[int, ...],
    cache: dict[str, pa.Table],
) -> pa.Table:
    """An equality delete file's rows, its columns resolved by field id and read as the types of
    ``fields`` (the current schema's), deduplicated."""
    key = f"{location}#{ids}"
    if key not in cache:
        # The delete file keeps the table's nesting: read the top-level fields holding the
        # equality columns, then take each column by its path.
        paths = [p for p in (path_of(fields, fid) for fid in ids) if p is not None]
        tops = sorted({p[0] for p in paths})
        wanted = [fields[i] for i in tops]
        names = [f"c{i}" for i in range(len(paths))]
        with FileIO.for_location(location).open_input(location) as stream:
            f = pq.ParquetFile(stream, coerce_int96_timestamp_unit="us")
            columns, project = projector(f.schema_arrow, wanted, mapping, location)
            if not columns:
                raise CorruptMetadataError(
                    f"equality delete file {location} holds none of the columns of field ids {list(ids)}"
                )
            parts = []
            for n, b in batches(f, columns):
                arrays = project(b if b is not None else pa.record_batch([], names=[]), n)
                by_top = dict(zip(tops, arrays, strict=True))
                picked = [column_at([by_top[p[0]]], (0, *p[1:])) for p in paths]
                parts.append(pa.record_batch([storage(c) for c in picked], names=names))
        table = pa.Table.from_batches(parts) if parts else None
        if table is None or not len(table):
            table = pa.table({name: pa.array([], pa.null()) for name in names})
        else:
            table = table.group_by(names).aggregate([])
        cache[key] = table
    return cache[key]


def equality_mask(
    fields: Sequence[NestedField], arrays: Sequence[pa.Array], ids: tuple[int, ...], deletes: pa.Table
) -> pa.Array | None:
    """True for the rows (``arrays``, one per field of ``fields``) an equality delete removes:
    every equality column equal to a delete row's value, nulls equal to nulls (Iceberg's rule).
    None when the delete file is empty."""
    if not len(deletes):
        return None
    columns = [column_at(arrays, p) for p in (path_of(fields, fid) for fid in ids) if p is not None]
    columns = [storage(c) for c in columns]
    if len(columns) == 1:
        wanted = storage(deletes.column(0).combine_chunks())
        if pa.types.is_floating(columns[0].type):
            column, wanted = _float_bits(columns[0]), _float_bits(wanted)
        else:
            column = columns[0]
        return pc.fill_null(pc.is_in(column, value_set=wanted, skip_nulls=False), False)
    # Several columns: rare and small (keys of deleted rows), so a set of Python tuples, with
    # floats compared as Java's StructLikeSet compares them (all NaNs equal, -0.0 != 0.0).
    gone = set(
        zip(
            *(_java_equal(storage(deletes.column(i).combine_chunks())) for i in range(len(columns))),
            strict=True,
        )
    )
    hits = [row in gone for row in zip(*(_java_equal(c) for c in columns), strict=True)]
    return pa.array(hits, pa.bool_())


def _java_equal(column: pa.Array) -> list[Any]:
    """Values as Python objects whose equality is Java's for the type."""
    values: list[Any] = (_float_bits(column) if pa.types.is_floating(column.type) else column).to_pylist()
    return values


def _float_bits(column: pa.Array) -> pa.Array:
    """Floats as int64 bits, every NaN the same: Java's equality (-0.0 is not 0.0)."""
    if pa.types.is_null(column.type):
        return column.cast(pa.int64())
    wide = column.cast(pa.float64())
    canonical = pc.if_else(pc.is_nan(wide), pa.scalar(float("nan")), wide)
    return canonical.view(pa.int64())
