"""rewrite-equality-deletes on the executors: one Spark task per group reads, for each of its data
files, only the equality columns (by field id, partition values and v3 initial defaults filled as
a reader fills them), finds the rows the applicable equality deletes remove, and writes their
positions: one Puffin file of deletion vectors on v3 (each the union of the file's existing DV,
the position delete files that apply to it and the new positions), or a Parquet position delete
file on v2 (only positions not deleted already). A data file whose matched rows are all deleted
already gets nothing new. The task returns the new files' metadata and what it found per file.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from tablekeeper.errors import CorruptMetadataError, StorageError
from tablekeeper.iceberg.arrow_project import Deleted, partition_constant, positions, projector
from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.name_mapping import NameMapping
from tablekeeper.iceberg.position_delete_merge import write_position_delete_file
from tablekeeper.iceberg.roaring import RoaringBitmap64
from tablekeeper.iceberg.types import IcebergType, NestedField
from tablekeeper.io import FileIO
from tablekeeper.spark.arrow_rewrite import deleted_positions
from tablekeeper.spark.data_read import path_key
from tablekeeper.spark.equality import batches, equality_mask, equality_rows
from tablekeeper.spark.position_deletes import write_dvs


@dataclass(frozen=True)
class TargetWork:
    location: str
    record_count: int
    dv: tuple[str, int, int, int] | None  # the DV that applies: puffin location, offset, length, cardinality
    position_files: tuple[tuple[str, str], ...]  # (position delete file, its format) that apply
    fills: tuple[tuple[int, IcebergType, Any], ...]  # (index in fields, type, partition value)
    equalities: tuple[tuple[str, tuple[int, ...]], ...]  # (equality delete file, its field ids)


@dataclass(frozen=True)
class GroupWork:
    index: int
    spec_id: int
    partition: tuple[Any, ...]
    fields: tuple[NestedField, ...]  # the top-level columns holding the equality columns
    mapping: NameMapping | None
    targets: tuple[TargetWork, ...]
    directory: str  # where the new files go
    prefix: str  # their names start with it (the run's staging token)
    to_dvs: bool
    compression: str
    file_scoped: bool = True  # v2: a position delete file per data file, not one per group


@dataclass(frozen=True)
class Resolved:
    """One data file: rows the equality deletes match, and how many of them were live."""

    location: str
    matched: int
    new: int


@dataclass(frozen=True)
class GroupOutput:
    index: int
    added: tuple[DataFile, ...]
    written: tuple[str, ...]
    resolved: tuple[Resolved, ...]

    @property
    def new_rows(self) -> int:
        return sum(r.new for r in self.resolved)


def _merged(
    work: GroupWork, target: TargetWork, cache: dict[str, pa.Table], merged: dict[object, pa.Table | None]
) -> list[tuple[tuple[int, ...], pa.Table]]:
    """The equality deletes that apply to ``target``, one deduplicated table of keys per set of
    equality field ids: a streaming writer leaves thousands of small delete files, and matching
    a batch against each would cost one pass per file. Data files of a partition mostly share
    their delete files, so each union is built once per task."""
    by_ids: dict[tuple[int, ...], list[str]] = {}
    for location, ids in target.equalities:
        by_ids.setdefault(ids, []).append(location)
    out = []
    for ids, locations in by_ids.items():
        key = (ids, tuple(sorted(locations)))
        if key not in merged:
            tables = [equality_rows(work.fields, work.mapping, loc, ids, cache) for loc in locations]
            keys = [t for t in tables if len(t)]
            if not keys:
                merged[key] = None
            else:
                whole = pa.concat_tables(keys) if len(keys) > 1 else keys[0]
                merged[key] = whole.group_by(whole.column_names).aggregate([]) if len(keys) > 1 else whole
        table = merged[key]
        if table is not None:
            out.append((ids, table))
    return out


def _matched(
    work: GroupWork, target: TargetWork, cache: dict[str, pa.Table], merged: dict[object, pa.Table | None]
) -> pa.Array:
    """Positions (ascending) of the rows of ``target`` some equality delete matches."""
    deletes = _merged(work, target, cache, merged)
    hits: list[pa.Array] = []
    with FileIO.for_location(target.location).open_input(target.location) as stream:
        f = pq.ParquetFile(stream, coerce_int96_timestamp_unit="us")
        columns, project = projector(f.schema_arrow, work.fields, work.mapping, target.location)
        offset = 0
        for n, batch in batches(f, columns):
            arrays = project(batch if batch is not None else pa.record_batch([], names=[]), n)
            for i, t, value in target.fills:
                arrays[i] = partition_constant(arrays[i], t, value)
            mask = None
            for ids, rows in deletes:
                gone = equality_mask(work.fields, arrays, ids, rows)
                if gone is not None:
                    mask = gone if mask is None else pc.or_(mask, gone)
            if mask is not None:
                hits.append(positions(offset, n).filter(mask))
            offset += n
    if offset != target.record_count:
        raise CorruptMetadataError(
            f"{target.location} holds {offset} rows but its manifest entry says {target.record_count}"
        )
    return pa.concat_arrays(hits) if hits else pa.array([], pa.int64())


def resolve_group(work: GroupWork) -> GroupOutput:
    """The task body (also callable on the driver)."""
    equality_cache: dict[str, pa.Table] = {}
    merged: dict[object, pa.Table | None] = {}
    position_cache: dict[str, dict[str, pa.Array]] = {}
    wanted = frozenset(path_key(t.location) for t in work.targets)
    resolved: list[Resolved] = []
    found: list[tuple[TargetWork, Deleted, pa.Array]] = []
    for target in work.targets:
        try:
            existing = deleted_positions(
                target.location, target.dv, target.position_files, wanted, position_cache
            )
            matched = _matched(work, target, equality_cache, merged)
        except (pa.ArrowException, OSError) as err:
            kind = StorageError if isinstance(err, OSError) else CorruptMetadataError
            reason = (str(err).strip().splitlines() or [err.__class__.__name__])[0]
            raise kind(f"resolving equality deletes of {target.location}: {reason}") from err
        new = (
            matched.filter(pc.invert(pc.is_in(matched, value_set=existing.positions)))
            if len(existing)
            else matched
        )
        resolved.append(Resolved(target.location, len(matched), len(new)))
        if len(new):
            found.append((target, existing, new))
    if not found:
        return GroupOutput(work.index, (), (), tuple(resolved))
    # A retried or speculative attempt writes its own names; the driver keeps only reported files.
    tag = f"{work.prefix}-g{work.index}-{uuid.uuid4().hex[:8]}"
    io = FileIO.for_location(work.directory)
    io.mkdirs(work.directory)
    if work.to_dvs:
        path = f"{work.directory}/{tag}-deletes.puffin"
        blobs: list[tuple[str, RoaringBitmap64 | bytes]] = [
            (t.location, RoaringBitmap64(pa.concat_arrays([existing.positions, new]).to_pylist()))
            for t, existing, new in found
        ]
        added = write_dvs(io, path, blobs, work.spec_id, work.partition)
        return GroupOutput(work.index, added, (path,), tuple(resolved))
    # v2: one position delete file per data file (write.delete.granularity=file, Iceberg's
    # default: a reader opens only its own file's deletes), or one per group (partition).
    chunks = [[f] for f in found] if work.file_scoped else [found]
    added_files: list[DataFile] = []
    written: list[str] = []
    try:
        for n, chunk in enumerate(chunks):
            path = f"{work.directory}/{tag}-{n:05d}-deletes.parquet"
            rows = pa.table(
                {
                    "file_path": pa.concat_arrays(
                        [pa.array([t.location] * len(new), pa.string()) for t, _, new in chunk]
                    ),
                    "pos": pa.concat_arrays([new for _, _, new in chunk]),
                }
            )
            rows = rows.sort_by([("file_path", "ascending"), ("pos", "ascending")])
            out = write_position_delete_file(
                rows, path, spec_id=work.spec_id, partition=work.partition, compression=work.compression
            )
            io.create_if_absent(path, out.data)
            written.append(path)
            added_files.append(out.file)
    except BaseException:
        io.delete_many(written)
        raise
    return GroupOutput(work.index, tuple(added_files), tuple(written), tuple(resolved))


def resolve_groups(spark: SparkSession, work: Sequence[GroupWork]) -> list[GroupOutput]:
    """Every group on the executors."""
    if not work:
        return []
    # As many tasks as the session runs at once, each taking its share of the groups: a group is
    # often a fraction of a second of work, less than a task's own cost.
    slices = min(len(work), max(1, spark.sparkContext.defaultParallelism))
    rdd = spark.sparkContext.parallelize(list(work), slices)
    return list(rdd.map(resolve_group).collect())
