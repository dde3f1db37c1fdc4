"""convert-delta's file building: Iceberg data files from Delta adds, and deletes from their DVs.

Data files get their metrics from the Delta stats; only files whose log entry has no record count
are opened (their Parquet footer). A Delta DV becomes, in a v3 table, a DV blob copied into one
Puffin file per snapshot; in a v2 table, one position delete file per data file.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.catalog.base import LoadedTable
from tablekeeper.delta.models import AddFile
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta.to_iceberg import MappedSchema
from tablekeeper.errors import UnsupportedFeatureError
from tablekeeper.iceberg.content import DATA, POSITION_DELETES, DataFile
from tablekeeper.iceberg.puffin import PuffinWriter
from tablekeeper.io import FileIO
from tablekeeper.tables.delta import build_data_file, read_deletion_vector
from tablekeeper.tables.iceberg import iter_live_entries

FILE_PATH_ID, POS_ID = 2147483546, 2147483545
_POS_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID)}),
    ]
)


@dataclass(frozen=True)
class WrittenDeletes:
    files: tuple[DataFile, ...]
    paths: tuple[str, ...]  # what was written, to remove again if the commit fails


def data_files(
    adds: Sequence[AddFile],
    snapshot: DeltaSnapshot,
    mapped: MappedSchema,
    spec_id: int,
    io: FileIO,
    zone: dt.tzinfo | None = None,
) -> list[DataFile]:
    struct, mapping, partition_columns = snapshot.schema, snapshot.column_mapping, snapshot.partition_columns
    return [
        build_data_file(add, struct, mapping, mapped, partition_columns, spec_id=spec_id, io=io, zone=zone)
        for add in adds
    ]


def delete_files(
    with_dv: Sequence[tuple[AddFile, DataFile]],
    root: str,
    io: FileIO,
    location: str,
    format_version: int,
    name_prefix: str = "",
) -> WrittenDeletes:
    """Delete files for data files whose Delta add carries a DV (pairs: the add and its data file);
    their names start with ``name_prefix`` (a run's staging token)."""
    pairs = [(a, f) for a, f in with_dv if a.deletion_vector is not None]
    if not pairs:
        return WrittenDeletes((), ())
    if format_version >= 3:
        return _puffin_dvs(pairs, root, io, location, name_prefix)
    out: list[DataFile] = []
    paths: list[str] = []
    try:
        for add, f in pairs:
            assert add.deletion_vector is not None
            bitmap, _ = read_deletion_vector(io, root, add.deletion_vector)
            positions = bitmap.to_array()
            table = pa.table(
                {
                    "file_path": pa.array([f.file_path] * len(positions), pa.string()),
                    "pos": pa.array(positions, pa.int64()),
                },
                schema=_POS_DELETE_SCHEMA,
            )
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            data = sink.getvalue().to_pybytes()
            path = f"{location}/data/{name_prefix}{uuid.uuid4()}-pos-deletes.parquet"
            FileIO.for_location(path).create_if_absent(path, data)
            paths.append(path)
            out.append(
                DataFile(
                    content=POSITION_DELETES,
                    file_path=path,
                    file_format="PARQUET",
                    partition=f.partition,
                    record_count=len(positions),
                    file_size_in_bytes=len(data),
                    referenced_data_file=f.file_path,
                    spec_id=f.spec_id,
                )
            )
    except BaseException:
        FileIO.for_location(location).delete_many(paths)
        raise
    return WrittenDeletes(tuple(out), tuple(paths))


def _puffin_dvs(
    pairs: Sequence[tuple[AddFile, DataFile]], root: str, io: FileIO, location: str, name_prefix: str
) -> WrittenDeletes:
    writer = PuffinWriter(created_by="tablekeeper convert-delta")
    blobs = []
    for add, f in pairs:
        assert add.deletion_vector is not None
        _, blob = read_deletion_vector(io, root, add.deletion_vector)
        blobs.append((f, writer.add_dv(f.file_path, blob)))
    puffin = writer.finish()
    path = f"{location}/data/{name_prefix}{uuid.uuid4()}-deletes.puffin"
    FileIO.for_location(path).create_if_absent(path, puffin.data)
    files = tuple(
        DataFile(
            content=POSITION_DELETES,
            file_path=path,
            file_format="PUFFIN",
            partition=f.partition,
            record_count=blob.cardinality,
            file_size_in_bytes=puffin.file_size,
            referenced_data_file=f.file_path,
            content_offset=blob.offset,
            content_size_in_bytes=blob.length,
            spec_id=f.spec_id,
        )
        for f, blob in blobs
    )
    return WrittenDeletes(files, (path,))


# A DV id no Delta DV has: files the target already deletes from compare as "DV changed".
_ICEBERG_DELETES = "iceberg-deletes"


def target_state(table: LoadedTable) -> pa.Table:
    """The target's live data files as a Delta-like state; any file with deletes gets a DV id no
    Delta DV matches, so its deletes are replaced by the source's."""
    meta = table.metadata
    deleted: set[str] = set()
    paths: list[str] = []
    for e in iter_live_entries(table.io, meta, meta.current_snapshot()):
        if e.data_file.content == DATA:
            paths.append(e.data_file.file_path)
        elif e.data_file.referenced_data_file:
            deleted.add(e.data_file.referenced_data_file)
        else:
            raise UnsupportedFeatureError(
                f"target {table.identifier} has a delete file without a referenced data file "
                f"({e.data_file.file_path}), which convert-delta did not write: cannot re-sync it"
            )
    return pa.table(
        {
            "absolute_path": pa.array(paths, pa.string()),
            "dv_id": pa.array([_ICEBERG_DELETES if p in deleted else None for p in paths], pa.string()),
        }
    )
