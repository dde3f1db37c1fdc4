"""The Arrow projection compaction's fast path reads files with: by field id, by name mapping,
promotions, nulls for missing fields, struct validity, delete masks and partition fills."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.arrow_project import (
    Deleted,
    fill,
    kept,
    positions,
    projector,
    promotable,
    supported,
    write_schema,
)
from tablekeeper.iceberg.name_mapping import parse_name_mapping
from tablekeeper.iceberg.parquet import FIELD_ID_KEY
from tablekeeper.iceberg.types import (
    DecimalType,
    ListType,
    NestedField,
    PrimitiveType,
    StructType,
)

LONG, INT, STRING = PrimitiveType("long"), PrimitiveType("int"), PrimitiveType("string")


def _f(name: str, t: pa.DataType, fid: int | None) -> pa.Field:
    return pa.field(name, t, metadata=None if fid is None else {FIELD_ID_KEY: str(fid).encode()})


FIELDS = (
    NestedField(1, "id", LONG),
    NestedField(2, "amount", DecimalType(10, 2)),
    NestedField(3, "s", StructType((NestedField(4, "renamed", STRING), NestedField(5, "added", INT)))),
    NestedField(6, "new_col", STRING),
)


def _batch(with_ids: bool) -> pa.RecordBatch:
    inner = pa.struct([_f("old_name", pa.string(), 4 if with_ids else None)])
    schema = pa.schema(
        [
            _f("id_old", pa.int32(), 1 if with_ids else None),
            _f("amount", pa.decimal128(5, 2), 2 if with_ids else None),
            _f("s", inner, 3 if with_ids else None),
            _f("dropped", pa.string(), 99 if with_ids else None),
        ]
    )
    structs = pa.array([{"old_name": "a"}, None, {"old_name": None}], inner)
    return pa.record_batch(
        [
            pa.array([1, 2, 3], pa.int32()),
            pa.array([Decimal("1.50"), None, Decimal("-2.25")], pa.decimal128(5, 2)),
            structs,
            pa.array(["x", "y", "z"]),
        ],
        schema=schema,
    )


def _check(arrays: list[pa.Array]) -> None:
    table = pa.Table.from_arrays(arrays, schema=write_schema(FIELDS))
    assert table.column("id").to_pylist() == [1, 2, 3]
    assert table.column("id").type == pa.int64()
    assert table.column("amount").type == pa.decimal128(10, 2)
    assert table.column("amount").to_pylist() == [Decimal("1.50"), None, Decimal("-2.25")]
    assert table.column("s").to_pylist() == [
        {"renamed": "a", "added": None},
        None,
        {"renamed": None, "added": None},
    ]
    assert table.column("new_col").to_pylist() == [None, None, None]
    ids = [f.metadata[FIELD_ID_KEY] for f in table.schema]
    assert ids == [b"1", b"2", b"3", b"6"]


def test_columns_resolve_by_field_id_not_name() -> None:
    batch = _batch(with_ids=True)
    read, project = projector(batch.schema, FIELDS, None, "f.parquet")
    assert read == ["amount", "id_old", "s"]  # the dropped column is not read
    _check(project(batch))


def test_files_without_ids_resolve_through_the_name_mapping() -> None:
    mapping = parse_name_mapping(
        '[{"field-id": 1, "names": ["id", "id_old"]}, {"field-id": 2, "names": ["amount"]},'
        ' {"field-id": 3, "names": ["s"], "fields": [{"field-id": 4, "names": ["old_name"]},'
        ' {"field-id": 5, "names": ["added"]}]}, {"field-id": 6, "names": ["new_col"]}]'
    )
    batch = _batch(with_ids=False)
    _, project = projector(batch.schema, FIELDS, mapping, "f.parquet")
    _check(project(batch))


def test_no_ids_and_no_mapping_fails_closed() -> None:
    with pytest.raises(CorruptMetadataError, match="no Parquet field ids"):
        projector(_batch(with_ids=False).schema, FIELDS, None, "f.parquet")


@pytest.mark.parametrize(
    ("source", "value", "target"),
    [
        (pa.string(), "1", LONG),  # parseable, still not a promotion
        (pa.int32(), 1, STRING),
        (pa.int64(), 1, PrimitiveType("double")),
        (pa.bool_(), True, INT),
        (pa.decimal128(5, 2), Decimal("1.50"), DecimalType(10, 3)),  # scale changes
        (pa.int64(), 1, INT),  # narrowing
    ],
)
def test_only_iceberg_promotions_are_read(source: pa.DataType, value: object, target: object) -> None:
    batch = pa.record_batch([pa.array([value], source)], schema=pa.schema([_f("c", source, 1)]))
    _, project = projector(batch.schema, (NestedField(1, "c", target),), None, "f.parquet")  # type: ignore[arg-type]
    with pytest.raises(CorruptMetadataError, match="not an Iceberg type promotion"):
        project(batch)


def test_promotions_and_spellings_that_read() -> None:
    assert promotable(pa.int8(), pa.int32()) and promotable(pa.uint16(), pa.int32())
    assert promotable(pa.large_string(), pa.string()) and promotable(pa.date32(), pa.timestamp("us"))
    assert not promotable(pa.uint32(), pa.int32())


def test_nanoseconds_round_down_before_1970() -> None:
    source = pa.array([-1, 1_999, -1_001], pa.timestamp("ns"))
    batch = pa.record_batch([source], schema=pa.schema([_f("ts", source.type, 1)]))
    _, project = projector(batch.schema, (NestedField(1, "ts", PrimitiveType("timestamp")),), None, "f")
    (out,) = project(batch)
    assert out.type == pa.timestamp("us") and out.cast(pa.int64()).to_pylist() == [-1, 1, -2]


def test_positions_and_delete_masks() -> None:
    assert positions(10, 4).to_pylist() == [10, 11, 12, 13]
    assert positions(0, 0).to_pylist() == []
    deleted = Deleted.of([pa.array([40, 11], pa.int64()), pa.array([13, 1, 11], pa.int64())])
    assert deleted.positions.to_pylist() == [1, 11, 13, 40] and list(deleted.index) == [1, 11, 13, 40]
    mask = kept(10, 4, deleted)
    assert mask is not None and mask.to_pylist() == [True, False, True, False]
    assert kept(20, 5, deleted) is None
    assert kept(40, 1, deleted) is not None
    assert kept(0, 5, Deleted.of([])) is None


def test_fill_replaces_only_nulls() -> None:
    assert fill(pa.array([None, 5], pa.int64()), 7).to_pylist() == [7, 5]
    dates = fill(pa.array([None], pa.date32()), 19000)
    assert str(dates[0]) == "2022-01-08"
    same = pa.array([1, 2], pa.int64())
    assert fill(same, 9) is same and fill(same, None) is same


def test_lists_and_maps_are_not_on_the_fast_path() -> None:
    assert supported(StructType((NestedField(1, "a", DecimalType(4, 1)),)))
    assert not supported(ListType(2, LONG))
    assert not supported(PrimitiveType("uuid"))
