"""convert-delta's executor path from a Parquet checkpoint: each task reads its share of the
checkpoint's row groups itself, drops the files the commits after the checkpoint supersede, and
writes the manifests of the rest. The driver parses only those commits (``CheckpointTail``).

Against replaying in Spark SQL this has no scan job, no shuffle and no window, and no file row
crosses between the JVM and Python: a checkpoint names each file once (the protocol), so no file
needs to meet the others. That promise is checked, not trusted: the tasks send a digest per
surviving key, and a checkpoint that breaks it is handed back (``None``) for the Spark SQL
replay, which groups every action, as the driver's replay would.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from tablekeeper.commit.summary import SummaryDelta
from tablekeeper.delta.reconcile import Superseded, key_digests, keyed, reconcile, unique_digests
from tablekeeper.delta.replay import UnreadableCheckpoint, checkpoint_file_actions
from tablekeeper.errors import CorruptMetadataError, FileNotFound, TablekeeperError
from tablekeeper.io import FileIO
from tablekeeper.spark.convert_files import DataFileContext, TaskOutput, Written, arrow_task, gathered
from tablekeeper.tables.delta import CheckpointTail

log = logging.getLogger(__name__)

# A slice smaller than this costs more in task overhead than it saves in parallel work.
MIN_SLICE_ROWS = 25_000
_BATCH_ROWS = 32_768


@dataclass(frozen=True)
class Slice:
    """Rows ``start``..``stop`` of one row group of one checkpoint file."""

    location: str
    row_group: int
    start: int
    stop: int


def plan_slices(io: FileIO, locations: tuple[str, ...], tasks: int) -> list[Slice]:
    """The checkpoint's row groups cut into about ``tasks`` slices of even size: a writer that
    put a million files in one row group (Spark's 128 MiB) still spreads over every core; a
    slice within a row group decodes the group up to its own end, no further."""
    groups: list[tuple[str, int, int]] = []
    for location in locations:
        try:
            with io.open_input(location) as stream:
                meta = pq.read_metadata(stream)
        except FileNotFound:
            name = location.rsplit("/", 1)[-1]
            raise CorruptMetadataError(f"the checkpoint names {name}, which is missing") from None
        except (pa.ArrowInvalid, OSError) as err:
            raise UnreadableCheckpoint(f"{location} is not a readable Parquet file ({err})") from err
        groups.extend((location, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups))
    total = sum(rows for _, _, rows in groups)
    target = max(MIN_SLICE_ROWS, math.ceil(total / max(1, tasks)))
    slices: list[Slice] = []
    for location, index, rows in groups:
        step = math.ceil(rows / max(1, math.ceil(rows / target)))
        slices.extend(
            Slice(location, index, start, min(rows, start + step)) for start in range(0, rows, step)
        )
    return slices


def read_slice(io: FileIO, piece: Slice) -> pa.Table | None:
    """The slice's ``add`` and ``remove`` columns, or None when the file has neither."""
    try:
        with io.open_input(piece.location) as stream:
            pf = pq.ParquetFile(stream)
            columns = [c for c in ("add", "remove") if c in pf.schema_arrow.names]
            if not columns:
                return None
            taken: list[pa.RecordBatch] = []
            seen = 0
            for batch in pf.iter_batches(
                batch_size=_BATCH_ROWS, row_groups=[piece.row_group], columns=columns
            ):
                end = seen + batch.num_rows
                first, last = max(seen, piece.start), min(end, piece.stop)
                if last > first:
                    taken.append(batch.slice(first - seen, last - first))
                seen = end
                if seen >= piece.stop:
                    break
            schema = pa.schema([pf.schema_arrow.field(c) for c in columns])
            return pa.Table.from_batches(taken, schema=schema)
    except (pa.ArrowInvalid, OSError) as err:
        raise UnreadableCheckpoint(f"{piece.location} is not a readable Parquet file ({err})") from err


def slice_files(root: str, piece: Slice, superseded: Superseded) -> tuple[pa.Table | None, bytes]:
    """The slice's live adds (keyed; None without any) and the digests of every key it keeps."""
    table = read_slice(FileIO.for_location(piece.location), piece)
    if table is None:
        return None, b""
    kept = [superseded.survivors(keyed(part, root)) for part in checkpoint_file_actions(table, 0)]
    digests = b"".join(key_digests(part) for part in kept)
    # checkpoint_file_actions gives one table per kind; an empty kind gives none.
    adds = [part for part in kept if part.num_rows and pc.all(part.column("is_add")).as_py()]
    if not adds:
        return None, digests
    return (adds[0] if len(adds) == 1 else pa.concat_tables(adds, promote_options="permissive")), digests


def checkpoint_manifests(
    spark: SparkSession, root: str, tail: CheckpointTail, ctx: DataFileContext, per_manifest: int = 20_000
) -> Written | None:
    """Manifests for every live add: the checkpoint's, read by the tasks, and the commits'
    winners, which go to one more task. None (after removing what the tasks wrote) when the
    checkpoint names a file twice: the caller replays in Spark SQL instead."""
    from tablekeeper.spark.convert_files import task_count

    io = FileIO.for_location(root)
    slices = plan_slices(io, tail.parquet, task_count(spark))
    commit_adds = reconcile([tail.newer], root).files
    items: list[Slice | pa.Table] = [*slices, *([commit_adds] if commit_adds.num_rows else [])]
    newer = tail.newer

    def task(pieces: Iterable[Slice | pa.Table]) -> Iterable[tuple[TaskOutput, bytes]]:
        superseded = Superseded(newer)
        for piece in pieces:
            try:
                adds, digests = (
                    slice_files(root, piece, superseded) if isinstance(piece, Slice) else (piece, b"")
                )
            except TablekeeperError as err:
                yield TaskOutput((), SummaryDelta(), (), error=err), b""
                continue
            if adds is None:
                yield TaskOutput((), SummaryDelta(), ()), digests
            else:
                yield arrow_task(ctx, adds, per_manifest), digests

    if not items:
        return gathered([], ctx)
    results = spark.sparkContext.parallelize(items, len(items)).mapPartitions(task).collect()
    written = gathered([output for output, _ in results], ctx)
    if unique_digests(digests for _, digests in results):
        log.info("checkpoint read by %d tasks: %d manifests", len(items), len(written.manifests))
        return written
    log.warning("the checkpoint names a file more than once: the log is replayed in Spark SQL instead")
    FileIO.for_location(ctx.table_location).delete_many([m.manifest_path for m in written.manifests])
    return None
