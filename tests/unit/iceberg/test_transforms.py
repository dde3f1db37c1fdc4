from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.conversions import days_to_ymd, ymd_to_days
from tablekeeper.iceberg.transforms import (
    Bucket,
    Day,
    Hour,
    Identity,
    Month,
    Transform,
    Truncate,
    UnknownTransform,
    Void,
    Year,
    bucket_hash,
    human_value,
    parse_transform,
)
from tablekeeper.iceberg.types import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    TIMESTAMPTZ_NS,
    UNKNOWN,
    UUID,
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    PrimitiveType,
    StructType,
)

VARIANT = PrimitiveType("variant")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


# Independent of the module under test: the standard library computes the epoch counts.
def days(text: str) -> int:
    return (dt.date.fromisoformat(text) - EPOCH.date()).days


def micros(text: str) -> int:
    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def time_micros(text: str) -> int:
    t = dt.time.fromisoformat(text)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


# ---------------------------------------------------------------------------------------------
# Spec Appendix B hash vectors (listed in the digest, section 6.1)

APPENDIX_B = [
    ("int 34", INT, 34, 2017239379),
    ("long 34L", LONG, 34, 2017239379),
    ("decimal 14.20", DecimalType(4, 2), Decimal("14.20"), -500754589),
    ("date 2017-11-16", DATE, days("2017-11-16"), -653330422),
    ("time 22:31:08", TIME, time_micros("22:31:08"), -662762989),
    ("timestamp", TIMESTAMP, micros("2017-11-16T22:31:08"), -2047944441),
    ("timestamptz", TIMESTAMPTZ, micros("2017-11-16T14:31:08-08:00"), -2047944441),
    ("timestamp .000001", TIMESTAMP, micros("2017-11-16T22:31:08.000001"), -1207196810),
    ("timestamptz .000001", TIMESTAMPTZ, micros("2017-11-16T14:31:08.000001-08:00"), -1207196810),
    ("timestamp_ns", TIMESTAMP_NS, micros("2017-11-16T22:31:08.000001") * 1000 + 1, -1207196810),
    (
        "timestamptz_ns",
        TIMESTAMPTZ_NS,
        micros("2017-11-16T14:31:08.000001-08:00") * 1000 + 1,
        -1207196810,
    ),
    ("string", STRING, "iceberg", 1210000089),
    ("uuid", UUID, uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"), 1488055340),
    ("fixed", FixedType(4), bytes([0, 1, 2, 3]), -188683207),
    ("binary", BINARY, bytes([0, 1, 2, 3]), -188683207),
    ("boolean true", BOOLEAN, True, 1392991556),
    ("float 1.0F", FLOAT, 1.0, -142385009),
    ("double 0.0D", DOUBLE, 0.0, 1669671676),
]


@pytest.mark.parametrize(
    ("source_type", "value", "expected"),
    [case[1:] for case in APPENDIX_B],
    ids=[case[0] for case in APPENDIX_B],
)
def test_appendix_b_hash_vectors(source_type: IcebergType, value: object, expected: int) -> None:
    assert bucket_hash(source_type, value) == expected


def test_epoch_counts_used_by_the_vectors() -> None:
    # Guards the helpers above: these are the numbers the spec's vectors are computed from.
    assert days("2017-11-16") == 17486
    assert micros("2017-11-16T22:31:08") == 1510871468000000
    assert time_micros("22:31:08") == 81068000000


def test_bucket_of_34_into_16_is_3() -> None:
    assert Bucket(16).apply(INT, 34) == 3
    assert Bucket(16).apply(LONG, 34) == 3


def test_bucket_masks_the_sign_before_the_modulo() -> None:
    # -653330422 is negative: the spec clears the sign bit rather than taking abs().
    assert Bucket(100).apply(DATE, 17486) == (-653330422 & 0x7FFFFFFF) % 100 == 26


def test_decimal_hash_uses_the_unscaled_value_not_the_column_width() -> None:
    # 14.20 in a wide decimal(38, 2) still hashes the minimal bytes 0x058c.
    assert bucket_hash(DecimalType(38, 2), Decimal("14.20")) == -500754589
    assert bucket_hash(DecimalType(4, 2), Decimal("14.2")) == -500754589


def test_float_hash_is_canonical_for_signed_zero_and_nan() -> None:
    assert bucket_hash(DOUBLE, -0.0) == bucket_hash(DOUBLE, 0.0) == 1669671676
    assert bucket_hash(DOUBLE, float("nan")) == bucket_hash(FLOAT, float("-nan"))
    assert bucket_hash(DOUBLE, float("nan")) != bucket_hash(DOUBLE, 0.0)
    # A float hashes as the double of its float32 value, like Java's (double) widening.
    assert bucket_hash(FLOAT, 1.1) == bucket_hash(DOUBLE, 1.100000023841858)
    assert bucket_hash(FLOAT, 1.1) != bucket_hash(DOUBLE, 1.1)


def test_int_and_long_hash_alike_so_promotion_keeps_buckets() -> None:
    for v in (0, -1, 2**31 - 1, -(2**31)):
        assert bucket_hash(INT, v) == bucket_hash(LONG, v)


def test_nanos_floor_to_micros_before_hashing() -> None:
    assert bucket_hash(TIMESTAMP_NS, -1) == bucket_hash(TIMESTAMP, -1)
    assert bucket_hash(TIMESTAMP_NS, 999) == bucket_hash(TIMESTAMP, 0)
    assert bucket_hash(TIMESTAMP_NS, 1000) == bucket_hash(TIMESTAMP, 1)


def test_bucket_refuses_types_java_refuses() -> None:
    for t in (BOOLEAN, FLOAT, DOUBLE, UNKNOWN, VARIANT, StructType()):
        assert not Bucket(4).can_transform(t)
    with pytest.raises(UnsupportedFeatureError, match=r"bucket\[4\] cannot apply to type float"):
        Bucket(4).apply(FLOAT, 1.0)


def test_bucket_rejects_values_of_the_wrong_python_type() -> None:
    with pytest.raises(TypeError, match="must be int"):
        Bucket(4).apply(DATE, dt.date(2017, 11, 16))
    with pytest.raises(TypeError, match="must be int"):
        Bucket(4).apply(LONG, True)


# ---------------------------------------------------------------------------------------------
# Truncate


@pytest.mark.parametrize(
    ("source_type", "width", "value", "expected"),
    [
        (INT, 10, 0, 0),
        (INT, 10, 1, 0),
        (INT, 10, 5, 0),
        (INT, 10, 9, 0),
        (INT, 10, 10, 10),
        (INT, 10, 11, 10),
        (INT, 10, -1, -10),
        (INT, 10, -5, -10),
        (INT, 10, -10, -10),
        (INT, 10, -11, -20),
        (LONG, 10, -1, -10),
        (LONG, 1000, 2**62 + 999, 4611686018427388000),
        (DecimalType(9, 2), 50, Decimal("10.65"), Decimal("10.50")),
        (DecimalType(9, 2), 10, Decimal("-0.05"), Decimal("-0.10")),
        (DecimalType(9, 2), 10, Decimal("12.3"), Decimal("12.30")),
        (DecimalType(38, 0), 7, Decimal("99999999999999999999999999999999999999"), Decimal(10**38 - 2)),
        (STRING, 3, "iceberg", "ice"),
        (STRING, 3, "ic", "ic"),
        (STRING, 2, "イロハニホヘト", "イロ"),
        (STRING, 2, "\U0001f600\U0001f601\U0001f602", "\U0001f600\U0001f601"),
        (STRING, 4, "abcé", "abcé"),
        (BINARY, 3, b"\x01\x02\x03\x04\x05", b"\x01\x02\x03"),
        (BINARY, 3, b"\x01", b"\x01"),
    ],
)
def test_truncate(source_type: IcebergType, width: int, value: object, expected: object) -> None:
    result = Truncate(width).apply(source_type, value)
    assert result == expected
    assert type(result) is type(expected)


def test_truncated_decimal_keeps_the_column_scale() -> None:
    result = Truncate(50).apply(DecimalType(9, 2), Decimal("10.65"))
    assert str(result) == "10.50"
    assert str(Truncate(10).apply(DecimalType(9, 2), Decimal("12.3"))) == "12.30"


def test_truncate_rejects_values_finer_than_the_scale() -> None:
    with pytest.raises(ValueError, match="more than 2 digits"):
        Truncate(10).apply(DecimalType(9, 2), Decimal("1.234"))


def test_truncate_applies_only_to_java_types() -> None:
    for ok in (INT, LONG, DecimalType(9, 2), STRING, BINARY):
        assert Truncate(4).can_transform(ok)
    for bad in (BOOLEAN, FLOAT, DOUBLE, DATE, TIME, TIMESTAMP, UUID, FixedType(4), StructType()):
        assert not Truncate(4).can_transform(bad)


@pytest.mark.parametrize("bad", [0, -3, True, 2.0])
def test_transform_arguments_must_be_positive_ints(bad: object) -> None:
    with pytest.raises(ValueError, match="positive int"):
        Truncate(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive int"):
        Bucket(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Temporal transforms

TS = "2017-11-16T22:31:08"


@pytest.mark.parametrize(
    ("source_type", "value"),
    [
        (TIMESTAMP, micros(TS)),
        (TIMESTAMPTZ, micros(TS)),
        (TIMESTAMP_NS, micros(TS) * 1000 + 999),
        (TIMESTAMPTZ_NS, micros(TS) * 1000),
    ],
)
def test_temporal_examples(source_type: IcebergType, value: int) -> None:
    assert Year().apply(source_type, value) == 47
    assert Month().apply(source_type, value) == 574
    assert Day().apply(source_type, value) == 17486
    assert Hour().apply(source_type, value) == 419686


def test_temporal_on_dates() -> None:
    d = days("2017-11-16")
    assert (Year().apply(DATE, d), Month().apply(DATE, d), Day().apply(DATE, d)) == (47, 574, 17486)
    assert not Hour().can_transform(DATE)
    with pytest.raises(UnsupportedFeatureError):
        Hour().apply(DATE, d)


@pytest.mark.parametrize(
    ("source_type", "value"),
    [(TIMESTAMP, micros("1969-12-31T23:59:59.999999")), (TIMESTAMP_NS, -1), (TIMESTAMPTZ, -1)],
)
def test_pre_epoch_rounds_down(source_type: IcebergType, value: int) -> None:
    assert value < 0
    for transform in (Year(), Month(), Day(), Hour()):
        assert transform.apply(source_type, value) == -1, transform


@pytest.mark.parametrize(
    ("date", "year", "month"),
    [
        ("1970-01-01", 0, 0),
        ("1969-12-31", -1, -1),
        ("1969-01-01", -1, -12),
        ("1968-12-31", -2, -13),
        ("1900-03-01", -70, -838),
        ("2000-02-29", 30, 361),
        ("0001-01-01", -1969, -23628),
        ("9999-12-31", 8029, 96359),
    ],
)
def test_year_and_month_use_calendar_math(date: str, year: int, month: int) -> None:
    d = days(date)
    assert Year().apply(DATE, d) == year
    assert Month().apply(DATE, d) == month
    assert Year().apply(TIMESTAMP, d * 86_400_000_000 + 1) == year


def test_calendar_helpers_agree_with_the_standard_library() -> None:
    start = dt.date(1600, 1, 1).toordinal()
    epoch = dt.date(1970, 1, 1).toordinal()
    for ordinal in range(start, dt.date(2401, 1, 1).toordinal(), 37):
        d = dt.date.fromordinal(ordinal)
        assert days_to_ymd(ordinal - epoch) == (d.year, d.month, d.day)
        assert ymd_to_days(d.year, d.month, d.day) == ordinal - epoch


def test_calendar_helpers_go_beyond_datetime_range() -> None:
    assert days_to_ymd(ymd_to_days(-44, 3, 15)) == (-44, 3, 15)
    assert days_to_ymd(ymd_to_days(292_000, 2, 29)) == (292_000, 2, 29)
    assert Year().apply(TIMESTAMP, 2**63 - 1) == 294247 - 1970
    with pytest.raises(ValueError, match="no such date"):
        ymd_to_days(2019, 2, 29)


# ---------------------------------------------------------------------------------------------
# Identity and void


def test_identity_returns_the_value_in_canonical_form() -> None:
    assert Identity().apply(STRING, "x") == "x"
    assert str(Identity().apply(DecimalType(9, 3), Decimal("1.5"))) == "1.500"
    assert Identity().apply(INT, None) is None


def test_identity_applies_to_primitives_except_variant() -> None:
    for t in (BOOLEAN, INT, DOUBLE, DATE, TIMESTAMPTZ_NS, STRING, UUID, FixedType(3), BINARY):
        assert Identity().can_transform(t)
    for nested in (VARIANT, StructType(), ListType(1, INT)):
        assert not Identity().can_transform(nested)


def test_void_maps_everything_to_none() -> None:
    assert Void().apply(INT, 34) is None
    assert Void().apply(StructType(), object()) is None
    assert Void().can_transform(VARIANT)
    assert Void().result_type(STRING) == STRING


# ---------------------------------------------------------------------------------------------
# Parsing and result types


@pytest.mark.parametrize(
    ("text", "transform"),
    [
        ("identity", Identity()),
        ("bucket[16]", Bucket(16)),
        ("truncate[10]", Truncate(10)),
        ("year", Year()),
        ("month", Month()),
        ("day", Day()),
        ("hour", Hour()),
        ("void", Void()),
        ("bucket[2147483647]", Bucket(2**31 - 1)),
    ],
)
def test_parse_and_str_round_trip(text: str, transform: Transform) -> None:
    parsed = parse_transform(text)
    assert parsed == transform
    assert type(parsed) is type(transform)
    assert str(parsed) == text


def test_parse_is_case_insensitive_like_java() -> None:
    assert parse_transform("DAY") == Day()
    assert parse_transform("Bucket[8]") == Bucket(8)
    assert str(parse_transform("Truncate[3]")) == "truncate[3]"


@pytest.mark.parametrize("text", ["zorder", "bucket_v2[3]", " day", "day[3]", "geohash[5]"])
def test_unrecognised_strings_round_trip_as_unknown(text: str) -> None:
    parsed = parse_transform(text)
    assert parsed == UnknownTransform(text)
    assert str(parsed) == text
    assert not parsed.can_transform(INT)
    # Readers must read such tables (v3): Iceberg Java types an unknown transform's values string.
    assert parsed.result_type(INT) == STRING
    with pytest.raises(UnsupportedFeatureError, match="not supported"):
        parsed.apply(INT, 1)
    assert parsed.human_string(INT, 5) == "5"


@pytest.mark.parametrize(
    "text",
    ["", "bucket[0]", "bucket[-1]", "bucket[x]", "bucket[]", "truncate[ 4]", "bucket[2147483648]"],
)
def test_malformed_transform_strings(text: str) -> None:
    with pytest.raises(CorruptMetadataError, match="malformed partition transform") as info:
        parse_transform(text)
    assert "\n" not in str(info.value)


def test_non_string_transform_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataError):
        parse_transform(16)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("transform", "source_type", "expected"),
    [
        (Identity(), STRING, STRING),
        (Identity(), DecimalType(9, 2), DecimalType(9, 2)),
        (Bucket(8), STRING, INT),
        (Bucket(8), LONG, INT),
        (Bucket(8), UUID, INT),
        (Truncate(4), STRING, STRING),
        (Truncate(4), DecimalType(9, 2), DecimalType(9, 2)),
        (Truncate(4), LONG, LONG),
        (Year(), TIMESTAMP, INT),
        (Year(), DATE, INT),
        (Month(), TIMESTAMPTZ_NS, INT),
        (Day(), TIMESTAMP, DATE),
        (Day(), DATE, DATE),
        (Hour(), TIMESTAMPTZ, INT),
        (Void(), LONG, LONG),
    ],
)
def test_result_types(transform: Transform, source_type: IcebergType, expected: IcebergType) -> None:
    assert transform.result_type(source_type) == expected


def test_result_type_refuses_inapplicable_sources() -> None:
    with pytest.raises(UnsupportedFeatureError, match="year cannot apply to type string"):
        Year().result_type(STRING)


def test_transforms_are_frozen_and_hashable() -> None:
    assert {Bucket(4), Bucket(4), Truncate(4)} == {Bucket(4), Truncate(4)}
    with pytest.raises(AttributeError):
        Bucket(4).num_buckets = 5  # type: ignore[misc]


def test_order_relations() -> None:
    assert Identity().satisfies_order_of(Day())
    assert not Identity().satisfies_order_of(Bucket(4))
    assert Hour().satisfies_order_of(Day())
    assert Day().satisfies_order_of(Year())
    assert not Year().satisfies_order_of(Month())
    assert not Bucket(4).satisfies_order_of(Bucket(8))
    assert Truncate(4).satisfies_order_of(Truncate(4))
    assert Day().preserves_order and not Bucket(4).preserves_order


# ---------------------------------------------------------------------------------------------
# Human strings (partition paths)


def test_human_strings_of_time_units() -> None:
    ts = micros(TS)
    assert Year().human_string(TIMESTAMP, Year().apply(TIMESTAMP, ts)) == "2017"
    assert Month().human_string(TIMESTAMP, Month().apply(TIMESTAMP, ts)) == "2017-11"
    assert Day().human_string(TIMESTAMP, Day().apply(TIMESTAMP, ts)) == "2017-11-16"
    assert Hour().human_string(TIMESTAMP, Hour().apply(TIMESTAMP, ts)) == "2017-11-16-22"
    assert Hour().human_string(TIMESTAMP, -1) == "1969-12-31-23"
    assert Month().human_string(DATE, -1) == "1969-12"
    assert Year().human_string(DATE, -1) == "1969"
    assert Day().human_string(DATE, None) == "null"


@pytest.mark.parametrize(
    ("transform", "source_type", "value", "expected"),
    [
        (Identity(), STRING, "a/b", "a/b"),
        (Identity(), BOOLEAN, True, "true"),
        (Identity(), DecimalType(9, 2), Decimal("14.20"), "14.20"),
        (Identity(), DATE, days("2017-11-16"), "2017-11-16"),
        (Identity(), TIME, time_micros("22:31:08.5"), "22:31:08.500"),
        (Identity(), TIMESTAMP, micros("2017-11-16T22:31:00"), "2017-11-16T22:31"),
        (Identity(), TIMESTAMP, micros("2017-11-16T22:31:08.000001"), "2017-11-16T22:31:08.000001"),
        (Identity(), TIMESTAMPTZ, micros(TS), "2017-11-16T22:31:08Z"),
        (Identity(), TIMESTAMP_NS, micros(TS) * 1000 + 1, "2017-11-16T22:31:08.000000001"),
        (Identity(), BINARY, b"\x00\x01\x02\x03", "AAECAw=="),
        (
            Identity(),
            UUID,
            uuid.UUID("F79C3E09-677C-4BBD-A479-3F349CB785E7"),
            "f79c3e09-677c-4bbd-a479-3f349cb785e7",
        ),
        (Bucket(16), STRING, 3, "3"),
        (Truncate(3), STRING, "ice", "ice"),
        (Void(), INT, None, "null"),
    ],
)
def test_human_strings(transform: Transform, source_type: IcebergType, value: object, expected: str) -> None:
    assert transform.human_string(source_type, value) == expected


def test_human_value_of_dates_outside_four_digit_years() -> None:
    assert human_value(DATE, ymd_to_days(10000, 1, 1)) == "+10000-01-01"
    assert human_value(DATE, ymd_to_days(-1, 1, 1)) == "-0001-01-01"


def test_a_spec_with_an_unknown_transform_still_types_its_partition_tuples() -> None:
    """Every manifest read goes through the spec's partition type: an unknown transform stopped
    them all; its field is a string, as Iceberg Java reads it."""
    from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
    from tablekeeper.iceberg.types import NestedField, Schema

    schema = Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "loc", STRING, False)))
    spec = PartitionSpec(
        1, (PartitionField(1, 1000, "id_b", "bucket[4]"), PartitionField(2, 1001, "g", "geohash[5]"))
    )
    ptype = spec.partition_type(schema)
    assert [(f.name, f.type) for f in ptype.fields] == [("id_b", INT), ("g", STRING)]


def test_v3_sort_fields_with_source_ids_load_and_round_trip() -> None:
    """A v3 multi-argument sort field names its sources in source-ids (no source-id): the
    metadata failed to load; it loads and is written back as it was."""
    from tablekeeper.iceberg.partitioning import sort_order_from_json, sort_order_to_json

    obj = {
        "order-id": 1,
        "fields": [
            {"transform": "geo_z[2]", "source-ids": [2, 3], "direction": "asc", "null-order": "nulls-first"},
            {"transform": "identity", "source-id": 1, "direction": "desc", "null-order": "nulls-last"},
        ],
    }
    order = sort_order_from_json(obj)
    assert order.fields[0].source_ids == (2, 3) and order.fields[0].source_id == 2
    assert sort_order_to_json(order) == obj


def test_v3_partition_fields_with_source_ids_load_type_and_round_trip() -> None:
    """A v3 partition field may name its sources in source-ids alone (one source or several, no
    source-id): it loads, its partition value is typed (a multi-argument transform unknown here
    reads as a string, as Iceberg Java types it), and the spec is written back as it was."""
    from tablekeeper.iceberg.partitioning import partition_spec_from_json, partition_spec_to_json
    from tablekeeper.iceberg.types import NestedField, Schema

    schema = Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "x", LONG, False)))
    obj = {
        "spec-id": 2,
        "fields": [
            {"source-ids": [1, 2], "field-id": 1000, "name": "xy", "transform": "zorder"},
            {"source-id": 1, "field-id": 1001, "name": "id_b", "transform": "bucket[8]"},
        ],
    }
    spec = partition_spec_from_json(obj)
    assert spec.fields[0].source_ids == (1, 2) and spec.fields[0].source_id == 1
    assert [(f.name, f.type) for f in spec.partition_type(schema).fields] == [("xy", STRING), ("id_b", INT)]
    assert partition_spec_to_json(spec) == obj
    # One source named only in source-ids reads as that source.
    single = partition_spec_from_json(
        {
            "spec-id": 3,
            "fields": [{"source-ids": [2], "field-id": 1000, "name": "x_b", "transform": "bucket[4]"}],
        }
    )
    assert single.fields[0].source_id == 2 and single.partition_type(schema).fields[0].type == INT
