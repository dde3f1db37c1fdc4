"""Merging position deletes: reading them in every format the spec allows, which entries still
apply, the merged order, and the Parquet files and DVs written (field ids and metrics as Iceberg
Java writes them)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.content import POSITION_DELETES
from tablekeeper.iceberg.position_delete_merge import (
    FILE_PATH_ID,
    POS_ID,
    applying,
    bitmaps,
    merge,
    read_position_deletes,
    rows_per_file,
    split,
    write_position_delete_file,
)
from tests.support.delete_files import avro_deletes, orc_deletes


def rows(*pairs: tuple[str, int]) -> pa.Table:
    return pa.table({"file_path": [p for p, _ in pairs], "pos": pa.array([n for _, n in pairs], pa.int64())})


def pairs(t: pa.Table) -> list[tuple[str, int]]:
    return list(zip(t.column("file_path").to_pylist(), t.column("pos").to_pylist(), strict=True))


def test_applying_keeps_entries_of_live_files_at_most_as_new_as_the_delete() -> None:
    t = rows(("a", 1), ("gone", 2), ("newer", 3), ("same", 4))
    kept = applying(t, 5, {"a": 1, "newer": 6, "same": 5})
    assert pairs(kept) == [("a", 1), ("same", 4)]
    assert applying(t, 5, {}).num_rows == 0


def test_merge_sorts_by_path_then_position_and_keeps_each_entry_once() -> None:
    merged = merge([rows(("b", 2), ("a", 9)), rows(("a", 1), ("b", 2), ("a", 10))])
    assert pairs(merged) == [("a", 1), ("a", 9), ("a", 10), ("b", 2)]
    assert merge([]).num_rows == 0


def test_written_file_has_java_field_ids_and_single_file_metrics() -> None:
    out = write_position_delete_file(
        rows(("s3://b/d1", 3), ("s3://b/d1", 70)), "x.parquet", spec_id=1, partition=("a",)
    )
    f = out.file
    assert f.content == POSITION_DELETES and f.record_count == 2 and f.file_size_in_bytes == len(out.data)
    assert f.referenced_data_file == "s3://b/d1" and f.spec_id == 1 and f.partition == ("a",)
    assert f.lower_bounds == {FILE_PATH_ID: b"s3://b/d1", POS_ID: struct.pack("<q", 3)}
    assert f.upper_bounds == {FILE_PATH_ID: b"s3://b/d1", POS_ID: struct.pack("<q", 70)}
    assert set(f.column_sizes or {}) == {FILE_PATH_ID, POS_ID}
    assert not f.value_counts and not f.null_value_counts  # Java drops counts of these columns
    assert f.split_offsets == (4,)
    schema = pq.ParquetFile(pa.BufferReader(out.data)).schema_arrow
    assert [(c.name, c.metadata[b"PARQUET:field_id"], c.nullable) for c in schema] == [
        ("file_path", str(FILE_PATH_ID).encode(), False),
        ("pos", str(POS_ID).encode(), False),
    ]
    assert pairs(read_position_deletes(out.data)) == [("s3://b/d1", 3), ("s3://b/d1", 70)]


def test_a_file_naming_several_data_files_has_no_bounds_nor_referenced_file() -> None:
    f = write_position_delete_file(rows(("d1", 3), ("d2", 1)), "x.parquet", spec_id=0, partition=()).file
    assert f.referenced_data_file is None and not f.lower_bounds and not f.upper_bounds


def test_reading_finds_columns_by_field_id_whatever_their_names() -> None:
    t = pa.table(
        [pa.array(["d"]), pa.array([5], pa.int64())],
        schema=pa.schema(
            [
                pa.field("path_x", pa.string(), metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
                pa.field("pos_x", pa.int64(), metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
            ]
        ),
    )
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    assert pairs(read_position_deletes(sink.getvalue().to_pybytes())) == [("d", 5)]


def test_bitmaps_split_and_rows_per_file() -> None:
    merged = merge([rows(("a", 1), ("a", 5), ("b", 2))])
    assert {k: list(v) for k, v in bitmaps(merged).items()} == {"a": [1, 5], "b": [2]}
    assert [c.num_rows for c in split(merged, 2)] == [2, 1]
    assert split(merged.slice(0, 0), 2) == []
    assert rows_per_file(1000, 100, 500) == 50  # 10 bytes a row


@pytest.mark.parametrize("fmt", ["ORC", "AVRO", "orc", "avro"])
def test_orc_and_avro_position_delete_files_are_read(fmt: str) -> None:
    rows = [("s3://b/d1", 7), ("s3://b/d2", 1), ("s3://b/d1", 2)]
    data = orc_deletes(rows) if fmt.upper() == "ORC" else avro_deletes(rows)
    assert pairs(read_position_deletes(data, fmt)) == rows
    assert pairs(read_position_deletes(pa.BufferReader(data), fmt)) == rows  # a stream


def test_a_format_the_spec_does_not_allow_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedFeatureError, match="'CSV'"):
        read_position_deletes(b"file_path,pos\n", "CSV")


@pytest.mark.parametrize("fmt", ["PARQUET", "ORC", "AVRO"])
def test_a_truncated_delete_file_is_a_typed_error_naming_it(fmt: str) -> None:
    """Read in an executor task, a raw reader error (pyarrow's, fastavro's) was an untyped task
    failure, exit 1 with Spark's cut-off message; a typed one reaches the driver as itself."""
    rows = [("s3://b/d1", 7), ("s3://b/d2", 1)]
    if fmt == "PARQUET":
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"file_path": ["s3://b/d1"], "pos": pa.array([7], pa.int64())}), sink)
        data = sink.getvalue().to_pybytes()
    else:
        data = orc_deletes(rows) if fmt == "ORC" else avro_deletes(rows)
    location = "s3://b/t/data/x-deletes.bin"
    with pytest.raises(CorruptMetadataError, match=location):
        read_position_deletes(data[: len(data) // 3], fmt, location)
