"""Shuffle keys over Arrow arrays: vectorised transforms equal the scalar ones, Z-values follow
Iceberg's byte rules and bit interleaving, partition keys keep signed zeros and nulls apart."""

from __future__ import annotations

import random
import struct
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from tablekeeper.iceberg.sort_keys import (
    ZOrder,
    interleave,
    murmur3_longs,
    ordered_bytes,
    partition_keys,
    python_values,
    transformed,
    zorder_values,
)
from tablekeeper.iceberg.transforms import bucket_hash, parse_transform
from tablekeeper.iceberg.types import DecimalType, PrimitiveType

P = PrimitiveType
_RNG = random.Random(7)
_INTS = [None, 0, -1, 1, 2**31 - 1, -(2**31), *(_RNG.randint(-(2**31), 2**31 - 1) for _ in range(200))]
_LONGS = [None, 0, -1, 2**63 - 1, -(2**63), *(_RNG.randint(-(2**50), 2**50) for _ in range(200))]

_CASES = [
    ("int", pa.int32(), _INTS, ["bucket[16]", "bucket[1000]", "truncate[10]", "truncate[1]"]),
    ("long", pa.int64(), _LONGS, ["bucket[7]", "truncate[3]"]),
    ("date", pa.date32(), [None, 0, -1, 19000, -800000, 2932896], ["bucket[5]", "year", "month", "day"]),
    (
        "timestamp",
        pa.timestamp("us"),
        [*_LONGS[:3], 86_400_000_000 * 365 * 30 + 5, -1, -86_400_000_001],
        ["bucket[9]", "year", "month", "day", "hour"],
    ),
    (
        "timestamptz_ns",
        pa.timestamp("ns", tz="UTC"),
        [None, 0, -1, 1_700_000_000_123_456_789, -999],
        ["bucket[9]", "year", "month", "day", "hour"],
    ),
    ("time", pa.time64("us"), [None, 0, 86_399_999_999, 12345], ["bucket[4]"]),
    (
        "string",
        pa.string(),
        [None, "", "a", "héllo wörld", "日本語テキスト", "x" * 40],
        ["bucket[8]", "truncate[3]"],
    ),
    ("binary", pa.binary(), [None, b"", b"\x00\xff", b"abcdef"], ["bucket[8]", "truncate[2]"]),
]


@pytest.mark.parametrize(("kind", "arrow", "values", "transforms"), _CASES)
def test_vectorised_transforms_equal_the_scalar_ones(
    kind: str, arrow: pa.DataType, values: list, transforms: list[str]
) -> None:  # type: ignore[type-arg]
    t = P(kind)
    raw = pa.int32() if kind == "date" else pa.int64()
    column = pa.array(values, raw).cast(arrow) if pa.types.is_temporal(arrow) else pa.array(values, arrow)
    for text in transforms:
        transform = parse_transform(text)
        want = [None if v is None else transform.apply(t, v) for v in python_values(t, column)]
        got = python_values(transform.result_type(t), transformed(transform, t, column))
        if text.startswith("truncate") and kind in ("int", "long"):
            # Truncating the type's minimum leaves its range; Java's arithmetic wraps there.
            bits = 32 if kind == "int" else 64
            keep = [i for i, w in enumerate(want) if w is None or w >= -(2 ** (bits - 1))]
            got, want = [got[i] for i in keep], [want[i] for i in keep]
        assert got == want, (kind, text)


def test_decimals_fall_back_to_the_scalar_transform() -> None:
    t = DecimalType(9, 2)
    column = pa.array([Decimal("1.23"), None, Decimal("-0.05")], pa.decimal128(9, 2))
    got = transformed(parse_transform("truncate[10]"), t, column).to_pylist()
    assert got == [Decimal("1.20"), None, Decimal("-0.10")]


def test_murmur3_of_longs_matches_the_spec() -> None:
    values = np.array([0, 1, -1, 34, 2**62, -(2**63)], np.int64)
    want = [bucket_hash(P("long"), int(v)) for v in values]
    assert murmur3_longs(values).tolist() == want
    assert bucket_hash(P("long"), 34) == 2017239379  # the spec's example


def _java_interleave(columns: list[bytes], size: int) -> bytes:
    """Iceberg's interleaveBits loop, written out bit by bit."""
    out = bytearray(size)
    col, byte, bit, obyte, obit = 0, 0, 7, 0, 7
    while obyte < size:
        out[obyte] |= ((columns[col][byte] >> bit) & 1) << obit
        obit -= 1
        if obit == -1:
            obyte, obit = obyte + 1, 7
        if obyte == size:
            break
        while True:
            col += 1
            if col == len(columns):
                col, bit = 0, bit - 1
                if bit == -1:
                    byte, bit = byte + 1, 7
            if len(columns[col]) > byte:
                break
    return bytes(out)


@pytest.mark.parametrize("widths", [(8, 8), (8, 3), (1, 8, 5), (2,)])
def test_interleaving_is_icebergs(widths: tuple[int, ...]) -> None:
    rows = [[bytes(_RNG.getrandbits(8) for _ in range(w)) for w in widths] for _ in range(50)]
    mats = [np.array([list(r[i]) for r in rows], np.uint8) for i in range(len(widths))]
    for size in (sum(widths), 3):
        got = interleave(mats, size)
        for r, row in enumerate(rows):
            assert bytes(got[r]) == _java_interleave(row, min(size, sum(widths)))


def test_ordered_bytes_sort_as_the_values() -> None:
    longs = pa.array([-(2**63), -5, -1, 0, 3, 2**63 - 1], pa.int64())
    keys = [bytes(r) for r in ordered_bytes(P("long"), longs, 8)]
    assert keys == sorted(keys)
    doubles = pa.array([float("-inf"), -2.5, -0.0, 0.0, 1e-300, 7.0, float("inf")], pa.float64())
    keys = [bytes(r) for r in ordered_bytes(P("double"), doubles, 8)]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert bytes(ordered_bytes(P("long"), pa.array([None], pa.int64()), 8)[0]) == b"\0" * 8
    # A character cut by the byte budget is left out whole, as Java's encoder does.
    strings = ordered_bytes(P("string"), pa.array(["abcdefgé", "ab", None]), 8)
    assert bytes(strings[0]) == b"abcdefg\0" and bytes(strings[1]) == b"ab" + b"\0" * 6
    assert bytes(strings[2]) == b"\0" * 8


def test_zorder_value_widths() -> None:
    x = pa.array([1.0, 2.0], pa.float64())
    s = pa.array(["a", "b"])
    full = zorder_values(ZOrder(("x", "s")), [(P("double"), x), (P("string"), s)])
    assert [len(v) for v in full.to_pylist()] == [16, 16]
    cut = zorder_values(ZOrder(("x", "s"), 4, 5), [(P("double"), x), (P("string"), s)])
    assert [len(v) for v in cut.to_pylist()] == [5, 5]


def test_partition_keys_keep_signed_zeros_nulls_and_nans_apart() -> None:
    day = parse_transform("day")
    identity = parse_transform("identity")
    ts = pa.array([0, 0, 86_400_000_000, None, 0, 0], pa.int64()).cast(pa.timestamp("us"))
    d = pa.array([0.0, -0.0, 0.0, None, float("nan"), 0.0], pa.float64())
    keys, tuples = partition_keys([(day, P("timestamp"), ts), (identity, P("double"), d)])
    values = keys.to_pylist()
    assert values[0] == values[5] and len(set(values)) == 5
    got = {repr(tuples[k]) for k in values}
    assert got == {"(0, 0.0)", "(0, -0.0)", "(1, 0.0)", "(None, None)", "(0, nan)"}
    assert struct.pack(">d", tuples[values[1]][1])[0] == 0x80


def test_nanosecond_time_units_are_exact_beside_nulls() -> None:
    hour = 1_700_000_000 // 3600 * 3_600_000_000_000
    column = pa.array([hour - 1, None, hour], pa.int64()).cast(pa.timestamp("ns"))
    got = transformed(parse_transform("hour"), P("timestamp_ns"), column).to_pylist()
    assert got == [hour // 3_600_000_000_000 - 1, None, hour // 3_600_000_000_000]
    day = 19700 * 86_400_000_000_000
    column = pa.array([day - 1, None], pa.int64()).cast(pa.timestamp("ns"))
    assert transformed(parse_transform("day"), P("timestamp_ns"), column).to_pylist() == [19699, None]
