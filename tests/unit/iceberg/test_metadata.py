"""Table metadata v1/v2/v3: round trips, Java's key order, draft row lineage, corrupt input."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from typing import Any

import pytest

from tablekeeper.errors import ConfigError, CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.metadata import (
    RESERVED_PROPERTIES,
    MetadataLogEntry,
    PartitionStatisticsFile,
    Snapshot,
    SnapshotRef,
    StatisticsFile,
    TableMetadata,
    parse_table_metadata,
    table_metadata_to_bytes,
    table_metadata_to_json,
    with_changes,
)
from tablekeeper.iceberg.metadata import BlobMetadata as Blob
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec, SortField, SortOrder
from tablekeeper.iceberg.types import LONG, STRING, TIMESTAMPTZ, NestedField, Schema
from tablekeeper.iceberg.updates import (
    add_snapshot,
    new_table_metadata,
    set_ref,
    upgrade_format_version,
    with_previous_metadata,
)

T0 = 1_700_000_000_000
TABLE_UUID = "9c12d441-03fe-4693-9a96-a0705ddf69c1"
LOCATION = "s3://bucket/warehouse/db/events"
SOURCE = "s3://bucket/warehouse/db/events/metadata/v7.metadata.json"

SCHEMA = Schema(
    schema_id=0,
    fields=(
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "category", STRING, doc="what happened"),
        NestedField(3, "ts", TIMESTAMPTZ),
    ),
    identifier_field_ids=(1,),
)
SPEC = PartitionSpec(
    0,
    (
        PartitionField(2, 1000, "category", "identity"),
        PartitionField(3, 1001, "ts_day", "day"),
    ),
)
SORT = SortOrder(1, (SortField(1, "identity", "asc", "nulls-first"),))

COMMON_ORDER_HEAD = ["format-version", "table-uuid", "location"]
COMMON_ORDER_TAIL = [
    "refs",
    "snapshots",
    "statistics",
    "partition-statistics",
    "snapshot-log",
    "metadata-log",
]
JAVA_KEY_ORDER: dict[int, list[str]] = {
    1: [
        *COMMON_ORDER_HEAD,
        "last-updated-ms",
        "last-column-id",
        "schema",
        "current-schema-id",
        "schemas",
        "partition-spec",
        "default-spec-id",
        "partition-specs",
        "last-partition-id",
        "default-sort-order-id",
        "sort-orders",
        "properties",
        "current-snapshot-id",
        *COMMON_ORDER_TAIL,
    ],
    2: [
        *COMMON_ORDER_HEAD,
        "last-sequence-number",
        "last-updated-ms",
        "last-column-id",
        "current-schema-id",
        "schemas",
        "default-spec-id",
        "partition-specs",
        "last-partition-id",
        "default-sort-order-id",
        "sort-orders",
        "properties",
        "current-snapshot-id",
        *COMMON_ORDER_TAIL,
    ],
    3: [
        *COMMON_ORDER_HEAD,
        "last-sequence-number",
        "last-updated-ms",
        "last-column-id",
        "current-schema-id",
        "schemas",
        "default-spec-id",
        "partition-specs",
        "last-partition-id",
        "default-sort-order-id",
        "sort-orders",
        "properties",
        "current-snapshot-id",
        "next-row-id",
        *COMMON_ORDER_TAIL,
    ],
}


def empty_table(version: int, **kwargs: Any) -> TableMetadata:
    return new_table_metadata(
        schema=SCHEMA,
        location=LOCATION,
        timestamp_ms=T0,
        spec=SPEC,
        sort_order=SORT,
        properties={"owner": "data-eng"},
        format_version=version,
        table_uuid=TABLE_UUID,
        **kwargs,
    )


def snapshot(version: int, snapshot_id: int, n: int, parent: int | None, first_row_id: int) -> Snapshot:
    return Snapshot(
        snapshot_id=snapshot_id,
        timestamp_ms=T0 + n * 1000,
        manifest_list=f"{LOCATION}/metadata/snap-{snapshot_id}-1-4b1c.avro",
        sequence_number=n if version > 1 else 0,
        parent_snapshot_id=parent,
        # "operation" deliberately not first: the writer must put it first.
        summary={"added-data-files": "1", "operation": "append", "added-records": "10"},
        schema_id=0,
        first_row_id=first_row_id if version >= 3 else None,
        added_rows=10 if version >= 3 else None,
    )


def table_with_history(version: int) -> TableMetadata:
    meta = empty_table(version)
    meta = add_snapshot(meta, snapshot(version, 101, 1, None, 0), timestamp_ms=T0 + 1000)
    meta = add_snapshot(meta, snapshot(version, 202, 2, 101, 10), timestamp_ms=T0 + 2000)
    meta = set_ref(meta, "v1.0", SnapshotRef(101, "tag", max_ref_age_ms=86_400_000), timestamp_ms=T0 + 3000)
    meta = set_ref(
        meta,
        "audit",
        SnapshotRef(101, "branch", min_snapshots_to_keep=3, max_snapshot_age_ms=3_600_000),
        timestamp_ms=T0 + 3000,
    )
    return with_changes(
        meta,
        metadata_log=(
            MetadataLogEntry(T0 + 1000, f"{LOCATION}/metadata/v1.metadata.json"),
            MetadataLogEntry(T0 + 2000, f"{LOCATION}/metadata/v2.metadata.json"),
        ),
        statistics=(
            StatisticsFile(
                snapshot_id=202,
                statistics_path=f"{LOCATION}/metadata/202.stats",
                file_size_in_bytes=1234,
                file_footer_size_in_bytes=120,
                blob_metadata=(
                    Blob("apache-datasketches-theta-v1", 202, 2, (1,), {"ndv": "10"}),
                    Blob("apache-datasketches-theta-v1", 202, 2, (2, 3)),
                ),
            ),
        ),
        partition_statistics=(PartitionStatisticsFile(202, f"{LOCATION}/metadata/p-202.parquet", 99),),
    )


def write_obj(meta: TableMetadata) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(table_metadata_to_json(meta))
    return obj


def expect_corrupt(obj: Any, message: str) -> None:
    text = obj if isinstance(obj, str) else json.dumps(obj)
    with pytest.raises(CorruptMetadataError) as info:
        parse_table_metadata(text, source=SOURCE)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_round_trip_with_history(version: int) -> None:
    meta = table_with_history(version)
    text = table_metadata_to_json(meta)
    parsed = parse_table_metadata(text)
    assert parsed == meta
    assert table_metadata_to_json(parsed) == text


@pytest.mark.parametrize("version", [1, 2, 3])
def test_round_trip_empty_table(version: int) -> None:
    meta = empty_table(version)
    assert parse_table_metadata(table_metadata_to_json(meta)) == meta


@pytest.mark.parametrize("version", [1, 2, 3])
def test_parsed_history_is_usable(version: int) -> None:
    parsed = parse_table_metadata(table_metadata_to_json(table_with_history(version)))
    assert parsed.current_snapshot_id == 202
    current = parsed.current_snapshot()
    assert current is not None
    assert current.parent_snapshot_id == 101
    assert [s.snapshot_id for s in parsed.ancestors(202)] == [202, 101]
    assert parsed.refs["main"] == SnapshotRef(202, "branch")
    assert parsed.refs["v1.0"] == SnapshotRef(101, "tag", max_ref_age_ms=86_400_000)
    assert parsed.refs["audit"].min_snapshots_to_keep == 3
    assert parsed.last_sequence_number == (2 if version > 1 else 0)
    assert parsed.next_row_id == (20 if version >= 3 else None)
    assert parsed.spec().fields == SPEC.fields
    assert parsed.sort_order().fields == SORT.fields
    assert parsed.schema().identifier_field_ids == (1,)
    assert [e.snapshot_id for e in parsed.snapshot_log] == [101, 202]


# -- Java's key order -------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_table_key_order_matches_java(version: int) -> None:
    text = table_metadata_to_json(table_with_history(version))
    assert list(json.loads(text).keys()) == JAVA_KEY_ORDER[version]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_empty_table_writes_every_collection(version: int) -> None:
    obj = write_obj(empty_table(version))
    assert list(obj.keys()) == JAVA_KEY_ORDER[version]
    for key in ("snapshots", "statistics", "partition-statistics", "snapshot-log", "metadata-log"):
        assert obj[key] == []
    assert obj["refs"] == {}


def test_encryption_keys_follow_next_row_id() -> None:
    key = {"key-id": "k1", "encrypted-key-metadata": "AAEC", "encrypted-by-id": "kms"}
    meta = with_changes(empty_table(3), encryption_keys=(key,))
    obj = write_obj(meta)
    order = list(obj.keys())
    assert order[order.index("next-row-id") + 1] == "encryption-keys"
    assert order[order.index("encryption-keys") + 1] == "refs"
    assert obj["encryption-keys"] == [key]
    assert parse_table_metadata(json.dumps(obj)).encryption_keys == (key,)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (1, ["snapshot-id", "timestamp-ms", "summary", "manifest-list", "schema-id"]),
        (2, ["sequence-number", "snapshot-id", "timestamp-ms", "summary", "manifest-list", "schema-id"]),
        (
            3,
            [
                "sequence-number",
                "snapshot-id",
                "timestamp-ms",
                "summary",
                "manifest-list",
                "schema-id",
                "first-row-id",
                "added-rows",
            ],
        ),
    ],
)
def test_snapshot_key_order_matches_java(version: int, expected: list[str]) -> None:
    obj = write_obj(table_with_history(version))
    first, second = obj["snapshots"]
    assert list(first.keys()) == expected
    with_parent = [*expected[: expected.index("snapshot-id") + 1], "parent-snapshot-id"]
    with_parent += expected[expected.index("snapshot-id") + 1 :]
    assert list(second.keys()) == with_parent
    assert second["parent-snapshot-id"] == 101
    assert next(iter(first["summary"].keys())) == "operation"
    assert first["summary"] == {"operation": "append", "added-data-files": "1", "added-records": "10"}


def test_snapshot_and_ref_values() -> None:
    obj = write_obj(table_with_history(3))
    assert obj["snapshots"][1]["first-row-id"] == 10
    assert obj["snapshots"][1]["added-rows"] == 10
    assert obj["snapshots"][1]["sequence-number"] == 2
    assert obj["next-row-id"] == 20
    assert obj["last-sequence-number"] == 2
    assert obj["current-snapshot-id"] == 202
    assert obj["refs"] == {
        "main": {"snapshot-id": 202, "type": "branch"},
        "v1.0": {"snapshot-id": 101, "type": "tag", "max-ref-age-ms": 86_400_000},
        "audit": {
            "snapshot-id": 101,
            "type": "branch",
            "min-snapshots-to-keep": 3,
            "max-snapshot-age-ms": 3_600_000,
        },
    }
    assert obj["statistics"][0]["blob-metadata"][0] == {
        "type": "apache-datasketches-theta-v1",
        "snapshot-id": 202,
        "sequence-number": 2,
        "fields": [1],
        "properties": {"ndv": "10"},
    }


# -- version-specific values ------------------------------------------------------------------


@pytest.mark.parametrize(("version", "expected"), [(1, -1), (2, -1), (3, None)])
def test_current_snapshot_id_without_snapshot(version: int, expected: int | None) -> None:
    obj = write_obj(empty_table(version))
    assert "current-snapshot-id" in obj
    assert obj["current-snapshot-id"] == expected
    assert parse_table_metadata(json.dumps(obj)).current_snapshot_id is None


def test_v1_writes_schema_and_partition_spec() -> None:
    obj = write_obj(table_with_history(1))
    assert obj["schema"] == obj["schemas"][0]
    assert obj["schema"]["schema-id"] == 0
    assert obj["partition-spec"] == [
        {"name": "category", "transform": "identity", "source-id": 2, "field-id": 1000},
        {"name": "ts_day", "transform": "day", "source-id": 3, "field-id": 1001},
    ]
    assert obj["partition-spec"] == obj["partition-specs"][0]["fields"]
    assert "last-sequence-number" not in obj
    assert "next-row-id" not in obj
    assert all("sequence-number" not in s for s in obj["snapshots"])


@pytest.mark.parametrize("version", [2, 3])
def test_v2_and_v3_do_not_write_v1_keys(version: int) -> None:
    obj = write_obj(table_with_history(version))
    assert "schema" not in obj
    assert "partition-spec" not in obj


def test_v1_metadata_with_only_schema_and_partition_spec_parses() -> None:
    obj = write_obj(table_with_history(1))
    for key in ("schemas", "current-schema-id", "partition-specs", "default-spec-id", "last-partition-id"):
        del obj[key]
    parsed = parse_table_metadata(json.dumps(obj))
    assert parsed.schema().fields == SCHEMA.fields
    assert parsed.spec().fields == SPEC.fields
    assert parsed.last_partition_id == 1001


def test_reserved_properties_are_never_written() -> None:
    reserved = dict.fromkeys(RESERVED_PROPERTIES, "x")
    meta = new_table_metadata(
        schema=SCHEMA,
        location=LOCATION,
        timestamp_ms=T0,
        properties={**reserved, "owner": "me"},
        table_uuid=TABLE_UUID,
    )
    obj = write_obj(meta)
    assert obj["properties"] == {"write.parquet.compression-codec": "zstd", "owner": "me"}
    assert set(RESERVED_PROPERTIES) == {
        "format-version",
        "uuid",
        "snapshot-count",
        "current-snapshot-id",
        "current-snapshot-summary",
        "current-snapshot-timestamp-ms",
        "current-schema",
        "default-partition-spec",
        "default-sort-order",
    }


def test_new_table_adds_java_default_codec_property() -> None:
    assert empty_table(2).properties["write.parquet.compression-codec"] == "zstd"


# -- gzip -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_gzip_metadata_parses(version: int) -> None:
    meta = table_with_history(version)
    data = table_metadata_to_bytes(meta, gzip_codec=True)
    assert data[:2] == b"\x1f\x8b"
    assert parse_table_metadata(data) == meta
    assert gzip.decompress(data) == table_metadata_to_bytes(meta)


def test_gzip_decided_by_content_not_name() -> None:
    meta = table_with_history(2)
    plain = table_metadata_to_bytes(meta)
    zipped = gzip.compress(plain, mtime=0)
    assert parse_table_metadata(zipped, source=f"{LOCATION}/metadata/v3.metadata.json") == meta
    assert parse_table_metadata(plain, source=f"{LOCATION}/metadata/v3.gz.metadata.json") == meta


def test_truncated_gzip_is_corrupt() -> None:
    data = table_metadata_to_bytes(table_with_history(2), gzip_codec=True)
    with pytest.raises(CorruptMetadataError) as info:
        parse_table_metadata(data[: len(data) // 2], source=SOURCE)
    assert "is gzip that is truncated or corrupt" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xffnot deflate data",  # zlib: invalid block type
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff",  # header only
        b"\x1f\x8b\x09garbage header",  # bad gzip header
    ],
    ids=["bad-deflate", "header-only", "bad-header"],
)
def test_corrupt_gzip_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptMetadataError) as info:
        parse_table_metadata(data, source=SOURCE)
    assert "is gzip that is truncated or corrupt" in str(info.value)
    assert "\n" not in str(info.value)


# -- the October 2024 row-lineage draft -------------------------------------------------------


def test_draft_row_lineage_enabled_parses_and_is_written_in_final_form() -> None:
    obj = write_obj(table_with_history(3))
    obj["row-lineage"] = True
    obj["next-row-id"] = 20
    parsed = parse_table_metadata(json.dumps(obj))
    assert parsed.next_row_id == 20
    assert parsed.row_lineage
    written = write_obj(parsed)
    assert "row-lineage" not in written
    assert written["next-row-id"] == 20
    assert list(written.keys()) == JAVA_KEY_ORDER[3]


def test_draft_row_lineage_disabled_normalises_next_row_id_to_zero() -> None:
    obj = write_obj(empty_table(3))
    obj["row-lineage"] = False
    del obj["next-row-id"]
    parsed = parse_table_metadata(json.dumps(obj))
    assert parsed.next_row_id == 0
    written = write_obj(parsed)
    assert "row-lineage" not in written
    assert written["next-row-id"] == 0


def test_draft_snapshots_without_first_row_id_parse() -> None:
    obj = write_obj(table_with_history(3))
    obj["row-lineage"] = False
    del obj["next-row-id"]
    for snap in obj["snapshots"]:
        del snap["first-row-id"]
        del snap["added-rows"]
    parsed = parse_table_metadata(json.dumps(obj))
    assert parsed.next_row_id == 0
    assert all(s.first_row_id is None and s.added_rows is None for s in parsed.snapshots)


def test_next_row_id_in_v2_metadata_is_ignored() -> None:
    obj = write_obj(empty_table(2))
    obj["next-row-id"] = 55
    parsed = parse_table_metadata(json.dumps(obj))
    assert parsed.next_row_id is None
    assert "next-row-id" not in write_obj(parsed)


# -- unsupported and corrupt input ------------------------------------------------------------


def test_format_version_4_is_unsupported() -> None:
    obj = write_obj(empty_table(3))
    obj["format-version"] = 4
    with pytest.raises(UnsupportedFeatureError) as info:
        parse_table_metadata(json.dumps(obj), source=SOURCE)
    assert "format version 4" in str(info.value)
    assert "\n" not in str(info.value)
    assert not isinstance(info.value, CorruptMetadataError)


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize(
    "key",
    [
        "format-version",
        "location",
        "last-updated-ms",
        "last-column-id",
        "current-schema-id",
        "default-spec-id",
        # Required from v2 on (spec; Java's TableMetadataParser refuses metadata without them).
        "last-sequence-number",
        "partition-specs",
        "last-partition-id",
        "sort-orders",
    ],
)
def test_missing_required_key_is_corrupt(version: int, key: str) -> None:
    obj = write_obj(table_with_history(version))
    # Unsorted, so a missing sort-orders list cannot be caught by the default order's id instead.
    obj["default-sort-order-id"] = 0
    obj["sort-orders"] = [{"order-id": 0, "fields": []}]
    del obj[key]
    with pytest.raises(CorruptMetadataError) as info:
        parse_table_metadata(json.dumps(obj), source=SOURCE)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: ")
    assert key in message
    assert "\n" not in message


def test_missing_location_message() -> None:
    obj = write_obj(empty_table(2))
    del obj["location"]
    expect_corrupt(obj, f"{SOURCE}: table metadata is missing required key 'location'")


def test_missing_snapshot_id_in_snapshot_message() -> None:
    obj = write_obj(table_with_history(2))
    del obj["snapshots"][0]["snapshot-id"]
    expect_corrupt(obj, f"{SOURCE}: table metadata is missing required key 'snapshot-id'")


def test_missing_table_uuid_in_v2_message() -> None:
    obj = write_obj(empty_table(2))
    del obj["table-uuid"]
    expect_corrupt(obj, f"{SOURCE}: format version 2 metadata has no table-uuid")


def test_v1_without_table_uuid_parses() -> None:
    obj = write_obj(empty_table(1))
    del obj["table-uuid"]
    assert parse_table_metadata(json.dumps(obj)).table_uuid == ""


def test_ref_to_missing_snapshot_is_corrupt() -> None:
    obj = write_obj(table_with_history(2))
    obj["refs"]["v1.0"]["snapshot-id"] = 999
    expect_corrupt(obj, f"{SOURCE}: ref 'v1.0' points at missing snapshot 999")


def test_current_snapshot_missing_is_corrupt() -> None:
    obj = write_obj(table_with_history(2))
    obj["snapshots"] = obj["snapshots"][:1]
    obj["refs"] = {}
    expect_corrupt(obj, f"{SOURCE}: current snapshot 202 is not in snapshots")


def test_main_ref_disagreeing_with_current_snapshot_is_corrupt() -> None:
    obj = write_obj(table_with_history(2))
    obj["refs"]["main"]["snapshot-id"] = 101
    expect_corrupt(obj, f"{SOURCE}: refs.main and current-snapshot-id disagree")


def test_main_ref_without_current_snapshot_is_corrupt() -> None:
    obj = write_obj(table_with_history(3))
    obj["current-snapshot-id"] = None
    expect_corrupt(obj, f"{SOURCE}: refs.main and current-snapshot-id disagree")


def test_bad_ref_type_is_corrupt() -> None:
    obj = write_obj(table_with_history(2))
    obj["refs"]["v1.0"]["type"] = "label"
    expect_corrupt(obj, f"{SOURCE}: ref type 'label' is neither branch nor tag")


def test_unknown_current_schema_is_corrupt() -> None:
    obj = write_obj(empty_table(2))
    obj["current-schema-id"] = 7
    expect_corrupt(obj, f"{SOURCE}: table metadata has no schema with id 7")


def test_truncated_json_is_corrupt() -> None:
    text = table_metadata_to_json(table_with_history(2))
    with pytest.raises(CorruptMetadataError) as info:
        parse_table_metadata(text[: len(text) // 2], source=SOURCE)
    message = str(info.value)
    assert message.startswith(f"{SOURCE} is not valid JSON (line 1 col ")
    assert message.endswith("the file is truncated or corrupt")
    assert "\n" not in message


def test_truncated_json_bytes_is_corrupt() -> None:
    data = table_metadata_to_bytes(table_with_history(3))
    with pytest.raises(CorruptMetadataError, match="is not valid JSON"):
        parse_table_metadata(data[:100], source=SOURCE)


def test_multi_line_json_error_message_stays_on_one_line() -> None:
    text = json.dumps(write_obj(empty_table(2)), indent=2)
    with pytest.raises(CorruptMetadataError) as info:
        parse_table_metadata(text[:-40], source=SOURCE)
    assert "not valid JSON" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", f"{SOURCE} is not a JSON object"),
        ('"v2"', f"{SOURCE} is not a JSON object"),
    ],
)
def test_non_object_json_is_corrupt(text: str, message: str) -> None:
    expect_corrupt(text, message)


def test_non_utf8_bytes_are_corrupt() -> None:
    with pytest.raises(CorruptMetadataError, match="not UTF-8"):
        parse_table_metadata(b"\xff\xfe\x00garbage", source=SOURCE)


def test_wrongly_typed_value_is_corrupt() -> None:
    obj = write_obj(empty_table(2))
    obj["last-column-id"] = "three"
    with pytest.raises(CorruptMetadataError) as info:
        parse_table_metadata(json.dumps(obj), source=SOURCE)
    assert str(info.value).startswith(f"{SOURCE}: malformed value")


# -- metadata log, upgrades -------------------------------------------------------------------


def test_with_previous_metadata_appends_the_replaced_file() -> None:
    base = table_with_history(2)
    new = with_changes(base, last_updated_ms=T0 + 9000)
    updated = with_previous_metadata(new, base, f"{LOCATION}/metadata/v3.metadata.json")
    assert updated.metadata_log == (
        *base.metadata_log,
        MetadataLogEntry(base.last_updated_ms, f"{LOCATION}/metadata/v3.metadata.json"),
    )


@pytest.mark.parametrize(("limit", "kept"), [("2", 2), ("1", 1), ("0", 1), ("10", 4)])
def test_with_previous_metadata_trims_to_previous_versions_max(limit: str, kept: int) -> None:
    props = {"write.metadata.previous-versions-max": limit}
    base = replace(
        table_with_history(2),
        properties=props,
        metadata_log=tuple(
            MetadataLogEntry(T0 + i, f"{LOCATION}/metadata/v{i}.metadata.json") for i in range(1, 4)
        ),
    )
    updated = with_previous_metadata(base, base, f"{LOCATION}/metadata/v4.metadata.json")
    assert len(updated.metadata_log) == kept
    assert updated.metadata_log[-1].metadata_file == f"{LOCATION}/metadata/v4.metadata.json"
    files = [e.metadata_file for e in updated.metadata_log]
    assert files == [f"{LOCATION}/metadata/v{i}.metadata.json" for i in range(5 - kept, 5)]


def test_previous_versions_max_set_by_this_commit_applies_at_once() -> None:
    # Java's TableMetadata.Builder.addPreviousFile reads the limit from the *new* properties.
    base = replace(
        table_with_history(2),
        metadata_log=tuple(
            MetadataLogEntry(T0 + i, f"{LOCATION}/metadata/v{i}.metadata.json") for i in range(1, 4)
        ),
    )
    new = replace(base, properties={**base.properties, "write.metadata.previous-versions-max": "1"})
    updated = with_previous_metadata(new, base, f"{LOCATION}/metadata/v4.metadata.json")
    assert [e.metadata_file for e in updated.metadata_log] == [f"{LOCATION}/metadata/v4.metadata.json"]


def test_default_previous_versions_max_is_100() -> None:
    base = replace(
        table_with_history(2),
        metadata_log=tuple(
            MetadataLogEntry(T0 + i, f"{LOCATION}/metadata/v{i}.metadata.json") for i in range(150)
        ),
    )
    updated = with_previous_metadata(base, base, f"{LOCATION}/metadata/v150.metadata.json")
    assert len(updated.metadata_log) == 100
    assert updated.metadata_log[0].metadata_file == f"{LOCATION}/metadata/v51.metadata.json"


def test_upgrade_v2_to_v3_starts_row_ids_at_zero() -> None:
    base = table_with_history(2)
    upgraded = upgrade_format_version(base, 3, timestamp_ms=T0 + 10_000)
    assert upgraded.format_version == 3
    assert upgraded.next_row_id == 0
    assert upgraded.last_updated_ms == T0 + 10_000
    assert all(s.first_row_id is None for s in upgraded.snapshots)
    obj = write_obj(upgraded)
    assert obj["next-row-id"] == 0
    assert all("first-row-id" not in s for s in obj["snapshots"])
    assert parse_table_metadata(json.dumps(obj)) == upgraded


def test_upgrade_v1_to_v2_keeps_history() -> None:
    upgraded = upgrade_format_version(table_with_history(1), 2, timestamp_ms=T0 + 10_000)
    assert upgraded.format_version == 2
    assert upgraded.next_row_id is None
    assert parse_table_metadata(table_metadata_to_json(upgraded)) == upgraded


def test_upgrade_to_same_version_is_a_no_op() -> None:
    base = table_with_history(2)
    assert upgrade_format_version(base, 2, timestamp_ms=T0 + 10_000) is base


def test_downgrade_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        upgrade_format_version(table_with_history(3), 2, timestamp_ms=T0 + 10_000)
    assert str(info.value) == "cannot downgrade format version 3 to 2"


def test_upgrade_to_v4_is_unsupported() -> None:
    with pytest.raises(UnsupportedFeatureError, match="format version 4"):
        upgrade_format_version(table_with_history(3), 4, timestamp_ms=T0 + 10_000)


def test_new_table_refuses_format_version_4() -> None:
    with pytest.raises(UnsupportedFeatureError, match="format version 4"):
        empty_table(4)


# -- model invariants the writer relies on ----------------------------------------------------


def test_v3_snapshot_without_row_ids_is_refused() -> None:
    bad = replace(snapshot(3, 101, 1, None, 0), first_row_id=None)
    with pytest.raises(ValueError, match="first-row-id and added-rows"):
        add_snapshot(empty_table(3), bad, timestamp_ms=T0 + 1000)


def test_v3_snapshot_below_next_row_id_is_refused() -> None:
    meta = add_snapshot(empty_table(3), snapshot(3, 101, 1, None, 0), timestamp_ms=T0 + 1000)
    with pytest.raises(ValueError, match="below the table's next-row-id"):
        add_snapshot(meta, snapshot(3, 202, 2, 101, 5), timestamp_ms=T0 + 2000)


def test_writer_refuses_inconsistent_metadata() -> None:
    meta = replace(table_with_history(2), current_snapshot_id=999)
    with pytest.raises(CorruptMetadataError, match="current snapshot 999 is not in snapshots"):
        table_metadata_to_json(meta)
