"""A pure-Python, immutable 64-bit Roaring bitmap in the "portable" serialisation.

This is the vector format shared by Iceberg ``deletion-vector-v1`` blobs and Delta Lake deletion
vectors: a uint64 LE count of 32-bit bitmaps, then for each high-32-bit key (ascending) a uint32 LE
key followed by one standard RoaringFormatSpec 32-bit bitmap.

Positions are held as one sorted ``array('q')``; Roaring containers exist only in the byte form.
numpy is not installed in this project, so bulk work is done on bytes with C-level builtins
(strided slice assignment, ``itertools.compress``, ``bytes.translate``, big-int bit operations)
rather than with a Python statement per position.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator
from functools import cache
from itertools import accumulate, compress, repeat
from operator import lt, ne
from typing import Final

from tablekeeper.errors import CorruptMetadataError

__all__ = [
    "MAX_POSITION",
    "NO_OFFSET_THRESHOLD",
    "SERIAL_COOKIE",
    "SERIAL_COOKIE_NO_RUNCONTAINER",
    "RoaringBitmap64",
]

# Iceberg and Delta both require the top bit of a position to be 0, so keys stay <= 2**31 - 1.
MAX_KEY: Final = 2**31 - 1
MAX_POSITION: Final = 2**63 - 1

SERIAL_COOKIE_NO_RUNCONTAINER: Final = 12346
SERIAL_COOKIE: Final = 12347
NO_OFFSET_THRESHOLD: Final = 4
_ARRAY_MAX: Final = 4096
_BITMAP_BYTES: Final = 8192
_SPAN: Final = 1 << 16

_LITTLE_ENDIAN: Final = sys.byteorder == "little"
# bytes.translate tables between b"0"/b"1" digit strings and 0/1 flag bytes (one byte per value).
_DIGITS_TO_FLAGS: Final = bytes(1 if i == ord("1") else 0 for i in range(256))
_FLAGS_TO_DIGITS: Final = bytes(ord("1") if i else ord("0") for i in range(256))
_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_U16_PAIR: Final = struct.Struct("<HH")
_U32_PAIR: Final = struct.Struct("<II")
_INCREMENT: Final = (1).__add__


@cache
def _low_records() -> tuple[bytes, ...]:
    # Every 16-bit value as its 2-byte LE record, so set bits can be gathered with compress + join.
    return tuple(value.to_bytes(2, "little") for value in range(_SPAN))


@cache
def _all_lows_le() -> bytes:
    return b"".join(_low_records())


def _lows_to_list(lows_le: bytes) -> list[int]:
    values = array("H")
    values.frombytes(lows_le)
    if not _LITTLE_ENDIAN:
        values.byteswap()
    return values.tolist()


def _list_to_lows(values: list[int]) -> bytes:
    packed = array("H", values)
    if not _LITTLE_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def _widen(lows_le: bytes, container_keys_le: bytes, key: int) -> bytes:
    """Per-value 16-bit lows and container keys plus one shared 32-bit key -> int64 LE records."""
    count = len(lows_le) // 2
    records = bytearray(8 * count)
    records[0::8] = lows_le[0::2]
    records[1::8] = lows_le[1::2]
    records[2::8] = container_keys_le[0::2]
    records[3::8] = container_keys_le[1::2]
    for column, byte in enumerate(key.to_bytes(4, "little"), start=4):
        if byte:
            records[column::8] = bytes((byte,)) * count
    return bytes(records)


def _narrow(records: bytes) -> bytes:
    """8-byte LE int64 records -> their 2-byte LE low halves."""
    lows = bytearray(len(records) // 4)
    lows[0::2] = records[0::8]
    lows[1::2] = records[1::8]
    return bytes(lows)


def _set_bit_positions(bits: int) -> bytes:
    """The indices of the set bits of a 65536-bit int, ascending, as 2-byte LE records."""
    flags = format(bits, f"0{_SPAN}b").encode("ascii")[::-1].translate(_DIGITS_TO_FLAGS)
    return b"".join(compress(_low_records(), flags))


def _int64_le_bytes(values: array[int]) -> bytes:
    if _LITTLE_ENDIAN:
        return values.tobytes()
    swapped = array("q", values)
    swapped.byteswap()
    return swapped.tobytes()


class RoaringBitmap64:
    """An immutable set of row positions in ``[0, 2**63 - 1]``.

    Build it from any iterable of ints (already-sorted input skips the sort); iteration is
    ascending. ``to_array()`` gives an ``array('q')`` (int64, native order) that numpy or pyarrow
    can wrap without copying through the buffer protocol.
    """

    __slots__ = ("_hash", "_values")

    _values: array[int]
    _hash: int | None

    def __init__(self, positions: Iterable[int] = ()) -> None:
        try:
            values = array("q", positions)
        except OverflowError:
            raise ValueError(f"a position is outside [0, {MAX_POSITION}]") from None
        if not all(map(lt, values, values[1:])):
            values = array("q", sorted(set(values)))
        if values and values[0] < 0:
            raise ValueError(f"positions must be non-negative, got {values[0]}")
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_hash", None)

    @classmethod
    def _from_sorted(cls, values: array[int]) -> RoaringBitmap64:
        # Trusted internal path: the caller has already proven order, uniqueness and range.
        bitmap = cls.__new__(cls)
        object.__setattr__(bitmap, "_values", values)
        object.__setattr__(bitmap, "_hash", None)
        return bitmap

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @property
    def cardinality(self) -> int:
        return len(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, position: object) -> bool:
        if not isinstance(position, int):
            return False
        index = bisect_left(self._values, position)
        return index < len(self._values) and self._values[index] == position

    def __iter__(self) -> Iterator[int]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RoaringBitmap64):
            return NotImplemented
        return self._values == other._values

    def __hash__(self) -> int:
        cached = self._hash
        if cached is None:
            cached = hash(self._values.tobytes())
            object.__setattr__(self, "_hash", cached)
        return cached

    def __repr__(self) -> str:
        shown = ", ".join(map(str, self._values[:8]))
        more = ", ..." if len(self._values) > 8 else ""
        return f"RoaringBitmap64(cardinality={len(self._values)}, positions=[{shown}{more}])"

    def to_array(self) -> array[int]:
        """A fresh ``array('q')`` of the positions in ascending order."""
        return array("q", self._values)

    def union(self, *others: RoaringBitmap64) -> RoaringBitmap64:
        """The positions in this bitmap or in any of ``others`` (e.g. merging DVs of one file)."""
        if not others:
            return self
        merged = array("q", self._values)
        for other in others:
            merged.extend(other._values)
        return RoaringBitmap64._from_sorted(array("q", sorted(set(merged))))

    def serialize(self) -> bytes:
        """The portable 64-bit form. Only non-empty keys are written; all readers accept that."""
        values = self._values
        out = bytearray(_U64.pack(0))
        key_count = 0
        start = 0
        while start < len(values):
            key = values[start] >> 32
            key_end = bisect_left(values, (key + 1) << 32, start)
            key_start = start
            lows_all = _narrow(_int64_le_bytes(values[key_start:key_end]))
            containers: list[tuple[int, int, bool, bytes]] = []
            while start < key_end:
                end = bisect_left(values, (values[start] | 0xFFFF) + 1, start, key_end)
                lows_le = lows_all[2 * (start - key_start) : 2 * (end - key_start)]
                container_key = (values[start] >> 16) & 0xFFFF
                containers.append((container_key, end - start, *_encode_container(lows_le)))
                start = end
            out += _U32.pack(key)
            _write_bitmap32(out, containers)
            key_count += 1
        _U64.pack_into(out, 0, key_count)
        return bytes(out)

    @classmethod
    def deserialize(cls, data: bytes | bytearray | memoryview) -> RoaringBitmap64:
        """Parse the portable 64-bit form. The input must hold exactly one bitmap."""
        raw = bytes(data)
        if len(raw) < 8:
            raise CorruptMetadataError(f"roaring bitmap is truncated: {len(raw)} bytes, need at least 8")
        (count,) = _U64.unpack_from(raw, 0)
        # Each 32-bit bitmap takes at least 12 bytes (key + cookie + size); bound the loop first.
        if count > (len(raw) - 8) // 12:
            raise CorruptMetadataError(
                f"roaring bitmap is truncated: it claims {count} 32-bit bitmaps in {len(raw)} bytes"
            )
        parts: list[bytes] = []
        pos = 8
        last_key = -1
        for _ in range(count):
            key = _read_u32(raw, pos, "a bitmap key")
            if key > MAX_KEY:
                raise CorruptMetadataError(f"roaring bitmap key {key} is above {MAX_KEY} (position >= 2**63)")
            if key <= last_key:
                raise CorruptMetadataError(f"roaring bitmap keys are not ascending: {key} after {last_key}")
            last_key = key
            records, pos = _read_bitmap32(raw, pos + 4, key)
            parts.append(records)
        if pos != len(raw):
            raise CorruptMetadataError(f"roaring bitmap has {len(raw) - pos} unexpected trailing bytes")
        values = array("q")
        values.frombytes(b"".join(parts))
        if not _LITTLE_ENDIAN:
            values.byteswap()
        return cls._from_sorted(values)


def _encode_container(lows_le: bytes) -> tuple[bool, bytes]:
    """Pick the smallest container for sorted 16-bit values; returns ``(is_run, body)``.

    A run container must be strictly smaller to win, as in Java's and CRoaring's ``runOptimize``,
    so re-serialising a bitmap they wrote reproduces their bytes.
    """
    cardinality = len(lows_le) // 2
    if cardinality <= 3:
        # An array of up to 3 values (<= 6 bytes) never loses to the smallest run container (6 bytes).
        return False, lows_le
    first, last = _U16.unpack_from(lows_le, 0)[0], _U16.unpack_from(lows_le, len(lows_le) - 2)[0]
    if last - first + 1 == cardinality:
        return True, _run_body([first], [last])
    if cardinality > _ARRAY_MAX:
        return _encode_large(lows_le)
    lows = _lows_to_list(lows_le)
    breaks = list(compress(range(1, cardinality), map(ne, lows[1:], map(_INCREMENT, lows))))
    if 2 + 4 * (len(breaks) + 1) >= 2 * cardinality:
        return False, lows_le
    starts = [lows[0], *(lows[i] for i in breaks)]
    ends = [*(lows[i - 1] for i in breaks), lows[-1]]
    return True, _run_body(starts, ends)


def _encode_large(lows_le: bytes) -> tuple[bool, bytes]:
    flags = bytearray(_SPAN)
    deque(map(flags.__setitem__, _lows_to_list(lows_le), repeat(1)), maxlen=0)
    # Reversed so that flag i lands on bit i: int() reads the most significant digit first.
    bits = int(flags.translate(_FLAGS_TO_DIGITS)[::-1], 2)
    run_starts = bits & ~(bits << 1)
    if 2 + 4 * run_starts.bit_count() >= _BITMAP_BYTES:
        return False, bits.to_bytes(_BITMAP_BYTES, "little")
    run_ends = bits & ~(bits >> 1)
    return True, _run_body(
        _lows_to_list(_set_bit_positions(run_starts)), _lows_to_list(_set_bit_positions(run_ends))
    )


def _run_body(starts: list[int], ends: list[int]) -> bytes:
    pairs: list[int] = []
    for first, last in zip(starts, ends, strict=True):
        pairs += (first, last - first)
    return _U16.pack(len(starts)) + _list_to_lows(pairs)


def _write_bitmap32(out: bytearray, containers: list[tuple[int, int, bool, bytes]]) -> None:
    size = len(containers)
    if any(is_run for _, _, is_run, _ in containers):
        run_flags = bytearray((size + 7) // 8)
        for index, (_, _, is_run, _) in enumerate(containers):
            if is_run:
                run_flags[index >> 3] |= 1 << (index & 7)
        head = _U16_PAIR.pack(SERIAL_COOKIE, size - 1) + bytes(run_flags)
        with_offsets = size >= NO_OFFSET_THRESHOLD
    else:
        head = _U32_PAIR.pack(SERIAL_COOKIE_NO_RUNCONTAINER, size)
        with_offsets = True
    out += head
    descriptors: list[int] = []
    for container_key, cardinality, _, _ in containers:
        descriptors += (container_key, cardinality - 1)
    out += _list_to_lows(descriptors)
    bodies = [body for _, _, _, body in containers]
    if with_offsets:
        # Offsets count from this 32-bit bitmap's cookie, not from the start of the 64-bit stream.
        first = len(head) + 8 * size
        out += struct.pack(f"<{size}I", *accumulate(map(len, bodies[:-1]), initial=first))
    out += b"".join(bodies)


def _take(raw: bytes, pos: int, length: int, what: str) -> bytes:
    end = pos + length
    if end > len(raw):
        raise CorruptMetadataError(
            f"roaring bitmap is truncated in {what}: need {end} bytes, have {len(raw)}"
        )
    return raw[pos:end]


def _read_u32(raw: bytes, pos: int, what: str) -> int:
    value: int = _U32.unpack(_take(raw, pos, 4, what))[0]
    return value


def _read_bitmap32(raw: bytes, pos: int, key: int) -> tuple[bytes, int]:
    """One 32-bit bitmap's positions as int64 LE records, and the offset where it ends."""
    start = pos
    cookie = _read_u32(raw, pos, "a cookie")
    if cookie == SERIAL_COOKIE_NO_RUNCONTAINER:
        size = _read_u32(raw, pos + 4, "a container count")
        pos += 8
        run_flags = b""
        with_offsets = True
        if size > _SPAN:
            raise CorruptMetadataError(f"roaring bitmap claims {size} containers, more than {_SPAN}")
    elif cookie & 0xFFFF == SERIAL_COOKIE:
        size = (cookie >> 16) + 1
        pos += 4
        run_flags = _take(raw, pos, (size + 7) // 8, "the run flags")
        pos += len(run_flags)
        with_offsets = size >= NO_OFFSET_THRESHOLD
    else:
        raise CorruptMetadataError(f"roaring bitmap has unknown cookie {cookie & 0xFFFF}")
    descriptors = _lows_to_list(_take(raw, pos, 4 * size, "the container headers"))
    pos += 4 * size
    offsets: tuple[int, ...] = ()
    if with_offsets:
        offsets = struct.unpack(f"<{size}I", _take(raw, pos, 4 * size, "the container offsets"))
        pos += 4 * size
    low_parts: list[bytes] = []
    # The container key of each value, repeated per value, becomes bytes 2-3 of its int64 record.
    high_parts: list[bytes] = []
    two_byte = _low_records()
    last_container_key = -1
    for index in range(size):
        container_key = descriptors[2 * index]
        cardinality = descriptors[2 * index + 1] + 1
        if container_key <= last_container_key:
            raise CorruptMetadataError(
                f"roaring container keys are not ascending: {container_key} after {last_container_key}"
            )
        last_container_key = container_key
        if offsets and offsets[index] != pos - start:
            raise CorruptMetadataError(
                f"roaring container {index} has offset {offsets[index]} but starts at {pos - start}"
            )
        if run_flags and run_flags[index >> 3] >> (index & 7) & 1:
            lows_le, pos = _read_runs(raw, pos, cardinality)
        elif cardinality <= _ARRAY_MAX:
            lows_le = _take(raw, pos, 2 * cardinality, "an array container")
            pos += 2 * cardinality
            lows = _lows_to_list(lows_le)
            if cardinality > 1 and not all(map(lt, lows, lows[1:])):
                raise CorruptMetadataError("roaring array container values are not strictly ascending")
        else:
            bits = int.from_bytes(_take(raw, pos, _BITMAP_BYTES, "a bitmap container"), "little")
            pos += _BITMAP_BYTES
            if bits.bit_count() != cardinality:
                raise CorruptMetadataError(
                    f"roaring bitmap container has {bits.bit_count()} bits set but its header says "
                    f"{cardinality}"
                )
            lows_le = _set_bit_positions(bits)
        low_parts.append(lows_le)
        high_parts.append(two_byte[container_key] * cardinality)
    return _widen(b"".join(low_parts), b"".join(high_parts), key), pos


def _read_runs(raw: bytes, pos: int, cardinality: int) -> tuple[bytes, int]:
    (run_count,) = _U16.unpack(_take(raw, pos, 2, "a run container"))
    pairs = _lows_to_list(_take(raw, pos + 2, 4 * run_count, "a run container"))
    all_lows = _all_lows_le()
    pieces: list[bytes] = []
    total = 0
    next_free = 0
    for first, extra in zip(pairs[0::2], pairs[1::2], strict=True):
        last = first + extra
        if first < next_free or last >= _SPAN:
            raise CorruptMetadataError(
                f"roaring run container has an overlapping or out-of-range run at {first}"
            )
        pieces.append(all_lows[2 * first : 2 * last + 2])
        total += extra + 1
        next_free = last + 1
    if total != cardinality:
        raise CorruptMetadataError(
            f"roaring run container holds {total} values but its header says {cardinality}"
        )
    return b"".join(pieces), pos + 2 + 4 * run_count
