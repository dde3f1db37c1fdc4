"""Delta partition values, file stats, schemaString types and the protocol gate (no I/O)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from tablekeeper.delta.models import Protocol
from tablekeeper.delta.schema import (
    ColumnMapping,
    DeltaArray,
    DeltaDecimal,
    DeltaField,
    DeltaMap,
    DeltaPrimitive,
    DeltaStruct,
    column_mapping,
    parse_schema_string,
)
from tablekeeper.delta.values import (
    FileStats,
    leaf_stats,
    parse_partition_value,
    parse_stats,
    stats_value,
    writer_zone,
    zoneless_timestamp_columns,
)
from tablekeeper.errors import ConfigError, CorruptMetadataError, UnsupportedFeatureError

P = DeltaPrimitive
DAY_US = 86_400_000_000
HOUR_US = 3_600_000_000
JAN_1_2021_US = 1_609_459_200_000_000  # 2021-01-01T00:00:00Z


# --- partition values ----------------------------------------------------------------------------


def test_string_partition_value_is_verbatim() -> None:
    assert parse_partition_value(P("string"), "B B") == "B B"
    assert parse_partition_value(P("string"), "a%20b") == "a%20b"  # never decoded
    assert parse_partition_value(P("string"), " ") == " "


@pytest.mark.parametrize("name", ["byte", "short", "integer", "long"])
def test_integer_partition_values(name: str) -> None:
    assert parse_partition_value(P(name), "0") == 0
    assert parse_partition_value(P(name), "-128") == -128
    assert parse_partition_value(P(name), "127") == 127


def test_long_partition_value_beyond_32_bits() -> None:
    assert parse_partition_value(P("long"), "-9223372036854775808") == -(2**63)
    assert parse_partition_value(P("long"), "9223372036854775807") == 2**63 - 1


@pytest.mark.parametrize("name", ["float", "double"])
def test_float_partition_values(name: str) -> None:
    t = P(name)
    assert parse_partition_value(t, "1.5") == 1.5
    assert parse_partition_value(t, "1.0E10") == 1e10
    assert parse_partition_value(t, "1.0E-5") == 1e-5
    assert parse_partition_value(t, "Infinity") == math.inf
    assert parse_partition_value(t, "-Infinity") == -math.inf
    nan = parse_partition_value(t, "NaN")
    assert isinstance(nan, float)
    assert math.isnan(nan)
    neg_zero = parse_partition_value(t, "-0.0")
    assert neg_zero == 0.0
    assert math.copysign(1.0, neg_zero) == -1.0
    assert math.copysign(1.0, parse_partition_value(t, "0.0")) == 1.0


def test_decimal_partition_values() -> None:
    value = parse_partition_value(DeltaDecimal(10, 2), "123.45")
    assert value == Decimal("123.45")
    assert isinstance(value, Decimal)
    assert parse_partition_value(DeltaDecimal(10, 2), "-0.50") == Decimal("-0.50")
    # Scale follows the type: "5" in decimal(5, 2) is 5.00.
    scaled = parse_partition_value(DeltaDecimal(5, 2), "5")
    assert scaled == Decimal("5.00")
    assert scaled.as_tuple().exponent == -2
    assert parse_partition_value(DeltaDecimal(10, 0), "42") == Decimal(42)


def test_decimal_38_partition_values_are_exact() -> None:
    # decimal(38, s) is a legal Delta type; its values have up to 38 digits, more than the 28 of
    # Python's default decimal context.
    digits38 = "12345678901234567890123456789012345678"
    assert parse_partition_value(DeltaDecimal(38, 0), digits38) == Decimal(digits38)
    frac = "1234567890123456789012345678.0123456789"
    assert parse_partition_value(DeltaDecimal(38, 10), frac) == Decimal(frac)


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("false", False)])
def test_boolean_partition_values(raw: str, expected: bool) -> None:
    assert parse_partition_value(P("boolean"), raw) is expected


@pytest.mark.parametrize(
    ("raw", "days"),
    [
        ("1970-01-01", 0),
        ("2021-01-01", 18_628),
        ("1969-12-31", -1),
        ("1900-01-01", -25_567),
        ("0001-01-01", -719_162),
    ],
)
def test_date_partition_values(raw: str, days: int) -> None:
    assert parse_partition_value(P("date"), raw) == days


def test_timestamp_partition_value_legacy_form_uses_default_zone() -> None:
    t = P("timestamp")
    assert parse_partition_value(t, "2021-01-01 00:00:00") == JAN_1_2021_US
    assert parse_partition_value(t, "2021-01-01 00:00:00.5") == JAN_1_2021_US + 500_000
    assert parse_partition_value(t, "2021-01-01 00:00:00.000001") == JAN_1_2021_US + 1
    # Written in Europe/Paris (UTC+01:00 in winter): local midnight is 23:00 UTC the day before.
    assert (
        parse_partition_value(t, "2021-01-01 00:00:00", zone=writer_zone("Europe/Paris"))
        == JAN_1_2021_US - HOUR_US
    )
    assert (
        parse_partition_value(t, "2021-01-01 00:00:00", zone=writer_zone("America/New_York"))
        == JAN_1_2021_US + 5 * HOUR_US
    )


def utc_micros(text: str) -> int:
    stamp = dt.datetime.fromisoformat(text)
    return (stamp - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("raw", "utc"),
    [
        # 2021-03-14: New York springs forward at 02:00 EST to 03:00 EDT.
        ("2021-03-14 01:59:59.999999", "2021-03-14T06:59:59.999999+00:00"),  # EST, -05:00
        ("2021-03-14 03:00:00", "2021-03-14T07:00:00+00:00"),  # EDT, -04:00
        ("2021-07-01 12:00:00", "2021-07-01T16:00:00+00:00"),
        # A wall time the clocks skipped: read with the offset before the jump (Java shifts it
        # forward by the gap, the same instant).
        ("2021-03-14 02:30:00", "2021-03-14T07:30:00+00:00"),
        # 2021-11-07: back from 02:00 EDT to 01:00 EST; a wall time seen twice is the earlier.
        ("2021-11-07 00:59:59", "2021-11-07T04:59:59+00:00"),
        ("2021-11-07 01:30:00", "2021-11-07T05:30:00+00:00"),
        ("2021-11-07 02:00:00", "2021-11-07T07:00:00+00:00"),
        ("2021-12-31 23:00:00", "2022-01-01T04:00:00+00:00"),
    ],
)
def test_zoneless_timestamp_takes_the_offset_of_its_own_wall_time(raw: str, utc: str) -> None:
    """A zone, not a fixed offset: each value gets the offset in force at its own local time."""
    zone = writer_zone("America/New_York")
    assert parse_partition_value(P("timestamp"), raw, zone=zone) == utc_micros(utc)
    # The same wall time in the other forms is not moved by the writer's zone.
    assert parse_partition_value(P("timestamp_ntz"), raw, zone=zone) == utc_micros(raw + "+00:00")


@pytest.mark.parametrize("name", ["America/NewYork", "EST+5", "../etc/passwd", "", "+05:00"])
def test_writer_zone_names_must_be_iana_zones(name: str) -> None:
    with pytest.raises(ConfigError, match="is not a time zone name"):
        writer_zone(name)


def test_zoneless_timestamp_columns_are_found_by_value() -> None:
    plan = (("ts", P("timestamp")), ("ntz", P("timestamp_ntz")), ("s", P("string")))
    maps = pa.array(
        [
            [("ts", "2021-01-01T00:00:00.000000Z"), ("ntz", "2021-01-01 00:00:00"), ("s", "x 00:00")],
            [("ts", None), ("ntz", None), ("s", None)],
            [("ts", ""), ("ntz", ""), ("s", "")],
        ],
        pa.map_(pa.string(), pa.string()),
    )
    assert zoneless_timestamp_columns(maps, plan) == ()
    offsets = pa.array(
        [[("ts", "2021-01-01T00:00:00+05:30")], [("ts", "2021-01-01 00:00:00-0800")]], maps.type
    )
    assert zoneless_timestamp_columns(offsets, plan) == ()
    legacy = pa.array([[("ts", "2021-01-01T00:00:00Z")], [("ts", "2021-01-01 00:00:00")]], maps.type)
    assert zoneless_timestamp_columns(legacy, plan) == ("ts",)
    assert zoneless_timestamp_columns(legacy.slice(0, 0), plan) == ()


def test_timestamp_partition_value_iso_form_is_utc() -> None:
    t = P("timestamp")
    assert parse_partition_value(t, "2021-01-01T00:00:00.000001Z") == JAN_1_2021_US + 1
    assert parse_partition_value(t, "2021-01-01T00:00:00.000000Z") == JAN_1_2021_US
    # The zone in the text wins over the writer's.
    assert (
        parse_partition_value(t, "2021-01-01T00:00:00.000001Z", zone=writer_zone("Asia/Tokyo"))
        == JAN_1_2021_US + 1
    )


def test_timestamp_partition_values_before_1970() -> None:
    t = P("timestamp")
    assert parse_partition_value(t, "1969-12-31 23:59:59.999999") == -1
    assert parse_partition_value(t, "1969-12-31T23:59:59.500000Z") == -500_000
    assert parse_partition_value(t, "1900-01-01 00:00:00") == -25_567 * DAY_US


def test_timestamp_ntz_partition_values() -> None:
    t = P("timestamp_ntz")
    assert parse_partition_value(t, "2021-01-01 00:00:00") == JAN_1_2021_US
    assert parse_partition_value(t, "2021-01-01 00:00:00.123456") == JAN_1_2021_US + 123_456
    assert parse_partition_value(t, "2021-01-01 12:30:15.1") == JAN_1_2021_US + (45_015 * 1_000_000) + 100_000
    # No zone: a configured writer zone does not apply.
    assert parse_partition_value(t, "2021-01-01 00:00:00", zone=writer_zone("Asia/Tokyo")) == JAN_1_2021_US


def test_binary_partition_value_is_utf8_bytes() -> None:
    assert parse_partition_value(P("binary"), "\u0001\u0002") == b"\x01\x02"
    assert parse_partition_value(P("binary"), "é") == "é".encode()


@pytest.mark.parametrize(
    "t",
    [
        P("string"),
        P("integer"),
        P("long"),
        P("double"),
        P("boolean"),
        P("date"),
        P("timestamp"),
        P("timestamp_ntz"),
        P("binary"),
        DeltaDecimal(10, 2),
    ],
)
@pytest.mark.parametrize("raw", ["", None])
def test_empty_and_null_partition_values_are_null(t: Any, raw: str | None) -> None:
    assert parse_partition_value(t, raw) is None


@pytest.mark.parametrize(
    ("t", "raw"),
    [
        (P("integer"), "abc"),
        (P("long"), "1.5"),
        (P("short"), "0x10"),
        (P("double"), "abc"),
        (P("float"), "1,5"),
        (P("boolean"), "yes"),
        (P("boolean"), "1"),
        (P("date"), "2021-13-01"),
        (P("date"), "01/02/2021"),
        (P("timestamp"), "yesterday"),
        (P("timestamp"), "2021-01-01"),
        (P("timestamp_ntz"), "2021-01-01 25:00:00"),
        (DeltaDecimal(10, 2), "abc"),
    ],
)
def test_malformed_partition_values_are_corrupt(t: Any, raw: str) -> None:
    with pytest.raises(CorruptMetadataError, match=r"partition value|not a timestamp"):
        parse_partition_value(t, raw)


def test_nested_partition_type_is_unsupported() -> None:
    with pytest.raises(UnsupportedFeatureError):
        parse_partition_value(DeltaArray(P("string"), True), "x")


# --- stats --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", "not json", "{", "[]", "3", '"x"', "null"])
def test_parse_stats_missing_empty_or_garbage_is_none(text: str | None) -> None:
    assert parse_stats(text) is None


def test_parse_stats_with_unusable_num_records_is_not_an_error() -> None:
    # "unreadable stats are unknown stats, never an error"
    stats = parse_stats('{"numRecords":"ten","minValues":{"a":1}}')
    assert stats is None or stats.num_records is None


def test_parse_stats_fields_and_tight_bounds_default() -> None:
    stats = parse_stats('{"numRecords":5,"minValues":{"a":1},"maxValues":{"a":9},"nullCount":{"a":0}}')
    assert stats == FileStats(5, {"a": 1}, {"a": 9}, {"a": 0}, True)
    loose = parse_stats('{"numRecords":5,"tightBounds":false}')
    assert loose is not None
    assert loose.tight_bounds is False
    assert loose.min_values == {}
    explicit = parse_stats('{"numRecords":5,"tightBounds":true}')
    assert explicit is not None
    assert explicit.tight_bounds is True
    only_count = parse_stats('{"numRecords":0}')
    assert only_count is not None
    assert only_count.num_records == 0
    no_count = parse_stats('{"minValues":{"a":1}}')
    assert no_count is not None
    assert no_count.num_records is None


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "nan", None, True])
@pytest.mark.parametrize("name", ["float", "double"])
def test_stats_value_drops_non_finite_floats(name: str, raw: Any) -> None:
    assert stats_value(P(name), raw) is None


def test_stats_value_numbers() -> None:
    assert stats_value(P("double"), 1.5) == 1.5
    assert stats_value(P("float"), 3) == 3.0
    assert stats_value(P("long"), 2**62) == 2**62
    assert stats_value(P("integer"), -7) == -7
    assert stats_value(P("integer"), True) is None
    assert stats_value(P("long"), "12") is None


def test_stats_value_decimal_is_exact() -> None:
    value = stats_value(DeltaDecimal(10, 2), Decimal("123.45"))
    assert value == Decimal("123.45")
    assert stats_value(DeltaDecimal(10, 2), 0.1) == Decimal("0.10")
    assert stats_value(DeltaDecimal(10, 2), 7) == Decimal("7.00")
    assert stats_value(DeltaDecimal(10, 2), "garbage") is None


def test_decimal_stats_from_json_are_exact() -> None:
    # Decimals are JSON numbers in stats; a float parse rounds 12345678901234567.89 to
    # 12345678901234568, a lower bound above the real minimum (files would be pruned wrongly).
    stats = parse_stats(
        '{"numRecords":2,"minValues":{"d":12345678901234567.89},"maxValues":{"d":99999999999999999.99}}'
    )
    assert stats is not None
    t = DeltaDecimal(19, 2)
    assert stats_value(t, stats.min_values["d"]) == Decimal("12345678901234567.89")
    assert stats_value(t, stats.max_values["d"]) == Decimal("99999999999999999.99")


def test_decimal_38_stats_value_is_exact() -> None:
    value = Decimal("12345678901234567890.123456789012345678")
    assert stats_value(DeltaDecimal(38, 18), value) == value


def test_stats_value_dates_and_strings() -> None:
    assert stats_value(P("date"), "2021-01-01") == 18_628
    assert stats_value(P("date"), "1969-12-31") == -1
    assert stats_value(P("date"), "bad") is None
    assert stats_value(P("string"), "abc") == "abc"
    assert stats_value(P("string"), 5) is None
    assert stats_value(P("boolean"), True) is None  # no bounds for boolean
    assert stats_value(P("binary"), "AAE=") is None


def test_stats_value_timestamps_with_offsets() -> None:
    t = P("timestamp")
    assert stats_value(t, "2021-01-01T00:00:00.000Z") == JAN_1_2021_US
    assert stats_value(t, "2021-01-01T05:30:00.000+05:30") == JAN_1_2021_US
    assert stats_value(t, "2020-12-31T19:00:00.123-05:00") == JAN_1_2021_US + 123_000
    assert stats_value(t, "2021-01-01T00:53:28.000+00:53:28") == JAN_1_2021_US  # LMT-style offset
    assert stats_value(t, "not a time") is None
    ntz = P("timestamp_ntz")
    assert stats_value(ntz, "2021-01-01T00:00:00.000") == JAN_1_2021_US
    assert stats_value(ntz, "2021-01-01T00:00:00") == JAN_1_2021_US  # Kernel omits a zero fraction
    assert stats_value(ntz, "2021-01-01T00:00:01.5") == JAN_1_2021_US + 1_500_000


def _field(name: str, t: Any, physical: str | None = None, field_id: int | None = None) -> DeltaField:
    metadata: dict[str, Any] = {}
    if physical is not None:
        metadata["delta.columnMapping.physicalName"] = physical
    if field_id is not None:
        metadata["delta.columnMapping.id"] = field_id
    return DeltaField(name, t, True, metadata)


NESTED_CM_SCHEMA = DeltaStruct(
    (
        _field("id", P("long"), "col-1", 1),
        _field(
            "info",
            DeltaStruct(
                (
                    _field("price", DeltaDecimal(10, 2), "col-3", 3),
                    _field("when", P("timestamp"), "col-4", 4),
                )
            ),
            "col-2",
            2,
        ),
        _field("tags", DeltaArray(P("string"), True), "col-5", 5),
    )
)


def test_leaf_stats_column_mapping_name_mode() -> None:
    stats = parse_stats(
        json.dumps(
            {
                "numRecords": 10,
                "minValues": {"col-1": 1, "col-2": {"col-3": 1.25, "col-4": "2021-01-01T00:00:00.000Z"}},
                "maxValues": {"col-1": 9, "col-2": {"col-3": 7.5, "col-4": "2021-01-02T00:00:00.000Z"}},
                "nullCount": {"col-1": 0, "col-2": {"col-3": 2, "col-4": 0}, "col-5": 4},
                # Logical names are not how stats are keyed under column mapping: ignored.
                "id": 999,
            }
        )
    )
    assert stats is not None
    out = leaf_stats(stats, NESTED_CM_SCHEMA, ColumnMapping("name"))
    assert out == {
        ("id",): (1, 9, 0),
        ("info", "price"): (Decimal("1.25"), Decimal("7.50"), 2),
        ("info", "when"): (JAN_1_2021_US, JAN_1_2021_US + DAY_US, 0),
        ("tags",): (None, None, 4),
    }


def test_leaf_stats_under_mapping_ignore_logical_keys() -> None:
    stats = FileStats(3, {"id": 1, "info": {"price": 1}}, {"id": 2}, {"id": 0})
    out = leaf_stats(stats, NESTED_CM_SCHEMA, ColumnMapping("id"))
    assert out[("id",)] == (None, None, None)
    assert out[("info", "price")] == (None, None, None)


def test_leaf_stats_without_mapping_use_logical_names() -> None:
    # Mode none: leftover physical names in the metadata are ignored.
    stats = FileStats(
        3,
        {"id": 1, "info": {"price": 2, "when": "2021-01-01T00:00:00.000Z"}},
        {"id": 5, "info": {"price": 3}},
        {"id": 0, "info": {"price": 1}},
    )
    out = leaf_stats(stats, NESTED_CM_SCHEMA, ColumnMapping("none"))
    assert out[("id",)] == (1, 5, 0)
    assert out[("info", "price")] == (Decimal("2.00"), Decimal("3.00"), 1)
    assert out[("info", "when")] == (JAN_1_2021_US, None, None)


def test_leaf_stats_missing_physical_name_under_mapping_is_corrupt() -> None:
    schema = DeltaStruct((_field("id", P("long")),))
    with pytest.raises(CorruptMetadataError, match="physicalName"):
        leaf_stats(FileStats(1), schema, ColumnMapping("name"))


def test_column_mapping_mode_counts_only_where_protocol_supports_it() -> None:
    config = {"delta.columnMapping.mode": "name"}
    assert column_mapping(config, True).mode == "name"
    assert column_mapping(config, False).mode == "none"
    assert column_mapping({}, True).mode == "none"
    with pytest.raises(UnsupportedFeatureError):
        column_mapping({"delta.columnMapping.mode": "weird"}, True)


# --- schemaString -------------------------------------------------------------------------------


def schema_of(*types: Any) -> str:
    return json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": f"c{i}", "type": t, "nullable": True, "metadata": {}} for i, t in enumerate(types)
            ],
        }
    )


PRIMITIVE_NAMES = [
    "string",
    "long",
    "integer",
    "short",
    "byte",
    "float",
    "double",
    "boolean",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
    "variant",
    "void",
]


def test_parse_schema_string_primitives() -> None:
    schema = parse_schema_string(schema_of(*PRIMITIVE_NAMES))
    assert [f.type for f in schema.fields] == [P(n) for n in PRIMITIVE_NAMES]
    assert [f.name for f in schema.fields] == [f"c{i}" for i in range(len(PRIMITIVE_NAMES))]


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("decimal", DeltaDecimal(10, 0)),
        ("decimal(10,2)", DeltaDecimal(10, 2)),
        ("decimal(10, 2)", DeltaDecimal(10, 2)),
        ("decimal( 38 , 18 )", DeltaDecimal(38, 18)),
        ("decimal(1,0)", DeltaDecimal(1, 0)),
    ],
)
def test_parse_schema_string_decimal_spellings(spelling: str, expected: DeltaDecimal) -> None:
    assert parse_schema_string(schema_of(spelling)).fields[0].type == expected


def test_parse_schema_string_nested() -> None:
    inner = {
        "type": "struct",
        "fields": [
            {"name": "x", "type": "integer", "nullable": False, "metadata": {"comment": "c"}},
            {
                "name": "y",
                "type": {"type": "array", "elementType": "string", "containsNull": False},
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    text = schema_of(
        {"type": "array", "elementType": inner, "containsNull": True},
        {
            "type": "map",
            "keyType": "string",
            "valueType": {
                "type": "map",
                "keyType": "integer",
                "valueType": "decimal(5,1)",
                "valueContainsNull": False,
            },
            "valueContainsNull": True,
        },
        inner,
    )
    schema = parse_schema_string(text)
    arr, mp, st = (f.type for f in schema.fields)
    assert isinstance(arr, DeltaArray)
    assert arr.contains_null is True
    assert isinstance(arr.element, DeltaStruct)
    x = arr.element.field("x")
    assert x is not None
    assert x.nullable is False
    assert x.metadata == {"comment": "c"}
    y = arr.element.field("Y")  # case-insensitive fallback
    assert y is not None
    assert y.type == DeltaArray(P("string"), False)
    assert mp == DeltaMap(P("string"), DeltaMap(P("integer"), DeltaDecimal(5, 1), False), True)
    assert st == arr.element


@pytest.mark.parametrize("spelling", ["interval", "interval year to month", "interval day to second"])
def test_parse_schema_string_types_without_iceberg_equivalent(spelling: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match="no Iceberg equivalent"):
        parse_schema_string(schema_of(spelling))


@pytest.mark.parametrize("spelling", ["geometry(OGC:CRS84)", "geometry(4326)", "geography"])
def test_parse_schema_string_refuses_geospatial_types_naming_the_fix(spelling: str) -> None:
    # Iceberg v3 has geometry and geography, so "no Iceberg equivalent" would be wrong: the
    # refusal says why (no reference reader) and what to do instead.
    with pytest.raises(
        UnsupportedFeatureError, match=r"neither delta-spark nor Iceberg Spark reads geospatial.*WKB binary"
    ):
        parse_schema_string(schema_of(spelling))


@pytest.mark.parametrize(
    "bad",
    [
        schema_of("uuid"),
        schema_of("decimal(10)"),
        schema_of({"type": "udt", "class": "x"}),
        schema_of({"type": "array"}),
        schema_of({"type": "map", "keyType": "string"}),
        '{"type":"struct","fields":[{"type":"long"}]}',
        '"long"',
        "{not json",
        '{"type":"struct"}',
    ],
)
def test_parse_schema_string_unknown_or_malformed_is_corrupt(bad: str) -> None:
    with pytest.raises(CorruptMetadataError):
        parse_schema_string(bad)


# --- protocol -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("writer", "features"),
    [
        (1, set()),
        (2, {"appendOnly", "invariants"}),
        (3, {"appendOnly", "invariants", "checkConstraints"}),
        (4, {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}),
        (
            5,
            {
                "appendOnly",
                "invariants",
                "checkConstraints",
                "changeDataFeed",
                "generatedColumns",
                "columnMapping",
            },
        ),
        (
            6,
            {
                "appendOnly",
                "invariants",
                "checkConstraints",
                "changeDataFeed",
                "generatedColumns",
                "columnMapping",
                "identityColumns",
            },
        ),
    ],
)
def test_legacy_writer_versions_imply_features(writer: int, features: set[str]) -> None:
    assert Protocol(1, writer).effective_writer_features == features


def test_legacy_reader_versions_imply_features() -> None:
    assert Protocol(1, 2).effective_reader_features == frozenset()
    assert Protocol(2, 5).effective_reader_features == {"columnMapping"}
    assert Protocol(2, 5).supports("columnMapping")
    assert not Protocol(1, 4).supports("columnMapping")
    assert Protocol(1, 4).supports("changeDataFeed")


def test_table_features_protocol() -> None:
    p = Protocol.from_json(
        {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors", "columnMapping"],
            "writerFeatures": ["deletionVectors", "columnMapping", "rowTracking", "domainMetadata"],
        }
    )
    assert p.effective_reader_features == {"deletionVectors", "columnMapping"}
    assert p.effective_writer_features == {
        "deletionVectors",
        "columnMapping",
        "rowTracking",
        "domainMetadata",
    }
    assert p.supports("rowTracking")
    assert not p.supports("appendOnly")  # no legacy implication under table features
    p.check_readable()


def test_writer_7_with_legacy_reader() -> None:
    p = Protocol.from_json({"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly"]})
    assert p.effective_reader_features == frozenset()
    assert p.effective_writer_features == {"appendOnly"}
    p.check_readable()


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"minReaderVersion": 1},
        {"readerVersion": 1, "writerVersion": 2},
        {"minReaderVersion": "x", "minWriterVersion": 2},
    ],
)
def test_malformed_protocol_is_corrupt(bad: dict[str, Any]) -> None:
    with pytest.raises(CorruptMetadataError):
        Protocol.from_json(bad)


@pytest.mark.parametrize("reader", [4, 5])
def test_reader_version_above_3_is_refused(reader: int) -> None:
    with pytest.raises(UnsupportedFeatureError, match=f"reader version {reader}"):
        Protocol(reader, 7, ("deletionVectors",), ("deletionVectors",)).check_readable()


def test_unknown_reader_feature_is_refused_by_name() -> None:
    p = Protocol(3, 7, ("blahabl", "deletionVectors"), ("blahabl", "deletionVectors"))
    with pytest.raises(UnsupportedFeatureError, match="'blahabl'"):
        p.check_readable()


@pytest.mark.parametrize("feature", ["catalogManaged", "catalogOwned-preview"])
def test_catalog_managed_is_refused(feature: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match=feature):
        Protocol(3, 7, (feature,), (feature, "inCommitTimestamp")).check_readable()


@pytest.mark.parametrize("feature", ["coordinatedCommits-preview", "catalogManaged"])
def test_writer_only_ownership_features_are_refused(feature: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match=feature):
        Protocol(1, 7, None, (feature,)).check_readable()


def test_unknown_writer_feature_is_allowed_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tablekeeper.delta.models"):
        Protocol(1, 7, None, ("someFutureWriterFeature", "appendOnly")).check_readable()
    assert "someFutureWriterFeature" in caplog.text


def test_legacy_protocols_are_readable() -> None:
    for reader, writer in [(1, 1), (1, 2), (1, 3), (1, 4), (2, 5), (2, 6)]:
        Protocol(reader, writer).check_readable()
