"""Merging position deletes: reading position delete files, keeping the entries that still apply,
and writing them back as Parquet position delete files or deletion vectors, as Iceberg Java
writes them. Works on bytes and streams; the caller opens and creates the files.

A Parquet position delete file has the columns ``file_path`` (field id 2147483546) and ``pos``
(2147483545), both required, rows sorted by path then position. Its metrics are Java's
``PositionDeleteWriter``'s: column sizes for both columns, no value or null counts for them, and
bounds only when every row names one data file (then ``referenced_data_file`` names it too, so
readers match the file without reading it).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import orc

from tablekeeper.errors import CorruptMetadataError, TablekeeperError, UnsupportedFeatureError
from tablekeeper.iceberg.content import POSITION_DELETES, DataFile
from tablekeeper.iceberg.parquet import FIELD_ID_KEY
from tablekeeper.iceberg.roaring import RoaringBitmap64

FILE_PATH_ID = 2147483546
POS_ID = 2147483545
_SCHEMA_JSON = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {
            "id": FILE_PATH_ID,
            "name": "file_path",
            "required": True,
            "type": "string",
            "doc": "Path of a file in which a deleted row is stored",
        },
        {
            "id": POS_ID,
            "name": "pos",
            "required": True,
            "type": "long",
            "doc": "Ordinal position of a deleted row in the target data file",
        },
    ],
}
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path", pa.string(), nullable=False, metadata={FIELD_ID_KEY: str(FILE_PATH_ID).encode()}
        ),
        pa.field("pos", pa.int64(), nullable=False, metadata={FIELD_ID_KEY: str(POS_ID).encode()}),
    ],
    # Java's Parquet writer records the Iceberg schema in the footer.
    metadata={b"iceberg.schema": json.dumps(_SCHEMA_JSON, separators=(",", ":")).encode()},
)
# Rows per row group: position deletes are tiny, so a file's rows fit in few groups.
_ROW_GROUP_ROWS = 1 << 20


def empty() -> pa.Table:
    return POSITION_DELETE_SCHEMA.empty_table()


def read_position_deletes(source: Any, file_format: str = "PARQUET", location: str | None = None) -> pa.Table:
    """The (file_path, pos) rows of a position delete file (bytes or a seekable binary stream) in
    any format the spec allows: Parquet, ORC or Avro. Columns are found by field id where the
    format's reader exposes it (Parquet, Avro), else by the spec's reserved names (ORC: pyarrow
    does not expose ORC type attributes); the optional ``row`` column is not needed.

    A file the format's reader cannot decode (truncated, corrupt) is a ``CorruptMetadataError``
    naming ``location``: raised in an executor task, it reaches the driver as itself (exit 3)."""
    try:
        return _read_any(source, file_format)
    except TablekeeperError as err:
        if location is None or location in err.message:
            raise
        raise type(err)(f"position delete file {location}: {err.message}") from err
    except (pa.ArrowException, ValueError, OSError, EOFError, IndexError, KeyError, TypeError) as err:
        raise CorruptMetadataError(
            f"position delete file {location or '(in memory)'} is not readable as {file_format.upper()} "
            f"(truncated or corrupt): {str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from err


def _read_any(source: Any, file_format: str) -> pa.Table:
    stream = pa.BufferReader(source) if isinstance(source, (bytes, bytearray)) else source
    fmt = file_format.upper()
    if fmt == "PARQUET":
        return _read_parquet(stream)
    if fmt == "ORC":
        return _read_orc(stream)
    if fmt == "AVRO":
        return _read_avro(stream)
    raise UnsupportedFeatureError(
        f"position delete file format {file_format!r} is not one the spec allows (Parquet, ORC, Avro)"
    )


def _typed(paths: Any, positions: Any) -> pa.Table:
    return pa.table([paths.cast(pa.string()), positions.cast(pa.int64())], schema=POSITION_DELETE_SCHEMA)


def _read_parquet(stream: Any) -> pa.Table:
    f = pq.ParquetFile(stream)
    by_id = {(c.metadata or {}).get(FIELD_ID_KEY, b""): c.name for c in f.schema_arrow}
    path_col = by_id.get(str(FILE_PATH_ID).encode(), "file_path")
    pos_col = by_id.get(str(POS_ID).encode(), "pos")
    names = set(f.schema_arrow.names)
    if path_col not in names or pos_col not in names:
        raise CorruptMetadataError("position delete file has no file_path and pos columns")
    table = f.read(columns=[path_col, pos_col], use_threads=False)
    return _typed(table.column(path_col), table.column(pos_col))


def _read_orc(stream: Any) -> pa.Table:
    f = orc.ORCFile(stream)
    names = set(f.schema.names)
    if "file_path" not in names or "pos" not in names:
        raise CorruptMetadataError("ORC position delete file has no file_path and pos columns")
    table = f.read(columns=["file_path", "pos"])
    return _typed(table.column("file_path"), table.column("pos"))


def _read_avro(stream: Any) -> pa.Table:
    reader = fastavro.reader(stream)
    schema = reader.writer_schema
    fields = schema.get("fields", []) if isinstance(schema, dict) else []
    by_id = {str(f.get("field-id")): f["name"] for f in fields if "field-id" in f}
    path_col = by_id.get(str(FILE_PATH_ID), "file_path")
    pos_col = by_id.get(str(POS_ID), "pos")
    names = {f["name"] for f in fields}
    if path_col not in names or pos_col not in names:
        raise CorruptMetadataError("Avro position delete file has no file_path and pos columns")
    paths: list[Any] = []
    positions: list[Any] = []
    for record in reader:
        paths.append(record[path_col])  # type: ignore[index]
        positions.append(record[pos_col])  # type: ignore[index]
    return _typed(pa.array(paths, pa.string()), pa.array(positions, pa.int64()))


def applying(rows: pa.Table, delete_sequence: int, live: Mapping[str, int]) -> pa.Table:
    """The rows that delete a row today: their data file is live (in the delete file's partition:
    ``live`` holds only those) with a data sequence number at most the delete file's. Iceberg
    matches paths exactly, and so does this."""
    if rows.num_rows == 0 or not live:
        return rows.slice(0, 0)
    paths = pa.array(list(live), pa.string())
    seqs = pa.array(list(live.values()), pa.int64())
    where = pc.index_in(rows.column("file_path"), value_set=paths)
    seq = pc.take(seqs, where)
    keep = pc.fill_null(pc.less_equal(seq, pa.scalar(delete_sequence, pa.int64())), False)
    return rows.filter(keep)


def merge(parts: Sequence[pa.Table]) -> pa.Table:
    """The union of ``parts``, each (file_path, pos) once, sorted by path then position."""
    if not parts:
        return empty()
    rows = pa.concat_tables([p.select(["file_path", "pos"]).cast(POSITION_DELETE_SCHEMA) for p in parts])
    unique = rows.group_by(["file_path", "pos"], use_threads=False).aggregate([])
    ordered = unique.sort_by([("file_path", "ascending"), ("pos", "ascending")])
    return pa.table([ordered.column("file_path"), ordered.column("pos")], schema=POSITION_DELETE_SCHEMA)


def split(rows: pa.Table, rows_per_file: int) -> list[pa.Table]:
    """Consecutive slices of at most ``rows_per_file`` rows (none for no rows)."""
    step = max(1, rows_per_file)
    return [rows.slice(i, step) for i in range(0, rows.num_rows, step)]


@dataclass(frozen=True)
class Written:
    data: bytes
    file: DataFile


def write_position_delete_file(
    rows: pa.Table,
    path: str,
    *,
    spec_id: int,
    partition: tuple[Any, ...],
    compression: str = "zstd",
) -> Written:
    """Parquet bytes of a position delete file holding ``rows`` (sorted) and its DataFile."""
    if rows.num_rows == 0:
        raise ValueError("a position delete file needs at least one row")
    sink = pa.BufferOutputStream()
    pq.write_table(
        rows.cast(POSITION_DELETE_SCHEMA),
        sink,
        compression=compression,
        row_group_size=_ROW_GROUP_ROWS,
        use_dictionary=["file_path"],
        write_statistics=True,
    )
    data = sink.getvalue().to_pybytes()
    footer = pq.ParquetFile(pa.BufferReader(data)).metadata
    ids = {"file_path": FILE_PATH_ID, "pos": POS_ID}
    sizes: dict[int, int] = {}
    offsets: list[int] = []
    for i in range(footer.num_row_groups):
        group = footer.row_group(i)
        first = group.column(0)
        offsets.append(first.dictionary_page_offset or first.data_page_offset)
        for c in range(group.num_columns):
            col = group.column(c)
            fid = ids[col.path_in_schema]
            sizes[fid] = sizes.get(fid, 0) + col.total_compressed_size
    paths = rows.column("file_path")
    first_path, last_path = str(paths[0]), str(paths[rows.num_rows - 1])
    single = first_path == last_path
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    if single:
        bounds = pc.min_max(rows.column("pos"))
        lower = {FILE_PATH_ID: first_path.encode(), POS_ID: struct.pack("<q", bounds["min"].as_py())}
        upper = {FILE_PATH_ID: first_path.encode(), POS_ID: struct.pack("<q", bounds["max"].as_py())}
    file = DataFile(
        content=POSITION_DELETES,
        file_path=path,
        file_format="PARQUET",
        partition=partition,
        record_count=rows.num_rows,
        file_size_in_bytes=len(data),
        spec_id=spec_id,
        column_sizes=sizes,
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds=lower,
        upper_bounds=upper,
        split_offsets=tuple(sorted(offsets)),
        referenced_data_file=first_path if single else None,
    )
    return Written(data, file)


def bitmaps(rows: pa.Table) -> dict[str, RoaringBitmap64]:
    """The positions of each data file named in ``rows``."""
    if rows.num_rows == 0:
        return {}
    grouped = rows.group_by("file_path", use_threads=False).aggregate([("pos", "list")])
    lists = grouped.column("pos_list").combine_chunks()
    return {
        str(path): RoaringBitmap64(lists[i].values.to_pylist())
        for i, path in enumerate(grouped.column("file_path").to_pylist())
    }


def rows_per_file(input_bytes: int, input_rows: int, target_file_size: int) -> int:
    """How many rows make a file of about the target size, judged by the inputs' bytes per row."""
    per_row = max(1.0, input_bytes / max(1, input_rows))
    return max(1, int(target_file_size / per_row))
