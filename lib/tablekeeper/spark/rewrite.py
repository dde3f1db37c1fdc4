"""Rewriting one file group on Spark: read by field id, apply deletes, keep row lineage, write.

The group's data files are read with Spark's Parquet reader against the table's current schema
(columns resolve by Iceberg field id, so renamed, reordered, added, dropped and promoted columns
read as Iceberg reads them). Each row knows its file and position (``_metadata``), which is how
position deletes and DVs are applied (an anti-join on file and position) and how per-file
constants join in: the data sequence number (equality deletes apply only to older files, v3
``_last_updated_sequence_number``), ``first_row_id`` (v3 ``_row_id``) and identity partition
values (files converted from Delta hold no partition columns).

The output is plain Spark Parquet with the ids, written into a fresh directory per write and
described afterwards from the files' footers (read on the executors), so nothing is guessed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tablekeeper.errors import ConfigError, CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.arrow_project import projector, written_fields
from tablekeeper.iceberg.content import DataFile, ManifestEntry
from tablekeeper.iceberg.conversions import to_json
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.metrics import FloatCollector, FloatStats, MetricsConfig
from tablekeeper.iceberg.name_mapping import NameMapping, parse_name_mapping
from tablekeeper.iceberg.parquet import data_file_from_footer
from tablekeeper.iceberg.partitioning import PartitionSpec, partition_key
from tablekeeper.iceberg.position_delete_merge import read_position_deletes
from tablekeeper.iceberg.puffin import deserialize_dv
from tablekeeper.iceberg.rewrite_plan import FileTask
from tablekeeper.iceberg.types import FixedType, IcebergType, NestedField, Schema, StructType
from tablekeeper.io import FileIO
from tablekeeper.spark.arrow_rewrite import arrow_blocker, rewrite_with_arrow, sorted_columns
from tablekeeper.spark.arrow_sort import Ordering, rewrite_sorted
from tablekeeper.spark.compat import require_parquet_widening
from tablekeeper.spark.concurrent import no_cycle_collection
from tablekeeper.spark.data_read import (
    FILE,
    POS,
    SCHEME_AUTHORITY,
    glob_escaped,
    path_key,
    read_data_files,
    spark_path_key,
)
from tablekeeper.spark.schema import (
    FIELD_ID,
    LAST_UPDATED,
    READ_WRITE_CONF,
    ROW_ID,
    spark_field,
    spark_schema,
    spark_type,
)
from tablekeeper.spark.session import scoped_conf

log = logging.getLogger(__name__)

SEQ, FIRST_ROW_ID, SCOPE = "_tk_seq", "_tk_first_row_id", "_tk_scope"
NAME_MAPPING = "schema.name-mapping.default"
# Up to this many written files, their footers are read by driver threads, not executor tasks.
DRIVER_FOOTERS = 256
# Delete sets below this many bytes (estimated from their rows) are broadcast: the data side is
# then never shuffled.
BROADCAST_DELETE_BYTES = 64 << 20


def name_mapping(meta: TableMetadata) -> NameMapping | None:
    text = meta.properties.get(NAME_MAPPING)
    return parse_name_mapping(text) if text else None


@contextmanager
def rewrite_conf(spark: SparkSession) -> Iterator[None]:
    """Spark settings for reading and writing by field id, restored afterwards."""
    conf = {
        **READ_WRITE_CONF,
        "spark.sql.session.timeZone": "UTC",
        # Spark stats the files it reads with one task per path beyond 32 paths (up to 10,000
        # tasks); a few tasks per core do it without the scheduling cost.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(
            max(8, spark.sparkContext.defaultParallelism * 4)
        ),
    }
    with scoped_conf(spark, conf):
        yield


@dataclass(frozen=True)
class WriteTarget:
    """Where and how one rewrite writes: all its rows go to one spec, and to one partition
    unless ``partition`` is None (files of other specs: each row's partition is computed)."""

    spec: PartitionSpec
    partition: tuple[Any, ...] | None
    directory: str
    compression: str
    max_records_per_file: int  # Spark's writer only: it cannot roll files by bytes
    output_files: int
    sizes: tuple[int, int, int]  # target, small and maximum written bytes of a file
    ordering: Ordering
    global_sort: bool  # range-partition by the sort (sort strategy) or only sort within tasks

    @property
    def sort(self) -> tuple[tuple[str, bool, bool], ...]:
        """(column, ascending, nulls first) of a sort on plain columns (Spark's writer)."""
        return tuple((t.name, t.ascending, t.nulls_first) for t in self.ordering.terms)

    @property
    def shuffles(self) -> bool:
        return bool(self.ordering.terms) or self.ordering.zorder is not None or self.partition is None


def _constants(
    spark: SparkSession, tasks: Sequence[FileTask], scopes: dict[tuple[int, tuple[Any, ...]], int]
) -> DataFrame:
    rows = [
        (
            path_key(t.file.file_path),
            int(t.entry.sequence_number or 0),
            t.file.first_row_id,
            scopes[(t.file.spec_id, partition_key(t.file.partition))],
        )
        for t in tasks
    ]
    schema = T.StructType(
        [
            T.StructField(FILE, T.StringType(), False),
            T.StructField(SEQ, T.LongType(), False),
            T.StructField(FIRST_ROW_ID, T.LongType(), True),
            T.StructField(SCOPE, T.IntegerType(), False),
        ]
    )
    return spark.createDataFrame(rows, schema)


def _dv_positions(dv: tuple[str, int, int, str, int]) -> Iterator[tuple[str, int]]:
    location, offset, length, data_key, cardinality = dv
    with FileIO.for_location(location).open_input(location) as stream:
        blob = stream.read_at(length, offset)
    with no_cycle_collection():
        bitmap = deserialize_dv(blob)
        rows = [(data_key, int(p)) for p in bitmap]
    if len(rows) != cardinality:
        raise CorruptMetadataError(
            f"deletion vector for {data_key} in {location} holds {len(rows)} positions, not {cardinality}"
        )
    return iter(rows)


_DELETED_SCHEMA = T.StructType(
    [T.StructField(FILE, T.StringType(), False), T.StructField(POS, T.LongType(), False)]
)


def _other_format_positions(item: tuple[str, str, tuple[str, ...]]) -> Iterator[tuple[str, int]]:
    """(data file key, position) of an ORC or Avro position delete file's rows for ``wanted`` data
    files (Spark reads Parquet ones itself; it has no Avro source and would match ORC by name)."""
    location, file_format, wanted = item
    with FileIO.for_location(location).open_input(location) as stream:
        rows = read_position_deletes(stream, file_format, location)
    keep = set(wanted)
    for path, pos in zip(rows.column("file_path").to_pylist(), rows.column("pos").to_pylist(), strict=True):
        key = path_key(path)
        if key in keep:
            yield key, int(pos)


def _position_deletes(spark: SparkSession, tasks: Sequence[FileTask]) -> tuple[DataFrame | None, int]:
    """(file key, position) of every row a DV or position delete file (Parquet, ORC or Avro)
    removes from the tasks' files, and an upper bound of their number."""
    parts: list[DataFrame] = []
    dvs = []
    pairs: set[tuple[str, str]] = set()
    others: dict[str, tuple[str, set[str]]] = {}  # ORC and Avro files: (format, data file keys)
    bound = 0
    for t in tasks:
        data_key = path_key(t.file.file_path)
        d = t.deletes.dv
        if d is not None:
            f = d.data_file
            if f.content_offset is None or f.content_size_in_bytes is None:
                raise CorruptMetadataError(f"deletion vector {f.file_path} has no content offset or size")
            dvs.append((f.file_path, f.content_offset, f.content_size_in_bytes, data_key, f.record_count))
            bound += f.record_count
        for p in t.deletes.positions:
            fmt = p.data_file.file_format.upper()
            if fmt == "PARQUET":
                pairs.add((path_key(p.data_file.file_path), data_key))
            else:
                others.setdefault(p.data_file.file_path, (fmt, set()))[1].add(data_key)
            bound += p.data_file.record_count
    if dvs:
        rdd = spark.sparkContext.parallelize(
            dvs, max(1, min(len(dvs), spark.sparkContext.defaultParallelism))
        )
        parts.append(spark.createDataFrame(rdd.flatMap(_dv_positions), _DELETED_SCHEMA))
    if others:
        items = [(loc, fmt, tuple(sorted(keys))) for loc, (fmt, keys) in sorted(others.items())]
        reads = spark.sparkContext.parallelize(
            items, max(1, min(len(items), spark.sparkContext.defaultParallelism))
        )
        parts.append(spark.createDataFrame(reads.flatMap(_other_format_positions), _DELETED_SCHEMA))
    if pairs:
        schema = T.StructType(
            [
                T.StructField("file_path", T.StringType(), True, {FIELD_ID: 2147483546}),
                T.StructField("pos", T.LongType(), True, {FIELD_ID: 2147483545}),
            ]
        )
        files = sorted({p[0] for p in pairs})
        by_path = {
            path_key(p.data_file.file_path): p.data_file.file_path for t in tasks for p in t.deletes.positions
        }
        deletes = spark.read.schema(schema).parquet(*(glob_escaped(by_path[f]) for f in files))
        deletes = deletes.select(
            spark_path_key(F.col("_metadata.file_path")).alias("_tk_delete"),
            F.regexp_replace(F.col("file_path"), SCHEME_AUTHORITY, "").alias(FILE),
            F.col("pos").alias(POS),
        )
        deletes = _known_delete_files(spark, deletes, files)
        allowed = spark.createDataFrame(
            sorted(pairs),
            T.StructType([T.StructField("_tk_delete", T.StringType()), T.StructField(FILE, T.StringType())]),
        )
        parts.append(deletes.join(F.broadcast(allowed), ["_tk_delete", FILE]).select(FILE, POS))
    if not parts:
        return None, 0
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out, bound


def _known_delete_files(spark: SparkSession, deletes: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Fail on a delete row whose file does not match a planned delete file: a mismatch would
    otherwise drop its deletes silently and bring deleted rows back."""
    known = spark.createDataFrame(
        [(k, True) for k in keys],
        T.StructType(
            [T.StructField("_tk_delete", T.StringType()), T.StructField("_tk_known", T.BooleanType())]
        ),
    )
    checked = deletes.join(F.broadcast(known), "_tk_delete", "left")
    missed = F.concat(F.lit("unmatched position delete file "), F.col("_tk_delete"))
    return checked.where(F.assert_true(F.col("_tk_known").isNotNull(), missed).isNull()).drop("_tk_known")


def _equality_deletes(
    spark: SparkSession,
    df: DataFrame,
    tasks: Sequence[FileTask],
    schema: Schema,
    scopes: dict[tuple[int, tuple[Any, ...]], int],
    unpartitioned: frozenset[int],
) -> DataFrame:
    by_ids: dict[tuple[int, ...], dict[str, ManifestEntry]] = {}
    for t in tasks:
        for e in t.deletes.equalities:
            ids = tuple(e.data_file.equality_ids or ())
            if not ids:
                raise CorruptMetadataError(
                    f"equality delete file {e.data_file.file_path} has no equality ids"
                )
            by_ids.setdefault(ids, {})[e.data_file.file_path] = e
    skipped = _skipped_pairs(tasks, unpartitioned)
    for ids, entries in by_ids.items():
        fields = []
        for fid in ids:
            field = next((f for f in schema.fields if f.id == fid), None)
            if field is None:
                raise UnsupportedFeatureError(
                    f"equality deletes on field id {fid}, which is not a top-level column of the current "
                    "schema: tablekeeper cannot apply them yet"
                )
            fields.append(field)
        read_schema = T.StructType([spark_field(f) for f in fields])
        consts = spark.createDataFrame(
            [
                (
                    path_key(p),
                    int(e.sequence_number or 0),
                    -1
                    if e.data_file.spec_id in unpartitioned
                    else scopes.get((e.data_file.spec_id, partition_key(e.data_file.partition)), -2),
                    skipped.get(p, []),
                )
                for p, e in entries.items()
            ],
            T.StructType(
                [
                    T.StructField("_tk_delete", T.StringType()),
                    T.StructField("_tk_dseq", T.LongType()),
                    T.StructField("_tk_dscope", T.IntegerType()),
                    T.StructField("_tk_dskip", T.ArrayType(T.StringType())),
                ]
            ),
        )
        deletes = spark.read.schema(read_schema).parquet(*(glob_escaped(p) for p in entries))
        deletes = deletes.select(
            *(F.col(f.name).alias(f"_tk_eq{i}") for i, f in enumerate(fields)),
            spark_path_key(F.col("_metadata.file_path")).alias("_tk_delete"),
        ).join(F.broadcast(consts), "_tk_delete", "left")
        missed = F.concat(F.lit("unmatched equality delete file "), F.col("_tk_delete"))
        deletes = deletes.where(F.assert_true(F.col("_tk_dseq").isNotNull(), missed).isNull())
        condition = F.col(SEQ) < F.col("_tk_dseq")
        condition = condition & ((F.col("_tk_dscope") == -1) | (F.col("_tk_dscope") == F.col(SCOPE)))
        if skipped:
            condition = condition & ~F.array_contains(F.col("_tk_dskip"), F.col(FILE))
        for i, f in enumerate(fields):
            condition = condition & df[f.name].eqNullSafe(deletes[f"_tk_eq{i}"])
        df = df.join(deletes, condition, "left_anti")
    return df


def _skipped_pairs(tasks: Sequence[FileTask], unpartitioned: frozenset[int]) -> dict[str, list[str]]:
    """Equality delete file -> the data files (path keys) of ``tasks`` it applies to by the
    sequence-number and partition rule but which Iceberg Java's planning skips by the files'
    statistics (the tasks' delete index left it out): the join must not apply it there."""
    skipped: dict[str, list[str]] = {}
    rules = {
        e.data_file.file_path: (
            int(e.sequence_number or 0),
            None
            if e.data_file.spec_id in unpartitioned
            else (e.data_file.spec_id, partition_key(e.data_file.partition)),
        )
        for t in tasks
        for e in t.deletes.equalities
    }
    for t in tasks:
        applied = {e.data_file.file_path for e in t.deletes.equalities}
        seq = int(t.entry.sequence_number or 0)
        scope = (t.file.spec_id, partition_key(t.file.partition))
        for p, (delete_seq, delete_scope) in rules.items():
            if p not in applied and seq < delete_seq and delete_scope in (None, scope):
                skipped.setdefault(p, []).append(path_key(t.file.file_path))
    return skipped


def _lineage(df: DataFrame) -> DataFrame:
    known = F.col(FIRST_ROW_ID).isNotNull()
    row_id = F.coalesce(F.col(ROW_ID.name), F.when(known, F.col(FIRST_ROW_ID) + F.col(POS)))
    updated = F.coalesce(F.col(LAST_UPDATED.name), F.when(known, F.col(SEQ)))
    return df.withColumn(ROW_ID.name, row_id).withColumn(LAST_UPDATED.name, updated)


def _identity_fill(df: DataFrame, meta: TableMetadata, tasks: Sequence[FileTask]) -> DataFrame:
    """Identity partition columns as Iceberg Java reads them: the partition tuple's value in every
    row, whatever a file holds (files converted from Delta hold none)."""
    schema = meta.schema()
    specs = {t.file.spec_id for t in tasks}
    if len(specs) != 1 or len({t.file.partition for t in tasks}) != 1:
        return df  # callers split groups by partition first
    partition = tasks[0].file.partition
    for i, field in meta.spec(next(iter(specs))).identity_columns(schema):
        value = _spark_literal(field.type, partition[i]).cast(spark_type(field.type, field.name))
        df = df.withColumn(field.name, value)
    return df


def _spark_literal(t: IcebergType, value: Any) -> Column:
    if value is None:
        return F.lit(None)
    name = getattr(t, "name", None)
    if name == "date":
        return F.date_from_unix_date(F.lit(int(value)))
    if name == "timestamptz":
        return F.timestamp_micros(F.lit(int(value)))
    if name == "timestamp":
        return F.timestamp_micros(F.lit(int(value))).cast("timestamp_ntz")
    if name == "binary" or isinstance(t, FixedType):
        return F.unhex(F.lit(bytes(value).hex()))
    return F.lit(to_json(t, value)).cast(spark_type(t, "partition value"))


@dataclass(frozen=True)
class Rewritten:
    files: tuple[DataFile, ...]
    directory: str
    writer: str  # "arrow" or "spark"


def _footer(task: tuple[str, int, int, tuple[Any, ...], int | None, Schema, MetricsConfig]) -> DataFile:
    location, size, spec_id, partition, sort_order_id, schema, metrics = task
    io = FileIO.for_location(location)
    with io.open_input(location) as stream:
        footer = pq.read_metadata(stream)
    f = data_file_from_footer(
        footer,
        schema,
        path=location,
        file_size=size,
        spec_id=spec_id,
        partition=partition,
        metrics=metrics,
        floats=_measured_floats(io, location, schema),
    )
    if sort_order_id is not None:
        f = replace(f, sort_order_id=sort_order_id)
    return f


def _measured_floats(io: FileIO, location: str, schema: Schema) -> dict[int, FloatStats]:
    """NaN counts and bounds of a written file's float columns (outside lists and maps), which
    its footer cannot give: read back, those columns only."""
    written = written_fields(schema.fields)
    tops = sorted({path[0] for path, _ in FloatCollector(written).leaves})
    if not tops:
        return {}
    fields = tuple(written[i] for i in tops)
    collector = FloatCollector(fields)
    with io.open_input(location) as stream:
        f = pq.ParquetFile(stream)
        columns, project = projector(f.schema_arrow, fields, None, location)
        names = [x.name for x in fields]
        for batch in f.iter_batches(columns=columns, use_threads=False):
            collector.update(pa.RecordBatch.from_arrays(project(batch), names=names))
    return collector.stats


def rewrite_files(
    spark: SparkSession,
    meta: TableMetadata,
    tasks: Sequence[FileTask],
    target: WriteTarget,
    sort_order_id: int | None,
    writer: str = "auto",
) -> Rewritten:
    """Rewrite ``tasks`` into ``target``; returns the new files with metrics from their footers.
    The caller deletes the directory on failure.

    ``writer="auto"`` reads and writes with Arrow on the executors: streamed straight through
    when the rows stay in their partition unsorted, through a Spark shuffle otherwise (sorts,
    Z-order, another spec). ``writer="spark"`` uses Spark's Parquet reader and writer."""
    blocker = arrow_blocker(meta, target.compression)
    if writer == "auto" and blocker is None:
        common: dict[str, Any] = {
            "directory": target.directory,
            "compression": target.compression,
            "output_files": target.output_files,
            "sizes": target.sizes,
            "sort_order_id": sort_order_id,
            "mapping": name_mapping(meta),
        }
        if not target.shuffles:
            assert target.partition is not None
            files = rewrite_with_arrow(
                spark, meta, tasks, spec_id=target.spec.spec_id, partition=target.partition, **common
            )
            return Rewritten(files, target.directory, "arrow")
        ordering = target.ordering
        if not target.global_sort:
            ordering = Ordering(ordering.terms, ordering.zorder, ordering.zorder_ids, local=True)
        files = rewrite_sorted(
            spark, meta, tasks, spec=target.spec, partition=target.partition, ordering=ordering, **common
        )
        return Rewritten(files, target.directory, "arrow+shuffle")
    if writer == "auto":
        log.info("rewriting %d files through Spark: %s", len(tasks), blocker)
    refuse_for_spark(meta)
    if target.partition is None:
        raise ConfigError(
            "Spark's writer rewrites files within their own spec: --output-spec-id needs --writer auto"
        )
    if any(t.transform != "identity" for t in target.ordering.terms) or target.ordering.zorder is not None:
        raise ConfigError(
            "Spark's writer sorts by plain columns only: transforms and zorder need --writer auto"
        )
    schema = meta.schema()
    v3 = meta.format_version >= 3
    scopes = {
        key: i
        for i, key in enumerate(
            sorted({(t.file.spec_id, partition_key(t.file.partition)) for t in tasks}, key=repr)
        )
    }
    df = read_data_files(
        spark,
        schema,
        (ROW_ID, LAST_UPDATED) if v3 else (),
        name_mapping(meta),
        [t.file.file_path for t in tasks],
    )
    # Before any delete: equality deletes may match on the identity partition columns.
    df = _identity_fill(df, meta, tasks)
    # Rows need their file's constants only for deletes and lineage: without either the rewrite
    # is a plain scan (no per-row file key, no join).
    if v3 or any(t.deletes.count for t in tasks):
        df = df.join(F.broadcast(_constants(spark, tasks, scopes)), FILE, "left")
        # A row whose file is not matched would lose its deletes and lineage: fail, never guess.
        unmatched = F.concat(F.lit("unmatched data file "), F.col(FILE))
        df = df.where(F.assert_true(F.col(SEQ).isNotNull(), unmatched).isNull())
        deleted, bound = _position_deletes(spark, tasks)
        if deleted is not None:
            small = bound * (48 + max(len(t.file.file_path) for t in tasks)) <= BROADCAST_DELETE_BYTES
            df = df.join(F.broadcast(deleted) if small else deleted, [FILE, POS], "left_anti")
        unpartitioned = meta.unpartitioned_spec_ids
        df = _equality_deletes(spark, df, tasks, schema, scopes, unpartitioned)
    if v3:
        df = _lineage(df)
    columns = [F.col(f.name).alias(f.name, metadata={FIELD_ID: f.id}) for f in schema.fields]
    if v3:
        columns += [F.col(f.name).alias(f.name, metadata={FIELD_ID: f.id}) for f in (ROW_ID, LAST_UPDATED)]
    out = df.select(*columns)
    order = [
        (F.col(c).asc_nulls_first() if nulls_first else F.col(c).asc_nulls_last())
        if asc
        else (F.col(c).desc_nulls_first() if nulls_first else F.col(c).desc_nulls_last())
        for c, asc, nulls_first in target.sort
    ]
    if target.global_sort and order:
        out = out.repartitionByRange(target.output_files, *order).sortWithinPartitions(*order)
    elif _read_partitions(spark, [t.size for t in tasks]) >= target.output_files:
        out = out.coalesce(target.output_files)  # merges read splits: no shuffle
        if order:
            out = out.sortWithinPartitions(*order)
    else:
        # Fewer read splits than files wanted (small files pack into few splits): spread rows.
        out = out.repartition(target.output_files)
        if order:
            out = out.sortWithinPartitions(*order)
    (
        out.write.option("compression", target.compression)
        .option("maxRecordsPerFile", target.max_records_per_file)
        .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        .mode("errorifexists")
        .parquet(target.directory)
    )
    return Rewritten(_describe(spark, target, meta, sort_order_id), target.directory, "spark")


def refuse_for_spark(meta: TableMetadata) -> None:
    """Refuse tables Spark's Parquet writer would rewrite wrongly: types it cannot write with
    their ids (lists and maps, uuid, fixed, time, nanosecond timestamps) and initial defaults;
    on a Spark line whose Parquet reader cannot widen types, tables with promoted columns."""
    spark_schema(meta.schema())
    _refuse_initial_defaults(meta.schema())
    require_parquet_widening(meta, "compact with --writer auto (Arrow), or run on Spark 4.0 or later")


def _refuse_initial_defaults(schema: Schema) -> None:
    """Files written before a column with an initial default was added read that default; both
    writers would store null in its place, losing it for good."""

    def walk(fields: Sequence[NestedField], prefix: str) -> None:
        for f in fields:
            if f.initial_default is not None:
                raise UnsupportedFeatureError(
                    f"column {prefix}{f.name} has an initial default (v3): tablekeeper cannot rewrite "
                    "its older files without losing it yet"
                )
            if isinstance(f.type, StructType):
                walk(f.type.fields, f"{prefix}{f.name}.")

    walk(schema.fields, "")


def _conf_bytes(value: str | None, default: int) -> int:
    """A Spark size setting (``134217728``, ``128m``, ``128MB``, ``4194304b``) in bytes."""
    if not value:
        return default
    text = value.strip().lower().rstrip("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    try:
        return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)
    except ValueError:
        return default


def _read_partitions(spark: SparkSession, sizes: Sequence[int]) -> int:
    """How many splits Spark's file scan makes of files of these sizes (its packing rule, which
    charges each file an open cost and caps a split at maxPartitionBytes), at least."""
    conf = spark.conf
    open_cost = int(conf.get("spark.sql.files.openCostInBytes", "4194304") or 4194304)
    max_bytes = int(conf.get("spark.sql.files.maxPartitionBytes", "134217728") or 134217728)
    min_parts = int(
        conf.get("spark.sql.files.minPartitionNum", None) or spark.sparkContext.defaultParallelism
    )
    total = sum(size + open_cost for size in sizes)
    split = min(max_bytes, max(open_cost, total // max(1, min_parts)))
    return max(1, -(-total // max(1, split)))


def _describe(
    spark: SparkSession, target: WriteTarget, meta: TableMetadata, sort_order_id: int | None
) -> tuple[DataFile, ...]:
    schema = meta.schema()
    metrics = MetricsConfig.for_table(meta.properties, schema, sorted_columns(meta))
    io = FileIO.for_location(target.directory)
    written, clutter = [], []
    for info in io.list(target.directory, recursive=True):
        name = info.location.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and not name.startswith((".", "_")):
            written.append(info)
        else:
            clutter.append(info.location)  # checksums and markers of the Hadoop committer
    io.delete_many(clutter)
    partition = target.partition if target.partition is not None else ()
    tasks = [
        (i.location, i.size, target.spec.spec_id, partition, sort_order_id, schema, metrics) for i in written
    ]
    if not tasks:
        return ()
    sc = spark.sparkContext
    if len(tasks) <= DRIVER_FOOTERS:
        # A footer is one small read: for a group's few files, threads here beat starting tasks.
        with ThreadPoolExecutor(max_workers=min(16, len(tasks))) as pool:
            files = list(pool.map(_footer, tasks))
    else:
        files = sc.parallelize(tasks, max(1, min(len(tasks), sc.defaultParallelism))).map(_footer).collect()
    # Spark writes a file even for a task left without rows (every row deleted): not a data file.
    io.delete_many([f.file_path for f in files if f.record_count == 0])
    return tuple(sorted((f for f in files if f.record_count > 0), key=lambda f: f.file_path))


def new_directory(data_root: str, label: str) -> str:
    return f"{data_root.rstrip('/')}/compact-{label}-{uuid.uuid4().hex[:12]}"
