"""Manifests and manifest lists: round trips, inheritance on read, assignment at commit, file metadata."""

from __future__ import annotations

import io
import json
import math
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.manifest import read_manifest_list as pyiceberg_read_manifest_list

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.avro_schemas import iceberg_schema_json, manifest_entry_struct, manifest_file_struct
from tablekeeper.iceberg.content import (
    ADDED,
    DATA,
    DELETED,
    EQUALITY_DELETES,
    EXISTING,
    MANIFEST_DATA,
    MANIFEST_DELETES,
    POSITION_DELETES,
    UNASSIGNED_SEQ,
    DataFile,
    FieldSummary,
    ManifestEntry,
    ManifestFile,
)
from tablekeeper.iceberg.conversions import to_bytes
from tablekeeper.iceberg.manifest import (
    assign_for_commit,
    read_manifest,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from tablekeeper.iceberg.partitioning import (
    PartitionField,
    PartitionSpec,
    partition_fields_to_json,
)
from tablekeeper.iceberg.types import (
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIMESTAMPTZ,
    NestedField,
    Schema,
    StructType,
    schema_to_json,
)

LOCATION = "s3://bucket/db/events"
SNAPSHOT_ID = 8_000_000_000_000_000_001
OLD_SNAPSHOT_ID = 7_000_000_000_000_000_001

SCHEMA = Schema(
    schema_id=3,
    fields=(
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "category", STRING),
        NestedField(3, "ts", TIMESTAMPTZ),
        NestedField(4, "price", DOUBLE),
    ),
)
# identity(category), bucket[16](id), day(ts): partition values str, int, int days.
SPEC = PartitionSpec(
    2,
    (
        PartitionField(2, 1000, "category", "identity"),
        PartitionField(1, 1001, "id_bucket", "bucket[16]"),
        PartitionField(3, 1002, "ts_day", "day"),
    ),
)
PTYPE = SPEC.partition_type(SCHEMA)
PARTITIONS: tuple[tuple[Any, ...], ...] = (("books", 3, 19_000), ("toys", None, 19_001), (None, 15, None))


def data_file(name: str, partition: tuple[Any, ...], records: int = 10, **changes: Any) -> DataFile:
    f = DataFile(
        content=DATA,
        file_path=f"{LOCATION}/data/{name}.parquet",
        file_format="PARQUET",
        partition=partition,
        record_count=records,
        file_size_in_bytes=4096 + records,
        spec_id=SPEC.spec_id,
        column_sizes={1: 120, 2: 340, 4: 80},
        value_counts={1: records, 2: records, 4: records},
        null_value_counts={1: 0, 2: 1, 4: 0},
        nan_value_counts={4: 1},
        lower_bounds={1: to_bytes(LONG, -5), 2: b"apple", 4: to_bytes(DOUBLE, 0.5)},
        upper_bounds={1: to_bytes(LONG, 2**40), 2: b"zebra", 4: to_bytes(DOUBLE, 99.5)},
        key_metadata=b"\x00\x01key",
        split_offsets=(4, 2048),
        sort_order_id=0,
    )
    return replace(f, **changes)


def position_delete(name: str, partition: tuple[Any, ...], records: int = 3) -> DataFile:
    return DataFile(
        content=POSITION_DELETES,
        file_path=f"{LOCATION}/data/{name}-deletes.parquet",
        file_format="PARQUET",
        partition=partition,
        record_count=records,
        file_size_in_bytes=900,
        spec_id=SPEC.spec_id,
        value_counts={2147483546: records, 2147483545: records},
        lower_bounds={2147483545: to_bytes(LONG, 0)},
        upper_bounds={2147483545: to_bytes(LONG, 7)},
        split_offsets=(4,),
        referenced_data_file=f"{LOCATION}/data/{name}.parquet",
    )


def equality_delete(name: str, partition: tuple[Any, ...], records: int = 2) -> DataFile:
    return DataFile(
        content=EQUALITY_DELETES,
        file_path=f"{LOCATION}/data/{name}-eq.parquet",
        file_format="PARQUET",
        partition=partition,
        record_count=records,
        file_size_in_bytes=700,
        spec_id=SPEC.spec_id,
        null_value_counts={1: 0, 2: 0},
        equality_ids=(1, 2),
        sort_order_id=0,
    )


def dv(name: str, partition: tuple[Any, ...], records: int = 4) -> DataFile:
    return DataFile(
        content=POSITION_DELETES,
        file_path=f"{LOCATION}/data/{name}-dvs.puffin",
        file_format="PUFFIN",
        partition=partition,
        record_count=records,
        file_size_in_bytes=1500,
        spec_id=SPEC.spec_id,
        referenced_data_file=f"{LOCATION}/data/{name}.parquet",
        content_offset=4,
        content_size_in_bytes=42,
    )


def as_written(f: DataFile, version: int) -> DataFile:
    """What a reader gets back: the fields the version's schema holds, nulled by content like Java."""
    is_pos = f.content == POSITION_DELETES
    return replace(
        f,
        equality_ids=f.equality_ids if version >= 2 else None,
        referenced_data_file=f.referenced_data_file if version >= 2 and is_pos else None,
        first_row_id=f.first_row_id if version >= 3 and f.content == DATA else None,
        content_offset=f.content_offset if version >= 3 and is_pos else None,
        content_size_in_bytes=f.content_size_in_bytes if version >= 3 and is_pos else None,
    )


def write(
    entries: list[ManifestEntry],
    version: int,
    content: int = MANIFEST_DATA,
    spec: PartitionSpec = SPEC,
    schema: Schema = SCHEMA,
) -> tuple[bytes, ManifestFile]:
    return write_manifest(
        f"{LOCATION}/metadata/c0ffee-m0.avro",
        entries,
        format_version=version,
        spec=spec,
        schema=schema,
        snapshot_id=SNAPSHOT_ID,
        content=content,
    )


def committed(manifest: ManifestFile, sequence_number: int, first_row_id: int | None = None) -> ManifestFile:
    """The manifest as a manifest list describes it after its commit."""
    return replace(
        manifest,
        sequence_number=sequence_number,
        min_sequence_number=sequence_number
        if manifest.min_sequence_number == UNASSIGNED_SEQ
        else manifest.min_sequence_number,
        first_row_id=first_row_id,
    )


def avro_metadata(data: bytes) -> dict[str, str]:
    reader = fastavro.reader(io.BytesIO(data))
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in reader.metadata.items()}


def avro_records(data: bytes) -> list[dict[str, Any]]:
    records: list[Any] = list(fastavro.reader(io.BytesIO(data)))
    return records


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_data_manifest_round_trip(version: int) -> None:
    files = [
        data_file(f"f{i}", p, records=10 + i, first_row_id=1000 * i if version >= 3 else None)
        for i, p in enumerate(PARTITIONS)
    ]
    seqs = [(None, None) if version == 1 else (i + 1, i + 2) for i in range(len(files))]
    entries = [
        ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, f, seq, file_seq)
        for f, (seq, file_seq) in zip(files, seqs, strict=True)
    ]
    data, manifest = write(entries, version)
    assert manifest.manifest_length == len(data)
    sequence_number = 0 if version == 1 else 9
    read = read_manifest(data, committed(manifest, sequence_number, 77 if version >= 3 else None), PTYPE)
    expected_seqs = [(0, 0)] * len(files) if version == 1 else seqs
    assert read == [
        ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, as_written(f, version), seq, file_seq)
        for f, (seq, file_seq) in zip(files, expected_seqs, strict=True)
    ]
    # Every metric map and list survives (not only equality of defaults).
    first = read[0].data_file
    assert first.lower_bounds == {1: to_bytes(LONG, -5), 2: b"apple", 4: to_bytes(DOUBLE, 0.5)}
    assert first.nan_value_counts == {4: 1}
    assert first.split_offsets == (4, 2048)
    assert first.key_metadata == b"\x00\x01key"
    assert [e.data_file.partition for e in read] == list(PARTITIONS)


@pytest.mark.parametrize("version", [2, 3])
def test_delete_manifest_round_trip(version: int) -> None:
    files = [position_delete("f0", PARTITIONS[0]), equality_delete("f1", PARTITIONS[1])]
    if version >= 3:
        files.append(dv("f2", PARTITIONS[2]))
    entries = [ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, f, 4, 5) for f in files]
    data, manifest = write(entries, version, content=MANIFEST_DELETES)
    assert manifest.content == MANIFEST_DELETES
    read = read_manifest(data, committed(manifest, 6), PTYPE)
    assert read == [ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, as_written(f, version), 4, 5) for f in files]
    assert read[1].data_file.equality_ids == (1, 2)
    assert read[0].data_file.referenced_data_file == f"{LOCATION}/data/f0.parquet"
    if version >= 3:
        assert read[2].data_file.is_dv
        assert (read[2].data_file.content_offset, read[2].data_file.content_size_in_bytes) == (4, 42)


def test_v2_drops_v3_only_fields_and_nulls_by_content() -> None:
    files = [
        data_file("f0", PARTITIONS[0], first_row_id=5, referenced_data_file="x", content_offset=1),
        replace(equality_delete("f1", PARTITIONS[1]), referenced_data_file="y"),
    ]
    entries = [ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, f, 1, 1) for f in files]
    data, manifest = write(entries, 2)
    read = read_manifest(data, committed(manifest, 2), PTYPE, committed=False)
    assert read[0].data_file.first_row_id is None
    assert read[0].data_file.referenced_data_file is None
    assert read[0].data_file.content_offset is None
    assert read[1].data_file.referenced_data_file is None
    raw = avro_records(data)[0]["data_file"]
    assert "first_row_id" not in raw
    assert raw["referenced_data_file"] is None


def test_file_format_is_written_upper_case_and_v1_block_size() -> None:
    entries = [ManifestEntry(ADDED, SNAPSHOT_ID, data_file("f0", PARTITIONS[0], file_format="parquet"))]
    data, _ = write(entries, 1)
    raw = avro_records(data)[0]["data_file"]
    assert raw["file_format"] == "PARQUET"
    assert raw["block_size_in_bytes"] == 64 * 1024 * 1024


def test_unpartitioned_manifest_round_trip() -> None:
    unpartitioned = PartitionSpec(0, ())
    f = replace(data_file("f0", ()), spec_id=0)
    data, manifest = write([ManifestEntry(ADDED, None, f)], 2, spec=unpartitioned)
    read = read_manifest(data, committed(manifest, 1), StructType(()))
    assert read == [ManifestEntry(ADDED, SNAPSHOT_ID, f, 1, 1)]
    assert manifest.partitions == ()


def test_partition_field_with_invalid_avro_name_round_trips() -> None:
    spec = PartitionSpec(
        0, (PartitionField(3, 1000, "ts-day", "day"), PartitionField(2, 1001, "1cat", "identity"))
    )
    f = replace(data_file("f0", (19_000, "books")), spec_id=0)
    data, manifest = write([ManifestEntry(ADDED, None, f)], 2, spec=spec)
    read = read_manifest(data, committed(manifest, 1), spec.partition_type(SCHEMA))
    assert read[0].data_file.partition == (19_000, "books")
    raw = avro_records(data)[0]["data_file"]["partition"]
    assert raw == {"ts_x2Dday": read_date(19_000), "_1cat": "books"}


def read_date(days: int) -> Any:
    import datetime as dt

    return dt.date(1970, 1, 1) + dt.timedelta(days=days)


def test_manifest_counts() -> None:
    entries = [
        ManifestEntry(ADDED, SNAPSHOT_ID, data_file("a", PARTITIONS[0], records=10)),
        ManifestEntry(ADDED, SNAPSHOT_ID, data_file("b", PARTITIONS[0], records=20)),
        ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, data_file("c", PARTITIONS[1], records=7), 3, 3),
        ManifestEntry(DELETED, SNAPSHOT_ID, data_file("d", PARTITIONS[2], records=5), 2, 2),
    ]
    _, manifest = write(entries, 2)
    assert manifest.manifest_path == f"{LOCATION}/metadata/c0ffee-m0.avro"
    assert manifest.partition_spec_id == 2
    assert manifest.added_snapshot_id == SNAPSHOT_ID
    assert manifest.content == MANIFEST_DATA
    assert (manifest.added_files_count, manifest.existing_files_count, manifest.deleted_files_count) == (
        2,
        1,
        1,
    )
    assert (manifest.added_rows_count, manifest.existing_rows_count, manifest.deleted_rows_count) == (
        30,
        7,
        5,
    )
    assert manifest.sequence_number == UNASSIGNED_SEQ
    # Lowest data sequence number of live entries with explicit values (deleted ones do not count).
    assert manifest.min_sequence_number == 3
    assert manifest.first_row_id is None


def test_new_manifest_without_explicit_sequence_numbers_is_unassigned() -> None:
    _, manifest = write([ManifestEntry(ADDED, None, data_file("a", PARTITIONS[0]))], 2)
    assert manifest.sequence_number == UNASSIGNED_SEQ
    assert manifest.min_sequence_number == UNASSIGNED_SEQ


def test_v1_manifest_sequence_numbers_are_zero() -> None:
    _, manifest = write([ManifestEntry(ADDED, SNAPSHOT_ID, data_file("a", PARTITIONS[0]))], 1)
    assert (manifest.sequence_number, manifest.min_sequence_number) == (0, 0)


def test_existing_entry_without_sequence_number_is_refused() -> None:
    with pytest.raises(ValueError, match="explicit sequence numbers"):
        write([ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, data_file("a", PARTITIONS[0]))], 2)


# -- inheritance on read ----------------------------------------------------------------------


def test_added_entries_inherit_sequence_numbers_and_snapshot_id() -> None:
    entries = [
        ManifestEntry(ADDED, None, data_file("a", PARTITIONS[0])),
        ManifestEntry(ADDED, SNAPSHOT_ID, data_file("b", PARTITIONS[1])),
        # An ADDED entry may carry an older data sequence number; its file sequence number is new.
        ManifestEntry(ADDED, None, data_file("c", PARTITIONS[2]), 4, None),
        ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, data_file("d", PARTITIONS[0]), 2, 3),
        ManifestEntry(DELETED, OLD_SNAPSHOT_ID, data_file("e", PARTITIONS[0]), 1, 1),
    ]
    data, manifest = write(entries, 2)
    raw = avro_records(data)
    assert [r["snapshot_id"] for r in raw] == [None, SNAPSHOT_ID, None, OLD_SNAPSHOT_ID, OLD_SNAPSHOT_ID]
    assert [r["sequence_number"] for r in raw] == [None, None, 4, 2, 1]
    read = read_manifest(data, committed(manifest, 12), PTYPE)
    assert [(e.status, e.snapshot_id, e.sequence_number, e.file_sequence_number) for e in read] == [
        (ADDED, SNAPSHOT_ID, 12, 12),
        (ADDED, SNAPSHOT_ID, 12, 12),
        (ADDED, SNAPSHOT_ID, 4, 12),
        (EXISTING, OLD_SNAPSHOT_ID, 2, 3),
        (DELETED, OLD_SNAPSHOT_ID, 1, 1),
    ]


def test_v1_entries_read_sequence_number_zero() -> None:
    entries = [
        ManifestEntry(ADDED, SNAPSHOT_ID, data_file("a", PARTITIONS[0])),
        ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, data_file("b", PARTITIONS[1])),
    ]
    data, manifest = write(entries, 1)
    read = read_manifest(data, manifest, PTYPE)
    assert [(e.snapshot_id, e.sequence_number, e.file_sequence_number) for e in read] == [
        (SNAPSHOT_ID, 0, 0),
        (OLD_SNAPSHOT_ID, 0, 0),
    ]
    assert all(e.data_file.content == DATA for e in read)


def v3_lineage_manifest() -> tuple[bytes, ManifestFile]:
    entries = [
        ManifestEntry(ADDED, None, data_file("a", PARTITIONS[0], records=10)),
        ManifestEntry(DELETED, OLD_SNAPSHOT_ID, data_file("b", PARTITIONS[0], records=5), 1, 1),
        ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, data_file("c", PARTITIONS[1], records=7), 2, 2),
        ManifestEntry(ADDED, None, data_file("d", PARTITIONS[2], records=4, first_row_id=3)),
    ]
    return write(entries, 3)


def test_v3_first_row_id_inheritance() -> None:
    data, manifest = v3_lineage_manifest()
    assert [r["data_file"]["first_row_id"] for r in avro_records(data)] == [None, None, None, 3]
    read = read_manifest(data, committed(manifest, 5, first_row_id=100), PTYPE)
    assert [e.data_file.first_row_id for e in read] == [100, None, 110, 3]


def test_v3_deleted_entry_keeps_its_explicit_first_row_id() -> None:
    entries = [
        ManifestEntry(
            DELETED, OLD_SNAPSHOT_ID, data_file("b", PARTITIONS[0], records=5, first_row_id=50), 1, 1
        ),
        ManifestEntry(ADDED, None, data_file("a", PARTITIONS[0], records=10)),
    ]
    data, manifest = write(entries, 3)
    read = read_manifest(data, committed(manifest, 5, first_row_id=100), PTYPE)
    assert [e.data_file.first_row_id for e in read] == [50, 100]


def test_v3_committed_manifest_without_first_row_id_has_no_row_ids() -> None:
    data, manifest = v3_lineage_manifest()
    read = read_manifest(data, committed(manifest, 5, first_row_id=None), PTYPE, committed=True)
    assert [e.data_file.first_row_id for e in read] == [None, None, None, None]


def test_v3_uncommitted_manifest_keeps_explicit_first_row_ids() -> None:
    data, manifest = v3_lineage_manifest()
    read = read_manifest(data, manifest, PTYPE, committed=False)
    assert [e.data_file.first_row_id for e in read] == [None, None, None, 3]


def test_v3_delete_files_never_get_row_ids() -> None:
    files = [position_delete("a", PARTITIONS[0]), dv("b", PARTITIONS[1]), equality_delete("c", PARTITIONS[2])]
    files = [replace(f, first_row_id=9) for f in files]
    data, manifest = write([ManifestEntry(ADDED, None, f) for f in files], 3, content=MANIFEST_DELETES)
    assert [r["data_file"]["first_row_id"] for r in avro_records(data)] == [None, None, None]
    read = read_manifest(data, committed(manifest, 5, first_row_id=100), PTYPE)
    assert [e.data_file.first_row_id for e in read] == [None, None, None]


# -- manifest lists ---------------------------------------------------------------------------


def manifest_row(
    name: str,
    *,
    content: int = MANIFEST_DATA,
    snapshot_id: int = SNAPSHOT_ID,
    seq: int = UNASSIGNED_SEQ,
    min_seq: int = UNASSIGNED_SEQ,
    added_rows: int = 10,
    existing_rows: int = 0,
    first_row_id: int | None = None,
) -> ManifestFile:
    return ManifestFile(
        manifest_path=f"{LOCATION}/metadata/{name}.avro",
        manifest_length=1000,
        partition_spec_id=SPEC.spec_id,
        added_snapshot_id=snapshot_id,
        content=content,
        sequence_number=seq,
        min_sequence_number=min_seq,
        added_files_count=1,
        existing_files_count=1 if existing_rows else 0,
        deleted_files_count=0,
        added_rows_count=added_rows,
        existing_rows_count=existing_rows,
        deleted_rows_count=0,
        partitions=(FieldSummary(False, False, b"a", b"z"), FieldSummary(True), FieldSummary(False)),
        first_row_id=first_row_id,
    )


def test_assign_for_commit_sets_unassigned_sequence_numbers() -> None:
    new = manifest_row("new")
    new_with_min = manifest_row("new-min", min_seq=3)
    old = manifest_row("old", snapshot_id=OLD_SNAPSHOT_ID, seq=4, min_seq=2)
    assigned, cursor = assign_for_commit(
        [new, new_with_min, old],
        format_version=2,
        snapshot_id=SNAPSHOT_ID,
        sequence_number=8,
        next_row_id=None,
    )
    assert [(m.sequence_number, m.min_sequence_number) for m in assigned] == [(8, 8), (8, 3), (4, 2)]
    assert assigned[2] == old
    assert cursor is None
    assert all(m.first_row_id is None for m in assigned)


def test_assign_for_commit_refuses_unassigned_manifest_of_another_snapshot() -> None:
    stray = manifest_row("stray", snapshot_id=OLD_SNAPSHOT_ID)
    with pytest.raises(ValueError, match="written for another snapshot"):
        assign_for_commit(
            [stray], format_version=2, snapshot_id=SNAPSHOT_ID, sequence_number=8, next_row_id=None
        )


def v3_manifests() -> list[ManifestFile]:
    return [
        manifest_row("m1", added_rows=10),
        manifest_row("d1", content=MANIFEST_DELETES, added_rows=6),
        manifest_row("old", snapshot_id=OLD_SNAPSHOT_ID, seq=4, min_seq=4, first_row_id=5),
        manifest_row("m2", added_rows=3, existing_rows=4),
        # Pre-v3 manifest carried into the first v3 snapshot: existing rows get ids too.
        manifest_row("pre-v3", snapshot_id=OLD_SNAPSHOT_ID, seq=2, min_seq=1, added_rows=0, existing_rows=20),
    ]


def test_v3_assignment_follows_the_spec_recipe() -> None:
    assigned, cursor = assign_for_commit(
        v3_manifests(), format_version=3, snapshot_id=SNAPSHOT_ID, sequence_number=9, next_row_id=100
    )
    assert [m.first_row_id for m in assigned] == [100, None, 5, 110, 117]
    assert cursor == 137
    assert [m.sequence_number for m in assigned] == [9, 9, 4, 9, 2]


def test_v3_delete_manifest_never_has_first_row_id() -> None:
    stale = manifest_row("d1", content=MANIFEST_DELETES, first_row_id=40)
    assigned, cursor = assign_for_commit(
        [stale], format_version=3, snapshot_id=SNAPSHOT_ID, sequence_number=9, next_row_id=100
    )
    assert assigned[0].first_row_id is None
    assert cursor == 100


def test_v3_manifest_list_result_and_file() -> None:
    result = write_manifest_list(
        v3_manifests(),
        format_version=3,
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=OLD_SNAPSHOT_ID,
        sequence_number=9,
        next_row_id=100,
    )
    assert result.first_row_id == 100
    assert result.added_rows == 37  # Java: the whole assigned range, existing rows included
    meta = avro_metadata(result.data)
    assert meta["first-row-id"] == "100"
    read = read_manifest_list(result.data)
    assert read == list(result.manifests)
    assert [m.first_row_id for m in read] == [100, None, 5, 110, 117]


def test_v3_manifest_list_with_no_new_rows_still_has_range_zero() -> None:
    result = write_manifest_list(
        [manifest_row("d1", content=MANIFEST_DELETES)],
        format_version=3,
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=None,
        sequence_number=1,
        next_row_id=42,
    )
    assert (result.first_row_id, result.added_rows) == (42, 0)


@pytest.mark.parametrize("version", [2, 3])
def test_manifest_list_round_trip(version: int) -> None:
    manifests = [
        manifest_row("new"),
        manifest_row("del", content=MANIFEST_DELETES),
        manifest_row(
            "old", snapshot_id=OLD_SNAPSHOT_ID, seq=3, min_seq=1, first_row_id=0 if version >= 3 else None
        ),
    ]
    result = write_manifest_list(
        manifests,
        format_version=version,
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=OLD_SNAPSHOT_ID,
        sequence_number=4,
        next_row_id=50 if version >= 3 else None,
    )
    read = read_manifest_list(result.data)
    assert read == list(result.manifests)
    assert [(m.sequence_number, m.min_sequence_number) for m in read] == [(4, 4), (4, 4), (3, 1)]
    assert [m.content for m in read] == [MANIFEST_DATA, MANIFEST_DELETES, MANIFEST_DATA]
    if version == 2:
        assert result.first_row_id is None
        assert result.added_rows is None
        assert all(m.first_row_id is None for m in read)


def test_v1_manifest_list_round_trip() -> None:
    m = replace(manifest_row("v1"), sequence_number=0, min_sequence_number=0)
    result = write_manifest_list(
        [m], format_version=1, snapshot_id=SNAPSHOT_ID, parent_snapshot_id=None, sequence_number=0
    )
    (read,) = read_manifest_list(result.data)
    assert read == m
    assert "content" not in avro_records(result.data)[0]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_manifest_list_file_metadata(version: int) -> None:
    result = write_manifest_list(
        [
            replace(manifest_row("m"), sequence_number=0, min_sequence_number=0)
            if version == 1
            else manifest_row("m")
        ],
        format_version=version,
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=None,
        sequence_number=0 if version == 1 else 1,
        next_row_id=7 if version >= 3 else None,
    )
    meta = avro_metadata(result.data)
    expected_keys = {
        "snapshot-id",
        "parent-snapshot-id",
        "format-version",
        "iceberg.schema",
        "avro.schema",
        "avro.codec",
    }
    if version >= 2:
        expected_keys.add("sequence-number")
    if version >= 3:
        expected_keys.add("first-row-id")
    assert set(meta) == expected_keys
    assert meta["snapshot-id"] == str(SNAPSHOT_ID)
    assert meta["parent-snapshot-id"] == "null"
    assert meta["format-version"] == str(version)
    assert meta["avro.codec"] == "deflate"
    assert fastavro.reader(io.BytesIO(result.data)).codec == "deflate"
    assert json.loads(meta["iceberg.schema"]) == iceberg_schema_json(manifest_file_struct(version))
    if version >= 2:
        assert meta["sequence-number"] == "1"
    if version >= 3:
        assert meta["first-row-id"] == "7"


def test_manifest_list_parent_snapshot_id() -> None:
    result = write_manifest_list(
        [manifest_row("m")],
        format_version=2,
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=OLD_SNAPSHOT_ID,
        sequence_number=2,
    )
    assert avro_metadata(result.data)["parent-snapshot-id"] == str(OLD_SNAPSHOT_ID)


@pytest.mark.parametrize(
    ("version", "content"),
    [
        (1, MANIFEST_DATA),
        (2, MANIFEST_DATA),
        (2, MANIFEST_DELETES),
        (3, MANIFEST_DATA),
        (3, MANIFEST_DELETES),
    ],
)
def test_manifest_file_metadata(version: int, content: int) -> None:
    f = data_file("a", PARTITIONS[0]) if content == MANIFEST_DATA else position_delete("a", PARTITIONS[0])
    data, _ = write([ManifestEntry(ADDED, None, f)], version, content=content)
    meta = avro_metadata(data)
    expected_keys = {
        "schema",
        "partition-spec",
        "partition-spec-id",
        "format-version",
        "iceberg.schema",
        "avro.schema",
        "avro.codec",
    }
    if version >= 2:
        expected_keys.add("content")
    assert set(meta) == expected_keys
    assert json.loads(meta["schema"]) == schema_to_json(SCHEMA)
    assert json.loads(meta["schema"])["schema-id"] == 3
    assert json.loads(meta["partition-spec"]) == partition_fields_to_json(SPEC)
    assert json.loads(meta["partition-spec"])[1] == {
        "name": "id_bucket",
        "transform": "bucket[16]",
        "source-id": 1,
        "field-id": 1001,
    }
    assert meta["partition-spec-id"] == "2"
    assert meta["format-version"] == str(version)
    if version >= 2:
        assert meta["content"] == ("deletes" if content == MANIFEST_DELETES else "data")
    assert json.loads(meta["iceberg.schema"]) == iceberg_schema_json(manifest_entry_struct(version, PTYPE))
    assert meta["avro.codec"] == "deflate"
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.codec == "deflate"
    writer_schema: Any = reader.writer_schema
    assert writer_schema["name"] == "manifest_entry"


# -- partition summaries ----------------------------------------------------------------------


def test_partition_summaries() -> None:
    entries = [ManifestEntry(ADDED, None, data_file(f"f{i}", p)) for i, p in enumerate(PARTITIONS)]
    _, manifest = write(entries, 2)
    assert manifest.partitions == (
        FieldSummary(True, False, to_bytes(STRING, "books"), to_bytes(STRING, "toys")),
        FieldSummary(True, False, to_bytes(INT, 3), to_bytes(INT, 15)),
        FieldSummary(True, False, to_bytes(DATE, 19_000), to_bytes(DATE, 19_001)),
    )
    assert manifest.partitions[2].lower_bound == (19_000).to_bytes(4, "little")


def test_partition_summaries_without_nulls() -> None:
    entries = [
        ManifestEntry(ADDED, None, data_file("a", ("m", 9, -3))),
        ManifestEntry(ADDED, None, data_file("b", ("b", 2, 40))),
    ]
    _, manifest = write(entries, 2)
    assert manifest.partitions == (
        FieldSummary(False, False, b"b", b"m"),
        FieldSummary(False, False, to_bytes(INT, 2), to_bytes(INT, 9)),
        FieldSummary(False, False, to_bytes(DATE, -3), to_bytes(DATE, 40)),
    )


def test_partition_summary_of_double_field_tracks_nan() -> None:
    spec = PartitionSpec(0, (PartitionField(4, 1000, "price", "identity"),))
    values = [(2.5,), (math.nan,), (None,), (-1.0,)]
    entries = [
        ManifestEntry(ADDED, None, replace(data_file(f"f{i}", v), spec_id=0)) for i, v in enumerate(values)
    ]
    data, manifest = write(entries, 2, spec=spec)
    assert manifest.partitions == (FieldSummary(True, True, to_bytes(DOUBLE, -1.0), to_bytes(DOUBLE, 2.5)),)
    read = read_manifest(data, committed(manifest, 1), spec.partition_type(SCHEMA))
    assert math.isnan(read[1].data_file.partition[0])


def test_partition_summary_of_all_null_field_has_no_bounds() -> None:
    entries = [ManifestEntry(ADDED, None, data_file("a", (None, None, None)))]
    _, manifest = write(entries, 2)
    assert manifest.partitions == (FieldSummary(True, False, None, None),) * 3


def test_partition_summaries_survive_the_manifest_list() -> None:
    entries = [ManifestEntry(ADDED, None, data_file(f"f{i}", p)) for i, p in enumerate(PARTITIONS)]
    _, manifest = write(entries, 2)
    result = write_manifest_list(
        [manifest], format_version=2, snapshot_id=SNAPSHOT_ID, parent_snapshot_id=None, sequence_number=1
    )
    (read,) = read_manifest_list(result.data)
    assert read.partitions == manifest.partitions
    raw = avro_records(result.data)[0]["partitions"]
    assert raw[0] == {
        "contains_null": True,
        "contains_nan": False,
        "lower_bound": b"books",
        "upper_bound": b"toys",
    }


# -- corrupt input ----------------------------------------------------------------------------


def test_garbage_manifest_is_corrupt() -> None:
    _, manifest = write([ManifestEntry(ADDED, None, data_file("a", PARTITIONS[0]))], 2)
    with pytest.raises(CorruptMetadataError) as info:
        read_manifest(b"not avro at all", committed(manifest, 1), PTYPE)
    assert str(info.value).startswith(f"manifest {manifest.manifest_path} is not a readable Avro file")
    assert "\n" not in str(info.value)


def test_truncated_manifest_is_corrupt() -> None:
    entries = [ManifestEntry(ADDED, None, data_file(f"f{i}", PARTITIONS[i % 3])) for i in range(50)]
    data, manifest = write(entries, 2)
    with pytest.raises(CorruptMetadataError, match=f"manifest {manifest.manifest_path}"):
        read_manifest(data[: len(data) - 40], committed(manifest, 1), PTYPE)


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _split_first_block(data: bytes) -> tuple[bytes, int, bytes, bytes]:
    """(header, record count, compressed payload, rest) of an Avro file with one data block."""
    sync = data[-16:]
    pos = data.index(sync) + 16
    header = data[:pos]
    values = []
    for _ in range(2):  # record count and payload size, zigzag varints
        shift = n = 0
        while True:
            byte = data[pos]
            pos += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        values.append((n >> 1) ^ -(n & 1))
    count, size = values
    return header, count, data[pos : pos + size], data[pos + size :]


def corrupt_deflate(data: bytes) -> bytes:
    """Same length, but the block's deflate stream starts with a reserved block type (BTYPE=11)."""
    header, count, payload, rest = _split_first_block(data)
    bad = b"\xff" + payload[1:]
    return header + _zigzag_varint(count) + _zigzag_varint(len(bad)) + bad + rest


def corrupt_first_union_index(data: bytes, offset: int) -> bytes:
    """Valid deflate whose decoded bytes hold a union branch index (5) that the schema lacks."""
    header, count, payload, rest = _split_first_block(data)
    raw = bytearray(zlib.decompress(payload, -15))
    raw[offset] = 0x0A  # zigzag 5
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    bad = packer.compress(bytes(raw)) + packer.flush()
    return header + _zigzag_varint(count) + _zigzag_varint(len(bad)) + bad + rest


def test_manifest_with_corrupt_deflate_block_is_corrupt() -> None:
    entries = [ManifestEntry(ADDED, None, data_file(f"f{i}", PARTITIONS[i % 3])) for i in range(5)]
    data, manifest = write(entries, 2)
    bad = corrupt_deflate(data)
    assert len(bad) == len(data)
    with pytest.raises(CorruptMetadataError) as info:
        read_manifest(bad, committed(manifest, 1), PTYPE)
    assert str(info.value).startswith(f"manifest {manifest.manifest_path} ")
    assert "\n" not in str(info.value)


def test_manifest_with_bad_union_index_is_corrupt() -> None:
    # Byte 0 is the status (int), byte 1 the snapshot_id union branch.
    entries = [ManifestEntry(ADDED, None, data_file(f"f{i}", PARTITIONS[i % 3])) for i in range(5)]
    data, manifest = write(entries, 2)
    bad = corrupt_first_union_index(data, 1)
    with pytest.raises(CorruptMetadataError) as info:
        read_manifest(bad, committed(manifest, 1), PTYPE)
    assert str(info.value).startswith(f"manifest {manifest.manifest_path} ")


def test_manifest_list_with_corrupt_deflate_block_is_corrupt() -> None:
    result = write_manifest_list(
        [manifest_row(f"m{i}") for i in range(5)],
        format_version=2,
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=None,
        sequence_number=1,
    )
    with pytest.raises(CorruptMetadataError) as info:
        read_manifest_list(corrupt_deflate(result.data), "s3://bucket/db/events/metadata/snap-1.avro")
    assert str(info.value).startswith("s3://bucket/db/events/metadata/snap-1.avro ")


def test_manifest_list_with_bad_union_index_is_corrupt() -> None:
    # A v2 manifest_file record: path (string), length, spec id, content, sequence numbers, snapshot
    # id, six counts, then the partitions union; the first record's path length byte comes first.
    result = write_manifest_list(
        [manifest_row("m0")],
        format_version=2,
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=None,
        sequence_number=1,
    )
    raw = zlib.decompress(_split_first_block(result.data)[2], -15)
    path_len = len(f"{LOCATION}/metadata/m0.avro")
    assert raw[0] == _zigzag_varint(path_len)[0]
    # The partitions union index follows the 12 fixed-position ints/longs after the path.
    pos = 1 + path_len
    for _ in range(12):
        while raw[pos] & 0x80:
            pos += 1
        pos += 1
    assert raw[pos] == 0x02  # branch 1: the array
    with pytest.raises(CorruptMetadataError) as info:
        read_manifest_list(corrupt_first_union_index(result.data, pos), "snap-1.avro")
    assert str(info.value).startswith("snap-1.avro ")


def test_garbage_manifest_list_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataError) as info:
        read_manifest_list(b"\x00\x01\x02", "s3://bucket/db/events/metadata/snap-1.avro")
    assert str(info.value).startswith(
        "s3://bucket/db/events/metadata/snap-1.avro is not a readable Avro file"
    )
    assert "\n" not in str(info.value)


# -- PyIceberg reads what we write ------------------------------------------------------------


def test_pyiceberg_reads_our_v2_manifest_list_and_manifest(tmp_path: Path) -> None:
    manifest_path = str(tmp_path / "c0ffee-m0.avro")
    entries = [
        ManifestEntry(ADDED, None, data_file("a", PARTITIONS[0], records=10)),
        ManifestEntry(ADDED, None, data_file("b", PARTITIONS[1], records=20)),
        ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, data_file("c", PARTITIONS[2], records=7), 2, 3),
        ManifestEntry(DELETED, SNAPSHOT_ID, data_file("d", PARTITIONS[0], records=5), 1, 1),
    ]
    data, manifest = write_manifest(
        manifest_path, entries, format_version=2, spec=SPEC, schema=SCHEMA, snapshot_id=SNAPSHOT_ID
    )
    Path(manifest_path).write_bytes(data)
    result = write_manifest_list(
        [manifest],
        format_version=2,
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=OLD_SNAPSHOT_ID,
        sequence_number=6,
    )
    list_path = tmp_path / f"snap-{SNAPSHOT_ID}-1-c0ffee.avro"
    list_path.write_bytes(result.data)

    fileio = PyArrowFileIO()
    (theirs,) = list(pyiceberg_read_manifest_list(fileio.new_input(str(list_path))))
    ours = result.manifests[0]
    assert theirs.manifest_path == ours.manifest_path == manifest_path
    assert theirs.manifest_length == len(data)
    assert theirs.partition_spec_id == 2
    assert int(theirs.content) == MANIFEST_DATA
    assert (theirs.sequence_number, theirs.min_sequence_number) == (6, 2)
    assert theirs.added_snapshot_id == SNAPSHOT_ID
    assert (theirs.added_files_count, theirs.existing_files_count, theirs.deleted_files_count) == (2, 1, 1)
    assert (theirs.added_rows_count, theirs.existing_rows_count, theirs.deleted_rows_count) == (30, 7, 5)
    assert theirs.partitions is not None
    assert [(p.contains_null, p.contains_nan, p.lower_bound, p.upper_bound) for p in theirs.partitions] == [
        (s.contains_null, s.contains_nan, s.lower_bound, s.upper_bound) for s in ours.partitions or ()
    ]

    their_entries = theirs.fetch_manifest_entry(fileio, discard_deleted=False)
    our_entries = read_manifest(data, ours, PTYPE)
    assert len(their_entries) == len(our_entries) == 4
    for t, o in zip(their_entries, our_entries, strict=True):
        assert int(t.status) == o.status
        assert t.snapshot_id == o.snapshot_id
        assert t.sequence_number == o.sequence_number
        assert t.file_sequence_number == o.file_sequence_number
        df = t.data_file
        assert df.file_path == o.data_file.file_path
        assert str(df.file_format.value).upper() == "PARQUET"
        assert int(df.content) == DATA
        assert df.record_count == o.data_file.record_count
        assert df.file_size_in_bytes == o.data_file.file_size_in_bytes
        assert tuple(df.partition[i] for i in range(3)) == o.data_file.partition
        assert df.column_sizes == o.data_file.column_sizes
        assert df.lower_bounds == o.data_file.lower_bounds
        assert df.upper_bounds == o.data_file.upper_bounds
        assert df.nan_value_counts == o.data_file.nan_value_counts
        assert list(df.split_offsets or ()) == list(o.data_file.split_offsets or ())
    assert [(e.sequence_number, e.file_sequence_number) for e in their_entries] == [
        (6, 6),
        (6, 6),
        (2, 3),
        (1, 1),
    ]
    assert [tuple(e.data_file.partition[i] for i in range(3)) for e in their_entries] == [
        PARTITIONS[0],
        PARTITIONS[1],
        PARTITIONS[2],
        PARTITIONS[0],
    ]
    assert their_entries[3].status == ManifestEntryStatus.DELETED
