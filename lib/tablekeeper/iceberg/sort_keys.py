"""Sort and clustering keys computed over Arrow arrays: transforms, Z-order values, partitions.

A rewrite that sorts or repartitions its rows hands the shuffle keys it computes here, one column
per key, to the engine that shuffles. Values follow Iceberg's semantics:

- **Transforms** (``bucket[N]``, ``truncate[W]``, ``year``/``month``/``day``/``hour``, identity)
  give the values Iceberg's transforms give (``tablekeeper.iceberg.transforms``).
- **Z-order** follows Iceberg's ``zorder`` sort: each column becomes order-preserving bytes (8 for
  numbers, dates and times, with the sign bit flipped; floats as IEEE bits made sortable;
  strings, binaries and uuids cut or zero-padded to ``var-length-contribution`` bytes; nulls as
  zeros), and the bits of all columns are interleaved, one from each column in turn, up to
  ``max-output-size`` bytes.
- **Partition keys**: the output spec's partition tuple of each row, as one binary value per
  distinct tuple (equal tuples give equal bytes) and the tuples themselves.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.arrow_project import storage
from tablekeeper.iceberg.conversions import type_kind
from tablekeeper.iceberg.transforms import Bucket, Day, Hour, Identity, Month, Transform, Truncate, Void, Year
from tablekeeper.iceberg.types import DecimalType, FixedType, IcebergType, PrimitiveType

# Iceberg's defaults for its zorder sort options of the same names.
VAR_LENGTH_CONTRIBUTION = 8
MAX_OUTPUT_SIZE = 2**31 - 1
_PRIMITIVE_BYTES = 8
_INTEGRAL = frozenset(
    {"int", "long", "date", "time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"}
)


def python_values(t: IcebergType, column: pa.Array) -> list[Any]:
    """The column's values in the project's Python convention (dates as days, times and
    timestamps as ints, uuids as ``uuid.UUID``)."""
    column = storage(column)
    kind = type_kind(t)
    values: list[Any]
    if kind == "date":
        values = column.cast(pa.int32()).to_pylist()
    elif kind in _INTEGRAL:
        values = column.cast(pa.int64()).to_pylist()
    elif kind == "uuid":
        values = [None if v is None else uuid.UUID(bytes=v) for v in column.to_pylist()]
    else:
        values = column.to_pylist()
    return values


def transformed(transform: Transform, t: IcebergType, column: pa.Array) -> pa.Array:
    """``transform`` applied to every value of ``column`` (of Iceberg type ``t``)."""
    if isinstance(transform, Identity):
        return column
    kind = type_kind(t)
    if isinstance(transform, Void):
        return pa.nulls(len(column), arrow_result(transform, t))
    if isinstance(transform, (Year, Month, Day, Hour)) and kind != "time":
        return _time_unit(transform, kind, column)
    if isinstance(transform, Bucket) and kind in _INTEGRAL:
        return _bucket_integral(transform.num_buckets, kind, column)
    if isinstance(transform, Truncate) and kind in ("int", "long"):
        raw = column.cast(pa.int64())
        values = raw.fill_null(0).to_numpy(zero_copy_only=False)
        cut = values - np.mod(values, transform.width)
        # Out of range only at the type's minimum, where Java's arithmetic wraps: so does this.
        return pa.array(cut, pa.int64(), mask=_nulls(raw)).cast(column.type, safe=False)
    if isinstance(transform, Truncate) and kind == "string":
        return pc.utf8_slice_codeunits(column, 0, transform.width)
    if isinstance(transform, Truncate) and kind == "binary":
        return pc.binary_slice(column, 0, transform.width)
    out = [None if v is None else transform.apply(t, v) for v in python_values(t, column)]
    result = transform.result_type(t)
    if isinstance(result, PrimitiveType) and result.name in ("int", "date"):
        return pa.array(out, pa.int32())
    return pa.array(out)


def arrow_result(transform: Transform, t: IcebergType) -> pa.DataType:
    result = transform.result_type(t)
    if isinstance(result, PrimitiveType) and result.name in ("int", "date"):
        return pa.int32()
    return pa.null()


def _nulls(column: pa.Array) -> np.ndarray | None:
    if not column.null_count:
        return None
    mask: np.ndarray = column.is_null().to_numpy(zero_copy_only=False)
    return mask


_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    out: np.ndarray = (x << np.uint32(r)) | (x >> np.uint32(32 - r))
    return out


def murmur3_longs(values: np.ndarray) -> np.ndarray:
    """Murmur3 x86 32-bit (seed 0) of each int64 as 8 little-endian bytes, as int32: the hash
    Iceberg's bucket transform takes of ints, longs, dates, times and timestamps."""
    words = values.astype("<i8").view("<u4").reshape(-1, 2)
    h = np.zeros(len(values), np.uint32)
    with np.errstate(over="ignore"):
        for i in (0, 1):
            k = words[:, i].astype(np.uint32) * _C1
            k = _rotl(k, 15) * _C2
            h = _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        h ^= np.uint32(8)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    out: np.ndarray = h.view(np.int32)
    return out


def _bucket_integral(buckets: int, kind: str, column: pa.Array) -> pa.Array:
    raw = column.cast(pa.int32() if kind == "date" else pa.int64()).cast(pa.int64())
    values = raw.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if kind.endswith("_ns"):
        values = np.floor_divide(values, 1000)  # hashed as microseconds, as the spec says
    hashed = murmur3_longs(values).astype(np.int64)
    return pa.array(((hashed & 0x7FFFFFFF) % buckets).astype(np.int32), pa.int32(), mask=_nulls(raw))


def _time_unit(transform: Transform, kind: str, column: pa.Array) -> pa.Array:
    if kind == "date":
        days = column.cast(pa.int32())
        if isinstance(transform, Day):
            return days
        stamps = column.cast(pa.timestamp("s"))
    else:
        per_day = 86_400_000_000_000 if kind.endswith("_ns") else 86_400_000_000
        raw = column.cast(pa.int64())
        if isinstance(transform, (Day, Hour)):
            unit = per_day if isinstance(transform, Day) else per_day // 24
            # Nulls filled first: a numpy view with nulls is float64, which rounds nanoseconds.
            values = raw.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            floor = np.floor_divide(values, unit).astype(np.int32)
            return pa.array(floor, pa.int32(), mask=raw.is_null().to_numpy(zero_copy_only=False))
        stamps = raw.cast(pa.timestamp("ns" if kind.endswith("_ns") else "us"))
    years = pc.subtract(pc.year(stamps), 1970)
    if isinstance(transform, Year):
        return years.cast(pa.int32())
    return pc.add(pc.multiply(years, 12), pc.subtract(pc.month(stamps), 1)).cast(pa.int32())


# ---------------------------------------------------------------------------------------------
# Z-order


@dataclass(frozen=True)
class ZOrder:
    columns: tuple[str, ...]
    var_length_contribution: int = VAR_LENGTH_CONTRIBUTION
    max_output_size: int = MAX_OUTPUT_SIZE

    def __post_init__(self) -> None:
        if self.var_length_contribution <= 0 or self.max_output_size <= 0:
            raise ConfigError("var-length-contribution and max-output-size must be positive")


def ordered_bytes(t: IcebergType, column: pa.Array, var_length: int) -> np.ndarray:
    """(rows, width) uint8: each value as bytes that sort as the values do; nulls as zeros."""
    n = len(column)
    column = storage(column)
    valid = ~column.is_null().to_numpy(zero_copy_only=False) if column.null_count else np.ones(n, bool)
    kind = type_kind(t)
    if kind in _INTEGRAL:
        raw = column.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        flipped = (raw.view(np.uint64) ^ np.uint64(1 << 63)).astype(">u8")
        out = flipped.view(np.uint8).reshape(n, _PRIMITIVE_BYTES).copy()
    elif kind in ("float", "double") or isinstance(t, DecimalType):
        raw = column.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False).astype(np.float64)
        bits = raw.view(np.int64)
        bits = bits ^ ((bits >> 63) | np.int64(-(1 << 63)))
        out = bits.astype(">i8").view(np.uint8).reshape(n, _PRIMITIVE_BYTES).copy()
    elif kind == "boolean":
        out = np.where(column.fill_null(False).to_numpy(zero_copy_only=False), 0x80, 0).astype(np.uint8)
        out = out.reshape(n, 1)
    elif kind in ("string", "binary", "uuid") or isinstance(t, FixedType):
        out = _prefix_bytes(column, var_length, text=kind == "string")
    else:
        raise ConfigError(f"zorder cannot order a column of type {t}")
    out[~valid] = 0
    result: np.ndarray = out
    return result


def _prefix_bytes(column: pa.Array, width: int, text: bool) -> np.ndarray:
    """The first ``width`` bytes of each value, zero-padded; a UTF-8 character that does not fit
    whole is left out, as Java's encoder leaves it."""
    binary = column.cast(pa.large_binary()) if not pa.types.is_fixed_size_binary(column.type) else column
    n = len(binary)
    if pa.types.is_fixed_size_binary(binary.type):
        size = binary.type.byte_width
        data = np.frombuffer(binary.buffers()[1], np.uint8)[binary.offset * size : (binary.offset + n) * size]
        starts = np.arange(n, dtype=np.int64) * size
        lengths = np.full(n, size, np.int64)
    else:
        offsets = np.frombuffer(binary.buffers()[1], np.int64)[binary.offset : binary.offset + n + 1]
        buffer = binary.buffers()[2]
        data = np.frombuffer(buffer, np.uint8) if buffer is not None else np.zeros(0, np.uint8)
        starts = offsets[:-1]
        lengths = offsets[1:] - offsets[:-1]
    if not len(data):
        return np.zeros((n, width), np.uint8)
    cut = np.minimum(lengths, width)
    if text:
        # Back off while the byte just past the cut continues a character (10xxxxxx).
        for _ in range(3):
            nxt = np.minimum(starts + cut, len(data) - 1)
            split = (cut < lengths) & (cut > 0) & ((data[nxt] & 0xC0) == 0x80)
            cut = np.where(split, cut - 1, cut)
    index = starts[:, None] + np.arange(width)[None, :]
    taken = data[np.minimum(index, len(data) - 1)]
    out: np.ndarray = np.where(np.arange(width)[None, :] < cut[:, None], taken, 0).astype(np.uint8)
    return out


def interleave(columns: Sequence[np.ndarray], max_output_size: int) -> np.ndarray:
    """Iceberg's bit interleaving: bit k of every column that still has one, column by column,
    for k from the most significant bit on, cut at ``max_output_size`` bytes."""
    widths = [c.shape[1] * 8 for c in columns]
    size = min(sum(c.shape[1] for c in columns), max_output_size)
    order: list[int] = []
    base = np.cumsum([0, *widths[:-1]])
    for bit in range(max(widths, default=0)):
        for i, w in enumerate(widths):
            if bit < w:
                order.append(int(base[i]) + bit)
    bits = np.concatenate([np.unpackbits(c, axis=1) for c in columns], axis=1)
    picked = bits[:, np.array(order[: size * 8], dtype=np.int64)]
    return np.packbits(picked, axis=1)


def zorder_values(order: ZOrder, columns: Sequence[tuple[IcebergType, pa.Array]]) -> pa.Array:
    """One binary Z-value per row."""
    parts = [ordered_bytes(t, c, order.var_length_contribution) for t, c in columns]
    packed = interleave(parts, order.max_output_size)
    n, width = packed.shape
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n, [None, pa.py_buffer(packed.tobytes())]
    ).cast(pa.binary())


# ---------------------------------------------------------------------------------------------
# Partition keys


def partition_keys(
    columns: Sequence[tuple[Transform, IcebergType, pa.Array]],
) -> tuple[pa.Array, dict[bytes, tuple[Any, ...]]]:
    """(one binary key per row, the partition tuple of each key) for the output spec's fields
    (transform, source type, source column). Rows compare by their transformed values' bits, so
    -0.0 and 0.0 (and NaN payloads) are distinct partitions, as ``partition_key`` says."""
    results = [(transform.result_type(t), transformed(transform, t, c)) for transform, t, c in columns]
    n = len(results[0][1]) if results else 0
    codes = np.zeros(n, np.int64)
    for _, column in results:
        encoded = pc.dictionary_encode(_comparable(column), null_encoding="encode")
        indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        codes = codes * len(encoded.dictionary) + indices
        # Dense again, so the next column's factor cannot overflow.
        codes = np.unique(codes, return_inverse=True)[1].astype(np.int64)
    if n == 0:
        return pa.array([], pa.binary()), {}
    unique, first = np.unique(codes, return_index=True)
    tuples: dict[bytes, tuple[Any, ...]] = {}
    keys = []
    for row in first.tolist():
        values = tuple(python_values(rt, column.slice(row, 1))[0] for rt, column in results)
        key = pickle.dumps(values, protocol=4)
        tuples[key] = values
        keys.append(key)
    position = np.searchsorted(unique, codes)
    return pa.array(keys, pa.binary()).take(pa.array(position)), tuples


def _comparable(column: pa.Array) -> pa.Array:
    """The column with floats as their bits and extension types as their storage."""
    column = storage(column)
    if pa.types.is_floating(column.type):
        bits = pa.int64() if column.type == pa.float64() else pa.int32()
        return column.view(bits)
    return column
