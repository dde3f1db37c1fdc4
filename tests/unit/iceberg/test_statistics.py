"""Statistics blobs: Java's single-value bytes, DataSketches' hash, the compact sketch layout, the
Puffin statistics file and its footer, column selection."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
import uuid
from dataclasses import replace

import datasketches  # type: ignore[import-untyped]
import numpy as np
import pyarrow as pa
import pytest

from tablekeeper.errors import CommitConflict, ConfigError, UnsupportedFeatureError
from tablekeeper.iceberg.conversions import decimal_bytes
from tablekeeper.iceberg.metadata import Snapshot, StatisticsFile, statistics_to_obj
from tablekeeper.iceberg.puffin import PUFFIN_MAGIC, read_blob, read_puffin_footer, zstd_content_size
from tablekeeper.iceberg.statistics import (
    THETA_BLOB_TYPE,
    ThetaAccumulator,
    ThetaBlob,
    arrow_theta_hashes,
    exact_sketch,
    merge_sketches,
    ndv,
    read_theta_blobs,
    resolve_columns,
    seed_hash,
    short_theta_hashes,
    single_value_bytes,
    statistics_file,
    theta_hash,
    write_statistics,
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
    TIMESTAMPTZ,
    UUID,
    DecimalType,
    FixedType,
    ListType,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
)
from tablekeeper.iceberg.updates import new_table_metadata, set_statistics

# --- single-value bytes (Java's Conversions.toByteBuffer of the value Spark reads) -----------------


def test_single_value_bytes_follow_javas_conversions() -> None:
    assert single_value_bytes(BOOLEAN, True) == b"\x01" and single_value_bytes(BOOLEAN, False) == b"\x00"
    assert single_value_bytes(INT, -2) == b"\xfe\xff\xff\xff"
    assert single_value_bytes(DATE, 19000) == (19000).to_bytes(4, "little")
    assert single_value_bytes(LONG, 1) == b"\x01" + bytes(7)
    assert single_value_bytes(TIMESTAMPTZ, -1) == b"\xff" * 8
    assert single_value_bytes(FLOAT, 1.0) == b"\x00\x00\x80\x3f"
    assert single_value_bytes(DOUBLE, -0.0) == b"\x00" * 7 + b"\x80"
    assert single_value_bytes(STRING, "é") == b"\xc3\xa9"
    assert single_value_bytes(BINARY, b"\x00\x01") == b"\x00\x01"
    assert single_value_bytes(FixedType(2), b"ab") == b"ab"
    # Spark reads a uuid column as its text, and Java's aggregate hashes that text.
    u = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")
    assert single_value_bytes(UUID, u) == b"f79c3e09-677c-4bbd-a479-3f349cb785e7"


@pytest.mark.parametrize(
    ("unscaled", "expected"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "0080"),
        (-1, "ff"),
        (-128, "80"),
        (-129, "ff7f"),
        (65535, "00ffff"),
    ],
)
def test_decimal_bytes_are_big_integer_to_byte_array(unscaled: int, expected: str) -> None:
    assert decimal_bytes(unscaled).hex() == expected


def test_decimal_value_uses_the_column_scale() -> None:
    t = DecimalType(38, 2)
    assert single_value_bytes(t, decimal.Decimal("1.5")) == decimal_bytes(150)
    big = decimal.Decimal("123456789012345678901234567890123456.78")
    assert single_value_bytes(t, big) == decimal_bytes(12345678901234567890123456789012345678)


# --- hashing ---------------------------------------------------------------------------------------


def test_theta_hash_is_the_one_datasketches_uses() -> None:
    # The C++ library hashes a string's UTF-8 bytes and an int64's 8 LE bytes as Java hashes the
    # same bytes: a one-entry sketch carries the hash itself.
    for value, data in (("abc", b"abc"), (5, struct.pack("<q", 5))):
        sketch = datasketches.update_theta_sketch()
        sketch.update(value)
        serialized = sketch.compact().serialize()
        assert struct.unpack_from("<Q", serialized, len(serialized) - 8)[0] == theta_hash(data)
    assert theta_hash(b"") is None
    assert seed_hash() == 0x93CC


def test_vectorised_hashes_equal_the_scalar_ones() -> None:
    rng = np.random.default_rng(7)
    longs = rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64)
    got = short_theta_hashes(longs.view(np.uint64), 8)
    assert list(got) == [theta_hash(struct.pack("<q", int(v))) for v in longs]
    ints = rng.integers(-(2**31), 2**31 - 1, 500, dtype=np.int64).astype(np.int32)
    got = short_theta_hashes(ints.view(np.uint32).astype(np.uint64), 4)
    assert list(got) == [theta_hash(struct.pack("<i", int(v))) for v in ints]
    with pytest.raises(ValueError):
        short_theta_hashes(np.zeros(1, np.uint64), 9)


@pytest.mark.parametrize(
    ("t", "array", "values"),
    [
        (BOOLEAN, pa.array([True, None, False]), [True, False]),
        (INT, pa.array([1, None, -7], pa.int32()), [1, -7]),
        (DATE, pa.array([dt.date(1969, 12, 31), dt.date(2024, 2, 29)]), [-1, 19782]),
        (LONG, pa.array([2**40, -3]), [2**40, -3]),
        (TIMESTAMPTZ, pa.array([0, -5, 10**15], pa.timestamp("us", "UTC")), [0, -5, 10**15]),
        (PrimitiveType("timestamp"), pa.array([7], pa.timestamp("us")), [7]),
        (FLOAT, pa.array([1.25, -0.0], pa.float32()), [1.25, -0.0]),
        (DOUBLE, pa.array([1e300, float("inf")]), [1e300, float("inf")]),
        (STRING, pa.array(["a", "", None, "ü" * 40]), ["a", "ü" * 40]),  # "" is never counted
        (STRING, pa.array(["x", "yy"], pa.large_string()), ["x", "yy"]),
        (BINARY, pa.array([b"\x00", b"", b"\xff" * 17]), [b"\x00", b"\xff" * 17]),
        (FixedType(3), pa.array([b"abc"]), [b"abc"]),
        (
            DecimalType(12, 2),
            pa.array([decimal.Decimal("-10.50"), decimal.Decimal("0.00")], pa.decimal128(12, 2)),
            [decimal.Decimal("-10.50"), decimal.Decimal("0")],
        ),
    ],
)
def test_arrow_hashes_match_the_single_value_bytes(t, array: pa.Array, values: list[object]) -> None:  # type: ignore[no-untyped-def]
    expected = [theta_hash(single_value_bytes(t, v)) for v in values]
    assert list(arrow_theta_hashes(array, t)) == [h for h in expected if h is not None]


def test_arrow_hashes_refuse_types_spark_cannot_read() -> None:
    with pytest.raises(ValueError, match="time"):
        arrow_theta_hashes(pa.array([1], pa.int64()), TIME)


# --- sketches -----------------------------------------------------------------------------------------


def test_exact_sketch_layout_parses_and_matches_the_librarys() -> None:
    hashes = arrow_theta_hashes(pa.array(["b", "a", "b", "c"]), STRING)
    data = exact_sketch(hashes)
    # preamble longs 2, serial version 3, family compact, flags read-only|compact|ordered, seed hash
    assert data[:8] == bytes([2, 3, 3, 0, 0, 0x1A]) + struct.pack("<H", 0x93CC)
    assert struct.unpack_from("<I", data, 8)[0] == 3 and len(data) == 16 + 3 * 8
    assert sorted(struct.unpack_from("<3Q", data, 16)) == list(struct.unpack_from("<3Q", data, 16))
    parsed = datasketches.compact_theta_sketch.deserialize(data)
    assert parsed.get_estimate() == 3 and not parsed.is_estimation_mode()
    empty = exact_sketch(np.empty(0, np.uint64))
    assert empty == bytes([1, 3, 3, 0, 0, 0x1E]) + struct.pack("<H", 0x93CC)
    assert datasketches.compact_theta_sketch.deserialize(empty).is_empty()


def test_accumulated_sketch_is_the_librarys_and_javas_layout() -> None:
    values = [f"v{i}" for i in range(3000)]
    reference = datasketches.update_theta_sketch()
    for v in values:
        reference.update(v)
    acc = ThetaAccumulator()
    for chunk in (values[:1000], values[500:2000], values[1500:]):  # overlapping batches
        acc.add_hashes(arrow_theta_hashes(pa.array(chunk), STRING))
    data, estimate = acc.result()
    expected = reference.compact().serialize()
    # Identical but for the sampling-probability field DataSketches-java fills with 1.0f.
    assert data[:12] == expected[:12] and data[16:] == expected[16:]
    assert data[12:16] == struct.pack("<f", 1.0) and expected[12:16] == bytes(4)
    assert estimate == 3000 and ndv(estimate) == 3000


def test_large_inputs_stay_bounded_and_estimate_well() -> None:
    n = 50_000
    parts = []
    for lo in range(0, n, 10_000):
        acc = ThetaAccumulator()
        acc.add_hashes(arrow_theta_hashes(pa.array(np.arange(lo, lo + 10_000, dtype=np.int64)), LONG))
        parts.append(acc.result()[0])
    merged, estimate = merge_sketches(parts)
    assert len(merged) <= 24 + 4096 * 8  # at most 4096 hashes kept
    sketch = datasketches.compact_theta_sketch.deserialize(merged)
    assert sketch.is_estimation_mode()
    assert sketch.get_lower_bound(2) <= n <= sketch.get_upper_bound(2)
    assert ndv(estimate) == int(estimate)


def test_ndv_truncates_like_javas_long_cast() -> None:
    assert ndv(5147.9) == 5147 and ndv(0.0) == 0


# --- Puffin statistics files ---------------------------------------------------------------------------


def _blobs() -> list[ThetaBlob]:
    out = []
    for field_id, values in ((1, ["a", "b"]), (3, []), (7, ["x"] * 5)):
        acc = ThetaAccumulator()
        acc.add_hashes(arrow_theta_hashes(pa.array(values, pa.string()), STRING))
        data, estimate = acc.result()
        out.append(ThetaBlob(field_id, 55, 4, data, ndv(estimate)))
    return out


def test_statistics_file_layout_and_footer() -> None:
    blobs = _blobs()
    puffin = write_statistics(blobs, created_by="tablekeeper test")
    data = puffin.data
    assert data[:4] == PUFFIN_MAGIC and data[-4:] == PUFFIN_MAGIC
    footer_json = data[len(data) - puffin.footer.footer_size + 4 : len(data) - 12]
    document = json.loads(footer_json)
    assert document["properties"] == {"created-by": "tablekeeper test"}
    first = document["blobs"][0]
    # Java's FileMetadataParser key order.
    keys = ["type", "fields", "snapshot-id", "sequence-number", "offset", "length", "compression-codec"]
    assert list(first) == [*keys, "properties"]
    assert first["type"] == THETA_BLOB_TYPE and first["fields"] == [1] and first["offset"] == 4
    assert first["snapshot-id"] == 55 and first["sequence-number"] == 4
    assert first["compression-codec"] == "zstd" and first["properties"] == {"ndv": "2"}
    assert [b["properties"]["ndv"] for b in document["blobs"]] == ["2", "0", "1"]
    footer = read_puffin_footer(data)
    for blob, meta in zip(blobs, footer.blobs, strict=True):
        raw = data[meta.offset : meta.offset + meta.length]
        assert zstd_content_size(raw) == len(blob.sketch)
        assert read_blob(data, meta, decompress=True) == blob.sketch
        with pytest.raises(UnsupportedFeatureError):
            read_blob(data, meta)  # a caller not expecting compression never gets raw zstd
    assert read_theta_blobs(data) == blobs


def test_statistics_entry_and_set_statistics() -> None:
    puffin = write_statistics(_blobs(), created_by="t")
    entry = statistics_file("s3://b/t/metadata/55-x.stats", 55, puffin)
    assert entry.file_size_in_bytes == len(puffin.data)
    assert entry.file_footer_size_in_bytes == puffin.footer.footer_size
    obj = statistics_to_obj(entry)
    assert obj["blob-metadata"][0] == {
        "type": THETA_BLOB_TYPE,
        "snapshot-id": 55,
        "sequence-number": 4,
        "fields": [1],
        "properties": {"ndv": "2"},
    }
    meta = new_table_metadata(schema=SCHEMA, location="s3://b/t", timestamp_ms=1)
    snaps = (Snapshot(55, 1000, "l1", 1), Snapshot(66, 2000, "l2", 2, 55))
    meta = replace(meta, snapshots=snaps, current_snapshot_id=66)
    other = StatisticsFile(66, "s3://b/t/metadata/66-y.stats", 10, 5)
    older = StatisticsFile(55, "s3://b/t/metadata/55-old.stats", 10, 5)
    meta = set_statistics(set_statistics(meta, older, timestamp_ms=1), other, timestamp_ms=2)
    updated = set_statistics(meta, entry, timestamp_ms=10**13)
    assert updated.statistics == (entry, other)  # replaced in place, one per snapshot
    assert updated.last_updated_ms == 10**13
    with pytest.raises(CommitConflict, match="expired"):
        set_statistics(meta, StatisticsFile(77, "p", 1, 1), timestamp_ms=3)


# --- columns -------------------------------------------------------------------------------------------


SCHEMA = Schema(
    0,
    (
        NestedField(1, "id", LONG, True),
        NestedField(2, "s", StructType((NestedField(5, "x", INT), NestedField(6, "t", TIME)))),
        NestedField(3, "tags", ListType(7, STRING)),
        NestedField(4, "at", TIME),
        NestedField(8, "v", PrimitiveType("variant")),
        NestedField(9, "u", UUID),
    ),
)


def test_default_columns_are_javas_top_level_primitives() -> None:
    columns, skipped = resolve_columns(SCHEMA, None)
    assert [(c.name, c.field_id) for c in columns] == [("id", 1), ("u", 9)]
    assert skipped == {"at": "Iceberg Spark cannot read time columns"}


def test_named_columns_reach_into_structs_and_refuse_the_rest() -> None:
    columns, _ = resolve_columns(SCHEMA, ["s.x", "id", "s.x"])
    assert [(c.name, c.path, c.field_id) for c in columns] == [("s.x", ("s", "x"), 5), ("id", ("id",), 1)]
    with pytest.raises(ConfigError, match=r"'nope', not a column .*'id', 's.x', 's.t', 'at', 'u'"):
        resolve_columns(SCHEMA, ["nope"])
    with pytest.raises(ConfigError, match="of type list: only primitive"):
        resolve_columns(SCHEMA, ["tags"])
    with pytest.raises(ConfigError, match="variant is not primitive"):
        resolve_columns(SCHEMA, ["v"])
    with pytest.raises(ConfigError, match="cannot read time"):
        resolve_columns(SCHEMA, ["s.t"])
    with pytest.raises(ConfigError, match=r"'tags\.element', not a column"):
        resolve_columns(SCHEMA, ["tags.element"])
    with pytest.raises(ConfigError, match="no columns"):
        resolve_columns(Schema(0, (NestedField(2, "s", StructType((NestedField(5, "x", INT),))),)), None)
