"""Rewriting a file group with Arrow on the executors: the fast path of compaction.

Spark's Parquet reader and writer cost most of a bin-pack rewrite (rows cross into the JVM and
back through its row format). When a group needs no shuffle (no sort, no equality deletes), each
output file is one Spark task that streams its input files through pyarrow: columns resolved by
field id (or the name mapping), identity partition columns from the partition tuple, position deletes and DVs
dropped by position, v3 row lineage made explicit, rows buffered into row groups of the table's
size and written with the table's codec. The task returns the new file's metrics read from its
footer, so the driver lists nothing and trusts no file it was not told about.
"""

from __future__ import annotations

import logging
import uuid
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import SparkSession

from tablekeeper.errors import CorruptMetadataError, StorageError
from tablekeeper.iceberg.arrow_project import (
    Deleted,
    kept,
    partition_constant,
    positions,
    projector,
    unsupported,
    write_schema,
    written_fields,
)
from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.metrics import MetricsConfig
from tablekeeper.iceberg.name_mapping import NameMapping
from tablekeeper.iceberg.position_delete_merge import read_position_deletes
from tablekeeper.iceberg.puffin import deserialize_dv
from tablekeeper.iceberg.rewrite_plan import FileTask
from tablekeeper.iceberg.transforms import parse_transform
from tablekeeper.iceberg.types import IcebergType
from tablekeeper.io import FileIO
from tablekeeper.spark.arrow_output import NO_ROW_LIMIT, Job, Output
from tablekeeper.spark.concurrent import no_cycle_collection
from tablekeeper.spark.data_read import SCHEME_AUTHORITY, path_key
from tablekeeper.spark.equality import batches, equality_mask, equality_rows, path_of
from tablekeeper.spark.schema import LAST_UPDATED, ROW_ID
from tablekeeper.spark.settle import Sized, settle, sizes_of

log = logging.getLogger(__name__)

ROW_GROUP_BYTES = "write.parquet.row-group-size-bytes"
PAGE_BYTES = "write.parquet.page-size-bytes"
DICT_BYTES = "write.parquet.dict-size-bytes"
LEVEL = "write.parquet.compression-level"
# Parquet-mr's defaults, which Iceberg Java writes with when the table sets no level; only these
# codecs take a level (Java ignores one for the others, pyarrow refuses it).
_DEFAULT_LEVELS = {"zstd": 3, "gzip": 6}
# Spark's lz4 is Hadoop's LZ4 framing, pyarrow's is LZ4_RAW, which older readers lack: Spark writes it.
_PYARROW_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "none": "none"}
_BATCH_ROWS = 1 << 16


def arrow_blocker(meta: TableMetadata, compression: str) -> str | None:
    """Why this table's files cannot be rewritten through Arrow, or None when they can."""
    if compression not in _PYARROW_CODECS:
        return f"codec {compression}"
    return next((r for f in meta.schema().fields if (r := unsupported(f.type, f.name))), None)


def sorted_columns(meta: TableMetadata) -> tuple[str, ...]:
    """Columns of the table's sort order whose transform keeps their order (Java gives them
    bounds even when the default mode has none)."""
    schema = meta.schema()
    names = []
    for f in meta.sort_order().fields:
        name = schema.column_name(f.source_id)
        if name is not None and parse_transform(f.transform).preserves_order:
            names.append(name)
    return tuple(names)


@dataclass(frozen=True)
class _Input:
    location: str
    sequence_number: int
    first_row_id: int | None
    dv: tuple[str, int, int, int] | None  # puffin location, offset, length, cardinality
    position_files: tuple[tuple[str, str], ...]  # (position delete file, its format)
    fills: tuple[tuple[int, IcebergType, Any], ...]  # (index in fields, type, partition value)
    equalities: tuple[tuple[str, tuple[int, ...]], ...]  # (delete file, equality field ids)


def make_job(
    meta: TableMetadata,
    *,
    directory: str,
    compression: str,
    sort_order_id: int | None,
    mapping: NameMapping | None,
    sizes: tuple[int, int, int],
) -> Job:
    schema = meta.schema()
    v3 = meta.format_version >= 3
    codec = _PYARROW_CODECS[compression]
    return Job(
        fields=(*written_fields(schema.fields), *((ROW_ID, LAST_UPDATED) if v3 else ())),
        lineage=v3,
        mapping=mapping,
        directory=directory,
        codec=codec,
        level=meta.property_int(LEVEL, _DEFAULT_LEVELS[codec]) if codec in _DEFAULT_LEVELS else None,
        row_group_bytes=meta.property_int(ROW_GROUP_BYTES, 128 << 20) or (128 << 20),
        page_bytes=meta.property_int(PAGE_BYTES, 1 << 20) or (1 << 20),
        dict_bytes=meta.property_int(DICT_BYTES, 2 << 20) or (2 << 20),
        schema=schema,
        metrics=MetricsConfig.for_table(meta.properties, schema, sorted_columns(meta)),
        sort_order_id=sort_order_id,
        target_bytes=sizes[0],
        small_bytes=sizes[1],
        max_bytes=sizes[2],
    )


class _HasSize(Protocol):
    @property
    def size(self) -> int: ...


S = TypeVar("S", bound=_HasSize)


def _bins(tasks: Sequence[S], count: int) -> list[tuple[list[S], int]]:
    """``tasks`` in order, cut into runs near ``total / count`` bytes, each with the number of
    files it is written into (a run holding a file larger than that writes several)."""
    total = sum(t.size for t in tasks)
    ideal = max(1.0, total / max(1, count))
    bins: list[list[S]] = [[]]
    size = 0
    for t in tasks:
        # A run closes only once it is half a file or more (no tiny file between two large ones),
        # and the last run takes the rest (no tiny file at the end).
        if bins[-1] and len(bins) < count and size >= ideal / 2 and size + t.size > ideal:
            bins.append([])
            size = 0
        bins[-1].append(t)
        size += t.size
    return list(zip(bins, _files_per_run([sum(t.size for t in b) for b in bins], ideal, count), strict=True))


def _files_per_run(sizes: Sequence[int], ideal: float, count: int) -> list[int]:
    """Output files per run summing to ``count`` (what the plan and health promise): each run's
    share of ``count`` by its bytes, at least one, the remainders going to the largest fractions
    (there are never more runs than ``count``)."""
    shares = [size / ideal for size in sizes]
    files = [max(1, int(share)) for share in shares]
    extra = max(1, count) - sum(files)
    while extra != 0:
        if extra > 0:
            i = max(range(len(files)), key=lambda j: shares[j] - files[j])
            files[i] += 1
        else:
            fewer = [j for j in range(len(files)) if files[j] > 1]
            if not fewer:
                break
            i = min(fewer, key=lambda j: shares[j] - files[j])
            files[i] -= 1
        extra += -1 if extra > 0 else 1
    return files


def make_input(meta: TableMetadata, job: Job, t: FileTask) -> _Input:
    dv = None
    if t.deletes.dv is not None:
        f = t.deletes.dv.data_file
        if f.content_offset is None or f.content_size_in_bytes is None:
            raise CorruptMetadataError(f"deletion vector {f.file_path} has no content offset or size")
        dv = (f.file_path, f.content_offset, f.content_size_in_bytes, f.record_count)
    # Identity partition columns read as Iceberg Java reads them: the partition tuple's value in
    # every row (files converted from Delta hold none; an imported file may contradict it).
    index = {f.id: n for n, f in enumerate(job.fields)}
    fills = tuple(
        (index[field.id], field.type, t.file.partition[i])
        for i, field in meta.spec(t.file.spec_id).identity_columns(job.schema)
        if field.id in index
    )
    equalities = []
    for e in t.deletes.equalities:
        ids = tuple(e.data_file.equality_ids or ())
        if not ids:
            raise CorruptMetadataError(f"equality delete file {e.data_file.file_path} has no equality ids")
        for fid in ids:
            if path_of(job.fields, fid) is None:
                raise CorruptMetadataError(
                    f"equality delete file {e.data_file.file_path} deletes by field id {fid}, which is not "
                    "a primitive column of the current schema outside lists and maps"
                )
        equalities.append((e.data_file.file_path, ids))
    return _Input(
        t.file.file_path,
        int(t.entry.sequence_number or 0),
        t.file.first_row_id,
        dv,
        tuple(
            sorted({(p.data_file.file_path, p.data_file.file_format.upper()) for p in t.deletes.positions})
        ),
        fills,
        tuple(equalities),
    )


def rewrite_with_arrow(
    spark: SparkSession,
    meta: TableMetadata,
    tasks: Sequence[FileTask],
    *,
    directory: str,
    spec_id: int,
    partition: tuple[Any, ...],
    compression: str,
    output_files: int,
    sizes: tuple[int, int, int],
    sort_order_id: int | None,
    mapping: NameMapping | None,
) -> tuple[DataFile, ...]:
    """Rewrite ``tasks`` into files of ``sizes`` (target, small, maximum written bytes): one
    task per run of input files, each rolling its files at the target, then the files left under
    it merged (``settle``) until at most one per partition is."""
    job = make_job(
        meta,
        directory=directory,
        compression=compression,
        sort_order_id=sort_order_id,
        mapping=mapping,
        sizes=sizes,
    )
    bins = [([make_input(meta, job, t) for t in b], None) for b, _ in _bins(tasks, max(1, output_files))]
    io = FileIO.for_location(directory)
    io.mkdirs(directory)

    def run(work: Sequence[tuple[list[_Input], tuple[int, int] | None]]) -> list[DataFile]:
        written: list[DataFile] = (
            spark.sparkContext.parallelize(list(enumerate(work)), len(work))
            .flatMap(lambda ib: _write_bin(job, ib[0], ib[1][0], ib[1][1], spec_id, partition))
            .collect()
        )
        return written

    def again(files: Sequence[DataFile], count: int) -> list[DataFile]:
        # Only the last merge (one task) lets its last file take the rest: merges in parallel
        # leave theirs under the target for that one.
        runs = _bins([Sized(f) for f in files], count)
        return run(
            [
                ([plain_input(s.file) for s in b], sizes_of(f.file for f in b) if count == 1 else None)
                for b, _ in runs
            ]
        )

    return keep_reported(directory, settle(sizes, directory, run(bins), again))


def plain_input(f: DataFile) -> _Input:
    """A file this rewrite wrote, read again as it is (its lineage columns already explicit)."""
    return _Input(f.file_path, 0, None, None, (), (), ())


def keep_reported(directory: str, written: Sequence[DataFile]) -> tuple[DataFile, ...]:
    """A failed or speculative task attempt may have left a partial file: only reported files
    count, the rest of the directory is removed."""
    io = FileIO.for_location(directory)
    reported = {f.file_path for f in written}
    io.delete_many([i.location for i in io.list(directory, recursive=True) if i.location not in reported])
    return tuple(sorted(written, key=lambda f: f.file_path))


def dv_positions(location: str, offset: int, length: int, cardinality: int) -> pa.Array:
    with FileIO.for_location(location).open_input(location) as stream:
        blob = stream.read_at(length, offset)
    try:
        with no_cycle_collection():
            values: array[int] = deserialize_dv(blob).to_array()
    except CorruptMetadataError as err:  # the blob's own checks cannot name the file
        raise CorruptMetadataError(f"deletion vector in {location}: {err.message}") from None
    if len(values) != cardinality:
        raise CorruptMetadataError(
            f"deletion vector in {location} holds {len(values)} positions, not {cardinality}"
        )
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def position_file_positions(location: str, file_format: str, wanted: frozenset[str]) -> dict[str, pa.Array]:
    """A position delete file's positions (Parquet, ORC or Avro) by the path key of the data file
    they delete from, for the ``wanted`` data files only (a delete file may cover many more)."""
    with FileIO.for_location(location).open_input(location) as stream:
        table = read_position_deletes(stream, file_format, location)
    keys = pc.replace_substring_regex(table.column("file_path"), SCHEME_AUTHORITY, "", max_replacements=1)
    rows = pa.table({"k": keys, "p": table.column("pos")})
    rows = rows.filter(pc.is_in(rows.column("k"), value_set=pa.array(sorted(wanted), pa.string())))
    grouped = rows.group_by("k").aggregate([("p", "list")])
    lists = grouped.column("p_list").combine_chunks()
    return {str(k): lists[i].values for i, k in enumerate(grouped.column("k").to_pylist())}


def deleted_positions(
    data_file: str,
    dv: tuple[str, int, int, int] | None,
    position_files: Sequence[tuple[str, str]],
    wanted: frozenset[str],
    cache: dict[str, dict[str, pa.Array]],
) -> Deleted:
    """The positions of ``data_file`` its DV (puffin location, offset, length, cardinality) and
    position delete files ((location, format); read once per ``cache``, for the ``wanted`` data
    files' path keys) delete."""
    parts: list[pa.Array] = []
    if dv is not None:
        parts.append(dv_positions(*dv))
    key = path_key(data_file)
    for location, file_format in position_files:
        if location not in cache:
            cache[location] = position_file_positions(location, file_format, wanted)
        found = cache[location].get(key)
        if found is not None:
            parts.append(found)
    return Deleted.of(parts)


def task_name(index: int) -> str:
    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    return f"{index:05d}-{attempt}-{uuid.uuid4().hex[:12]}"


def _write_bin(
    job: Job,
    index: int,
    items: Sequence[_Input],
    expected: tuple[int, int] | None,
    spec_id: int,
    partition: tuple[Any, ...],
) -> list[DataFile]:
    out = Output(job, task_name(index), NO_ROW_LIMIT, spec_id, partition, expected)
    FileIO.for_location(job.directory).mkdirs(job.directory)
    try:
        for batch in read_inputs(job, items):
            out.add(batch)
        out.close()
    except BaseException:
        out.abandon()
        raise
    return out.done


def read_inputs(job: Job, items: Sequence[_Input]) -> Iterator[pa.RecordBatch]:
    """The live rows of ``items`` (deletes applied, lineage made explicit) as batches of the
    job's write schema."""
    cache: dict[str, dict[str, pa.Array]] = {}
    equality_cache: dict[str, pa.Table] = {}
    wanted = frozenset(path_key(i.location) for i in items)
    for item in items:
        try:
            yield from _read(
                job,
                item,
                deleted_positions(item.location, item.dv, item.position_files, wanted, cache),
                equality_cache,
            )
        except (pa.ArrowException, OSError) as err:
            # Arrow's and the store's own errors name neither the file nor tablekeeper: the
            # driver would only see a Py4J line.
            kind = StorageError if isinstance(err, OSError) else CorruptMetadataError
            reason = (str(err).strip().splitlines() or [err.__class__.__name__])[0]
            raise kind(f"rewriting {item.location}: {reason}") from err


def _read(
    job: Job, item: _Input, deleted: Deleted, equality_cache: dict[str, pa.Table]
) -> Iterator[pa.RecordBatch]:
    row_id, updated = len(job.fields) - 2, len(job.fields) - 1
    schema = write_schema(job.fields)
    equalities = [
        (ids, equality_rows(job.fields, job.mapping, location, ids, equality_cache))
        for location, ids in item.equalities
    ]
    io = FileIO.for_location(item.location)
    with io.open_input(item.location) as stream:
        f = pq.ParquetFile(stream, coerce_int96_timestamp_unit="us")
        columns, project = projector(f.schema_arrow, job.fields, job.mapping, item.location)
        offset = 0
        for n, batch in batches(f, columns):
            arrays = project(batch if batch is not None else pa.record_batch([], names=[]), n)
            for i, t, value in item.fills:
                arrays[i] = partition_constant(arrays[i], t, value)
            if job.lineage and item.first_row_id is not None:
                ids = pc.add(positions(offset, n), item.first_row_id)
                arrays[row_id] = pc.coalesce(arrays[row_id], ids)
                arrays[updated] = pc.coalesce(arrays[updated], pa.scalar(item.sequence_number, pa.int64()))
            rows = pa.RecordBatch.from_arrays(arrays, schema=schema)
            mask = kept(offset, n, deleted)
            for ids, deletes in equalities:
                gone = equality_mask(job.fields, arrays, ids, deletes)
                if gone is not None:
                    live = pc.invert(gone)
                    mask = live if mask is None else pc.and_(mask, live)
            yield rows if mask is None else rows.filter(mask)
            offset += n
        if offset != f.metadata.num_rows:
            raise CorruptMetadataError(
                f"{item.location} yielded {offset} rows but its footer says {f.metadata.num_rows}"
            )
