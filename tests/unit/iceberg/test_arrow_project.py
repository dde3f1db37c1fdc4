"""The Arrow projection compaction's fast path reads files with: by field id, by name mapping,
promotions, nulls for missing fields, struct validity, delete masks and partition fills."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.arrow_project import (
    Deleted,
    iceberg_unreadable,
    kept,
    partition_constant,
    positions,
    projector,
    promotable,
    unsupported,
    write_schema,
    written_fields,
)
from tablekeeper.iceberg.name_mapping import parse_name_mapping
from tablekeeper.iceberg.parquet import FIELD_ID_KEY
from tablekeeper.iceberg.types import (
    DecimalType,
    FixedType,
    ListType,
    MapType,
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


def test_an_identity_partition_column_reads_as_its_partition_value_in_every_row() -> None:
    """As Iceberg Java's readers do (``PartitionUtil.constantsMap``): the value a file holds, or
    lacks, does not count; a null partition value reads as null."""
    assert partition_constant(pa.array([None, 5], pa.int64()), LONG, 7).to_pylist() == [7, 7]
    dates = partition_constant(pa.array([None], pa.date32()), PrimitiveType("date"), 19000)
    assert str(dates[0]) == "2022-01-08" and dates.type == pa.date32()
    held = pa.array(["us", None], pa.string())
    assert partition_constant(held, PrimitiveType("string"), "eu").to_pylist() == ["eu", "eu"]
    assert partition_constant(held, PrimitiveType("string"), None).to_pylist() == [None, None]
    nulls = pa.nulls(2, pa.int64())
    assert partition_constant(nulls, LONG, None) is nulls
    ids = pa.ExtensionArray.from_storage(pa.uuid(), pa.array([None, b"\x01" * 16], pa.binary(16)))
    filled = partition_constant(ids, PrimitiveType("uuid"), uuid.UUID(int=5))
    assert filled.type == ids.type and filled.to_pylist() == [uuid.UUID(int=5)] * 2


def test_every_type_but_variant_is_on_the_arrow_path() -> None:
    assert unsupported(StructType((NestedField(1, "a", DecimalType(4, 1)),)), "s") is None
    assert unsupported(ListType(2, LONG), "l") is None
    assert (
        unsupported(MapType(3, STRING, 4, ListType(5, StructType((NestedField(6, "x", FixedType(3)),)))), "m")
        is None
    )
    for name in ("uuid", "time", "timestamp_ns", "timestamptz_ns", "unknown", "binary"):
        assert unsupported(PrimitiveType(name), "c") is None
    assert unsupported(PrimitiveType("variant"), "c") is not None
    assert unsupported(ListType(2, PrimitiveType("unknown")), "l") is not None
    reason = unsupported(StructType((NestedField(1, "v", PrimitiveType("variant")),)), "s")
    assert reason is not None and reason.startswith("column s.v has type variant")


def _ids(t: pa.DataType) -> list[int]:
    """Field ids of every nested Arrow field, depth first."""
    out: list[int] = []
    children: list[pa.Field] = []
    if pa.types.is_struct(t):
        children = [t.field(i) for i in range(t.num_fields)]
    elif pa.types.is_list(t):
        children = [t.value_field]
    elif pa.types.is_map(t):
        children = [t.key_field, t.item_field]
    for c in children:
        out.append(int((c.metadata or {})[FIELD_ID_KEY]))
        out.extend(_ids(c.type))
    return out


def test_nested_columns_resolve_by_id_at_every_level_and_keep_their_ids() -> None:
    element = StructType((NestedField(5, "a", LONG), NestedField(12, "b", STRING, initial_default="x")))
    fields = (
        NestedField(1, "l", ListType(4, element)),
        NestedField(2, "m", MapType(6, STRING, 7, ListType(8, PrimitiveType("double")))),
        NestedField(13, "gone", PrimitiveType("unknown")),
        NestedField(15, "d", INT, initial_default=7),
    )
    # The file: the struct's field 5 is still an int under an older name, 12 does not exist yet.
    file_schema = pa.schema(
        [
            _f("l", pa.list_(_f("element", pa.struct([_f("old_a", pa.int32(), 5)]), 4)), 1),
            _f(
                "m",
                pa.map_(
                    _f("key", pa.string(), 6).with_nullable(False),
                    _f("value", pa.list_(_f("element", pa.float64(), 8)), 7),
                ),
                2,
            ),
        ]
    )
    batch = pa.record_batch(
        [
            pa.array([[{"old_a": 1}], None, []], file_schema.field("l").type),
            pa.array([[("k", [1.0, None])], None, []], file_schema.field("m").type),
        ],
        schema=file_schema,
    )
    read, project = projector(file_schema, written_fields(fields), None, "f")
    assert read == ["l", "m"]
    arrays = project(batch)
    assert arrays[0].to_pylist() == [[{"a": 1, "b": "x"}], None, []]
    assert arrays[1].to_pylist() == [[("k", [1.0, None])], None, []]
    assert arrays[2].to_pylist() == [7, 7, 7]
    schema = write_schema(fields)
    assert schema.names == ["l", "m", "d"]  # unknown columns are never written
    assert _ids(schema.field("l").type) == [4, 5, 12]
    assert _ids(schema.field("m").type) == [6, 7, 8]


def test_geospatial_columns_load_and_are_refused_by_name() -> None:
    from tablekeeper.iceberg.types import type_from_json

    for text in ("geometry", "geometry(OGC:CRS84)", "geography(srid:4326, karney)"):
        t = type_from_json(text)
        reason = unsupported(StructType((NestedField(1, "shape", t),)), "place")
        assert reason is not None and reason.startswith(f"column place.shape has type {text}")


DOUBLE = PrimitiveType("double")
_LIST_FIELDS = (NestedField(1, "id", LONG, False), NestedField(2, "tags", ListType(5, INT, False), False))


def test_iceberg_unreadable_names_list_elements_without_ids_and_unpromoted_types() -> None:
    # Column-mapped Delta files: ids on columns, none on list elements.
    no_element_id = pa.schema([_f("id", pa.int64(), 1), _f("tags", pa.list_(pa.int32()), 2)])
    assert "tags.element has no field id 5" in (iceberg_unreadable(no_element_id, _LIST_FIELDS, None) or "")
    element = pa.field("element", pa.int32(), metadata={FIELD_ID_KEY: b"5"})
    with_ids = pa.schema([_f("id", pa.int64(), 1), _f("tags", pa.list_(element), 2)])
    assert iceberg_unreadable(with_ids, _LIST_FIELDS, None) is None
    # A file without any ids resolves through the name mapping, elements included.
    names = parse_name_mapping(
        '[{"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["tags"], '
        '"fields": [{"field-id": 5, "names": ["element"]}]}]'
    )
    plain = pa.schema([_f("id", pa.int64(), None), _f("tags", pa.list_(pa.int32()), None)])
    assert iceberg_unreadable(plain, _LIST_FIELDS, names) is None
    # int is promoted to long but not to double; a column the file lacks is read as null.
    widened = (NestedField(1, "id", LONG, False), NestedField(3, "ratio", DOUBLE, False))
    ints = pa.schema([_f("id", pa.int32(), 1), _f("ratio", pa.int32(), 3)])
    assert "ratio is int32 in the file" in (iceberg_unreadable(ints, widened, None) or "")
    assert iceberg_unreadable(pa.schema([_f("id", pa.int32(), 1)]), widened, None) is None


def test_projector_widens_only_when_asked() -> None:
    fields = (NestedField(3, "ratio", DOUBLE, False),)
    batch = pa.record_batch(
        [pa.array([1, None, -3], pa.int8())], schema=pa.schema([_f("ratio", pa.int8(), 3)])
    )
    _, strict = projector(batch.schema, fields, None, "f")
    with pytest.raises(CorruptMetadataError, match="not an Iceberg type promotion"):
        strict(batch)
    # Resolved by name although the file has ids (as Delta resolves name-mapped columns).
    names = parse_name_mapping('[{"field-id": 3, "names": ["ratio"]}]')
    _, widen = projector(batch.schema, fields, names, "f", by_id=False, widen=True)
    assert widen(batch)[0].to_pylist() == [1.0, None, -3.0]
