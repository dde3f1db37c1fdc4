"""Iceberg single values (spec Appendix D): the binary form of bounds and the JSON form of defaults.

Python value convention, used for every Iceberg value across tablekeeper (partition tuples,
bounds, defaults, transform inputs and outputs):

=============================  ===================================================
Iceberg type                   Python value
=============================  ===================================================
boolean                        ``bool``
int, long                      ``int``
float, double                  ``float`` (a ``float`` column holds float32-exact values)
decimal(P, S)                  ``decimal.Decimal``, normalised to exponent ``-S``
date                           ``int`` days since 1970-01-01
time                           ``int`` microseconds since midnight
timestamp, timestamptz         ``int`` microseconds since 1970-01-01T00:00:00 (UTC for tz)
timestamp_ns, timestamptz_ns   ``int`` nanoseconds since the epoch
string                         ``str``
uuid                           ``uuid.UUID``
fixed[L], binary               ``bytes``
=============================  ===================================================

Plain ints instead of ``datetime`` objects because the transforms, hashing and bounds all work on
the epoch counts, and ``datetime`` cannot hold nanoseconds or years outside 1..9999.

Errors: values handed in by our own code that break the convention raise ``TypeError`` or
``ValueError`` (a bug, not bad data); bytes or JSON read from metadata that cannot be decoded raise
``CorruptMetadataError``; types without a single-value form raise ``UnsupportedFeatureError``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import struct
import uuid
from decimal import Decimal, InvalidOperation
from typing import TypeAlias

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.types import (
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    PrimitiveType,
    StructType,
)

PrimitiveValue: TypeAlias = bool | int | float | Decimal | str | uuid.UUID | bytes
JsonPrimitive: TypeAlias = bool | int | float | str | None

MICROS_PER_SECOND = 1_000_000
NANOS_PER_SECOND = 1_000_000_000
SECONDS_PER_DAY = 86_400
MICROS_PER_HOUR = 3_600 * MICROS_PER_SECOND
MICROS_PER_DAY = SECONDS_PER_DAY * MICROS_PER_SECOND
NANOS_PER_DAY = SECONDS_PER_DAY * NANOS_PER_SECOND

INT32_RANGE = (-(2**31), 2**31 - 1)
INT64_RANGE = (-(2**63), 2**63 - 1)

INT32_KINDS = frozenset({"int", "date"})
INT64_KINDS = frozenset({"long", "time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"})
MICRO_TIMESTAMP_KINDS = frozenset({"timestamp", "timestamptz"})
NANO_TIMESTAMP_KINDS = frozenset({"timestamp_ns", "timestamptz_ns"})


def type_kind(t: IcebergType) -> str:
    """The type's family name: primitive names as-is, plus "decimal", "fixed", "struct", "list", "map"."""
    if isinstance(t, PrimitiveType):
        return t.name
    if isinstance(t, DecimalType):
        return "decimal"
    if isinstance(t, FixedType):
        return "fixed"
    if isinstance(t, StructType):
        return "struct"
    if isinstance(t, ListType):
        return "list"
    if isinstance(t, MapType):
        return "map"
    raise TypeError(f"not an Iceberg type: {t!r}")


# ---------------------------------------------------------------------------------------------
# Value checks


def coerce_value(t: IcebergType, value: object) -> PrimitiveValue:
    """Check ``value`` against the convention for ``t`` and return its canonical form.

    Canonical means: decimals carry exactly the column's scale, float-column values are rounded to
    float32 (what the column can store, so hashing and bounds agree with Java), ints are accepted
    for float columns.
    """
    kind = type_kind(t)
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _wrong_type(t, value, "bool")
        return value
    if kind in INT32_KINDS or kind in INT64_KINDS:
        return _check_int(t, value, INT32_RANGE if kind in INT32_KINDS else INT64_RANGE)
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (float, int)):
            raise _wrong_type(t, value, "float")
        return _to_float32(float(value)) if kind == "float" else float(value)
    if isinstance(t, DecimalType):
        if not isinstance(value, Decimal):
            raise _wrong_type(t, value, "Decimal")
        unscaled = decimal_to_unscaled(value, t.scale)
        if _digits(unscaled) > t.precision:
            raise ValueError(f"{value} does not fit {t}")
        return unscaled_to_decimal(unscaled, t.scale)
    if kind == "string":
        if not isinstance(value, str):
            raise _wrong_type(t, value, "str")
        return value
    if kind == "uuid":
        if not isinstance(value, uuid.UUID):
            raise _wrong_type(t, value, "uuid.UUID")
        return value
    if isinstance(t, FixedType) or kind == "binary":
        if not isinstance(value, bytes):
            raise _wrong_type(t, value, "bytes")
        if isinstance(t, FixedType) and len(value) != t.length:
            raise ValueError(f"{t} value must be {t.length} bytes, got {len(value)}")
        return value
    raise UnsupportedFeatureError(f"Iceberg type {t} has no single-value form")


def _check_int(t: IcebergType, value: object, bounds: tuple[int, int]) -> int:
    # bool is an int subclass, but True in a long column is always a caller bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(t, value, "int")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{value} is out of range for {t}")
    return value


def _wrong_type(t: IcebergType, value: object, expected: str) -> TypeError:
    return TypeError(f"{t} value must be {expected}, got {type(value).__name__}")


def _to_float32(value: float) -> float:
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError as err:
        raise ValueError(f"{value} is out of range for float") from err


def _digits(unscaled: int) -> int:
    return len(str(abs(unscaled)))


def decimal_to_unscaled(value: Decimal, scale: int) -> int:
    """The unscaled integer of ``value`` at ``scale``; exact (no context rounding at 38 digits)."""
    if not value.is_finite():
        raise ValueError(f"{value} cannot be stored in a decimal column")
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite decimals always have an int exponent
    coefficient = int("".join(map(str, digit_tuple)) or "0")
    shift = exponent + scale
    if shift >= 0:
        unscaled = coefficient * int(10**shift)
    else:
        unscaled, rest = divmod(coefficient, int(10**-shift))
        if rest:
            raise ValueError(f"{value} has more than {scale} digits after the decimal point")
    return -unscaled if sign else unscaled


def unscaled_to_decimal(unscaled: int, scale: int) -> Decimal:
    # Built from a tuple so no decimal context (28-digit default) can round a 38-digit value.
    digit_tuple = tuple(int(c) for c in str(abs(unscaled)))
    return Decimal((1 if unscaled < 0 else 0, digit_tuple, -scale))


def decimal_bytes(unscaled: int) -> bytes:
    """Minimum-length two's-complement big-endian bytes, as Java's ``BigInteger.toByteArray``."""
    # ~x for negatives gives the magnitude whose bit length matches Java's bitLength().
    length = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return unscaled.to_bytes(length, "big", signed=True)


# ---------------------------------------------------------------------------------------------
# Binary form


def to_bytes(t: IcebergType, value: object) -> bytes:
    """Appendix D binary form of ``value`` (bounds in manifests and partition summaries)."""
    v = coerce_value(t, value)
    kind = type_kind(t)
    if isinstance(v, bool):
        return b"\x01" if v else b"\x00"
    if isinstance(v, int):
        return struct.pack("<i" if kind in INT32_KINDS else "<q", v)
    if isinstance(v, float):
        return struct.pack("<f" if kind == "float" else "<d", v)
    if isinstance(v, Decimal):
        assert isinstance(t, DecimalType)
        return decimal_bytes(decimal_to_unscaled(v, t.scale))
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, uuid.UUID):
        return v.bytes
    return v


def from_bytes(t: IcebergType, data: bytes) -> PrimitiveValue:
    """Decode an Appendix D binary value, including bounds written before a type promotion."""
    data = bytes(data)
    kind = type_kind(t)
    size = len(data)
    if kind == "boolean":
        _need(t, data, 1)
        # The spec reads any non-zero byte as true.
        return data != b"\x00"
    if kind in INT32_KINDS:
        _need(t, data, 4)
        return int(struct.unpack("<i", data)[0])
    if kind in INT64_KINDS:
        # Promotion never rewrites old bounds: 4 bytes on a long column are the old int, and on a
        # timestamp column (v3 date promotion) the old date, which we move to midnight.
        if size == 4 and kind in ("long", "timestamp", "timestamp_ns"):
            old = int(struct.unpack("<i", data)[0])
            if kind == "timestamp":
                return old * MICROS_PER_DAY
            return old * NANOS_PER_DAY if kind == "timestamp_ns" else old
        _need(t, data, 8)
        return int(struct.unpack("<q", data)[0])
    if kind == "float":
        _need(t, data, 4)
        return float(struct.unpack("<f", data)[0])
    if kind == "double":
        if size == 4:  # written while the column was still a float
            return float(struct.unpack("<f", data)[0])
        _need(t, data, 8)
        return float(struct.unpack("<d", data)[0])
    if isinstance(t, DecimalType):
        if not data:
            raise CorruptMetadataError(f"malformed {t} value: empty bytes")
        unscaled = int.from_bytes(data, "big", signed=True)
        if _digits(unscaled) > t.precision:
            raise CorruptMetadataError(f"malformed {t} value: {unscaled} has more than {t.precision} digits")
        return unscaled_to_decimal(unscaled, t.scale)
    if kind == "string":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CorruptMetadataError(f"malformed string value: invalid UTF-8 at byte {err.start}") from err
    if kind == "uuid":
        _need(t, data, 16)
        return uuid.UUID(bytes=data)
    if isinstance(t, FixedType):
        _need(t, data, t.length)
        return data
    if kind == "binary":
        return data
    raise UnsupportedFeatureError(f"Iceberg type {t} has no binary single-value form")


def _need(t: IcebergType, data: bytes, size: int) -> None:
    if len(data) != size:
        unit = "byte" if size == 1 else "bytes"
        raise CorruptMetadataError(f"malformed {t} value: expected {size} {unit}, got {len(data)}")


# ---------------------------------------------------------------------------------------------
# Calendar. Own proleptic-Gregorian arithmetic (days <-> civil date) because datetime stops at
# year 9999 while Iceberg dates and timestamps range far wider.


def days_to_ymd(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01; works for any int."""
    # Shift to 0000-03-01 so leap days fall at the end of a 400-year era.
    z = days + 719_468
    era = z // 146_097
    day_of_era = z - era * 146_097
    year_of_era = (day_of_era - day_of_era // 1_460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153  # 0 = March
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def ymd_to_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a civil date; ``ValueError`` if the date does not exist."""
    if not 1 <= month <= 12 or not 1 <= day <= _month_length(year, month):
        raise ValueError(f"no such date: {year}-{month:02d}-{day:02d}")
    y = year - 1 if month <= 2 else year
    era = y // 400
    year_of_era = y - era * 400
    day_of_year = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


def _month_length(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def year_text(year: int) -> str:
    """ISO-8601 year: four digits, with a sign outside 0000..9999 (as java.time prints it)."""
    if year > 9999:
        return f"+{year}"
    if year < 0:
        return f"-{-year:04d}"
    return f"{year:04d}"


def iso_date(days: int) -> str:
    year, month, day = days_to_ymd(days)
    return f"{year_text(year)}-{month:02d}-{day:02d}"


# ---------------------------------------------------------------------------------------------
# JSON form

_DATE_RE = r"([+-]?\d{4,})-(\d{2})-(\d{2})"
_TIME_RE = r"(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
_OFFSET_RE = r"(Z|[+-]\d{2}:\d{2})"
_DATE_PATTERN = re.compile(f"^{_DATE_RE}$")
_TIME_PATTERN = re.compile(f"^{_TIME_RE}$")
_TIMESTAMP_PATTERN = re.compile(f"^{_DATE_RE}T{_TIME_RE}{_OFFSET_RE}?$")


def to_json(t: IcebergType, value: object) -> JsonPrimitive:
    """Appendix D JSON form (defaults, stats files); ``None`` stays JSON null."""
    if value is None:
        return None
    v = coerce_value(t, value)
    kind = type_kind(t)
    if isinstance(v, int) and not isinstance(v, bool):
        if kind == "date":
            return iso_date(v)
        if kind == "time":
            return _time_text(v * 1_000, 6)
        if kind in MICRO_TIMESTAMP_KINDS:
            return _timestamp_text(v * 1_000, 6, kind == "timestamptz")
        if kind in NANO_TIMESTAMP_KINDS:
            return _timestamp_text(v, 9, kind == "timestamptz_ns")
        return v
    if isinstance(v, Decimal):
        # str() of a Decimal follows the same scientific-notation rule as Java's BigDecimal.toString
        # ("14.20", "2E+20"), which the spec requires to carry the scale.
        return str(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    return v


def _time_text(nanos_of_day: int, digits: int) -> str:
    seconds, nanos = divmod(nanos_of_day, NANOS_PER_SECOND)
    hours, rest = divmod(seconds, 3_600)
    minutes, secs = divmod(rest, 60)
    fraction = nanos // int(10 ** (9 - digits))
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{fraction:0{digits}d}"


def _timestamp_text(nanos: int, digits: int, with_zone: bool) -> str:
    days, nanos_of_day = divmod(nanos, NANOS_PER_DAY)
    text = f"{iso_date(days)}T{_time_text(nanos_of_day, digits)}"
    return text + "+00:00" if with_zone else text


def from_json(t: IcebergType, value: object) -> PrimitiveValue | None:
    """Parse an Appendix D JSON value; malformed input raises ``CorruptMetadataError``."""
    if value is None:
        return None
    kind = type_kind(t)
    try:
        if kind == "boolean":
            if not isinstance(value, bool):
                raise _bad_json(t, value)
            return value
        if kind in ("int", "long"):
            # JSON true must not pass for 1.
            if isinstance(value, bool) or not isinstance(value, int):
                raise _bad_json(t, value)
            return _check_int(t, value, INT32_RANGE if kind == "int" else INT64_RANGE)
        if kind in ("float", "double"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _bad_json(t, value)
            return coerce_value(t, float(value))
        if isinstance(t, DecimalType):
            return _decimal_from_json(t, _json_str(t, value))
        if kind == "date":
            return _parse_date(t, _json_str(t, value))
        if kind == "time":
            match = _TIME_PATTERN.match(_json_str(t, value))
            if not match:
                raise _bad_json(t, value)
            return _nanos_of_day(t, *match.groups()) // 1_000
        if kind in MICRO_TIMESTAMP_KINDS or kind in NANO_TIMESTAMP_KINDS:
            nanos = _parse_timestamp(t, _json_str(t, value), with_zone=kind.startswith("timestamptz"))
            return _check_int(t, nanos if kind in NANO_TIMESTAMP_KINDS else nanos // 1_000, INT64_RANGE)
        if kind == "string":
            return _json_str(t, value)
        if kind == "uuid":
            return uuid.UUID(_json_str(t, value))
        if kind in ("fixed", "binary"):
            return coerce_value(t, bytes.fromhex(_json_str(t, value)))
    except (ValueError, TypeError) as err:
        raise CorruptMetadataError(f"malformed {t} value {_show(value)}: {err}") from err
    raise UnsupportedFeatureError(f"JSON single values of type {t} are not supported")


def _json_str(t: IcebergType, value: object) -> str:
    if not isinstance(value, str):
        raise _bad_json(t, value)
    return value


def _bad_json(t: IcebergType, value: object) -> CorruptMetadataError:
    return CorruptMetadataError(f"malformed {t} value {_show(value)} in metadata JSON")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _decimal_from_json(t: DecimalType, text: str) -> Decimal:
    try:
        parsed = Decimal(text)
    except InvalidOperation as err:
        raise _bad_json(t, text) from err
    exponent = parsed.as_tuple().exponent
    # The spec makes the written scale part of the value; Java rejects a mismatch too.
    if not parsed.is_finite() or exponent != -t.scale:
        raise CorruptMetadataError(f"malformed {t} value {_show(text)}: scale must be {t.scale}")
    v = coerce_value(t, parsed)
    assert isinstance(v, Decimal)
    return v


def _parse_date(t: IcebergType, text: str) -> int:
    match = _DATE_PATTERN.match(text)
    if not match:
        raise _bad_json(t, text)
    return ymd_to_days(*(int(g) for g in match.groups()))


def _nanos_of_day(t: IcebergType, hours: str, minutes: str, seconds: str | None, fraction: str | None) -> int:
    h, m, s = int(hours), int(minutes), int(seconds or 0)
    if h > 23 or m > 59 or s > 59:
        raise _bad_json(t, f"{hours}:{minutes}:{seconds}")
    # Digits beyond the type's precision are dropped, as Java's parser does.
    return (h * 3_600 + m * 60 + s) * NANOS_PER_SECOND + int((fraction or "").ljust(9, "0"))


def _parse_timestamp(t: IcebergType, text: str, with_zone: bool) -> int:
    match = _TIMESTAMP_PATTERN.match(text)
    if not match:
        raise _bad_json(t, text)
    year, month, day, hours, minutes, seconds, fraction, offset = match.groups()
    if (offset is not None) != with_zone:
        need = "needs a UTC offset such as +00:00" if with_zone else "must not carry a UTC offset"
        raise CorruptMetadataError(f"malformed {t} value {_show(text)}: {need}")
    days = ymd_to_days(int(year), int(month), int(day))
    nanos = days * NANOS_PER_DAY + _nanos_of_day(t, hours, minutes, seconds, fraction)
    if offset and offset != "Z":
        sign = -1 if offset[0] == "-" else 1
        shift = int(offset[1:3]) * 3_600 + int(offset[4:6]) * 60
        nanos -= sign * shift * NANOS_PER_SECOND
    return nanos


def native_to_value(t: IcebergType, value: object) -> object:
    """A value as Python libraries hand it over (pyarrow statistics and rows, fastavro logical
    types: datetime, date, time, uuid bytes or text, unscaled ints) in this module's convention."""
    if isinstance(value, _dt.datetime):
        delta = value - _dt.datetime(1970, 1, 1, tzinfo=value.tzinfo)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros * 1000 if isinstance(t, PrimitiveType) and t.name.endswith("_ns") else micros
    if isinstance(value, _dt.date):
        return (value - _dt.date(1970, 1, 1)).days
    if isinstance(value, _dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(t, DecimalType) and not isinstance(value, Decimal) and isinstance(value, (int, str)):
        return Decimal(value).scaleb(-t.scale) if isinstance(value, int) else Decimal(value)
    if isinstance(t, PrimitiveType) and t.name == "uuid" and isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    if isinstance(t, PrimitiveType) and t.name == "uuid" and isinstance(value, str):
        return uuid.UUID(value)
    return value


def json_value(value: object) -> object:
    """A decoded value (a partition's, a bound's) as a JSON document can hold it: NaN and the
    infinities as text (JSON has none), bytes as hex, other non-JSON values by their text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
