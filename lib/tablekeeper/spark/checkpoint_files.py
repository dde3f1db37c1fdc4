"""Delta replay from a Parquet checkpoint on the executors: each task reads its share of the
checkpoint's row groups itself and drops the files the commits after the checkpoint supersede;
the driver parses only those commits (``CheckpointTail``). convert-delta's executor path then
writes the manifests of the rest in the same tasks (``checkpoint_manifests``); the Spark replay
brings them to the driver as Arrow (``checkpoint_state``).

Against replaying in Spark SQL this has no scan job, no shuffle and no window, and no file row
crosses between the JVM and Python: a checkpoint names each file once (the protocol), so no file
needs to meet the others. That promise is checked, not trusted: the tasks send a digest per
surviving key, and a checkpoint that breaks it is handed back (``None``) for the Spark SQL
replay, which groups every action (keeping one of a checkpoint's duplicates, not necessarily
the one the driver's replay keeps: Delta's writers never produce them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from tablekeeper.commit.summary import SummaryDelta
from tablekeeper.delta.reconcile import (
    Reconciled,
    Superseded,
    concat_tables,
    key_digests,
    keyed,
    reconcile,
    unique_digests,
)
from tablekeeper.delta.replay import UnreadableCheckpoint, checkpoint_file_actions
from tablekeeper.errors import CorruptMetadataError, FileNotFound, TablekeeperError
from tablekeeper.io import FileIO
from tablekeeper.spark.convert_files import (
    DataFileContext,
    TaskOutput,
    Written,
    arrow_task,
    gathered,
    task_count,
)
from tablekeeper.tables.delta import CHECKPOINT_ORDER_BASE, CheckpointTail

log = logging.getLogger(__name__)

# The commits after the checkpoint are parsed on the driver: past this many bytes of them, the
# whole log is replayed in Spark SQL instead.
TAIL_BYTES = 64 * 1024 * 1024
# A slice smaller than this costs more in task overhead than it saves in parallel work.
MIN_SLICE_ROWS = 25_000
# Slices whose state comes to the driver are kept this small: the driver's JVM holds a round of
# them at once on their way.
STATE_SLICE_ROWS = 100_000
_BATCH_ROWS = 32_768
_DUPLICATES = "the checkpoint names a file more than once: the log is replayed in Spark SQL instead"


@dataclass(frozen=True)
class Slice:
    """Rows ``start``..``stop`` of one row group of one checkpoint file; ``offset``: the rows of
    the checkpoint before them (which orders its actions as the driver's replay does)."""

    location: str
    row_group: int
    start: int
    stop: int
    offset: int = 0


def plan_slices(
    io: FileIO, locations: tuple[str, ...], tasks: int, max_rows: int | None = None
) -> list[Slice]:
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
    target = target if max_rows is None else min(target, max_rows)
    slices: list[Slice] = []
    offset = 0
    for location, index, rows in groups:
        if rows == 0:
            continue  # pyarrow writes an empty table as one empty row group
        step = math.ceil(rows / max(1, math.ceil(rows / target)))
        for start in range(0, rows, step):
            slices.append(Slice(location, index, start, min(rows, start + step), offset + start))
        offset += rows
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


def slice_actions(root: str, piece: Slice, superseded: Superseded) -> tuple[list[pa.Table], bytes]:
    """The slice's actions no newer one supersedes (keyed; a table per kind, each non-empty) and
    the digests of their keys."""
    table = read_slice(FileIO.for_location(piece.location), piece)
    if table is None:
        return [], b""
    order = CHECKPOINT_ORDER_BASE + piece.offset
    kept = [superseded.survivors(keyed(part, root)) for part in checkpoint_file_actions(table, order)]
    kept = [part for part in kept if part.num_rows]
    return kept, b"".join(key_digests(part) for part in kept)


def _is_add(part: pa.Table) -> bool:
    return bool(pc.all(part.column("is_add")).as_py())


def slice_files(root: str, piece: Slice, superseded: Superseded) -> tuple[pa.Table | None, bytes]:
    """The slice's live adds (keyed; None without any) and the digests of every key it keeps."""
    kept, digests = slice_actions(root, piece, superseded)
    adds = [part for part in kept if _is_add(part)]
    return (concat_tables(adds) if adds else None), digests


def checkpoint_manifests(
    spark: SparkSession, root: str, tail: CheckpointTail, ctx: DataFileContext, per_manifest: int = 20_000
) -> Written | None:
    """Manifests for every live add: the checkpoint's, read by the tasks, and the commits'
    winners, which go to one more task. None (after removing what the tasks wrote) when the
    checkpoint names a file twice: the caller replays in Spark SQL instead."""
    io = FileIO.for_location(root)
    slices = plan_slices(io, tail.parquet, task_count(spark))
    commit_adds = reconcile([tail.newer], root).files
    items: list[Slice | pa.Table] = [*slices, *([commit_adds] if commit_adds.num_rows else [])]
    newer = spark.sparkContext.broadcast(tail.newer)

    def task(pieces: Iterable[Slice | pa.Table]) -> Iterable[tuple[TaskOutput, bytes]]:
        superseded = Superseded(newer.value)
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
    try:
        results = spark.sparkContext.parallelize(items, len(items)).mapPartitions(task).collect()
    finally:
        newer.unpersist()
    written = gathered([output for output, _ in results], ctx)
    if unique_digests(digests for _, digests in results):
        log.info("checkpoint read by %d tasks: %d manifests", len(items), len(written.manifests))
        return written
    log.warning(_DUPLICATES)
    FileIO.for_location(ctx.table_location).delete_many([m.manifest_path for m in written.manifests])
    return None


def _ipc(tables: list[pa.Table]) -> bytes:
    sink = pa.BufferOutputStream()
    for table in tables:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _from_ipc(data: bytes) -> list[pa.Table]:
    tables = []
    reader = pa.BufferReader(data)
    while reader.tell() < len(data):
        tables.append(pa.ipc.open_stream(reader).read_all())
    return tables


def checkpoint_state(
    spark: SparkSession, root: str, tail: CheckpointTail, paths: Sequence[str] | None = None
) -> Reconciled | None:
    """The live files and tombstones (all, or those of the absolute ``paths``) in the driver's
    replay layout: the checkpoint's read by the tasks and sent as Arrow streams, the commits' from
    ``tail``. None when the checkpoint names a file twice: the caller replays in Spark SQL."""
    sc = spark.sparkContext
    slices = plan_slices(FileIO.for_location(root), tail.parquet, task_count(spark), STATE_SLICE_ROWS)
    wanted = None if paths is None else pa.array(sorted(set(paths)), pa.string())
    # Broadcast once: each round's job would otherwise ship the commits' actions again.
    newer = sc.broadcast(tail.newer)

    def pick(part: pa.Table) -> pa.Table:
        if wanted is None:
            return part
        return part.filter(pc.is_in(part.column("absolute_path"), value_set=wanted))

    def task(pieces: Iterable[Slice]) -> Iterable[tuple[bytes, bytes, TablekeeperError | None]]:
        superseded = Superseded(newer.value)
        for piece in pieces:
            try:
                kept, digests = slice_actions(root, piece, superseded)
            except TablekeeperError as err:  # raised on the driver as itself
                yield b"", b"", err
                continue
            yield _ipc([t for t in (pick(part) for part in kept) if t.num_rows]), digests, None

    parts: list[pa.Table] = []
    digests: list[bytes] = []
    try:
        if slices:
            rdd = sc.parallelize(slices, len(slices)).mapPartitions(task)
            # A round of partitions at a time: the JVM holds no more than a round's results.
            step = max(1, sc.defaultParallelism)
            for first in range(0, len(slices), step):
                wanted_parts = range(first, min(first + step, len(slices)))
                for data, keys, error in sc.runJob(rdd, lambda rows: rows, wanted_parts):
                    if error is not None:
                        raise error
                    parts.extend(_from_ipc(data))
                    digests.append(keys)
    finally:
        newer.unpersist()
    if not unique_digests(digests):
        log.warning(_DUPLICATES)
        return None
    commits = reconcile([tail.newer], root)
    files = [*(p for p in parts if _is_add(p)), pick(commits.files)]
    tombstones = [*(p for p in parts if not _is_add(p)), pick(commits.tombstones)]
    return Reconciled(concat_tables(files), concat_tables(tombstones))
