"""The Avro schemas of manifests and manifest lists equal the ones Iceberg Java writes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tablekeeper.iceberg.avro_schemas import (
    avro_name,
    iceberg_schema_json,
    manifest_entry_avro,
    manifest_entry_struct,
    manifest_file_avro,
)
from tablekeeper.iceberg.types import DATE, INT, UUID, DecimalType, NestedField, StructType

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
AVRO_REFERENCE = SHARED / "reference" / "avro"

# The partition type of the reference files: identity(int) field 1000 + day(timestamp) field 1001.
TAXI_PARTITION = StructType(
    (
        NestedField(1000, "VendorID", INT, required=False),
        NestedField(1001, "tpep_pickup_day", DATE, required=False),
    )
)
EMPTY_PARTITION = StructType(())
VERSIONS = (1, 2, 3)


def reference(name: str) -> Any:
    return json.loads((AVRO_REFERENCE / name).read_text(encoding="utf-8"))


def partition_fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    data_file = next(f for f in schema["fields"] if f["name"] == "data_file")["type"]
    partition = next(f for f in data_file["fields"] if f["name"] == "partition")["type"]
    assert partition["name"] == "r102"
    fields: list[dict[str, Any]] = partition["fields"]
    return fields


def assert_parses(schema: dict[str, Any]) -> None:
    """The schema is valid Avro: fastavro accepts it and can write a file with it."""
    fastavro.parse_schema(schema)
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [])
    writer_schema: Any = fastavro.reader(io.BytesIO(buf.getvalue())).writer_schema
    assert writer_schema["name"] == schema["name"]


@pytest.mark.corpus  # reads ../shared/reference
@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_entry_matches_java_partitioned(version: int) -> None:
    ours = manifest_entry_avro(version, TAXI_PARTITION)
    assert ours == reference(f"manifest_entry_v{version}.avsc.json")
    assert_parses(ours)


@pytest.mark.corpus  # reads ../shared/reference
@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_entry_matches_java_unpartitioned(version: int) -> None:
    ours = manifest_entry_avro(version, EMPTY_PARTITION)
    assert ours == reference(f"manifest_entry_v{version}_unpartitioned.avsc.json")
    assert partition_fields(ours) == []


@pytest.mark.corpus  # reads ../shared/reference
@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_entry_key_order_matches_java(version: int) -> None:
    # Java's field layout is name, type, doc, default, field-id; dict equality ignores order.
    ours = json.dumps(manifest_entry_avro(version, TAXI_PARTITION))
    assert ours == json.dumps(reference(f"manifest_entry_v{version}.avsc.json"))


@pytest.mark.corpus  # reads ../shared/reference
@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_file_matches_java(version: int) -> None:
    ours = manifest_file_avro(version)
    expected = reference(f"manifest_file_v{version}.avsc.json")
    assert ours == expected
    assert json.dumps(ours) == json.dumps(expected)
    assert_parses(ours)


@pytest.mark.corpus  # reads ../shared/reference
@pytest.mark.parametrize("version", VERSIONS)
def test_iceberg_schema_of_unpartitioned_entry_matches_java(version: int) -> None:
    ours = iceberg_schema_json(manifest_entry_struct(version, StructType(())))
    assert ours == reference(f"iceberg_schema_manifest_entry_v{version}_unpartitioned.json")


def test_version_specific_fields() -> None:
    def data_file_names(version: int) -> list[str]:
        schema = manifest_entry_avro(version, EMPTY_PARTITION)
        data_file = next(f for f in schema["fields"] if f["name"] == "data_file")["type"]
        return [f["name"] for f in data_file["fields"]]

    assert "block_size_in_bytes" in data_file_names(1)
    assert "content" not in data_file_names(1)
    assert "block_size_in_bytes" not in data_file_names(2)
    assert "referenced_data_file" in data_file_names(2)
    assert "first_row_id" not in data_file_names(2)
    assert data_file_names(3)[-4:] == [
        "first_row_id",
        "referenced_data_file",
        "content_offset",
        "content_size_in_bytes",
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ts-day", "ts_x2Dday"),
        ("1abc", "_1abc"),
        ("a b", "a_x20b"),
        ("ok_name", "ok_name"),
        ("_x", "_x"),
    ],
)
def test_avro_name_sanitises_like_java(name: str, expected: str) -> None:
    assert avro_name(name) == expected


def test_invalid_partition_names_keep_the_iceberg_name() -> None:
    ptype = StructType(
        (
            NestedField(1000, "ts-day", DATE, required=False),
            NestedField(1001, "1abc", INT, required=False),
            NestedField(1002, "fine", INT, required=False),
        )
    )
    fields = partition_fields(manifest_entry_avro(2, ptype))
    assert [f["name"] for f in fields] == ["ts_x2Dday", "_1abc", "fine"]
    assert fields[0]["iceberg-field-name"] == "ts-day"
    assert fields[1]["iceberg-field-name"] == "1abc"
    assert "iceberg-field-name" not in fields[2]
    assert [f["field-id"] for f in fields] == [1000, 1001, 1002]
    # field-id stays the last key, as Java writes it.
    assert list(fields[0]) == ["name", "type", "default", "iceberg-field-name", "field-id"]
    assert_parses(manifest_entry_avro(2, ptype))


def test_two_uuid_partition_fields_define_uuid_fixed_once() -> None:
    ptype = StructType(
        (
            NestedField(1000, "a", UUID, required=False),
            NestedField(1001, "b", UUID, required=False),
        )
    )
    schema = manifest_entry_avro(2, ptype)
    first, second = partition_fields(schema)
    assert first["type"] == [
        "null",
        {"type": "fixed", "name": "uuid_fixed", "size": 16, "logicalType": "uuid"},
    ]
    assert second["type"] == ["null", "uuid_fixed"]
    assert json.dumps(schema).count('"name": "uuid_fixed"') == 1
    assert_parses(schema)


def test_repeated_decimal_types_are_referenced_by_name() -> None:
    ptype = StructType(
        (
            NestedField(1000, "a", DecimalType(10, 2), required=False),
            NestedField(1001, "b", DecimalType(10, 2), required=False),
            NestedField(1002, "c", DecimalType(10, 3), required=False),
        )
    )
    schema = manifest_entry_avro(3, ptype)
    a, b, c = partition_fields(schema)
    assert a["type"][1]["name"] == "decimal_10_2"
    assert b["type"] == ["null", "decimal_10_2"]
    assert c["type"][1]["name"] == "decimal_10_3"
    assert_parses(schema)


@pytest.mark.parametrize(
    ("precision", "size"),
    [(1, 1), (2, 1), (3, 2), (9, 4), (10, 5), (18, 8), (19, 9), (38, 16)],
)
def test_decimal_fixed_size(precision: int, size: int) -> None:
    ptype = StructType((NestedField(1000, "d", DecimalType(precision, 2), required=False),))
    (field,) = partition_fields(manifest_entry_avro(2, ptype))
    assert field["type"][1] == {
        "type": "fixed",
        "name": f"decimal_{precision}_2",
        "size": size,
        "logicalType": "decimal",
        "precision": precision,
        "scale": 2,
    }
