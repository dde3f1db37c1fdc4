from __future__ import annotations

import random
import struct
import time
from array import array

import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.roaring import MAX_POSITION, RoaringBitmap64


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace("\n", " "))


def _round_trip(positions: list[int]) -> RoaringBitmap64:
    bitmap = RoaringBitmap64(positions)
    restored = RoaringBitmap64.deserialize(bitmap.serialize())
    expected = sorted(set(positions))
    assert list(restored) == expected
    assert restored == bitmap
    assert restored.cardinality == len(expected)
    return restored


# --- exact bytes, derived by hand from the RoaringFormatSpec -------------------------------------


def test_empty_bitmap_is_a_zero_count() -> None:
    empty = RoaringBitmap64()
    assert empty.serialize() == bytes(8)
    assert RoaringBitmap64.deserialize(bytes(8)) == empty
    assert empty.cardinality == 0
    assert list(empty) == []
    assert 0 not in empty


def test_array_containers_without_runs_use_cookie_12346_with_offsets() -> None:
    # {1, 2, 3} is a 3-value array (a run would also take 6 bytes, and ties stay arrays);
    # 70000 = 0x1_1170 lands in container 1; 2**32 + 5 is key 1.
    expected = _hex(
        "02 00 00 00 00 00 00 00"  # two 32-bit bitmaps
        " 00 00 00 00"  # key 0
        " 3a 30 00 00 02 00 00 00"  # cookie 12346, 2 containers
        " 00 00 02 00  01 00 00 00"  # (key 0, card-1 2), (key 1, card-1 0)
        " 18 00 00 00  1e 00 00 00"  # offsets 24 and 30, counted from the cookie
        " 01 00 02 00 03 00  70 11"  # bodies
        " 01 00 00 00"  # key 1
        " 3a 30 00 00 01 00 00 00  00 00 00 00  10 00 00 00  05 00"
    )
    bitmap = RoaringBitmap64([70000, 3, 2**32 + 5, 1, 2])
    assert bitmap.serialize() == expected
    assert list(RoaringBitmap64.deserialize(expected)) == [1, 2, 3, 70000, 2**32 + 5]


def test_run_container_below_threshold_has_run_flags_and_no_offsets() -> None:
    expected = _hex(
        "01 00 00 00 00 00 00 00  00 00 00 00"
        " 3b 30 00 00"  # cookie 12347, size-1 = 0
        " 01"  # run flag for container 0
        " 00 00 09 00"  # key 0, card-1 9
        " 01 00  0a 00 09 00"  # one run: start 10, length-1 9
    )
    assert RoaringBitmap64(range(10, 20)).serialize() == expected
    assert list(RoaringBitmap64.deserialize(expected)) == list(range(10, 20))


def test_run_cookie_with_four_containers_carries_offsets() -> None:
    expected = _hex(
        "01 00 00 00 00 00 00 00  00 00 00 00"
        " 3b 30 03 00  01"  # cookie 12347 with 4 containers; only container 0 is a run
        " 00 00 09 00  01 00 00 00  02 00 00 00  03 00 00 00"
        " 25 00 00 00  2b 00 00 00  2d 00 00 00  2f 00 00 00"  # 37 = 4 + 1 + 16 + 16
        " 01 00 00 00 09 00  00 00  00 00  00 00"
    )
    positions = [*range(10), 65536, 131072, 196608]
    assert RoaringBitmap64(positions).serialize() == expected
    assert list(RoaringBitmap64.deserialize(expected)) == positions


def test_bitmap_container_for_more_than_4096_scattered_values() -> None:
    evens = list(range(0, 10000, 2))
    body = b"\x55" * 1250 + bytes(8192 - 1250)
    expected = _hex("01 00 00 00 00 00 00 00  00 00 00 00  3a 30 00 00 01 00 00 00  00 00 87 13  10 00 00 00")
    assert RoaringBitmap64(evens).serialize() == expected + body
    assert list(RoaringBitmap64.deserialize(expected + body)) == evens


@pytest.mark.parametrize(
    ("positions", "kind", "body_size"),
    [
        ([0, 1, 2], "array", 6),  # a run would also take 6 bytes: ties stay arrays
        ([0, 1, 2, 3], "run", 6),
        ([0, 1, 2, 10, 11], "array", 10),  # 2 runs = 10 bytes, a tie again
        ([0, 1, 2, 3, 10, 11, 12, 13], "run", 10),
        (list(range(0, 8192, 2)), "array", 8192),  # 4096 values is the largest array
        (list(range(0, 8194, 2)), "bitmap", 8192),
        ([*range(0, 4000, 2), *range(5000, 65536)], "run", 2 + 4 * 2001),
        ([*range(0, 4094, 2), *range(5000, 65536)], "bitmap", 8192),  # 2048 runs take 8194 bytes
    ],
)
def test_smallest_container_wins(positions: list[int], kind: str, body_size: int) -> None:
    data = RoaringBitmap64(positions).serialize()
    (cookie,) = struct.unpack_from("<H", data, 12)
    if kind == "run":
        assert (cookie, data[16]) == (12347, 1)
        header = 4 + 1 + 4  # cookie+size, run flags, descriptor; no offsets below 4 containers
    else:
        assert cookie == 12346
        header = 8 + 4 + 4  # cookie, size, descriptor, offset
    assert len(data) == 8 + 4 + header + body_size
    assert list(RoaringBitmap64.deserialize(data)) == positions


# --- round trips at scale ------------------------------------------------------------------------


def test_random_positions_across_several_high_keys() -> None:
    rng = random.Random(7)
    positions = [rng.randrange(0, 5 * 2**32) for _ in range(200_000)]
    restored = _round_trip(positions)
    assert restored.to_array()[-1] >= 4 * 2**32


def test_dense_runs_spanning_containers_and_keys() -> None:
    positions = [*range(2**32 - 100_000, 2**32 + 100_000), *range(3 * 2**32, 3 * 2**32 + 70_000)]
    data = RoaringBitmap64(positions).serialize()
    # Only run containers: 5 containers in key 0/1 and 2 in key 3 collapse to a few hundred bytes.
    assert len(data) < 200
    _round_trip(positions)


def test_mixed_container_kinds_and_extreme_positions() -> None:
    rng = random.Random(11)
    positions = [
        *range(100, 50_000),
        *rng.sample(range(70_000, 130_000), 3_000),
        *rng.sample(range(200_000, 260_000), 20_000),
        *range(2**33, 2**33 + 70_000, 3),
        2**32 + 7,
        2**40,
        MAX_POSITION,
    ]
    _round_trip(positions)


def test_one_value_per_container_over_a_wide_range() -> None:
    _round_trip([k * 65536 + (k % 65536) for k in range(0, 3 * 65536, 7)])


def test_matches_croaring_bytes_when_pyroaring_is_available() -> None:
    # pyroaring arrives only as a PyIceberg dependency; it is an oracle here, never a runtime need.
    pyroaring = pytest.importorskip("pyroaring")
    rng = random.Random(3)
    positions = sorted(
        {
            *range(5, 40_000),
            *rng.sample(range(2**32, 2**32 + 10_000_000), 150_000),
            *range(2**34, 2**34 + 9_000, 2),
        }
    )
    boundary_cases = [
        [0, 1, 2, 10, 11],
        list(range(0, 8194, 2)),
        [*range(0, 4092, 2), *range(5000, 65536)],  # 2047 runs: 8190 bytes, a run container
        [*range(0, 4094, 2), *range(5000, 65536)],  # 2048 runs: 8194 bytes, a bitmap
    ]
    for case in [positions, *boundary_cases]:
        reference = pyroaring.BitMap64(case)
        reference.run_optimize()
        ours = RoaringBitmap64(case).serialize()
        assert ours == reference.serialize()
        assert list(pyroaring.BitMap64.deserialize(ours)) == case


def test_deserialising_a_million_positions_is_fast() -> None:
    # One random position per block of 10 rows: 1M positions in 10M rows, mostly bitmap containers.
    jitter = random.Random(5).randbytes(1_000_000)
    bitmap = RoaringBitmap64(10 * block + jitter[block] % 10 for block in range(1_000_000))
    data = bitmap.serialize()
    started = time.perf_counter()
    restored = RoaringBitmap64.deserialize(data)
    elapsed = time.perf_counter() - started
    assert restored == bitmap
    # Generous for loaded CI machines; a per-bit Python loop takes tens of seconds.
    assert elapsed < 3.0


# --- the model ------------------------------------------------------------------------------------


def test_construction_sorts_and_deduplicates() -> None:
    bitmap = RoaringBitmap64([9, 3, 3, 2**35, 0, 9])
    assert list(bitmap) == [0, 3, 9, 2**35]
    assert len(bitmap) == bitmap.cardinality == 4
    assert bitmap == RoaringBitmap64(iter([0, 3, 9, 2**35]))
    assert hash(bitmap) == hash(RoaringBitmap64([2**35, 9, 3, 0]))
    assert bitmap != RoaringBitmap64([0, 3, 9])


@pytest.mark.parametrize(("value", "message"), [(-1, "non-negative"), (2**63, "outside")])
def test_out_of_range_positions_are_rejected(value: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RoaringBitmap64([1, value])


def test_membership() -> None:
    bitmap = RoaringBitmap64([5, 2**32 + 1, MAX_POSITION])
    assert 5 in bitmap
    assert 2**32 + 1 in bitmap
    assert MAX_POSITION in bitmap
    assert 6 not in bitmap
    assert -5 not in bitmap
    assert 2**64 not in bitmap
    assert "5" not in bitmap


def test_is_immutable_and_to_array_is_a_copy() -> None:
    bitmap = RoaringBitmap64([1, 2])
    with pytest.raises(AttributeError):
        bitmap._values = array("q")
    copy = bitmap.to_array()
    assert copy.typecode == "q"
    copy.append(99)
    assert list(bitmap) == [1, 2]


def test_union_merges() -> None:
    merged = RoaringBitmap64([1, 5]).union(RoaringBitmap64([5, 7]), RoaringBitmap64([2**33]))
    assert list(merged) == [1, 5, 7, 2**33]


# --- reading what other writers produce -------------------------------------------------------------


def test_reads_dense_key_arrays_with_empty_bitmaps_as_java_writes_them() -> None:
    empty32 = _hex("3a 30 00 00 00 00 00 00")
    one_value = _hex("3a 30 00 00 01 00 00 00  00 00 00 00  10 00 00 00  04 00")
    data = _hex("03 00 00 00 00 00 00 00") + (
        _hex("00 00 00 00") + empty32 + _hex("01 00 00 00") + empty32 + _hex("02 00 00 00") + one_value
    )
    assert list(RoaringBitmap64.deserialize(data)) == [2 * 2**32 + 4]


def test_reads_run_cookie_whose_containers_are_not_runs() -> None:
    data = _hex("01 00 00 00 00 00 00 00  00 00 00 00  3b 30 00 00  00  00 00 01 00  07 00 08 00")
    assert list(RoaringBitmap64.deserialize(data)) == [7, 8]


def test_reads_runs_where_an_array_would_be_smaller() -> None:
    data = _hex(
        "01 00 00 00 00 00 00 00  00 00 00 00  3b 30 00 00  01  00 00 01 00  02 00 03 00 00 00 09 00 00 00"
    )
    assert list(RoaringBitmap64.deserialize(data)) == [3, 9]


# --- corrupt input --------------------------------------------------------------------------------


def _sample() -> bytes:
    return RoaringBitmap64([*range(10), *range(65536, 65536 + 5000, 2), 2**32 + 3, 2**32 + 70000]).serialize()


def test_every_truncation_is_rejected() -> None:
    data = _sample()
    for cut in range(len(data)):
        with pytest.raises(CorruptMetadataError, match="truncated"):
            RoaringBitmap64.deserialize(data[:cut])


def test_trailing_bytes_are_rejected() -> None:
    with pytest.raises(CorruptMetadataError) as info:
        RoaringBitmap64.deserialize(_sample() + b"\x00")
    assert info.value.message == "roaring bitmap has 1 unexpected trailing bytes"


ONE = "01 00 00 00 00 00 00 00"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (f"{ONE} 00 00 00 00  39 30 00 00 01 00 00 00", "roaring bitmap has unknown cookie 12345"),
        (
            "02 00 00 00 00 00 00 00"
            " 01 00 00 00 3a 30 00 00 00 00 00 00  00 00 00 00 3a 30 00 00 00 00 00 00",
            "roaring bitmap keys are not ascending: 0 after 1",
        ),
        (
            f"{ONE} 00 00 00 80  3a 30 00 00 00 00 00 00",
            "roaring bitmap key 2147483648 is above 2147483647 (position >= 2**63)",
        ),
        (
            f"{ONE} 00 00 00 00  3a 30 00 00 01 00 00 00  00 00 01 00  10 00 00 00  05 00 04 00",
            "roaring array container values are not strictly ascending",
        ),
        (
            f"{ONE} 00 00 00 00  3a 30 00 00 02 00 00 00  01 00 00 00 00 00 00 00  18 00 00 00 1a 00 00 00"
            " 01 00 01 00",
            "roaring container keys are not ascending: 0 after 1",
        ),
        (
            f"{ONE} 00 00 00 00  3a 30 00 00 01 00 00 00  00 00 00 00  11 00 00 00  05 00",
            "roaring container 0 has offset 17 but starts at 16",
        ),
        (
            f"{ONE} 00 00 00 00  3b 30 00 00 01  00 00 04 00  02 00 00 00 02 00 02 00 01 00",
            "roaring run container has an overlapping or out-of-range run at 2",
        ),
        (
            f"{ONE} 00 00 00 00  3b 30 00 00 01  00 00 04 00  01 00 fe ff 03 00",
            "roaring run container has an overlapping or out-of-range run at 65534",
        ),
        (
            f"{ONE} 00 00 00 00  3b 30 00 00 01  00 00 05 00  01 00 00 00 03 00",
            "roaring run container holds 4 values but its header says 6",
        ),
        (
            "ff ff ff ff 00 00 00 00  00 00 00 00",
            "roaring bitmap is truncated: it claims 4294967295 32-bit bitmaps in 12 bytes",
        ),
    ],
)
def test_malformed_bitmaps_name_the_problem(data: str, message: str) -> None:
    with pytest.raises(CorruptMetadataError) as info:
        RoaringBitmap64.deserialize(_hex(data))
    assert info.value.message == message


def test_bitmap_container_cardinality_must_match_its_bits() -> None:
    header = _hex(f"{ONE} 00 00 00 00  3a 30 00 00 01 00 00 00  00 00 00 10  10 00 00 00")
    with pytest.raises(CorruptMetadataError) as info:
        RoaringBitmap64.deserialize(header + b"\xff" * 512 + bytes(8192 - 512))
    assert info.value.message == "roaring bitmap container has 4096 bits set but its header says 4097"
