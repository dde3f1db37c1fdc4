"""convert-delta --rewrite-unreadable-files without Spark: which Delta files are rewritten, how
(field ids, Iceberg types, rows in order, under the target), and how later runs find them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.schema import column_mapping, parse_schema_string
from tablekeeper.delta.to_iceberg import map_schema
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.parquet import FIELD_ID_KEY
from tablekeeper.io import FileIO
from tablekeeper.jobs.convert_delta.rewrite import Rewriter, as_delta_paths, path_digest, rewritten_location

NAME_MODE = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"}


def _field(name: str, type_: Any, cid: int, changes: list[dict[str, str]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"col-{cid}"}
    if changes:
        meta["delta.typeChanges"] = changes
    return {"name": name, "type": type_, "nullable": True, "metadata": meta}


def _id(fid: int) -> dict[bytes, bytes]:
    return {FIELD_ID_KEY: str(fid).encode()}


def _add(path: Path) -> AddFile:
    return AddFile(path.name, str(path), {}, path.stat().st_size, 0, True)


def _rewriter(location: Path) -> Rewriter:
    struct = parse_schema_string(
        json.dumps(
            {
                "type": "struct",
                "fields": [
                    _field("id", "long", 1),
                    _field("tags", {"type": "array", "elementType": "integer", "containsNull": True}, 2),
                    _field("ratio", "double", 3, [{"fromType": "integer", "toType": "double"}]),
                ],
            }
        )
    )
    mapped = map_schema(struct, column_mapping(NAME_MODE, True), NAME_MODE, rewrite_unreadable=True)
    return Rewriter(mapped.schema, mapped, False, str(location), {}, frozenset())


def _original(path: Path, rows: int) -> DataFile:
    return DataFile(DATA, str(path), "PARQUET", (), rows, path.stat().st_size)


def test_only_unreadable_files_are_rewritten_under_the_target_in_row_order(tmp_path: Path) -> None:
    delta = tmp_path / "delta"
    delta.mkdir()
    # As delta-spark writes column-mapped files: physical names, ids on columns only.
    old = pa.schema(
        [
            pa.field("col-1", pa.int64(), metadata=_id(1)),
            pa.field("col-2", pa.list_(pa.int32()), metadata=_id(2)),
            pa.field("col-3", pa.int32(), metadata=_id(3)),
        ]
    )
    rows = {"col-1": [3, 1, 2], "col-2": [[1, None], None, []], "col-3": [7, None, -1]}
    pq.write_table(pa.table(rows, schema=old), delta / "old.parquet")
    rewriter = _rewriter(tmp_path / "target")
    io = FileIO.for_location(str(delta))
    assert "tags.element has no field id" in (rewriter.unreadable(io, _add(delta / "old.parquet")) or "")
    [written] = rewriter.rewrite_unreadable(
        io, [(_add(delta / "old.parquet"), _original(delta / "old.parquet", 3))]
    )
    expected = rewritten_location(str(tmp_path / "target"), str(delta / "old.parquet"), 0)
    assert written.file_path == expected and expected.startswith(f"{tmp_path}/target/data/delta-rewritten/")
    assert rewriter.created == [expected] and rewriter.rewritten == 1
    back = pq.read_table(expected)
    assert back.column("id").to_pylist() == [3, 1, 2]  # same rows, same order: DV positions hold
    assert back.column("tags").to_pylist() == [[1, None], None, []]
    assert back.column("ratio").to_pylist() == [7.0, None, -1.0]
    assert back.schema.field("ratio").type == pa.float64()
    tags = back.schema.field("tags")
    element_id = rewriter.schema.find_field(2).type.element_id  # type: ignore[union-attr]
    assert tags.type.value_field.metadata == _id(element_id)
    assert written.record_count == 3 and written.file_size_in_bytes == Path(expected).stat().st_size
    assert written.lower_bounds and written.lower_bounds[3] is not None  # doubles measured on write
    # A file Iceberg reads as it is (element ids, doubles) is referenced in place.
    element = pa.field("element", pa.int32(), metadata=_id(element_id))
    new = pa.schema(
        [
            pa.field("col-1", pa.int64(), metadata=_id(1)),
            pa.field("col-2", pa.list_(element), metadata=_id(2)),
            pa.field("col-3", pa.float64(), metadata=_id(3)),
        ]
    )
    pq.write_table(
        pa.table({"col-1": [4], "col-2": [[5]], "col-3": [0.5]}, schema=new), delta / "new.parquet"
    )
    kept = _original(delta / "new.parquet", 1)
    assert rewriter.rewrite_unreadable(io, [(_add(delta / "new.parquet"), kept)]) == [kept]
    # A second run reuses the rewrite (the Delta file is immutable) and creates nothing.
    again = _rewriter(tmp_path / "target")
    [reused] = again.rewrite_unreadable(
        io, [(_add(delta / "old.parquet"), _original(delta / "old.parquet", 3))]
    )
    assert reused.file_path == expected and again.created == []


def test_rewritten_names_are_a_function_of_the_delta_path() -> None:
    a = rewritten_location("s3://b/t/", "s3://d/x/part-0.parquet", 3)
    assert a == rewritten_location("s3://b/t", "s3://d/x/part-0.parquet", 3)
    assert a != rewritten_location("s3://b/t", "s3://d/x/part-1.parquet", 3)
    assert a.startswith(f"s3://b/t/data/delta-rewritten/{path_digest('s3://d/x/part-0.parquet')}-")
    assert a.endswith("-s3.parquet")


def test_a_resync_compares_rewrites_by_their_delta_paths() -> None:
    rewrite = rewritten_location("/t", "/d/a.parquet", 2)
    state = pa.table(
        {"absolute_path": [rewrite, "/d/b.parquet", "/t/data/other.parquet"], "dv_id": ["x", None, None]}
    )
    delta = pa.table({"absolute_path": ["/d/a.parquet", "/d/b.parquet"]})
    out = as_delta_paths(state, delta, "/t")
    assert out.column("absolute_path").to_pylist() == [
        "/d/a.parquet",
        "/d/b.parquet",
        "/t/data/other.parquet",
    ]
    assert out.column("dv_id").to_pylist() == ["x", None, None]


@pytest.mark.parametrize("rows", [0, 2])
def test_a_file_without_any_of_the_columns_reads_as_nulls(tmp_path: Path, rows: int) -> None:
    path = tmp_path / "only_other.parquet"
    pq.write_table(pa.table({"col-9": pa.array([1] * rows, pa.int32())}), path)
    rewriter = _rewriter(tmp_path / "target")
    written = rewriter.rewrite(FileIO.for_location(str(path)), _add(path), _original(path, rows))
    assert pq.read_table(written.file_path).to_pylist() == [{"id": None, "tags": None, "ratio": None}] * rows
