"""rewrite-position-deletes on the executors: one Spark task per group reads the group's position
delete files, whatever their format (Parquet, ORC, Avro), and on v3 the DVs it merges into; keeps
the entries that still apply, and writes the new files: Parquet position delete files of about
the target size (v2) or one Puffin file with a deletion vector per data file (v3).
The task returns the new files' metadata, so the driver lists nothing and commits only what it
was told about.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tablekeeper import __version__
from tablekeeper.errors import ConfigError, CorruptMetadataError
from tablekeeper.iceberg.content import POSITION_DELETES, DataFile
from tablekeeper.iceberg.conversions import to_json
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.position_delete_merge import (
    applying,
    bitmaps,
    merge,
    read_position_deletes,
    rows_per_file,
    split,
    write_position_delete_file,
)
from tablekeeper.iceberg.position_delete_plan import DeleteGroup, Scope, TrackedFile, scope_of
from tablekeeper.iceberg.puffin import deserialize_dv, write_dv_file
from tablekeeper.iceberg.roaring import RoaringBitmap64
from tablekeeper.io import FileIO
from tablekeeper.spark.schema import spark_type

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupWork:
    group: DeleteGroup
    directory: str  # where the new files go
    prefix: str  # their names start with it (the run's staging token)
    target_file_size: int
    compression: str


@dataclass(frozen=True)
class GroupOutput:
    index: int
    added: tuple[DataFile, ...]
    written: tuple[str, ...]  # every file the task wrote (DVs share one Puffin file)
    merged_dvs: tuple[TrackedFile, ...]  # v3: the live DVs merged into the new ones
    entries_read: int
    entries_kept: int  # distinct (file_path, pos) written

    @property
    def dangling(self) -> int:
        """Entries dropped because they no longer apply (their data file is gone, or newer)."""
        return self.entries_read - self.entries_kept


def _read_dv(dv: TrackedFile) -> RoaringBitmap64:
    f = dv.file
    if f.content_offset is None or f.content_size_in_bytes is None or f.referenced_data_file is None:
        raise CorruptMetadataError(f"deletion vector in {f.file_path} has no offset, size or data file")
    with FileIO.for_location(f.file_path).open_input(f.file_path) as stream:
        blob = stream.read_at(f.content_size_in_bytes, f.content_offset)
    try:
        bitmap = deserialize_dv(blob)
    except CorruptMetadataError as err:  # the blob's own checks cannot name the file
        raise CorruptMetadataError(f"deletion vector in {f.file_path}: {err.message}") from None
    if bitmap.cardinality != f.record_count:
        raise CorruptMetadataError(
            f"deletion vector for {f.referenced_data_file} in {f.file_path} holds {bitmap.cardinality} "
            f"positions, its entry says {f.record_count}"
        )
    return bitmap


def rewrite_group(work: GroupWork) -> GroupOutput:
    """The task body (also callable on the driver): read, filter, merge, write."""
    group = work.group
    live = dict(group.data_files)
    parts = []
    read = 0
    for d in group.deletes:
        with FileIO.for_location(d.file.file_path).open_input(d.file.file_path) as stream:
            rows = read_position_deletes(stream, d.file.file_format, d.file.file_path)
        read += rows.num_rows
        parts.append(applying(rows, d.sequence_number, live))
    rows = merge(parts)
    written: list[str] = []
    # A retried or speculative attempt writes its own names; the driver keeps only reported files.
    tag = f"{work.prefix}-g{group.index}-{uuid.uuid4().hex[:8]}"
    io = FileIO.for_location(work.directory)
    try:
        if not group.to_dvs:
            added: list[DataFile] = []
            per_file = rows_per_file(group.input_size, group.input_records, work.target_file_size)
            for i, chunk in enumerate(split(rows, per_file)):
                path = f"{work.directory}/{tag}-{i:05d}-deletes.parquet"
                out = write_position_delete_file(
                    chunk,
                    path,
                    spec_id=group.spec_id,
                    partition=group.partition,
                    compression=work.compression,
                )
                io.create_if_absent(path, out.data)
                written.append(path)
                added.append(out.file)
            return GroupOutput(group.index, tuple(added), tuple(written), (), read, rows.num_rows)
        return _to_dvs(work, tag, rows.num_rows, bitmaps(rows), read, written, io)
    except BaseException:
        io.delete_many(written)
        raise


def _to_dvs(
    work: GroupWork,
    tag: str,
    kept: int,
    new: dict[str, RoaringBitmap64],
    read: int,
    written: list[str],
    io: FileIO,
) -> GroupOutput:
    group = work.group
    old = {str(t.file.referenced_data_file): t for t in group.dvs}
    merged: list[TrackedFile] = []
    blobs: list[tuple[str, RoaringBitmap64 | bytes]] = []
    for path in sorted(new):
        bitmap = new[path]
        if path in old:
            bitmap = _read_dv(old[path]).union(bitmap)
            merged.append(old[path])
        blobs.append((path, bitmap))
    if not blobs:
        return GroupOutput(group.index, (), (), (), read, kept)
    path = f"{work.directory}/{tag}-deletes.puffin"
    added = write_dvs(io, path, blobs, group.spec_id, group.partition)
    written.append(path)
    return GroupOutput(group.index, added, tuple(written), tuple(merged), read, kept)


def write_dvs(
    io: FileIO,
    path: str,
    blobs: Sequence[tuple[str, RoaringBitmap64 | bytes]],
    spec_id: int,
    partition: tuple[Any, ...],
) -> tuple[DataFile, ...]:
    """One Puffin file at ``path`` with a DV per (data file, positions) of ``blobs``, and the
    delete file entry of each DV."""
    data, locations = write_dv_file(blobs, f"tablekeeper {__version__}")
    io.create_if_absent(path, data)
    return tuple(
        DataFile(
            content=POSITION_DELETES,
            file_path=path,
            file_format="PUFFIN",
            partition=partition,
            record_count=loc.cardinality,
            file_size_in_bytes=len(data),
            spec_id=spec_id,
            referenced_data_file=loc.referenced_data_file,
            content_offset=loc.offset,
            content_size_in_bytes=loc.length,
        )
        for loc in locations
    )


class _Reported(Protocol):
    @property
    def written(self) -> tuple[str, ...]: ...


def rewrite_groups(spark: SparkSession, work: Sequence[GroupWork]) -> list[GroupOutput]:
    """Every group as one Spark task. A failed attempt removes what it wrote; one killed outright
    leaves files the caller removes (``keep_reported``) or its staging journal collects."""
    if not work:
        return []
    rdd = spark.sparkContext.parallelize(list(work), len(work))
    return list(rdd.map(rewrite_group).collect())


def keep_reported(directory: str, outputs: Sequence[_Reported]) -> None:
    """Remove what killed or speculative task attempts left in the run's directory: only files
    the tasks reported are kept."""
    io = FileIO.for_location(directory)
    reported = {p for o in outputs for p in o.written}
    io.delete_many([i.location for i in io.list(directory, recursive=True) if i.location not in reported])


def _text(value: object, t: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    out = to_json(t, value)  # type: ignore[arg-type]
    return str(out).lower() if isinstance(out, bool) else str(out)


def partitions_matching(
    spark: SparkSession, meta: TableMetadata, files: Sequence[DataFile], where: str
) -> frozenset[Scope]:
    """The (spec, partition) scopes of ``files`` whose identity partition values satisfy the
    Spark SQL predicate ``where``. A column a spec does not partition by is null in its rows, so
    a predicate on it does not match them (the job rewrites less, never more)."""
    schema = meta.schema()
    scopes: dict[Scope, DataFile] = {}
    for f in files:
        scopes.setdefault(scope_of(f), f)
    if not scopes:
        return frozenset()
    columns = {}
    for spec_id in {s[0] for s in scopes}:
        for _, field in meta.spec(spec_id).identity_columns(schema):
            columns[field.id] = field
    ids = sorted(columns)
    rows = []
    keys = list(scopes)
    for n, key in enumerate(keys):
        f = scopes[key]
        values: dict[int, object] = {}
        for i, field in meta.spec(f.spec_id).identity_columns(schema):
            values[field.id] = f.partition[i]
        rows.append((n, *(_text(values.get(i), columns[i].type) for i in ids)))
    raw = spark.createDataFrame(
        rows,
        T.StructType(
            [T.StructField("_tk_scope", T.IntegerType())]
            + [T.StructField(f"_tk_id{i}", T.StringType()) for i in ids]
        ),
    )
    typed = []
    for i in ids:
        c = columns[i]
        binary = getattr(c.type, "name", None) == "binary" or type(c.type).__name__ == "FixedType"
        value = (
            F.unhex(F.col(f"_tk_id{i}")) if binary else F.col(f"_tk_id{i}").cast(spark_type(c.type, c.name))
        )
        typed.append(value.alias(c.name))
    df = raw.select(F.col("_tk_scope"), *typed)
    try:
        matched = df.where(F.expr(where)).select("_tk_scope").collect()
    except Exception as err:
        reason = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), err.__class__.__name__)
        raise ConfigError(
            f"--where {where!r} is not a predicate on the table's identity partition columns "
            f"({reason[:200]}): e.g. \"cat = 'a'\""
        ) from err
    return frozenset(keys[int(r[0])] for r in matched)
