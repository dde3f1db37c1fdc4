"""Delta partition values and file statistics, typed into the project's value convention.

Values follow ``tablekeeper.iceberg.conversions``: dates as days, timestamps as microseconds since
the epoch (UTC for Delta ``timestamp``), decimals as ``Decimal``, binary as ``bytes``.

A ``timestamp`` partition value without a zone (``2021-01-01 00:00:00``, what delta-spark writes
with ``spark.databricks.delta.write.utcTimestampPartitionValues`` off) is a wall time in the
zone of the session that wrote it, which the log does not record: the caller states it (``zone``),
else it is read as UTC.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Context, Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.delta.schema import (
    ColumnMapping,
    DeltaDecimal,
    DeltaField,
    DeltaPrimitive,
    DeltaStruct,
    DeltaType,
)
from tablekeeper.errors import ConfigError, CorruptMetadataError, UnsupportedFeatureError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_WALL = dt.datetime(1970, 1, 1)
_TS = re.compile(
    r"^(?P<date>\d{4,}-\d{2}-\d{2})[ T](?P<h>\d{2}):(?P<m>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d{1,9}))?)?"
    r"(?P<tz>Z|[+-]\d{2}(?::?\d{2}(?::?\d{2})?)?)?$"
)
INTEGER_TYPES = frozenset({"byte", "short", "integer", "long"})


def _micros(date_text: str, h: str, m: str, s: str | None, f: str | None) -> int:
    if int(h) > 23 or int(m) > 59 or int(s or 0) > 59:
        raise ValueError(f"time of day {h}:{m}:{s} is out of range")
    day = (dt.date.fromisoformat(date_text) - _EPOCH_DATE).days
    frac = int((f or "0").ljust(6, "0")[:6])
    return ((day * 24 + int(h)) * 60 + int(m)) * 60_000_000 + int(s or 0) * 1_000_000 + frac


def _offset_micros(tz: str | None) -> int:
    if not tz or tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    hours, minutes, seconds = int(digits[:2]), int(digits[2:4] or 0), int(digits[4:6] or 0)
    return sign * ((hours * 60 + minutes) * 60 + seconds) * 1_000_000


def writer_zone(name: str) -> dt.tzinfo:
    """The zone a Delta writer's session ran in, by its IANA name (``America/New_York``, ``UTC``)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"{name!r} is not a time zone name: give an IANA zone such as America/New_York or UTC"
        ) from None


def _zone_offset_micros(local_micros: int, zone: dt.tzinfo) -> int:
    """The zone's UTC offset at that wall time (its own, across DST). A wall time that occurs
    twice takes the earlier instant, one the clocks skipped is read with the offset before the
    jump: both as Java's ``ZonedDateTime`` resolves them, which Spark parses Delta's values with."""
    wall = _EPOCH_WALL + dt.timedelta(microseconds=local_micros)
    offset = wall.replace(tzinfo=zone).utcoffset()
    assert offset is not None
    return (offset.days * 86_400 + offset.seconds) * 1_000_000 + offset.microseconds


def parse_timestamp(text: str, *, with_zone: bool, zone: dt.tzinfo | None = None) -> int:
    """Micros since the epoch; zone-less text of a ``timestamp`` column is a wall time in the
    writer's ``zone`` (UTC when None)."""
    match = _TS.match(text.strip())
    if match is None:
        raise CorruptMetadataError(f"{text!r} is not a timestamp Delta writes")
    try:
        local = _micros(match["date"], match["h"], match["m"], match["s"], match["f"])
        if not with_zone:
            return local
        tz = match["tz"]
        if tz:
            return local - _offset_micros(tz)
        return local - (_zone_offset_micros(local, zone) if zone is not None else 0)
    except (ValueError, OverflowError) as err:
        raise CorruptMetadataError(f"{text!r} is not a timestamp Delta writes ({err})") from err


# The end of a value that names its zone, as ``_TS`` reads one.
_ZONE_SUFFIX = r"(Z|[+-]\d{2}(:?\d{2}(:?\d{2})?)?)\s*$"


def zoneless_timestamp_columns(
    partition_values: pa.Array | pa.ChunkedArray, plan: tuple[tuple[str, DeltaType], ...]
) -> tuple[str, ...]:
    """The partitionValues keys of ``timestamp`` columns (``plan``: key and type per partition
    column) that hold a value without a zone in these files' ``partition_values`` (a map column)."""
    keys = [key for key, t in plan if isinstance(t, DeltaPrimitive) and t.name == "timestamp"]
    if not keys or len(partition_values) == 0:
        return ()
    values = (
        partition_values.combine_chunks()
        if isinstance(partition_values, pa.ChunkedArray)
        else partition_values
    )
    found = []
    for key in keys:
        texts = pc.map_lookup(values, pa.scalar(key), "last")
        texts = texts.filter(pc.and_(pc.is_valid(texts), pc.not_equal(texts, "")))
        if len(texts) and not pc.all(pc.match_substring_regex(texts, _ZONE_SUFFIX)).as_py():
            found.append(key)
    return tuple(found)


_DECIMAL_CONTEXT = Context(prec=80)


def _decimal(raw: Any, t: DeltaDecimal) -> Decimal | None:
    """An exact decimal at the column's scale (decimal(38, s) needs more than the default 28 digits)."""
    if isinstance(raw, float):
        raw = repr(raw)
    try:
        value = Decimal(str(raw))
        if not value.is_finite():
            return None
        quantized = value.quantize(Decimal(1).scaleb(-t.scale), context=_DECIMAL_CONTEXT)
    except (InvalidOperation, ValueError):
        return None
    return quantized if len(quantized.as_tuple().digits) <= t.precision else None


def parse_partition_value(t: DeltaType, raw: str | None, *, zone: dt.tzinfo | None = None) -> Any:
    """A partitionValues string as a typed value; empty string and null are both null. ``zone``:
    the writer's, for ``timestamp`` values written without one (UTC when None)."""
    if raw is None or raw == "":
        return None
    if isinstance(t, DeltaDecimal):
        value = _decimal(raw, t)
        if value is None:
            raise CorruptMetadataError(f"partition value {raw!r} is not a decimal({t.precision},{t.scale})")
        return value
    if not isinstance(t, DeltaPrimitive):
        raise UnsupportedFeatureError(f"partition column of nested type {t} is not supported")
    name = t.name
    try:
        if name == "string":
            return raw
        if name in INTEGER_TYPES:
            return int(raw)
        if name in ("float", "double"):
            return float(raw.replace("Infinity", "inf"))
        if name == "boolean":
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
        if name == "date":
            return (dt.date.fromisoformat(raw) - _EPOCH_DATE).days
        if name == "timestamp":
            return parse_timestamp(raw, with_zone=True, zone=zone)
        if name == "timestamp_ntz":
            return parse_timestamp(raw, with_zone=False)
        if name == "binary":
            return raw.encode("utf-8")
    except ValueError as err:
        raise CorruptMetadataError(f"partition value {raw!r} is not a valid {name}") from err
    raise UnsupportedFeatureError(f"partition column of type {name} is not supported")


@dataclass(frozen=True)
class FileStats:
    """``add.stats`` as written: nested dicts keyed by physical names."""

    num_records: int | None
    min_values: Mapping[str, Any] = field(default_factory=dict, hash=False)
    max_values: Mapping[str, Any] = field(default_factory=dict, hash=False)
    null_count: Mapping[str, Any] = field(default_factory=dict, hash=False)
    tight_bounds: bool = True


def parse_stats(text: str | None, *, exact_decimals: bool = True) -> FileStats | None:
    """``exact_decimals``: parse fractional numbers as Decimal (needed only when a decimal column
    has stats); otherwise the faster parser, whose floats equal the ones float() would give."""
    if not text:
        return None
    obj: Any = None
    if not exact_decimals:
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            obj = None  # e.g. integers beyond 64 bits: the exact parser below takes them
    if obj is None:
        try:
            # Decimal stats are JSON numbers: parse them exactly, never through a binary float.
            obj = json.loads(text, parse_float=Decimal)
        except (json.JSONDecodeError, ValueError):
            return None  # unreadable stats are unknown stats, never an error
    if not isinstance(obj, dict):
        return None
    num = obj.get("numRecords")
    return FileStats(
        num_records=num if isinstance(num, int) and not isinstance(num, bool) and num >= 0 else None,
        min_values=obj.get("minValues") or {},
        max_values=obj.get("maxValues") or {},
        null_count=obj.get("nullCount") or {},
        tight_bounds=obj.get("tightBounds", True) is not False,
    )


def stats_value(t: DeltaType, raw: Any) -> Any:
    """A min/max stat as a typed value, or None when it cannot be trusted as written."""
    if raw is None:
        return None
    if isinstance(t, DeltaDecimal):
        return _decimal(raw, t)
    if not isinstance(t, DeltaPrimitive):
        return None
    name = t.name
    if name in INTEGER_TYPES and isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if name in ("float", "double"):
        if isinstance(raw, (int, float, Decimal)) and not isinstance(raw, bool) and math.isfinite(float(raw)):
            return float(raw)
        return None  # NaN/Infinity arrive as strings: no bound
    if name == "string" and isinstance(raw, str):
        return raw
    if name == "date" and isinstance(raw, str):
        try:
            return (dt.date.fromisoformat(raw[:10]) - _EPOCH_DATE).days
        except ValueError:
            return None
    if name in ("timestamp", "timestamp_ntz") and isinstance(raw, str):
        try:
            return parse_timestamp(raw, with_zone=name == "timestamp")
        except CorruptMetadataError:
            return None
    return None


def leaf_stats(
    stats: FileStats, schema: DeltaStruct, mapping: ColumnMapping
) -> dict[tuple[str, ...], tuple[Any, Any, int | None]]:
    """Logical leaf path -> (min, max, null count), looked up by physical names."""
    out: dict[tuple[str, ...], tuple[Any, Any, int | None]] = {}

    def visit(
        fields: tuple[DeltaField, ...], mins: Any, maxs: Any, nulls: Any, path: tuple[str, ...]
    ) -> None:
        for f in fields:
            key = mapping.physical_name(f)
            lo = mins.get(key) if isinstance(mins, dict) else None
            hi = maxs.get(key) if isinstance(maxs, dict) else None
            nc = nulls.get(key) if isinstance(nulls, dict) else None
            if isinstance(f.type, DeltaStruct):
                visit(f.type.fields, lo, hi, nc, (*path, f.name))
                continue
            count = nc if isinstance(nc, int) and not isinstance(nc, bool) else None
            leaf = (*path, f.name)
            out[leaf] = (stats_value(f.type, lo), stats_value(f.type, hi), count)

    visit(schema.fields, stats.min_values, stats.max_values, stats.null_count, ())
    return out


# Delta Spark 3.2 and 3.3 wrote a timestamp stat's zone offset cut to whole minutes (LMT
# +00:53:28 as +00:53, delta-io/delta#5249), so a value from before its zone's offset was a whole
# number of minutes may be up to 59 s off either way. The last offset with seconds in the time zone
# database (Africa/Monrovia's) ended in January 1972; later values are exact.
_CUT_OFFSETS_END = (dt.datetime(1972, 1, 8, tzinfo=dt.timezone.utc) - _EPOCH) // dt.timedelta(microseconds=1)
_CUT_OFFSET_ERROR = 59_000_000


def timestamp_lower_bound(min_micros: int, zoned: bool) -> int:
    """A timestamp stat's minimum as a safe lower bound (``zoned``: a timestamp with time zone,
    written with an offset)."""
    if zoned and min_micros < _CUT_OFFSETS_END + _CUT_OFFSET_ERROR:
        return min_micros - _CUT_OFFSET_ERROR
    return min_micros


def timestamp_upper_bound(max_micros: int, zoned: bool = False) -> int:
    """Delta truncates timestamp maxima to milliseconds; the true maximum may be 999 µs later
    (and, ``zoned``, up to 59 s later for a value from before 1972: see ``_CUT_OFFSETS_END``)."""
    if zoned and max_micros < _CUT_OFFSETS_END + _CUT_OFFSET_ERROR:
        return max_micros + 999 + _CUT_OFFSET_ERROR
    return max_micros + 999


# How long Delta keeps a removed file before VACUUM may delete it.
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
DEFAULT_RETENTION = "interval 1 week"
# delta-spark's OPTIMIZE defaults (spark.databricks.delta.optimize.minFileSize / maxFileSize):
# smaller files are compacted, into bins of at most the maximum.
OPTIMIZE_MIN_FILE_SIZE = 1024 * 1024 * 1024
OPTIMIZE_MAX_FILE_SIZE = 1024 * 1024 * 1024
_UNIT_HOURS = {
    "week": 168.0,
    "day": 24.0,
    "hour": 1.0,
    "minute": 1 / 60,
    "second": 1 / 3600,
    "millisecond": 1 / 3_600_000,
    "microsecond": 1 / 3_600_000_000,
}


def interval_hours(text: str) -> float:
    """A Delta duration property (``interval 1 week``, ``interval 36 hours``) in hours."""
    parts = text.strip().lower().removeprefix("interval").split()
    if len(parts) % 2 or not parts:
        raise UnsupportedFeatureError(f"cannot read the Delta duration {text!r}")
    hours = 0.0
    for amount, unit in zip(parts[::2], parts[1::2], strict=True):
        factor = _UNIT_HOURS.get(unit.rstrip("s"))
        if factor is None or not amount.replace(".", "", 1).isdigit():
            raise UnsupportedFeatureError(f"cannot read the Delta duration {text!r}")
        hours += float(amount) * factor
    return hours
