from __future__ import annotations

import io
import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.delta.deletion_vectors import (
    delta_dv_relative_path,
    dv_from_delta_bytes,
    read_delta_dv,
    read_delta_inline_dv,
    z85_decode,
    z85_encode,
)
from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.puffin import (
    DV_MAGIC,
    PuffinBlobMetadata,
    PuffinWriter,
    deserialize_dv,
    read_blob,
    read_dv_file,
    read_puffin_footer,
    serialize_dv,
    write_dv_file,
)
from tablekeeper.iceberg.roaring import RoaringBitmap64

DELTA_TABLES = Path(__file__).resolve().parents[3].parent / "shared" / "delta-tables" / "delta-rs"
DV_TABLES = ("table-with-dv-small", "cdf-table-with-cdc-and-dvs")

# {0, 9} as a DV blob, derived from the spec: BE length 36, magic, one key-0 bitmap holding one
# 2-value array container, BE CRC-32 of bytes [4, 40).
SMALL_DV_BODY = bytes.fromhex(
    "d1d339640100000000000000000000003a300000 01000000 00000100 10000000 0000 0900".replace(" ", "")
)
SMALL_DV_BLOB = struct.pack(">I", 36) + SMALL_DV_BODY + struct.pack(">I", zlib.crc32(SMALL_DV_BODY))


# --- deletion-vector-v1 blobs -------------------------------------------------------------------


def test_dv_blob_bytes_match_the_spec_layout() -> None:
    assert serialize_dv(RoaringBitmap64([9, 0])) == SMALL_DV_BLOB
    assert list(deserialize_dv(SMALL_DV_BLOB)) == [0, 9]


def test_dv_blob_round_trip_at_scale() -> None:
    bitmap = RoaringBitmap64([*range(0, 3_000_000, 3), *range(2**32, 2**32 + 100_000)])
    blob = serialize_dv(bitmap)
    assert blob[4:8] == DV_MAGIC
    assert struct.unpack(">I", blob[:4])[0] == len(blob) - 8
    assert deserialize_dv(blob) == bitmap


def _with_crc(blob: bytes) -> bytes:
    return blob[:-4] + struct.pack(">I", zlib.crc32(blob[4:-4]))


@pytest.mark.parametrize(
    ("blob", "error", "message"),
    [
        (
            SMALL_DV_BLOB[:11],
            CorruptMetadataError,
            "deletion vector blob is truncated: 11 bytes, need at least 12",
        ),
        (
            SMALL_DV_BLOB[:-1],
            CorruptMetadataError,
            "deletion vector blob length prefix says 36 bytes but the blob holds 35",
        ),
        (
            _with_crc(SMALL_DV_BLOB[:4] + b"\x00\x01\x02\x03" + SMALL_DV_BLOB[8:]),
            CorruptMetadataError,
            "deletion vector blob has bad magic 00 01 02 03 (expected d1 d3 39 64)",
        ),
        (
            SMALL_DV_BLOB[:-1] + bytes([SMALL_DV_BLOB[-1] ^ 1]),
            CorruptMetadataError,
            f"deletion vector blob CRC-32 mismatch: stored {zlib.crc32(SMALL_DV_BODY) ^ 1:08x}, "
            f"computed {zlib.crc32(SMALL_DV_BODY):08x}",
        ),
        (
            _with_crc(SMALL_DV_BLOB[:4] + (1681511376).to_bytes(4, "little") + SMALL_DV_BLOB[8:]),
            UnsupportedFeatureError,
            "deletion vector uses Delta's legacy native bitmap format (magic 1681511376); "
            "only the portable format is supported",
        ),
    ],
)
def test_bad_dv_blobs_raise_typed_one_line_errors(blob: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        deserialize_dv(blob)
    assert str(info.value) == message


def test_corrupt_vector_inside_a_valid_envelope_is_still_rejected() -> None:
    body = DV_MAGIC + bytes.fromhex("0100000000000000 00000000 39300000 00000000".replace(" ", ""))
    with pytest.raises(CorruptMetadataError, match="unknown cookie 12345"):
        dv_from_delta_bytes(body)


# --- Z85 and Delta descriptors -----------------------------------------------------------------------


def test_z85_matches_the_zeromq_reference_vector() -> None:
    raw = bytes.fromhex("864FD26FB559F75B")
    assert z85_encode(raw) == "HelloWorld"
    assert z85_decode("HelloWorld") == raw


def test_z85_round_trips_every_byte_value() -> None:
    raw = bytes(range(256)) + b"\xff\xff\xff\xff"
    assert z85_decode(z85_encode(raw)) == raw


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abcd", "Z85 text length 4 is not a multiple of 5"),
        ("Hello Worl", "Z85 text has invalid character ' ' at 5"),
    ],
)
def test_z85_rejects_malformed_text(text: str, message: str) -> None:
    with pytest.raises(CorruptMetadataError) as info:
        z85_decode(text)
    assert info.value.message == message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("#####", 85**5 - 1 - 2**32),  # the largest group: 4437053124, past 32 bits
        ("%nSc1", 0),  # exactly 2**32
        ("%nSc0", 0xFFFFFFFF),  # the largest a Z85 encoder writes
    ],
)
def test_z85_group_past_32_bits_keeps_its_low_bits_as_delta_reads_it(text: str, value: int) -> None:
    # delta-spark's Codec.Base85Codec and delta-kernel's Base85Codec put the group's sum in an int.
    assert z85_decode(text) == struct.pack(">I", value)


def test_inline_dv_with_a_group_past_32_bits_reads_as_delta_reads_it() -> None:
    bitmap_data = DV_MAGIC + RoaringBitmap64([3]).serialize()
    text = z85_encode(bitmap_data + bytes(-len(bitmap_data) % 4))
    # The same last 32 bits, spelled with 2**32 more: past the range, same low bits.
    last = int.from_bytes(z85_decode(text[-5:]), "big") + 2**32
    assert last < 85**5
    digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    over = "".join(digits[last // 85**p % 85] for p in range(4, -1, -1))
    bitmap, _ = read_delta_inline_dv(text[:-5] + over, len(bitmap_data), cardinality=1)
    assert list(bitmap) == [3]


@pytest.mark.parametrize(
    ("descriptor", "path"),
    [
        ("ab^-aqEH.-t@S}K{vb[*k^", "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"),
        ("vBn[lx{q8@P<9BNH/isA", "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"),
    ],
)
def test_delta_dv_paths(descriptor: str, path: str) -> None:
    assert delta_dv_relative_path(descriptor) == path


def test_delta_dv_path_needs_a_full_uuid() -> None:
    with pytest.raises(CorruptMetadataError, match="shorter than a 20-character Z85 UUID"):
        delta_dv_relative_path("abc")


def test_inline_delta_dv_is_wrapped_into_an_iceberg_blob() -> None:
    bitmap = RoaringBitmap64([1, 5, 2**32])
    bitmap_data = DV_MAGIC + bitmap.serialize()
    padded = bitmap_data + bytes(-len(bitmap_data) % 4)
    assert len(padded) != len(bitmap_data)  # the case worth testing: the writer had to pad
    decoded, blob = read_delta_inline_dv(z85_encode(padded), len(bitmap_data), cardinality=3)
    assert decoded == bitmap
    assert blob == serialize_dv(bitmap)


def test_inline_delta_dv_size_must_fit_the_decoded_bytes() -> None:
    with pytest.raises(CorruptMetadataError) as info:
        read_delta_inline_dv(z85_encode(bytes(8)), 3)
    assert info.value.message == "inline Delta deletion vector decodes to 8 bytes but sizeInBytes is 3"


def test_delta_dv_file_reads() -> None:
    data = b"\x01" + SMALL_DV_BLOB + serialize_dv(RoaringBitmap64([7]))
    assert read_delta_dv(data, 1, 36, cardinality=2) == (RoaringBitmap64([0, 9]), SMALL_DV_BLOB)
    bitmap, _ = read_delta_dv(data, 1 + len(SMALL_DV_BLOB), 34)
    assert list(bitmap) == [7]


@pytest.mark.parametrize(
    ("data", "offset", "size", "cardinality", "error", "message"),
    [
        (b"\x02" + SMALL_DV_BLOB, 1, 36, None, UnsupportedFeatureError, "version 2 is not supported"),
        (
            b"\x01" + SMALL_DV_BLOB[:-1],
            1,
            36,
            None,
            CorruptMetadataError,
            "needs 45 bytes but the file has 44",
        ),
        (b"\x01" + SMALL_DV_BLOB, 1, 35, None, CorruptMetadataError, "has size 36, descriptor says 35"),
        (
            b"\x01" + SMALL_DV_BLOB,
            1,
            36,
            3,
            CorruptMetadataError,
            "holds 2 positions but its cardinality says 3",
        ),
        (b"\x01" + SMALL_DV_BLOB, 0, 36, None, CorruptMetadataError, "points at the file's version byte"),
        (
            b"\x01" + SMALL_DV_BLOB,
            1,
            -5,
            None,
            CorruptMetadataError,
            "sizeInBytes -5 is below the minimum of 12",
        ),
    ],
)
def test_bad_delta_dv_reads(
    data: bytes, offset: int, size: int, cardinality: int | None, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        read_delta_dv(data, offset, size, cardinality)


# --- real Delta tables written by Databricks ------------------------------------------------------------


@dataclass(frozen=True)
class _Add:
    path: str
    num_records: int
    dv: dict[str, Any] | None


def _commits(table: str) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    for log in sorted((DELTA_TABLES / table / "_delta_log").glob("*.json")):
        yield int(log.stem), [json.loads(line) for line in log.read_text().splitlines() if line]


def _dv_id(dv: dict[str, Any] | None) -> str:
    if dv is None:
        return ""
    return f"{dv['storageType']}{dv['pathOrInlineDv']}@{dv.get('offset')}"


def _active_files(table: str, version: int) -> list[_Add]:
    # Keyed by (path, DV) because a DV update is remove(path, old DV) + add(path, new DV).
    active: dict[tuple[str, str], _Add] = {}
    for commit_version, actions in _commits(table):
        if commit_version > version:
            break
        for action in actions:
            if "remove" in action:
                remove = action["remove"]
                active.pop((remove["path"], _dv_id(remove.get("deletionVector"))), None)
            elif "add" in action:
                add = action["add"]
                stats = json.loads(add["stats"])
                active[(add["path"], _dv_id(add.get("deletionVector")))] = _Add(
                    add["path"], stats["numRecords"], add.get("deletionVector")
                )
    return list(active.values())


def _schema_columns(table: str) -> list[str]:
    # Data files may carry columns outside the table schema (Databricks leaves a null
    # `_change_type` in some CDF-enabled files); a Delta reader projects the schema's columns.
    columns: list[str] = []
    for _, actions in _commits(table):
        for action in actions:
            if "metaData" in action:
                schema = json.loads(action["metaData"]["schemaString"])
                columns = [column["name"] for column in schema["fields"]]
    return columns


def _all_descriptors() -> list[tuple[str, dict[str, Any]]]:
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for table in DV_TABLES:
        for _, actions in _commits(table):
            for action in actions:
                for kind in ("add", "remove"):
                    dv = action.get(kind, {}).get("deletionVector")
                    if dv is not None:
                        found[table + _dv_id(dv)] = (table, dv)
    return list(found.values())


DESCRIPTORS = _all_descriptors()


@pytest.mark.corpus  # reads ../shared
def test_the_fixture_tables_hold_the_descriptors_we_expect() -> None:
    assert len(DESCRIPTORS) == 11
    assert {dv["storageType"] for _, dv in DESCRIPTORS} == {"u"}
    # One .bin file holds two DVs (offsets 1 and 43) for two different data files.
    assert sorted(
        dv["offset"] for _, dv in DESCRIPTORS if dv["pathOrInlineDv"] == "F0u+Uo^@EuVa@tFk))2D"
    ) == [1, 43]


@pytest.mark.corpus  # reads ../shared
@pytest.mark.parametrize(("table", "dv"), DESCRIPTORS, ids=[f"{t}:{_dv_id(d)}" for t, d in DESCRIPTORS])
def test_real_delta_dvs_read_and_reserialise_byte_identically(table: str, dv: dict[str, Any]) -> None:
    data = (DELTA_TABLES / table / delta_dv_relative_path(dv["pathOrInlineDv"])).read_bytes()
    bitmap, blob = read_delta_dv(data, dv["offset"], dv["sizeInBytes"], dv["cardinality"])
    assert bitmap.cardinality == dv["cardinality"]
    assert blob == data[dv["offset"] : dv["offset"] + dv["sizeInBytes"] + 8]
    # Our container choices match Databricks' writer, so our blob for the same bitmap is identical.
    assert serialize_dv(bitmap) == blob
    num_records = {
        add.path: add.num_records
        for version, _ in _commits(table)
        for add in _active_files(table, version)
        if add.dv == dv
    }
    assert num_records
    assert all(0 <= position < min(num_records.values()) for position in bitmap)


@pytest.mark.corpus  # reads ../shared
def test_table_with_dv_small_deletes_the_first_and_last_rows() -> None:
    (add,) = _active_files("table-with-dv-small", 1)
    assert add.dv is not None
    data = (
        DELTA_TABLES / "table-with-dv-small" / delta_dv_relative_path(add.dv["pathOrInlineDv"])
    ).read_bytes()
    bitmap, _ = read_delta_dv(data, add.dv["offset"], add.dv["sizeInBytes"], add.dv["cardinality"])
    assert list(bitmap) == [0, 9]


@pytest.mark.corpus  # reads ../shared
@pytest.mark.parametrize("table", DV_TABLES)
def test_dv_positions_are_exactly_the_rows_delta_rs_hides(table: str) -> None:
    deltalake = pytest.importorskip("deltalake")
    pq = pytest.importorskip("pyarrow.parquet")
    versions = [version for version, _ in _commits(table)]
    columns = _schema_columns(table)
    checked = 0
    for version in versions:
        active = _active_files(table, version)
        if not any(add.dv for add in active):
            continue
        expected: list[tuple[Any, ...]] = []
        for add in active:
            rows = [
                tuple(row.values())
                for row in pq.read_table(DELTA_TABLES / table / add.path, columns=columns).to_pylist()
            ]
            assert len(rows) == add.num_records
            if add.dv is not None:
                data = (DELTA_TABLES / table / delta_dv_relative_path(add.dv["pathOrInlineDv"])).read_bytes()
                deleted, _ = read_delta_dv(
                    data, add.dv["offset"], add.dv["sizeInBytes"], add.dv["cardinality"]
                )
                rows = [row for position, row in enumerate(rows) if position not in deleted]
            expected.extend(rows)
        dt = deltalake.DeltaTable(DELTA_TABLES / table, version=version)
        reader = deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t")
        actual = [tuple(row.values()) for batch in reader for row in _batch_rows(batch)]
        assert sorted(actual, key=repr) == sorted(expected, key=repr), f"version {version}"
        checked += 1
    # Versions with at least one live DV: 1 in the small table, 10 of 26 in the CDF table.
    assert checked == {"table-with-dv-small": 1, "cdf-table-with-cdc-and-dvs": 10}[table]


def _batch_rows(batch: Any) -> list[dict[str, Any]]:
    import pyarrow as pa

    return list(pa.record_batch(batch).to_pylist())


# --- Puffin writer ----------------------------------------------------------------------------------------


def test_dv_file_layout_and_footer_json_are_javas() -> None:
    big = RoaringBitmap64(range(0, 100_000, 3))
    data, locations = write_dv_file(
        [("s3://bucket/t/data/a.parquet", RoaringBitmap64([9, 0])), ("s3://bucket/t/data/é.parquet", big)],
        created_by="tablekeeper 0.1.0",
    )
    second_length = len(serialize_dv(big))
    assert [(loc.offset, loc.length, loc.cardinality) for loc in locations] == [
        (4, 44, 2),
        (48, second_length, 33334),
    ]
    assert data[:4] == b"PFA1"
    assert data[4:48] == SMALL_DV_BLOB
    footer_start = 48 + second_length
    assert data[footer_start : footer_start + 4] == b"PFA1"
    expected_json = (
        '{"blobs":['
        '{"type":"deletion-vector-v1","fields":[2147483645],"snapshot-id":-1,"sequence-number":-1,'
        '"offset":4,"length":44,'
        '"properties":{"referenced-data-file":"s3://bucket/t/data/a.parquet","cardinality":"2"}},'
        '{"type":"deletion-vector-v1","fields":[2147483645],"snapshot-id":-1,"sequence-number":-1,'
        f'"offset":48,"length":{second_length},'
        '"properties":{"referenced-data-file":"s3://bucket/t/data/é.parquet","cardinality":"33334"}}],'
        '"properties":{"created-by":"tablekeeper 0.1.0"}}'
    ).encode()
    assert data[footer_start + 4 : -12] == expected_json
    assert data[-12:] == struct.pack("<i", len(expected_json)) + bytes(4) + b"PFA1"
    assert len(data) == footer_start + len(expected_json) + 16


def test_writer_reports_offsets_and_footer_size_and_omits_empty_parts() -> None:
    writer = PuffinWriter()
    first = writer.add_blob("apache-datasketches-theta-v1", [1, 2], b"abc", snapshot_id=5, sequence_number=3)
    second = writer.add_blob("custom", [], b"", properties={"k": "v"})
    puffin = writer.finish()
    assert (first.offset, first.length, second.offset, second.length) == (4, 3, 7, 0)
    payload = (
        b'{"blobs":[{"type":"apache-datasketches-theta-v1","fields":[1,2],"snapshot-id":5,'
        b'"sequence-number":3,"offset":4,"length":3},{"type":"custom","fields":[],"snapshot-id":-1,'
        b'"sequence-number":-1,"offset":7,"length":0,"properties":{"k":"v"}}]}'
    )
    assert puffin.data == b"PFA1abcPFA1" + payload + struct.pack("<i", len(payload)) + bytes(4) + b"PFA1"
    assert puffin.footer.footer_size == len(payload) + 16
    assert puffin.file_size == len(puffin.data)
    with pytest.raises(ValueError, match="already called"):
        writer.add_blob("custom", [], b"")


def test_empty_puffin_file() -> None:
    puffin = PuffinWriter().finish()
    assert puffin.data == b'PFA1PFA1{"blobs":[]}' + struct.pack("<i", 12) + bytes(4) + b"PFA1"
    footer = read_puffin_footer(puffin.data)
    assert footer.blobs == ()
    assert footer.properties == {}


def test_delta_blobs_are_copied_verbatim() -> None:
    writer = PuffinWriter(created_by="t")
    location = writer.add_dv("file:/t/part-0.parquet", SMALL_DV_BLOB)
    data = writer.finish().data
    assert data[location.offset : location.offset + location.length] == SMALL_DV_BLOB
    assert location.cardinality == 2


def test_one_dv_per_data_file() -> None:
    with pytest.raises(ValueError, match="two deletion vectors for one data file: a"):
        write_dv_file([("a", RoaringBitmap64([1])), ("a", RoaringBitmap64([2]))], created_by="t")


# --- Puffin reader ----------------------------------------------------------------------------------------


F2_POSITIONS = [*range(10), *range(2 * 2**32, 2 * 2**32 + 5000)]


def _dv_file() -> bytes:
    # f2 skips key 1, which checks that readers fill the gap in our sparse key list.
    data, _ = write_dv_file(
        [("f1", RoaringBitmap64([1, 2, 3])), ("f2", RoaringBitmap64(F2_POSITIONS))],
        created_by="tablekeeper test",
    )
    return data


def test_reader_round_trip_from_bytes_and_from_a_file_object() -> None:
    data = _dv_file()
    footer = read_puffin_footer(data)
    assert footer == read_puffin_footer(io.BytesIO(data))
    assert footer.properties == {"created-by": "tablekeeper test"}
    assert footer.footer_size == len(data) - footer.blobs[-1].offset - footer.blobs[-1].length
    assert footer.blobs[0] == PuffinBlobMetadata(
        type="deletion-vector-v1",
        fields=(2147483645,),
        snapshot_id=-1,
        sequence_number=-1,
        offset=4,
        length=footer.blobs[0].length,
        properties={"referenced-data-file": "f1", "cardinality": "3"},
    )
    assert list(deserialize_dv(read_blob(io.BytesIO(data), footer.blobs[1]))) == F2_POSITIONS
    assert read_dv_file(data) == [("f1", RoaringBitmap64([1, 2, 3])), ("f2", RoaringBitmap64(F2_POSITIONS))]


def test_pyiceberg_reads_our_dv_files() -> None:
    puffin = pytest.importorskip("pyiceberg.table.puffin")
    deletion_vector = pytest.importorskip("pyiceberg.table.deletion_vector")
    vectors = {
        dv.referenced_data_file: dv.to_vector().to_pylist()
        for dv in deletion_vector.deletion_vectors_from_puffin_file(puffin.PuffinFile(_dv_file()))
    }
    assert vectors == {"f1": [1, 2, 3], "f2": F2_POSITIONS}


def _refooter(data: bytes, payload: bytes, flags: bytes = bytes(4)) -> bytes:
    footer = read_puffin_footer(data)
    start = len(data) - footer.footer_size
    return data[:start] + b"PFA1" + payload + struct.pack("<i", len(payload)) + flags + b"PFA1"


def _payload(data: bytes) -> bytes:
    return data[len(data) - read_puffin_footer(data).footer_size + 4 : -12]


def _cases() -> list[tuple[bytes, type[Exception], str]]:
    data = _dv_file()
    payload = _payload(data)
    footer_start = len(data) - len(payload) - 16
    document = json.loads(payload)
    document["blobs"][1]["offset"] = footer_start - 10
    out_of_range = _refooter(data, json.dumps(document).encode())
    moved_end = footer_start - 10 + read_puffin_footer(data).blobs[1].length
    del document["blobs"][0]["snapshot-id"]
    missing = _refooter(data, json.dumps(document).encode())
    return [
        (
            b"PFA0" + data[4:],
            CorruptMetadataError,
            "Puffin file does not start with magic PFA1 (found b'PFA0')",
        ),
        (data[:-1] + b"2", CorruptMetadataError, "Puffin file does not end with magic PFA1 (found b'PFA2')"),
        (
            data[:10],
            CorruptMetadataError,
            "Puffin file is truncated: 10 bytes is too short for magic and footer",
        ),
        (
            data[:footer_start] + b"XXXX" + data[footer_start + 4 :],
            CorruptMetadataError,
            "Puffin footer does not start with magic PFA1 (found b'XXXX')",
        ),
        (
            data[:4] + data[-(len(payload) + 16) + 1 :],
            CorruptMetadataError,
            f"Puffin footer payload size {len(payload)} does not fit in a {len(payload) + 19}-byte file",
        ),
        (
            data[:-8] + b"\x01\x00\x00\x00PFA1",
            UnsupportedFeatureError,
            "Puffin footer payload is LZ4-compressed; only uncompressed footers are supported",
        ),
        (
            data[:-8] + b"\x00\x02\x00\x00PFA1",
            UnsupportedFeatureError,
            "Puffin footer has unknown flags 00020000",
        ),
        (
            _refooter(data, b"{not json"),
            CorruptMetadataError,
            "Puffin footer payload is not valid UTF-8 JSON: "
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (
            _refooter(data, b"[]"),
            CorruptMetadataError,
            "Puffin footer JSON is not an object with a 'blobs' list",
        ),
        (
            out_of_range,
            CorruptMetadataError,
            f"Puffin blob 1 spans [{footer_start - 10}, {moved_end}) "
            f"outside the blob area [4, {footer_start})",
        ),
        (missing, CorruptMetadataError, "Puffin blob 0 is missing integer field 'snapshot-id'"),
    ]


@pytest.mark.parametrize(("data", "error", "message"), _cases())
def test_bad_puffin_files_raise_typed_one_line_errors(
    data: bytes, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        read_puffin_footer(data)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_compressed_blobs_are_refused() -> None:
    blob = PuffinBlobMetadata("deletion-vector-v1", (1,), -1, -1, 4, 3, compression_codec="zstd")
    with pytest.raises(UnsupportedFeatureError) as info:
        read_blob(b"PFA1abc", blob)
    assert info.value.message == "Puffin blob compression codec 'zstd' is not supported"


def test_dv_cardinality_property_must_match() -> None:
    data = _dv_file()
    payload = _payload(data)
    tampered = _refooter(data, payload.replace(b'"cardinality":"3"', b'"cardinality":"4"'))
    with pytest.raises(CorruptMetadataError) as info:
        read_dv_file(tampered)
    assert info.value.message == "Puffin DV blob 0 holds 3 positions but says cardinality 4"


def test_truncated_file_object_is_reported() -> None:
    data = _dv_file()
    blob = read_puffin_footer(data).blobs[1]
    with pytest.raises(CorruptMetadataError, match="Puffin file is truncated: wanted"):
        read_blob(io.BytesIO(data[: blob.offset + 10]), blob)
