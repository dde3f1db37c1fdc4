"""Rewriting a file group whose rows must move between tasks: sorted, Z-ordered, or written
into another partition spec.

Spark does only the shuffle. Executors read the input files with Arrow exactly as the bin-pack
path does (columns by field id, deletes applied, lineage explicit) and add the shuffle keys
(``tablekeeper.iceberg.sort_keys``): the output partition of each row, the sort order's
transformed terms or the Z-value. Spark range-partitions and sorts the rows by those keys, and
each task writes its sorted rows with Arrow, one run of files per partition, with the field ids
of every nested field and the table's metrics. Every Iceberg type crosses the shuffle in a form
Spark carries unchanged (times and timestamps as integers, uuids and fixed as binary), so no
value is reinterpreted by Spark's own type system.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.arrow_project import arrow_type, storage, write_schema, written_fields
from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.name_mapping import NameMapping
from tablekeeper.iceberg.partitioning import PartitionSpec, partition_key
from tablekeeper.iceberg.rewrite_plan import FileTask
from tablekeeper.iceberg.sort_keys import ZOrder, partition_keys, transformed, zorder_values
from tablekeeper.iceberg.transforms import Transform, parse_transform
from tablekeeper.iceberg.types import (
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
)
from tablekeeper.io import FileIO
from tablekeeper.spark.arrow_output import NO_ROW_LIMIT, Job, Output
from tablekeeper.spark.arrow_rewrite import (
    _bins,
    _Input,
    keep_reported,
    make_input,
    make_job,
    plain_input,
    read_inputs,
    task_name,
)
from tablekeeper.spark.settle import settle, sizes_of

PART = "_tk_part"
ZVALUE = "_tk_z"


@dataclass(frozen=True)
class SortTerm:
    """One sort key: a column (by field id) through a transform, with its direction."""

    field_id: int
    name: str
    transform: str  # Iceberg's transform text: identity, bucket[16], day, ...
    ascending: bool = True
    nulls_first: bool = True


@dataclass(frozen=True)
class Ordering:
    terms: tuple[SortTerm, ...] = ()
    zorder: ZOrder | None = None
    zorder_ids: tuple[int, ...] = ()
    local: bool = False  # sorted within each output task only (bin-pack in the table's order)


# ---------------------------------------------------------------------------------------------
# The form rows take through Spark


def _spark_type(t: IcebergType) -> T.DataType:
    if isinstance(t, DecimalType):
        return T.DecimalType(t.precision, t.scale)
    if isinstance(t, FixedType):
        return T.BinaryType()
    if isinstance(t, StructType):
        return T.StructType(
            [T.StructField(f.name, _spark_type(f.type), True) for f in written_fields(t.fields)]
        )
    if isinstance(t, ListType):
        return T.ArrayType(_spark_type(t.element), True)
    if isinstance(t, MapType):
        return T.MapType(_spark_type(t.key), _spark_type(t.value), True)
    assert isinstance(t, PrimitiveType)
    return {
        "boolean": T.BooleanType(),
        "int": T.IntegerType(),
        "long": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "date": T.IntegerType(),
        "string": T.StringType(),
        "binary": T.BinaryType(),
        "uuid": T.BinaryType(),
    }.get(t.name, T.LongType())  # times and timestamps: their integer count


def _carried(t: IcebergType) -> pa.DataType:
    """The Arrow type Spark hands back for ``_spark_type(t)`` (Spark's own conversion)."""
    return to_arrow_type(_spark_type(t))


def to_carried(t: IcebergType, column: pa.Array) -> pa.Array:
    """A column of ``arrow_type(t)`` in the form Spark carries."""
    return _convert(t, column, _carried)


def from_carried(t: IcebergType, column: pa.Array) -> pa.Array:
    """A column as Spark hands it back, in ``arrow_type(t)`` again."""
    return _convert(t, column, arrow_type)


def _convert(t: IcebergType, column: pa.Array, target_of: Any) -> pa.Array:
    target = target_of(t)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    mask = column.is_null() if column.null_count else None
    if isinstance(t, StructType):
        fields = written_fields(t.fields)
        assert isinstance(column, pa.StructArray)
        children = [_convert(f.type, column.field(i), target_of) for i, f in enumerate(fields)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if isinstance(t, ListType):
        values = _convert(t.element, column.values, target_of)
        return pa.ListArray.from_arrays(column.offsets.cast(pa.int32()), values, type=target, mask=mask)
    if isinstance(t, MapType):
        keys = _convert(t.key, column.keys, target_of)
        items = _convert(t.value, column.items, target_of)
        return pa.MapArray.from_arrays(column.offsets.cast(pa.int32()), keys, items, type=target, mask=mask)
    column = storage(column)
    if isinstance(target, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(target, column.cast(target.storage_type))
    if column.type == target:
        return column
    if pa.types.is_date32(column.type) or pa.types.is_date32(target):
        return column.cast(pa.int32()).cast(target)
    if pa.types.is_temporal(column.type) or pa.types.is_temporal(target):
        return column.cast(pa.int64()).cast(target)
    return column.cast(target)


# ---------------------------------------------------------------------------------------------
# Keys


@dataclass(frozen=True)
class _Keys:
    """What the read side adds to each row (shipped to the executors)."""

    part: tuple[tuple[str, int, IcebergType], ...]  # (transform, field index, source type)
    terms: tuple[tuple[str, int, IcebergType], ...]
    zorder: ZOrder | None
    zcolumns: tuple[tuple[int, IcebergType], ...]


def _top_index(fields: Sequence[NestedField], fid: int, what: str) -> tuple[int, IcebergType]:
    for i, f in enumerate(fields):
        if f.id == fid:
            return i, f.type
    raise ConfigError(
        f"{what} (field id {fid}) is not a top-level column: tablekeeper sorts by top-level columns"
    )


def _key_arrays(keys: _Keys, arrays: Sequence[pa.Array]) -> list[pa.Array]:
    out: list[pa.Array] = []
    if keys.part:
        column, _ = partition_keys([(parse_transform(tr), t, arrays[i]) for tr, i, t in keys.part])
        out.append(column)
    for tr, i, t in keys.terms:
        transform: Transform = parse_transform(tr)
        out.append(to_carried(transform.result_type(t), transformed(transform, t, arrays[i])))
    if keys.zorder is not None:
        out.append(zorder_values(keys.zorder, [(t, arrays[i]) for i, t in keys.zcolumns]))
    return out


def rewrite_sorted(
    spark: SparkSession,
    meta: TableMetadata,
    tasks: Sequence[FileTask],
    *,
    directory: str,
    spec: PartitionSpec,
    partition: tuple[Any, ...] | None,
    ordering: Ordering,
    compression: str,
    output_files: int,
    sizes: tuple[int, int, int],
    sort_order_id: int | None,
    mapping: NameMapping | None,
) -> tuple[DataFile, ...]:
    """Rewrite ``tasks`` into ``spec``, rows ordered by ``ordering``; returns the new files.
    ``partition`` is the tuple every row keeps, or None to compute each row's in ``spec``.
    Each task rolls its files at the target's written bytes; the files left under it are sorted
    and written again together (``settle``). Not under a global order: there each task holds one
    range of the sort key, sized to about one target by the range partitioning, and writes it as
    one file (rolled only at the maximum size). Writing the tasks' last files again together
    would make a file spanning every range, which each lookup on the key then opens: what the
    sort was for."""
    if partition is None and all(str(pf.transform) == "void" for pf in spec.fields):
        partition = tuple(None for _ in spec.fields)  # an unpartitioned spec: one partition
    ranged = bool(ordering.terms or ordering.zorder is not None) and not ordering.local
    job = make_job(
        meta,
        directory=directory,
        compression=compression,
        sort_order_id=sort_order_id,
        mapping=mapping,
        sizes=(sizes[2], sizes[1], sizes[2]) if ranged else sizes,
    )
    fields = job.fields
    schema = meta.schema()
    part = (
        tuple(
            (str(pf.transform), *_top_index(fields, pf.source_id, f"partition field {pf.name}"))
            for pf in spec.fields
        )
        if partition is None
        else ()
    )
    terms = tuple(
        (t.transform, *_top_index(fields, t.field_id, f"sort column {schema.column_name(t.field_id)}"))
        for t in ordering.terms
    )
    zcolumns = tuple(
        _top_index(fields, fid, f"zorder column {schema.column_name(fid)}") for fid in ordering.zorder_ids
    )
    keys = _Keys(part, terms, ordering.zorder, zcolumns)
    key_fields: list[T.StructField] = []
    order: list[Column] = []
    if part:
        key_fields.append(T.StructField(PART, T.BinaryType(), True))
        order.append(F.col(PART).asc_nulls_first())
    for n, (term, (tr, _, t)) in enumerate(zip(ordering.terms, terms, strict=True)):
        name = f"_tk_s{n}"
        key_fields.append(T.StructField(name, _spark_type(parse_transform(tr).result_type(t)), True))
        c = F.col(name)
        order.append(
            (c.asc_nulls_first() if term.nulls_first else c.asc_nulls_last())
            if term.ascending
            else (c.desc_nulls_first() if term.nulls_first else c.desc_nulls_last())
        )
    if ordering.zorder is not None:
        key_fields.append(T.StructField(ZVALUE, T.BinaryType(), True))
        order.append(F.col(ZVALUE).asc_nulls_first())
    data_fields = [T.StructField(f"c{i}", _spark_type(f.type), True) for i, f in enumerate(fields)]
    carried = T.StructType(data_fields + key_fields)
    first = [
        [make_input(meta, job, t) for t in b]
        for b, _ in _bins(tasks, max(1, min(len(tasks), spark.sparkContext.defaultParallelism * 4)))
    ]
    spec_id, fixed = spec.spec_id, partition
    io = FileIO.for_location(directory)
    io.mkdirs(directory)
    result = T.StructType([T.StructField("file", T.BinaryType(), False)])

    def run(
        bins: list[list[_Input]], files: int, expected: dict[Any, tuple[int, int]] | None
    ) -> list[DataFile]:
        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in batches:
                for index in b.column(0).to_pylist():
                    for rows in read_inputs(job, bins[index]):
                        arrays = [rows.column(i) for i in range(rows.num_columns)]
                        columns = [to_carried(f.type, a) for f, a in zip(fields, arrays, strict=True)]
                        columns += _key_arrays(keys, arrays)
                        yield pa.RecordBatch.from_arrays(columns, names=carried.fieldNames())

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            yield from _write_sorted(job, batches, fixed, spec_id, expected)

        df = spark.range(0, len(bins), 1, numPartitions=max(1, len(bins))).mapInArrow(
            read,  # type: ignore[arg-type]
            carried,
        )
        if order and not ordering.local:
            df = df.repartitionByRange(max(1, files), *order).sortWithinPartitions(*order)
        elif part:
            # Rows of one partition meet in one task (hash of the key), sorted there by the rest.
            df = df.repartition(max(1, files), F.col(PART)).sortWithinPartitions(*order)
        else:
            df = df.repartition(max(1, files))
            if order:
                df = df.sortWithinPartitions(*order)
        out = df.mapInArrow(write, result)  # type: ignore[arg-type]
        return [pickle.loads(r[0]) for r in out.collect()]

    def again(files: Sequence[DataFile], count: int) -> list[DataFile]:
        # The last merge (one task) knows each partition's rows and bytes: its files take them.
        scopes: dict[Any, list[DataFile]] = {}
        for f in files:
            scopes.setdefault(partition_key(f.partition), []).append(f)
        expected = {k: sizes_of(v) for k, v in scopes.items()} if count == 1 else None
        return run([[plain_input(f)] for f in files], count, expected)

    if ranged:
        return keep_reported(
            directory, _ranges_sized(sizes, directory, run(first, output_files, None), again)
        )
    return keep_reported(directory, settle(sizes, directory, run(first, output_files, None), again))


def _ranges_sized(
    sizes: tuple[int, int, int],
    directory: str,
    files: Sequence[DataFile],
    again: Callable[[Sequence[DataFile], int], Sequence[DataFile]],
) -> list[DataFile]:
    """A range-partitioned write's files, written again once into as many ranges as the bytes
    really written make targets when the input's bytes misjudged them (rows that compress far
    better sorted leave ranges of small files). All of them, so each range stays one slice of the
    key: merging only the small ones would make files spanning the others' ranges."""
    target, small, _ = sizes
    written = sum(f.file_size_in_bytes for f in files)
    if sum(1 for f in files if f.file_size_in_bytes < small) <= 1:
        return list(files)
    count = max(1, written // target)
    if written / (count + 1) >= small * 1.1:
        count += 1  # one more range still leaves every one well above small
    if count >= len(files):
        return list(files)
    merged = list(again(files, count))
    FileIO.for_location(directory).delete_many(sorted(f.file_path for f in files))
    return merged


def _write_sorted(
    job: Job,
    batches: Iterator[pa.RecordBatch],
    partition: tuple[Any, ...] | None,
    spec_id: int,
    expected: dict[Any, tuple[int, int]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Write a task's sorted rows: one run of files per partition (rows of a partition are
    contiguous), the partition read from each row's key unless every row keeps ``partition``."""
    schema = write_schema(job.fields)
    name = task_name(0)
    current: Output | None = None
    current_key: bytes | None = None
    runs = 0
    done: list[DataFile] = []
    try:
        for batch in batches:
            columns = [from_carried(f.type, batch.column(i)) for i, f in enumerate(job.fields)]
            rows = pa.RecordBatch.from_arrays(columns, schema=schema)
            if partition is None:
                keys = batch.column(PART)
                bounds = _runs(keys)
            else:
                keys, bounds = None, [(0, rows.num_rows)]
            for start, end in bounds:
                key = keys[start].as_py() if keys is not None else None
                if current is None or key != current_key:
                    if current is not None:
                        current.close()
                        done.extend(current.done)
                    values = tuple(pickle.loads(key)) if key is not None else partition or ()
                    sizes = None if expected is None else expected.get(partition_key(values))
                    current = Output(job, f"{name}-p{runs:04d}", NO_ROW_LIMIT, spec_id, values, sizes)
                    current_key = key
                    runs += 1
                current.add(rows.slice(start, end - start))
        if current is not None:
            current.close()
            done.extend(current.done)
            current = None
    except BaseException:
        if current is not None:
            current.abandon()
        FileIO.for_location(job.directory).delete_many([f.file_path for f in done])
        raise
    if done:
        yield pa.RecordBatch.from_arrays(
            [pa.array([pickle.dumps(f) for f in done], pa.binary())], names=["file"]
        )


def _runs(keys: pa.Array) -> list[tuple[int, int]]:
    """(start, end) of each run of equal values in ``keys``."""
    n = len(keys)
    if n == 0:
        return []
    changed = pc.not_equal(keys.slice(1), keys.slice(0, n - 1))
    starts = [0] + [i + 1 for i, c in enumerate(changed.to_pylist()) if c]
    return list(zip(starts, [*starts[1:], n], strict=True))
