"""Iceberg partition transforms: parsing, result types, applying them, and bucket hashing.

Values in and out follow the project convention (also in ``tablekeeper.iceberg.conversions``):

=============================  ===================================================
Iceberg type                   Python value
=============================  ===================================================
boolean                        ``bool``
int, long                      ``int``
float, double                  ``float``
decimal(P, S)                  ``decimal.Decimal`` (results carry exponent ``-S``)
date                           ``int`` days since 1970-01-01
time                           ``int`` microseconds since midnight
timestamp, timestamptz         ``int`` microseconds since the epoch
timestamp_ns, timestamptz_ns   ``int`` nanoseconds since the epoch
string                         ``str``
uuid                           ``uuid.UUID``
fixed[L], binary               ``bytes``
=============================  ===================================================

Partition values use the same convention for the result type: bucket, year, month and hour give
``int``; day gives a ``date``, i.e. ``int`` days. ``None`` always maps to ``None`` (void maps
everything to ``None``).

Which transform applies to which source type follows Java (``canTransform``):

- identity: any primitive except ``variant``.
- bucket[N]: int, long, decimal, date, time, timestamp(tz), timestamp(tz)_ns, string, uuid,
  fixed, binary. Not boolean, float or double (their hash is specified, see ``bucket_hash``).
- truncate[W]: int, long, decimal, string, binary.
- year, month, day: date and the four timestamp types; hour: the timestamp types only.
- void: any type.

A string Java would not recognise either (``"zorder"``, a transform from a newer spec) parses to
``UnknownTransform`` so metadata round-trips; using it raises ``UnsupportedFeatureError`` because
guessing its result type would write wrong manifests.
"""

from __future__ import annotations

import base64
import math
import re
import struct
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from decimal import Decimal
from typing import ClassVar

import mmh3

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.conversions import (
    INT32_KINDS,
    INT64_KINDS,
    MICRO_TIMESTAMP_KINDS,
    MICROS_PER_DAY,
    MICROS_PER_HOUR,
    NANO_TIMESTAMP_KINDS,
    NANOS_PER_DAY,
    PrimitiveValue,
    coerce_value,
    days_to_ymd,
    decimal_bytes,
    decimal_to_unscaled,
    iso_date,
    type_kind,
    unscaled_to_decimal,
    year_text,
)
from tablekeeper.iceberg.types import DATE, INT, STRING, IcebergType, is_primitive

_BUCKET_KINDS = frozenset(
    {"decimal", "string", "uuid", "fixed", "binary"} | INT32_KINDS | INT64_KINDS,
)
_TRUNCATE_KINDS = frozenset({"int", "long", "decimal", "string", "binary"})
_TIMESTAMP_KINDS = MICRO_TIMESTAMP_KINDS | NANO_TIMESTAMP_KINDS
_NANOS_PER_HOUR = MICROS_PER_HOUR * 1_000


@dataclass(frozen=True)
class Transform(ABC):
    """A partition transform. ``str(t)`` is the Iceberg JSON string it was parsed from."""

    # True when sorting by the source column also sorts by the transformed value.
    preserves_order: ClassVar[bool] = False

    @abstractmethod
    def __str__(self) -> str: ...

    @abstractmethod
    def can_transform(self, source_type: IcebergType) -> bool: ...

    def result_type(self, source_type: IcebergType) -> IcebergType:
        """Type of the partition value (spec: identity/truncate/void keep the source type)."""
        self._require(source_type)
        return source_type

    def apply(self, source_type: IcebergType, value: object) -> PrimitiveValue | None:
        """The partition value of ``value``; ``TypeError``/``ValueError`` if it breaks the convention."""
        self._require(source_type)
        if value is None:
            return None
        return self._apply(source_type, coerce_value(source_type, value))

    def human_string(self, source_type: IcebergType, value: object) -> str:
        """Text of a partition value (not a source value) for partition paths and listings."""
        if value is None:
            return "null"
        return human_value(self.result_type(source_type), value)

    def satisfies_order_of(self, other: Transform) -> bool:
        """Whether data ordered by this transform is also ordered by ``other`` (same source).

        ``False`` is always safe: it only means a sort may be redone.
        """
        return self == other

    def _require(self, source_type: IcebergType) -> None:
        if not self.can_transform(source_type):
            raise UnsupportedFeatureError(f"partition transform {self} cannot apply to type {source_type}")

    @abstractmethod
    def _apply(self, source_type: IcebergType, value: PrimitiveValue) -> PrimitiveValue | None: ...


@dataclass(frozen=True)
class Identity(Transform):
    preserves_order: ClassVar[bool] = True

    def __str__(self) -> str:
        return "identity"

    def can_transform(self, source_type: IcebergType) -> bool:
        return is_primitive(source_type) and type_kind(source_type) != "variant"

    def satisfies_order_of(self, other: Transform) -> bool:
        return other.preserves_order

    def _apply(self, source_type: IcebergType, value: PrimitiveValue) -> PrimitiveValue:
        return value


def _check_positive(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class Bucket(Transform):
    num_buckets: int

    def __post_init__(self) -> None:
        if (
            isinstance(self.num_buckets, bool)
            or not isinstance(self.num_buckets, int)
            or self.num_buckets <= 0
        ):
            raise ValueError(f"bucket count must be a positive int, got {self.num_buckets!r}")

    def __str__(self) -> str:
        return f"bucket[{self.num_buckets}]"

    def can_transform(self, source_type: IcebergType) -> bool:
        return is_primitive(source_type) and type_kind(source_type) in _BUCKET_KINDS

    def result_type(self, source_type: IcebergType) -> IcebergType:
        self._require(source_type)
        return INT

    def _apply(self, source_type: IcebergType, value: PrimitiveValue) -> int:
        return (bucket_hash(source_type, value) & 0x7FFFFFFF) % self.num_buckets


@dataclass(frozen=True)
class Truncate(Transform):
    width: int
    preserves_order: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_positive(self.width, "truncate width")

    def __str__(self) -> str:
        return f"truncate[{self.width}]"

    def can_transform(self, source_type: IcebergType) -> bool:
        return is_primitive(source_type) and type_kind(source_type) in _TRUNCATE_KINDS

    def _apply(self, source_type: IcebergType, value: PrimitiveValue) -> PrimitiveValue:
        w = self.width
        if isinstance(value, Decimal):
            scale = -_exponent(value)
            unscaled = decimal_to_unscaled(value, scale)
            return unscaled_to_decimal(unscaled - unscaled % w, scale)
        if isinstance(value, int) and not isinstance(value, bool):
            # Python's % already has the sign of the (positive) width, i.e. floor semantics.
            return value - value % w
        if isinstance(value, (str, bytes)):
            # str slices by code point, bytes by byte: exactly the spec's two rules.
            return value[:w]
        raise TypeError(f"cannot truncate {type(value).__name__}")


def _exponent(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)  # coerce_value only lets finite decimals through
    return exponent


@dataclass(frozen=True)
class _TimeTransform(Transform):
    """Year, month, day and hour: whole units since the epoch, rounded down (floor)."""

    preserves_order: ClassVar[bool] = True
    # Coarseness rank; a finer time unit orders data for every coarser one.
    _rank: ClassVar[int] = 0

    def can_transform(self, source_type: IcebergType) -> bool:
        kind = type_kind(source_type)
        return kind == "date" or kind in _TIMESTAMP_KINDS

    def result_type(self, source_type: IcebergType) -> IcebergType:
        self._require(source_type)
        return INT

    def satisfies_order_of(self, other: Transform) -> bool:
        return isinstance(other, _TimeTransform) and self._rank <= other._rank

    def human_string(self, source_type: IcebergType, value: object) -> str:
        self._require(source_type)
        if value is None:
            return "null"
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{self} partition value must be int, got {type(value).__name__}")
        return self._unit_text(value)

    def _apply(self, source_type: IcebergType, value: PrimitiveValue) -> int:
        assert isinstance(value, int)
        return self._from_epoch_count(type_kind(source_type), value)

    @abstractmethod
    def _from_epoch_count(self, kind: str, value: int) -> int: ...

    @abstractmethod
    def _unit_text(self, value: int) -> str: ...


def _days(kind: str, value: int) -> int:
    if kind in MICRO_TIMESTAMP_KINDS:
        return value // MICROS_PER_DAY
    if kind in NANO_TIMESTAMP_KINDS:
        return value // NANOS_PER_DAY
    return value


def _months(kind: str, value: int) -> int:
    year, month, _ = days_to_ymd(_days(kind, value))
    return (year - 1970) * 12 + month - 1


@dataclass(frozen=True)
class Year(_TimeTransform):
    _rank: ClassVar[int] = 3

    def __str__(self) -> str:
        return "year"

    def _from_epoch_count(self, kind: str, value: int) -> int:
        return days_to_ymd(_days(kind, value))[0] - 1970

    def _unit_text(self, value: int) -> str:
        return year_text(1970 + value)


@dataclass(frozen=True)
class Month(_TimeTransform):
    _rank: ClassVar[int] = 2

    def __str__(self) -> str:
        return "month"

    def _from_epoch_count(self, kind: str, value: int) -> int:
        return _months(kind, value)

    def _unit_text(self, value: int) -> str:
        years, month0 = divmod(value, 12)
        return f"{year_text(1970 + years)}-{month0 + 1:02d}"


@dataclass(frozen=True)
class Day(_TimeTransform):
    _rank: ClassVar[int] = 1

    def __str__(self) -> str:
        return "day"

    def result_type(self, source_type: IcebergType) -> IcebergType:
        self._require(source_type)
        return DATE

    def _from_epoch_count(self, kind: str, value: int) -> int:
        return _days(kind, value)

    def _unit_text(self, value: int) -> str:
        return iso_date(value)


@dataclass(frozen=True)
class Hour(_TimeTransform):
    _rank: ClassVar[int] = 0

    def __str__(self) -> str:
        return "hour"

    def can_transform(self, source_type: IcebergType) -> bool:
        return type_kind(source_type) in _TIMESTAMP_KINDS

    def _from_epoch_count(self, kind: str, value: int) -> int:
        return value // (_NANOS_PER_HOUR if kind in NANO_TIMESTAMP_KINDS else MICROS_PER_HOUR)

    def _unit_text(self, value: int) -> str:
        days, hour = divmod(value, 24)
        return f"{iso_date(days)}-{hour:02d}"


@dataclass(frozen=True)
class Void(Transform):
    def __str__(self) -> str:
        return "void"

    def can_transform(self, source_type: IcebergType) -> bool:
        return True

    def apply(self, source_type: IcebergType, value: object) -> PrimitiveValue | None:
        # Void never looks at the value, so it must not reject types coerce_value cannot check.
        return None

    def _apply(self, source_type: IcebergType, value: PrimitiveValue) -> None:
        return None


@dataclass(frozen=True)
class UnknownTransform(Transform):
    """A transform string tablekeeper does not understand, kept verbatim for metadata round trips."""

    text: str

    def __str__(self) -> str:
        return self.text

    def can_transform(self, source_type: IcebergType) -> bool:
        return False

    def result_type(self, source_type: IcebergType) -> IcebergType:
        # The spec has readers read tables with transforms they do not know: their manifests'
        # partition values are kept as read (string, as Iceberg Java types an unknown transform).
        return STRING

    def human_string(self, source_type: IcebergType, value: object) -> str:
        # Listings of such tables should still work; only computing new values is refused.
        return "null" if value is None else str(value)

    def _require(self, source_type: IcebergType) -> None:
        raise UnsupportedFeatureError(f"partition transform {self.text!r} is not supported by tablekeeper")

    def _apply(self, source_type: IcebergType, value: PrimitiveValue) -> None:
        raise UnsupportedFeatureError(f"partition transform {self.text!r} is not supported by tablekeeper")


# Names are matched case-insensitively, as Java does when reading metadata.
_SIMPLE: dict[str, Transform] = {
    "identity": Identity(),
    "year": Year(),
    "month": Month(),
    "day": Day(),
    "hour": Hour(),
    "void": Void(),
}
_WITH_ARGUMENT = re.compile(r"^(\w+)\[(.*)\]$")


def parse_transform(text: str) -> Transform:
    """Parse an Iceberg transform string ("identity", "bucket[16]", "truncate[10]", "day", ...)."""
    if not isinstance(text, str) or not text:
        raise CorruptMetadataError(f"malformed partition transform {text!r}: expected a non-empty string")
    simple = _SIMPLE.get(text.lower())
    if simple is not None:
        return simple
    match = _WITH_ARGUMENT.match(text)
    if match and match.group(1).lower() in ("bucket", "truncate"):
        name, argument = match.group(1).lower(), match.group(2)
        # Java reads the argument as a positive Java int; anything else is a broken spec.
        if not re.fullmatch(r"\d{1,10}", argument) or not 0 < int(argument) < 2**31:
            raise CorruptMetadataError(
                f"malformed partition transform {text!r}: {name} needs a positive integer argument"
            )
        return Bucket(int(argument)) if name == "bucket" else Truncate(int(argument))
    return UnknownTransform(text)


# ---------------------------------------------------------------------------------------------
# Hashing (spec Appendix B)


def bucket_hash(source_type: IcebergType, value: object) -> int:
    """Signed 32-bit Murmur3 (x86, seed 0) of ``value`` as the spec serialises it for hashing.

    Also defined for boolean, float and double (the spec gives their hash even though bucket does
    not accept them).
    """
    v = coerce_value(source_type, value)
    kind = type_kind(source_type)
    data: bytes
    if isinstance(v, bool):
        data = struct.pack("<q", int(v))
    elif isinstance(v, int):
        # Every integer-like type hashes as a long so promotion int -> long keeps bucket ids.
        data = struct.pack("<q", v // 1_000 if kind in NANO_TIMESTAMP_KINDS else v)
    elif isinstance(v, float):
        data = _canonical_double_bits(v)
    elif isinstance(v, Decimal):
        data = decimal_bytes(decimal_to_unscaled(v, -_exponent(v)))
    elif isinstance(v, str):
        data = v.encode("utf-8")
    elif isinstance(v, uuid.UUID):
        data = v.bytes
    else:
        data = v
    return mmh3.hash(data, 0, signed=True)


def _canonical_double_bits(value: float) -> bytes:
    # Java hashes doubleToLongBits with -0.0 folded into 0.0 and every NaN folded into one pattern.
    if math.isnan(value):
        return struct.pack("<q", 0x7FF8000000000000)
    return struct.pack("<d", value if value != 0.0 else 0.0)


# ---------------------------------------------------------------------------------------------
# Human strings. Shaped like Java's toHumanString so partition directory names match the ones
# Spark + Iceberg write for the same table.


def human_value(t: IcebergType, value: object) -> str:
    """Text of a value of type ``t`` as it appears in partition paths ("2017-11-16", "ice", ...)."""
    if value is None:
        return "null"
    v = coerce_value(t, value)
    kind = type_kind(t)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if kind == "date":
            return iso_date(v)
        if kind == "time":
            return _java_time_text(v * 1_000)
        if kind in _TIMESTAMP_KINDS:
            nanos = v if kind in NANO_TIMESTAMP_KINDS else v * 1_000
            days, nanos_of_day = divmod(nanos, NANOS_PER_DAY)
            text = f"{iso_date(days)}T{_java_time_text(nanos_of_day)}"
            return text + "Z" if kind.startswith("timestamptz") else text
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    return str(v)


def _java_time_text(nanos_of_day: int) -> str:
    # java.time prints "HH:mm", adds ":ss" only if needed, and the fraction in groups of 3 digits.
    seconds, nanos = divmod(nanos_of_day, 1_000_000_000)
    hours, rest = divmod(seconds, 3_600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}"
    if secs or nanos:
        text += f":{secs:02d}"
        if nanos % 1_000_000 == 0 and nanos:
            text += f".{nanos // 1_000_000:03d}"
        elif nanos % 1_000 == 0 and nanos:
            text += f".{nanos // 1_000:06d}"
        elif nanos:
            text += f".{nanos:09d}"
    return text
