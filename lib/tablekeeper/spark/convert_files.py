"""convert-delta's large path: data files built and manifests written on the executors.

The Delta state stays a Spark DataFrame (``spark_state``); each task turns its share of live adds
into Iceberg data files (metrics from the Delta stats, footers read where the log has no record
count) and writes their manifests. Only manifest-list rows, summary counts and the few adds that
carry deletion vectors come back to the driver, so its memory does not grow with the file count.
"""

from __future__ import annotations

import datetime as dt
import pickle
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from tablekeeper.commit.added_manifests import added_delta, write_added_manifests
from tablekeeper.commit.summary import SummaryDelta
from tablekeeper.delta.file_columns import added_files
from tablekeeper.delta.models import AddFile
from tablekeeper.delta.schema import ColumnMapping, DeltaStruct
from tablekeeper.delta.snapshot import add_file_from_row
from tablekeeper.delta.to_iceberg import MappedSchema, zoneless_partition_columns
from tablekeeper.delta_row_ids import unsound_file
from tablekeeper.errors import TablekeeperError
from tablekeeper.iceberg.content import DataFile, ManifestFile
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.types import Schema
from tablekeeper.io import FileIO
from tablekeeper.row_counts import (
    Counts,
    PartitionKey,
    delta_partition,
    live_delta_rows,
    merge_counts,
    stats_record_count,
    written_counts,
)
from tablekeeper.spark.concurrent import no_cycle_collection
from tablekeeper.spark.manifests import write_manifest_group
from tablekeeper.tables.delta import build_data_file


@dataclass(frozen=True)
class DataFileContext:
    """What a task needs to turn adds into data files and manifests (pickled to executors)."""

    struct: DeltaStruct
    mapping: ColumnMapping
    mapped: MappedSchema
    partition_columns: tuple[str, ...]
    spec: PartitionSpec
    schema: Schema
    format_version: int
    table_location: str
    snapshot_id: int
    commit_uuid: str
    # convert-delta --verify: count Delta's live rows per partition from the adds, and read the
    # written manifests back to count Iceberg's.
    verify: bool = False
    # Row lineage carried from Delta: files take baseRowId as first_row_id and their row commit
    # version as data sequence number, unless one holds copied row ids Iceberg cannot see
    # (``delta_row_ids``); ``operations``: the commits the log has, by version.
    carry_row_ids: bool = False
    materialized: Mapping[str, int] = field(default_factory=dict, hash=False)
    operations: Mapping[int, str | None] = field(default_factory=dict)
    # The writer's zone for zone-less timestamp partition values; None: UTC, and the tasks say
    # which columns had such values (``TaskOutput.zoneless``).
    zone: dt.tzinfo | None = None


@dataclass(frozen=True)
class TaskOutput:
    manifests: tuple[ManifestFile, ...]
    delta: SummaryDelta
    with_dv: tuple[tuple[AddFile, DataFile], ...]  # deletes are written by the driver
    delta_counts: Counts | None = None
    manifest_counts: dict[str, Counts] | None = None
    names: dict[PartitionKey, tuple[Any, ...]] | None = None
    unsound: str | None = None  # why this task's files cannot carry Delta's row ids
    # A typed error the task met: raised on the driver as itself, not as Spark's task failure.
    error: TablekeeperError | None = None
    zoneless: tuple[str, ...] = ()  # timestamp partition columns read as UTC (no zone stated)


def build_task(
    ctx: DataFileContext, rows: Iterable[dict[str, Any]], per_manifest: int
) -> Iterator[TaskOutput]:
    """One task's adds as data files in manifests of at most ``per_manifest`` entries."""
    with no_cycle_collection():
        output = _build(ctx, rows, per_manifest)
    yield output


def _build(ctx: DataFileContext, rows: Iterable[dict[str, Any]], per_manifest: int) -> TaskOutput:
    files: list[DataFile] = []
    manifests: list[ManifestFile] = []
    with_dv: list[tuple[AddFile, DataFile]] = []
    delta = SummaryDelta()
    counts: Counts | None = {} if ctx.verify else None
    written: dict[str, Counts] | None = {} if ctx.verify else None
    names: dict[PartitionKey, tuple[Any, ...]] = {}
    unsound: str | None = None
    sequence_numbers: dict[str, int] = {}
    for row in rows:
        add = add_file_from_row(row)
        f = build_data_file(
            add,
            ctx.struct,
            ctx.mapping,
            ctx.mapped,
            ctx.partition_columns,
            spec_id=ctx.spec.spec_id,
            zone=ctx.zone,
        )
        if ctx.carry_row_ids and unsound is None:
            io = FileIO.for_location(add.absolute_path)
            unsound = unsound_file(io, [add], ctx.materialized, ctx.operations)
            f = replace(f, first_row_id=add.base_row_id)
            sequence_numbers[f.file_path] = int(add.default_row_commit_version or 0)
        files.append(f)
        if counts is not None:
            key, values = delta_partition(
                add, ctx.spec.spec_id, ctx.struct, ctx.mapping, ctx.partition_columns, ctx.zone
            )
            names.setdefault(key, values)
            # Where the log has no count the footer was read for the data file: that is the source.
            rows_in_file = stats_record_count(add.stats)
            rows_in_file = f.record_count if rows_in_file is None else rows_in_file
            counts[key] = counts.get(key, 0) + live_delta_rows(add, rows_in_file)
        if add.deletion_vector is not None:
            with_dv.append((add, f))
        if len(files) >= per_manifest:
            manifests.extend(_write(ctx, files, sequence_numbers, written))
            delta = delta + SummaryDelta.of(files)
            files = []
    if files:
        manifests.extend(_write(ctx, files, sequence_numbers, written))
        delta = delta + SummaryDelta.of(files)
    if counts is None:
        return TaskOutput(tuple(manifests), delta, tuple(with_dv), unsound=unsound)
    return TaskOutput(tuple(manifests), delta, tuple(with_dv), counts, written, names, unsound)


def _write(
    ctx: DataFileContext,
    files: list[DataFile],
    sequence_numbers: dict[str, int],
    written: dict[str, Counts] | None,
) -> list[ManifestFile]:
    manifests = write_manifest_group(
        files,
        data_sequence_numbers=sequence_numbers,
        table_location=ctx.table_location,
        format_version=ctx.format_version,
        specs={ctx.spec.spec_id: ctx.spec},
        schema=ctx.schema,
        snapshot_id=ctx.snapshot_id,
        name_prefix=f"{ctx.commit_uuid}-",
    )
    if written is not None:
        # Counted from the entries as encoded, each manifest read back for its entry count:
        # decoding 1M entries again would cost half of the conversion.
        for m in manifests:
            written[m.manifest_path] = written_counts(m, files)
    return manifests


def arrow_task(ctx: DataFileContext, table: pa.Table, per_manifest: int) -> TaskOutput:
    """One task's adds: as columns when they can be (``delta.file_columns``), else one at a time."""
    try:
        output = _arrow_task(ctx, table, per_manifest)
    except TablekeeperError as err:
        return TaskOutput((), SummaryDelta(), (), error=err)
    if ctx.zone is None and "partition_values" in table.column_names:
        values = table.column("partition_values")
        found = zoneless_partition_columns(values, ctx.struct, ctx.mapping, ctx.partition_columns)
        output = replace(output, zoneless=found)
    return output


def _arrow_task(ctx: DataFileContext, table: pa.Table, per_manifest: int) -> TaskOutput:
    if table.num_rows == 0:
        return TaskOutput((), SummaryDelta(), ())
    if not ctx.verify and not ctx.carry_row_ids:
        files = added_files(table, ctx.struct, ctx.mapping, ctx.mapped, ctx.partition_columns, ctx.zone)
        manifests = None
        if files is not None:
            manifests = write_added_manifests(
                files,
                location=ctx.table_location,
                format_version=ctx.format_version,
                spec=ctx.spec,
                schema=ctx.schema,
                snapshot_id=ctx.snapshot_id,
                name_prefix=f"{ctx.commit_uuid}-",
                per_manifest=per_manifest,
                threads=1,  # a task per core already
            )
        if files is not None and manifests is not None:
            return TaskOutput(tuple(manifests), added_delta(files, manifests), ())
    return next(iter(build_task(ctx, table.to_pylist(), per_manifest)))


def task_count(spark: SparkSession) -> int:
    """Partitions for the data-file tasks: two per core, so a slow task does not idle the rest."""
    return max(1, spark.sparkContext.defaultParallelism * 2)


@dataclass(frozen=True)
class Written:
    """What the tasks wrote: manifests, their summary counts, the adds with DVs (with their data
    files), and with ``verify`` Delta's counts and each manifest's counts as written."""

    manifests: list[ManifestFile]
    delta: SummaryDelta
    with_dv: list[tuple[AddFile, DataFile]]
    delta_counts: Counts | None = None
    manifest_counts: dict[str, Counts] | None = None
    names: dict[PartitionKey, tuple[Any, ...]] | None = None
    unsound: str | None = None
    zoneless: frozenset[str] = frozenset()  # as ``TaskOutput.zoneless``, of every task


# What the tasks read of a live add: the replay's columns a data file is built from.
ADD_COLUMNS = (
    "path",
    "absolute_path",
    "partition_values",
    "size",
    "modification_time",
    "data_change",
    "stats",
    "tags",
    "dv",
    "base_row_id",
    "default_row_commit_version",
    "clustering_provider",
)


def write_data_manifests(live: DataFrame, ctx: DataFileContext, per_manifest: int = 20_000) -> Written:
    """Manifests for every live add in ``live`` (one task per partition, see ``task_count``)."""
    live = live.select(*ADD_COLUMNS)

    def task(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        # An empty partition may come without a batch.
        chunks = list(batches)
        output = arrow_task(ctx, pa.Table.from_batches(chunks), per_manifest) if chunks else None
        yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(output)], pa.binary())], ["output"])

    # No count first: that would replay the log twice. Every task writes its own manifests.
    # Arrow batches, not rows: a task whose adds come out as columns builds no object per file.
    rows = live.mapInArrow(task, "output binary").collect()
    outputs = [pickle.loads(r.output) for r in rows]
    return gathered([o for o in outputs if o is not None], ctx)


def gathered(outputs: list[TaskOutput], ctx: DataFileContext) -> Written:
    """The tasks' outputs as one ``Written``; the first typed error a task met is raised (what
    the tasks wrote is the caller's to remove)."""
    error = next((o.error for o in outputs if o.error is not None), None)
    if error is not None:
        raise error
    manifests = [m for o in outputs for m in o.manifests]
    delta = SummaryDelta()
    for o in outputs:
        delta = delta + o.delta
    with_dv = [pair for o in outputs for pair in o.with_dv]
    unsound = next((o.unsound for o in outputs if o.unsound is not None), None)
    zoneless = frozenset(c for o in outputs for c in o.zoneless)
    if not ctx.verify:
        return Written(manifests, delta, with_dv, unsound=unsound, zoneless=zoneless)
    return Written(
        manifests,
        delta,
        with_dv,
        merge_counts(o.delta_counts or {} for o in outputs),
        {path: c for o in outputs for path, c in (o.manifest_counts or {}).items()},
        {k: v for o in outputs for k, v in (o.names or {}).items()},
        unsound,
        zoneless,
    )
