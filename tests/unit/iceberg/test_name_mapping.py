from __future__ import annotations

import json
from typing import Any

import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.name_mapping import (
    MappedField,
    NameMapping,
    name_mapping_from_schema,
    name_mapping_to_json,
    parse_name_mapping,
)
from tablekeeper.iceberg.types import (
    DOUBLE,
    INT,
    LONG,
    STRING,
    ListType,
    MapType,
    NestedField,
    Schema,
    StructType,
    schema_to_json,
)

NESTED = Schema(
    schema_id=0,
    fields=(
        NestedField(1, "id", LONG, required=True),
        NestedField(
            2,
            "location",
            StructType((NestedField(5, "lat", DOUBLE), NestedField(6, "long", DOUBLE))),
        ),
        NestedField(3, "tags", ListType(7, STRING)),
        NestedField(
            4,
            "points",
            MapType(
                8,
                STRING,
                9,
                ListType(10, StructType((NestedField(11, "x", INT), NestedField(12, "y", INT)))),
            ),
        ),
    ),
)

NESTED_JSON = (
    '[{"names":["id"],"field-id":1},'
    '{"names":["location"],"field-id":2,"fields":[{"names":["lat"],"field-id":5},{"names":["long"],"field-id":6}]},'
    '{"names":["tags"],"field-id":3,"fields":[{"names":["element"],"field-id":7}]},'
    '{"names":["points"],"field-id":4,"fields":[{"names":["key"],"field-id":8},'
    '{"names":["value"],"field-id":9,"fields":[{"names":["element"],"field-id":10,'
    '"fields":[{"names":["x"],"field-id":11},{"names":["y"],"field-id":12}]}]}]}]'
)


def test_from_schema_names_struct_list_and_map_children() -> None:
    mapping = name_mapping_from_schema(NESTED)
    assert name_mapping_to_json(mapping) == NESTED_JSON
    assert mapping.find(("location", "long")) == MappedField(("long",), 6)
    assert mapping.find(("tags", "element")) == MappedField(("element",), 7)
    found = mapping.find(("points", "value", "element", "y"))
    assert found is not None and found.field_id == 12
    assert mapping.find(("points", "key")) == MappedField(("key",), 8)


def test_find_misses() -> None:
    mapping = name_mapping_from_schema(NESTED)
    assert mapping.find(()) is None
    assert mapping.find(("nope",)) is None
    assert mapping.find(("location", "alt")) is None
    assert mapping.find(("id", "child")) is None
    assert mapping.find(("location", "lat", "deeper")) is None


def test_round_trip_is_exact() -> None:
    mapping = parse_name_mapping(NESTED_JSON)
    assert mapping == name_mapping_from_schema(NESTED)
    assert name_mapping_to_json(mapping) == NESTED_JSON


def test_field_id_is_optional_and_empty_parts_are_omitted() -> None:
    text = '[{"names":["a","A"],"field-id":1},{"names":["legacy"]},{"names":[],"field-id":3,"fields":[]}]'
    mapping = parse_name_mapping(text)
    assert mapping.fields == (
        MappedField(("a", "A"), 1),
        MappedField(("legacy",), None),
        MappedField((), 3),
    )
    assert mapping.find(("A",)) == MappedField(("a", "A"), 1)
    legacy = mapping.find(("legacy",))
    assert legacy is not None
    assert legacy.field_id is None
    assert (
        name_mapping_to_json(mapping)
        == '[{"names":["a","A"],"field-id":1},{"names":["legacy"]},{"names":[],"field-id":3}]'
    )


def test_unknown_keys_are_ignored_and_unicode_kept() -> None:
    mapping = parse_name_mapping('[{"names":["größe"],"field-id":1,"future-key":true}]')
    assert mapping.fields == (MappedField(("größe",), 1),)
    assert name_mapping_to_json(mapping) == '[{"names":["größe"],"field-id":1}]'


def test_with_aliases_adds_physical_names() -> None:
    mapping = name_mapping_from_schema(NESTED)
    aliased = mapping.with_aliases(6, "col-7f3a", "long")  # "long" is already there: not repeated
    assert aliased.find(("location", "col-7f3a")) == MappedField(("long", "col-7f3a"), 6)
    assert aliased.find(("location", "long")) == aliased.find(("location", "col-7f3a"))
    assert mapping.find(("location", "col-7f3a")) is None  # the original is untouched
    assert aliased.find_by_id(6) == MappedField(("long", "col-7f3a"), 6)
    both = mapping.with_all_aliases({2: ["col-a"], 5: ("col-b",)})
    assert both.find(("col-a", "col-b")) == MappedField(("lat", "col-b"), 5)


def test_with_aliases_rejects_unknown_ids_and_clashes() -> None:
    mapping = name_mapping_from_schema(NESTED)
    with pytest.raises(KeyError, match="99"):
        mapping.with_aliases(99, "x")
    with pytest.raises(CorruptMetadataError, match="'lat' maps to two fields"):
        mapping.with_aliases(6, "lat")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[{", r"not valid JSON \(.* at line 1 column 3\)"),
        ("", "not valid JSON"),
        ("null", "must be a JSON array, not null"),
        ('{"names":["a"]}', "value must be a JSON array"),
        ('["a"]', r"entry \[0\] is not an object"),
        ('[{"field-id":1}]', r"entry \[0\]: 'names' must be a list of strings"),
        ('[{"names":"a","field-id":1}]', "'names' must be a list of strings"),
        ('[{"names":["a",1]}]', "'names' must be a list of strings"),
        ('[{"names":["a"],"field-id":"1"}]', "'field-id' must be an integer"),
        ('[{"names":["a"],"field-id":true}]', "'field-id' must be an integer"),
        ('[{"names":["a"],"field-id":1.5}]', "'field-id' must be an integer"),
        ('[{"names":["a"],"fields":{}}]', r"\[0\]\.fields must be a JSON array"),
        (
            '[{"names":["a"],"fields":[{"names":["b"],"field-id":"x"}]}]',
            r"entry \[0\]\.fields\[0\]: 'field-id'",
        ),
        (
            '[{"names":["a"],"field-id":1},{"names":["b","a"],"field-id":2}]',
            "'a' maps to two fields at the top",
        ),
        ('[{"names":["s"],"fields":[{"names":["x"]},{"names":["x"]}]}]', "'x' maps to two fields under 's'"),
        (
            '[{"names":["a"],"field-id":1},{"names":["b"],"fields":[{"names":["c"],"field-id":1}]}]',
            "id 1 appears twice",
        ),
    ],
)
def test_malformed_input_is_corrupt_metadata_with_one_line(text: str, message: str) -> None:
    with pytest.raises(CorruptMetadataError, match=message) as info:
        parse_name_mapping(text)
    assert "\n" not in str(info.value)
    assert str(info.value).endswith("fix or unset the table property schema.name-mapping.default")


def test_bytes_input_and_bad_utf8() -> None:
    assert parse_name_mapping(b'[{"names":["a"],"field-id":1}]') == NameMapping((MappedField(("a",), 1),))
    with pytest.raises(CorruptMetadataError, match="not UTF-8"):
        parse_name_mapping(b'[{"names":["\xff"]}]')


def test_models_are_frozen_and_hashable() -> None:
    mapping = name_mapping_from_schema(NESTED)
    with pytest.raises(AttributeError):
        mapping.fields = ()  # type: ignore[misc]
    assert hash(mapping) == hash(parse_name_mapping(NESTED_JSON))


# -- compatibility with the reference implementation ---------------------------------------------


def _pyiceberg_tree(fields: Any) -> list[Any]:
    return [(list(f.names), f.field_id, _pyiceberg_tree(f.fields)) for f in fields]


def _our_tree(fields: tuple[MappedField, ...]) -> list[Any]:
    return [(list(f.names), f.field_id, _our_tree(f.fields)) for f in fields]


@pytest.mark.parametrize(
    "mapping",
    [
        name_mapping_from_schema(NESTED),
        name_mapping_from_schema(NESTED).with_aliases(11, "col-x").with_aliases(2, "col-loc"),
        parse_name_mapping('[{"names":["a","A"],"field-id":1},{"names":["legacy"]}]'),
    ],
)
def test_pyiceberg_reads_our_json_identically(mapping: NameMapping) -> None:
    from pyiceberg.table.name_mapping import parse_mapping_from_json

    text = name_mapping_to_json(mapping)
    theirs = parse_mapping_from_json(text)
    assert _pyiceberg_tree(theirs) == _our_tree(mapping.fields)
    # And what PyIceberg writes back is byte-for-byte what we wrote.
    assert theirs.model_dump_json() == text
    assert parse_name_mapping(theirs.model_dump_json()) == mapping


def test_pyiceberg_builds_the_same_mapping_from_the_same_schema() -> None:
    from pyiceberg.schema import Schema as PySchema
    from pyiceberg.table.name_mapping import create_mapping_from_schema

    their_schema = PySchema.model_validate_json(json.dumps(schema_to_json(NESTED)))
    theirs = create_mapping_from_schema(their_schema)
    assert _pyiceberg_tree(theirs) == _our_tree(name_mapping_from_schema(NESTED).fields)


def test_a_merge_can_leave_a_fields_former_names_behind() -> None:
    """A target written by an older converter listed a logical name beside a physical one; under
    column mapping only the physical name is a name files hold, so the merge drops the former
    ones while it keeps the fields only the older mapping has (dropped columns')."""
    from tablekeeper.iceberg.name_mapping import merge_name_mappings

    older = NameMapping((MappedField(("col-u", "x"), 3), MappedField(("gone",), 2)))
    newer = NameMapping((MappedField(("col-u",), 3),))
    assert merge_name_mappings(newer, older).find(("x",)) == MappedField(("col-u", "x"), 3)
    merged = merge_name_mappings(newer, older, keep_former_names=False)
    assert merged.find(("x",)) is None and merged.find(("col-u",)) == MappedField(("col-u",), 3)
    assert merged.find(("gone",)) == MappedField(("gone",), 2)
