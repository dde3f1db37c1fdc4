from __future__ import annotations

import math
import struct
import uuid
from decimal import Decimal

import pytest

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.conversions import (
    coerce_value,
    decimal_bytes,
    from_bytes,
    from_json,
    to_bytes,
    to_json,
    type_kind,
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

TS_MICROS = 1510871468123456  # 2017-11-16T22:31:08.123456 UTC
SAMPLE_UUID = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")

ROUND_TRIPS: list[tuple[IcebergType, object]] = [
    (BOOLEAN, True),
    (BOOLEAN, False),
    (INT, 0),
    (INT, -1),
    (INT, 2**31 - 1),
    (INT, -(2**31)),
    (LONG, 2**63 - 1),
    (LONG, -(2**63)),
    (FLOAT, 1.5),
    (FLOAT, -0.0),
    (FLOAT, float("inf")),
    (DOUBLE, 0.1),
    (DOUBLE, -1e300),
    (DecimalType(4, 2), Decimal("14.20")),
    (DecimalType(4, 2), Decimal("-14.20")),
    (DecimalType(9, 0), Decimal("0")),
    (DecimalType(38, 10), Decimal("-9999999999999999999999999999.9999999999")),
    (DecimalType(38, 38), Decimal("0.00000000000000000000000000000000000001")),
    (DATE, 17486),
    (DATE, -719162),  # 0001-01-01
    (TIME, 0),
    (TIME, 86_399_999_999),
    (TIMESTAMP, TS_MICROS),
    (TIMESTAMP, -1),
    (TIMESTAMPTZ, TS_MICROS),
    (TIMESTAMP_NS, TS_MICROS * 1000 + 789),
    (TIMESTAMPTZ_NS, -1),
    (STRING, ""),
    (STRING, "iceberg"),
    (STRING, "ünïcödé \U0001f600"),
    (UUID, SAMPLE_UUID),
    (FixedType(3), b"\x00\xff\x10"),
    (BINARY, b""),
    (BINARY, bytes(range(256))),
]


def _same(a: object, b: object) -> bool:
    # -0.0 == 0.0 in Python, so compare floats by sign too; decimals by their exact text.
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return str(a) == str(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(("t", "value"), ROUND_TRIPS, ids=[f"{t}:{v!r}"[:40] for t, v in ROUND_TRIPS])
def test_binary_round_trip(t: IcebergType, value: object) -> None:
    assert _same(from_bytes(t, to_bytes(t, value)), value)


# JSON has no infinity, so those cases stay binary-only.
JSON_ROUND_TRIPS = [(t, v) for t, v in ROUND_TRIPS if not (isinstance(v, float) and math.isinf(v))]


@pytest.mark.parametrize(
    ("t", "value"), JSON_ROUND_TRIPS, ids=[f"{t}:{v!r}"[:40] for t, v in JSON_ROUND_TRIPS]
)
def test_json_round_trip(t: IcebergType, value: object) -> None:
    assert _same(from_json(t, to_json(t, value)), value)


@pytest.mark.parametrize(
    ("t", "value", "expected"),
    [
        (BOOLEAN, True, b"\x01"),
        (BOOLEAN, False, b"\x00"),
        (INT, 1, b"\x01\x00\x00\x00"),
        (INT, -2, b"\xfe\xff\xff\xff"),
        (LONG, 1, b"\x01\x00\x00\x00\x00\x00\x00\x00"),
        (DATE, 17486, b"\x4e\x44\x00\x00"),
        (TIME, 1, b"\x01" + b"\x00" * 7),
        (TIMESTAMP, -1, b"\xff" * 8),
        (TIMESTAMP_NS, 1000, b"\xe8\x03" + b"\x00" * 6),
        (FLOAT, 1.0, b"\x00\x00\x80\x3f"),
        (FLOAT, -0.0, b"\x00\x00\x00\x80"),
        (FLOAT, 0.0, b"\x00\x00\x00\x00"),
        (DOUBLE, 1.0, b"\x00\x00\x00\x00\x00\x00\xf0\x3f"),
        (DOUBLE, -0.0, b"\x00" * 7 + b"\x80"),
        (STRING, "iceberg", b"iceberg"),
        (STRING, "é", b"\xc3\xa9"),
        (UUID, SAMPLE_UUID, bytes.fromhex("f79c3e09677c4bbda4793f349cb785e7")),
        (FixedType(2), b"\x01\x02", b"\x01\x02"),
        (BINARY, b"\x00\x01", b"\x00\x01"),
        (DecimalType(4, 2), Decimal("14.20"), b"\x05\x8c"),
        (DecimalType(4, 2), Decimal("14.2"), b"\x05\x8c"),
        (DecimalType(4, 2), Decimal("-14.20"), b"\xfa\x74"),
        (DecimalType(9, 2), Decimal("0.00"), b"\x00"),
        (DecimalType(9, 0), Decimal("127"), b"\x7f"),
        (DecimalType(9, 0), Decimal("128"), b"\x00\x80"),
        (DecimalType(9, 0), Decimal("-128"), b"\x80"),
        (DecimalType(9, 0), Decimal("-129"), b"\xff\x7f"),
        (DecimalType(9, 0), Decimal("-1"), b"\xff"),
        (DecimalType(9, 0), Decimal("255"), b"\x00\xff"),
        (DecimalType(9, 0), Decimal("-256"), b"\xff\x00"),
    ],
)
def test_binary_bytes(t: IcebergType, value: object, expected: bytes) -> None:
    assert to_bytes(t, value) == expected


def test_decimal_bytes_are_minimal_for_every_length() -> None:
    for bits in range(1, 130):
        for unscaled in (2 ** (bits - 1) - 1, -(2 ** (bits - 1))):
            data = decimal_bytes(unscaled)
            assert int.from_bytes(data, "big", signed=True) == unscaled
            # Minimal: one byte fewer could not hold it.
            assert len(data) == (bits + 7) // 8


def test_negative_zero_keeps_its_sign_in_bounds() -> None:
    assert math.copysign(1.0, float(from_bytes(DOUBLE, b"\x00" * 7 + b"\x80"))) == -1.0  # type: ignore[arg-type]
    assert to_bytes(DOUBLE, -0.0) != to_bytes(DOUBLE, 0.0)


def test_float_values_are_rounded_to_float32() -> None:
    assert to_bytes(FLOAT, 1.1) == struct.pack("<f", 1.1)
    assert from_bytes(FLOAT, to_bytes(FLOAT, 1.1)) == coerce_value(FLOAT, 1.1) != 1.1
    with pytest.raises(ValueError, match="out of range for float"):
        to_bytes(FLOAT, 1e300)


def test_nan_round_trips_in_binary() -> None:
    assert math.isnan(float(from_bytes(DOUBLE, to_bytes(DOUBLE, float("nan")))))  # type: ignore[arg-type]


def test_boolean_accepts_any_non_zero_byte() -> None:
    assert from_bytes(BOOLEAN, b"\x02") is True
    assert from_bytes(BOOLEAN, b"\x00") is False


# Spec: type promotion never rewrites bounds, so the byte length says what was written.
def test_bounds_written_before_a_promotion() -> None:
    assert from_bytes(LONG, struct.pack("<i", -7)) == -7
    assert from_bytes(DOUBLE, struct.pack("<f", 1.5)) == 1.5
    assert from_bytes(TIMESTAMP, struct.pack("<i", 17486)) == 17486 * 86_400_000_000
    assert from_bytes(TIMESTAMP_NS, struct.pack("<i", -1)) == -86_400_000_000_000
    assert from_bytes(DecimalType(10, 2), to_bytes(DecimalType(4, 2), Decimal("14.20"))) == Decimal("14.20")


@pytest.mark.parametrize(
    ("t", "data", "message"),
    [
        (BOOLEAN, b"", "malformed boolean value: expected 1 byte, got 0"),
        (INT, b"\x01\x00\x00", "malformed int value: expected 4 bytes, got 3"),
        (DATE, b"\x01" * 8, "malformed date value: expected 4 bytes, got 8"),
        (LONG, b"\x01" * 5, "malformed long value: expected 8 bytes, got 5"),
        (TIME, b"\x01" * 4, "malformed time value: expected 8 bytes, got 4"),
        (TIMESTAMPTZ, b"\x01" * 4, "malformed timestamptz value: expected 8 bytes, got 4"),
        (TIMESTAMPTZ_NS, b"\x01" * 7, "malformed timestamptz_ns value: expected 8 bytes, got 7"),
        (FLOAT, b"\x01" * 8, "malformed float value: expected 4 bytes, got 8"),
        (DOUBLE, b"\x01" * 2, "malformed double value: expected 8 bytes, got 2"),
        (UUID, b"\x01" * 15, "malformed uuid value: expected 16 bytes, got 15"),
        (FixedType(4), b"\x01" * 3, r"malformed fixed\[4\] value: expected 4 bytes, got 3"),
        (DecimalType(4, 2), b"", r"malformed decimal\(4, 2\) value: empty bytes"),
        (
            DecimalType(4, 2),
            b"\x01\x00\x00",
            r"malformed decimal\(4, 2\) value: 65536 has more than 4 digits",
        ),
        (STRING, b"ab\xff", "malformed string value: invalid UTF-8 at byte 2"),
    ],
)
def test_bad_bytes_are_corrupt_metadata(t: IcebergType, data: bytes, message: str) -> None:
    with pytest.raises(CorruptMetadataError, match=f"^{message}$") as info:
        from_bytes(t, data)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("t", [UNKNOWN, PrimitiveType("variant"), StructType(), ListType(1, INT)])
def test_types_without_a_single_value_form(t: IcebergType) -> None:
    with pytest.raises(UnsupportedFeatureError):
        from_bytes(t, b"\x00")
    with pytest.raises(UnsupportedFeatureError):
        to_bytes(t, 0)


@pytest.mark.parametrize(
    ("t", "value", "error", "message"),
    [
        (INT, 2**31, ValueError, "out of range for int"),
        (LONG, True, TypeError, "long value must be int, got bool"),
        (DATE, "2017-11-16", TypeError, "date value must be int, got str"),
        (STRING, b"x", TypeError, "string value must be str, got bytes"),
        (UUID, str(SAMPLE_UUID), TypeError, "uuid value must be uuid.UUID"),
        (FixedType(2), b"\x01", ValueError, r"fixed\[2\] value must be 2 bytes"),
        (DecimalType(4, 2), Decimal("123.45"), ValueError, "does not fit"),
        (DecimalType(4, 2), Decimal("1.234"), ValueError, "more than 2 digits"),
        (DecimalType(4, 2), Decimal("NaN"), ValueError, "cannot be stored"),
        (DecimalType(4, 2), 1.5, TypeError, "must be Decimal"),
        (BOOLEAN, 1, TypeError, "must be bool"),
    ],
)
def test_values_breaking_the_convention_are_caller_errors(
    t: IcebergType, value: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        to_bytes(t, value)


def test_type_kind() -> None:
    assert type_kind(DecimalType(9, 2)) == "decimal"
    assert type_kind(FixedType(3)) == "fixed"
    assert type_kind(TIMESTAMPTZ_NS) == "timestamptz_ns"
    assert type_kind(StructType()) == "struct"


# ---------------------------------------------------------------------------------------------
# JSON


@pytest.mark.parametrize(
    ("t", "value", "expected"),
    [
        (BOOLEAN, True, True),
        (INT, 34, 34),
        (LONG, -34, -34),
        (DOUBLE, 1.5, 1.5),
        (DecimalType(4, 2), Decimal("14.20"), "14.20"),
        (DecimalType(4, 2), Decimal("14.2"), "14.20"),
        (DecimalType(9, 4), Decimal("-0.0001"), "-0.0001"),
        (DecimalType(38, 10), Decimal("1E-10"), "1E-10"),
        (DATE, 17486, "2017-11-16"),
        (DATE, -1, "1969-12-31"),
        (TIME, 81068123456, "22:31:08.123456"),
        (TIME, 81068000000, "22:31:08.000000"),
        (TIMESTAMP, TS_MICROS, "2017-11-16T22:31:08.123456"),
        (TIMESTAMP, -1, "1969-12-31T23:59:59.999999"),
        (TIMESTAMPTZ, TS_MICROS, "2017-11-16T22:31:08.123456+00:00"),
        (TIMESTAMP_NS, TS_MICROS * 1000 + 789, "2017-11-16T22:31:08.123456789"),
        (TIMESTAMPTZ_NS, TS_MICROS * 1000, "2017-11-16T22:31:08.123456000+00:00"),
        (STRING, "iceberg", "iceberg"),
        (UUID, uuid.UUID("F79C3E09-677C-4BBD-A479-3F349CB785E7"), "f79c3e09-677c-4bbd-a479-3f349cb785e7"),
        (FixedType(4), b"\x00\x01\x02\xff", "000102ff"),
        (BINARY, b"\x00\x01\x02\xff", "000102ff"),
        (STRING, None, None),
    ],
)
def test_json_values(t: IcebergType, value: object, expected: object) -> None:
    assert to_json(t, value) == expected


@pytest.mark.parametrize(
    ("t", "text", "expected"),
    [
        (TIMESTAMPTZ, "2017-11-16T14:31:08.123456-08:00", TS_MICROS),
        (TIMESTAMPTZ, "2017-11-16T22:31:08.123456Z", TS_MICROS),
        (TIMESTAMPTZ, "2017-11-17T04:01:08.123456+05:30", TS_MICROS),
        (TIMESTAMP, "2017-11-16T22:31:08.123456", TS_MICROS),
        (TIMESTAMP, "2017-11-16T22:31:08.1234569", TS_MICROS),
        (TIMESTAMP, "2017-11-16T22:31", TS_MICROS - 8_123_456),
        (TIMESTAMP_NS, "2017-11-16T22:31:08.123456789", TS_MICROS * 1000 + 789),
        (TIMESTAMP_NS, "2017-11-16T22:31:08.1", (TS_MICROS - 23_456) * 1000),
        (TIME, "22:31:08", 81068000000),
        (TIME, "22:31:08.1", 81068100000),
        (DATE, "2000-02-29", 11016),
        (UUID, "F79C3E09-677C-4BBD-A479-3F349CB785E7", SAMPLE_UUID),
        (BINARY, "000102FF", b"\x00\x01\x02\xff"),
        (FLOAT, 1, 1.0),
        (DecimalType(4, 2), "-14.20", Decimal("-14.20")),
        (DecimalType(38, -2), "2E+2", None),
    ],
)
def test_json_parsing(t: IcebergType, text: object, expected: object) -> None:
    if expected is None:  # negative scale: value must survive with its exponent
        result = from_json(t, text)
        assert str(result) == "2E+2"
        return
    assert from_json(t, text) == expected


@pytest.mark.parametrize(
    ("t", "value", "message"),
    [
        (DecimalType(4, 2), "14.2", "scale must be 2"),
        (DecimalType(4, 2), "1.4E+1", "scale must be 2"),
        (DecimalType(4, 2), "abc", "malformed"),
        (DecimalType(4, 2), 14.2, "malformed"),
        (DecimalType(4, 2), "123.45", "does not fit"),
        (INT, True, "malformed"),
        (INT, 2**31, "out of range"),
        (INT, "34", "malformed"),
        (BOOLEAN, 1, "malformed"),
        (DOUBLE, "1.0", "malformed"),
        (DATE, "2017-02-30", "no such date"),
        (DATE, "17486", "malformed"),
        (TIME, "24:00:00", "malformed"),
        (TIMESTAMP, "2017-11-16T22:31:08+00:00", "must not carry a UTC offset"),
        (TIMESTAMPTZ, "2017-11-16T22:31:08", "needs a UTC offset"),
        (TIMESTAMP, "2017-11-16 22:31:08", "malformed"),
        (UUID, "not-a-uuid", "malformed"),
        (FixedType(2), "000102", r"fixed\[2\] value must be 2 bytes"),
        (BINARY, "0g", "malformed"),
        (STRING, 5, "malformed"),
    ],
)
def test_bad_json_is_corrupt_metadata(t: IcebergType, value: object, message: str) -> None:
    with pytest.raises(CorruptMetadataError, match=message) as info:
        from_json(t, value)
    assert "\n" not in str(info.value)


def test_json_null_stays_null() -> None:
    assert from_json(LONG, None) is None
    assert to_json(LONG, None) is None


def test_nested_json_is_not_supported_yet() -> None:
    with pytest.raises(UnsupportedFeatureError):
        from_json(StructType(), {"1": 1})
