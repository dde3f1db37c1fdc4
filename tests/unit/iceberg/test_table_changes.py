"""Metadata transitions as REST commits: the updates rebuild the new metadata's content in an
order a server can apply, and the requirements pin what each transition was computed from."""

from __future__ import annotations

import pytest

from tablekeeper.errors import CommitConflict, UnsupportedFeatureError
from tablekeeper.iceberg.metadata import (
    MAIN_BRANCH,
    PartitionStatisticsFile,
    Snapshot,
    SnapshotRef,
    StatisticsFile,
    with_changes,
)
from tablekeeper.iceberg.table_changes import table_change
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import (
    add_schema,
    add_snapshot,
    new_table_metadata,
    set_partition_statistics,
    set_properties,
    set_ref,
    set_statistics,
    upgrade_format_version,
)

SCHEMA = Schema(0, (NestedField(1, "id", LONG, True),))
T = 1_790_000_000_000


def _base(version: int = 2):  # type: ignore[no-untyped-def]
    return new_table_metadata(schema=SCHEMA, location="s3://b/t", timestamp_ms=T, format_version=version)


def _snap(sid: int, parent: int | None, seq: int) -> Snapshot:
    return Snapshot(
        sid, T + seq, f"s3://b/t/metadata/snap-{sid}.avro", seq, parent, {"operation": "append"}, 0
    )


def test_an_append_adds_the_snapshot_then_moves_main_guarded_by_its_old_value() -> None:
    base = _base()
    new = add_snapshot(base, _snap(1, None, 1), timestamp_ms=T + 1)
    change = table_change(base, new)
    assert [u.action for u in change.updates] == ["add-snapshot", "set-snapshot-ref"]
    assert change.updates[0].to_json()["snapshot"]["snapshot-id"] == 1
    assert change.updates[1].to_json() == {
        "action": "set-snapshot-ref",
        "ref-name": MAIN_BRANCH,
        "snapshot-id": 1,
        "type": "branch",
    }
    assert [r.to_json() for r in change.requirements] == [
        {"type": "assert-table-uuid", "uuid": base.table_uuid},
        {"type": "assert-ref-snapshot-id", "ref": MAIN_BRANCH, "snapshot-id": None},
    ]
    body = change.request(("db",), "t")
    assert body["identifier"] == {"namespace": ["db"], "name": "t"}


def test_expiring_snapshots_pins_every_ref() -> None:
    base = add_snapshot(_base(), _snap(1, None, 1), timestamp_ms=T + 1)
    base = add_snapshot(base, _snap(2, 1, 2), timestamp_ms=T + 2)
    base = set_ref(base, "audit", SnapshotRef(2, "tag"), timestamp_ms=T + 3)
    new = with_changes(base, snapshots=tuple(s for s in base.snapshots if s.snapshot_id != 1))
    change = table_change(base, new)
    assert [u.to_json() for u in change.updates] == [{"action": "remove-snapshots", "snapshot-ids": [1]}]
    pinned = {
        (r.body["ref"], r.body["snapshot-id"]) for r in change.requirements if r.type != "assert-table-uuid"
    }
    assert pinned == {(MAIN_BRANCH, 2), ("audit", 2)}


def test_upgrade_schema_and_properties_come_before_snapshots() -> None:
    base = _base()
    new = upgrade_format_version(base, 3, timestamp_ms=T + 1)
    wider = Schema(1, (*SCHEMA.fields, NestedField(2, "note", LONG)))
    new = add_schema(new, wider, timestamp_ms=T + 2)
    new = set_properties(new, {"gc.enabled": "true"}, timestamp_ms=T + 3)
    first = Snapshot(7, T + 4, "s3://b/t/metadata/snap-7.avro", 1, None, {"operation": "append"}, 1, 0, 10)
    new = add_snapshot(new, first, timestamp_ms=T + 4)
    assert table_change(base, new).updates[4].to_json()["snapshot"]["first-row-id"] == 0
    actions = [u.action for u in table_change(base, new).updates]
    assert actions == [
        "upgrade-format-version",
        "add-schema",
        "set-current-schema",
        "set-properties",
        "add-snapshot",
        "set-snapshot-ref",
    ]
    kinds = {r.type for r in table_change(base, new).requirements}
    assert {"assert-last-assigned-field-id", "assert-current-schema-id"} <= kinds
    # The schema just added is made current as "the last added": servers may renumber it.
    assert table_change(base, new).updates[2].to_json() == {"action": "set-current-schema", "schema-id": -1}


def test_removed_properties_and_refs() -> None:
    base = set_properties(_base(), {"a": "1", "b": "2"}, timestamp_ms=T)
    base = add_snapshot(base, _snap(1, None, 1), timestamp_ms=T + 1)
    base = set_ref(base, "old", SnapshotRef(1, "tag"), timestamp_ms=T + 2)
    new = set_properties(base, {}, ("a",), timestamp_ms=T + 3)
    new = with_changes(new, refs={k: v for k, v in new.refs.items() if k != "old"})
    updates = [u.to_json() for u in table_change(base, new).updates]
    assert updates == [
        {"action": "remove-properties", "removals": ["a"]},
        {"action": "remove-snapshot-ref", "ref-name": "old"},
    ]


def test_no_change_is_no_update_and_the_uuid_is_fixed() -> None:
    base = _base()
    assert table_change(base, base).updates == ()
    with pytest.raises(UnsupportedFeatureError, match="uuid"):
        table_change(base, with_changes(base, table_uuid="00000000-0000-0000-0000-000000000000"))
    with pytest.raises(UnsupportedFeatureError, match="never goes down"):
        v3 = _base(3)
        table_change(v3, with_changes(v3, format_version=2))


def test_a_creation_rebuilds_everything_from_nothing_in_id_order() -> None:
    """A create transaction: the server applies the updates to empty metadata, so they carry every
    schema, spec and order (ids in order, as a builder numbers them), every snapshot, the log
    through main, the refs and the statistics, guarded only by assert-create."""
    from tablekeeper.iceberg.table_changes import creation_change

    meta = add_snapshot(_base(), _snap(1, None, 1), timestamp_ms=T + 1)
    wider = Schema(1, (*SCHEMA.fields, NestedField(2, "v", LONG)))
    meta = add_schema(meta, wider, timestamp_ms=T + 2)
    meta = add_snapshot(meta, _snap(2, 1, 2), timestamp_ms=T + 3)
    meta = set_ref(meta, "audit", SnapshotRef(1, "tag"), timestamp_ms=T + 4)
    meta = set_properties(meta, {"gc.enabled": "false"}, timestamp_ms=T + 5)
    change = creation_change(meta)
    assert [r.to_json() for r in change.requirements] == [{"type": "assert-create"}]
    actions = [u.action for u in change.updates]
    assert actions[:2] == ["assign-uuid", "upgrade-format-version"]
    assert change.updates[0].to_json()["uuid"] == meta.table_uuid
    schemas = [u.to_json()["schema"]["schema-id"] for u in change.updates if u.action == "add-schema"]
    assert schemas == [0, 1]
    assert change.updates[actions.index("set-current-schema")].to_json()["schema-id"] == 1
    assert actions.index("set-location") < actions.index("add-snapshot")
    added = [u.to_json()["snapshot"]["snapshot-id"] for u in change.updates if u.action == "add-snapshot"]
    assert added == [1, 2]
    moves = [u.to_json() for u in change.updates if u.action == "set-snapshot-ref"]
    assert [(m["ref-name"], m["snapshot-id"]) for m in moves] == [
        ("main", 1),
        ("main", 2),
        ("main", 2),
        ("audit", 1),
    ]
    assert actions.index("add-snapshot") < actions.index("set-snapshot-ref")


def test_a_created_table_is_checked_for_what_a_server_may_change() -> None:
    from dataclasses import replace

    from tablekeeper.catalog.rest import _created_differently

    sent = add_snapshot(_base(), _snap(1, None, 1), timestamp_ms=T + 1)
    assert _created_differently(sent, sent) is None
    renumbered = replace(sent, schemas=(replace(SCHEMA, schema_id=7),), current_schema_id=7)
    assert _created_differently(sent, renumbered) == "schemas"
    assert _created_differently(sent, replace(sent, next_row_id=(sent.next_row_id or 0) + 5)) == "row ids"
    assert _created_differently(sent, replace(sent, refs={})) == "refs"


def test_set_statistics_carries_the_snapshot_id_servers_before_iceberg_1_8_require() -> None:
    """The REST spec deprecates the update's own snapshot-id; servers on Iceberg 1.7 or older
    answer 400 without it, and Iceberg Java 1.10's client still writes it."""
    base = add_snapshot(_base(), _snap(1, None, 1), timestamp_ms=T + 1)
    stats = StatisticsFile(1, "s3://b/t/metadata/1.stats", 100, 40)
    change = table_change(base, set_statistics(base, stats, timestamp_ms=T + 2))
    (update,) = [u.to_json() for u in change.updates if u.action == "set-statistics"]
    assert update["snapshot-id"] == 1 and update["statistics"]["snapshot-id"] == 1


def test_partition_statistics_are_set_in_place_and_go_with_their_snapshot() -> None:
    """Java's ``SetPartitionStatistics`` update: one entry per snapshot, replaced in place;
    ``set_partition_statistics`` refuses a snapshot expired meanwhile (a conflict: run again)."""
    base = add_snapshot(_base(), _snap(1, None, 1), timestamp_ms=T + 1)
    base = add_snapshot(base, _snap(2, 1, 2), timestamp_ms=T + 2)
    first = PartitionStatisticsFile(1, "s3://b/t/metadata/partition-stats-1-a.parquet", 10)
    one = set_partition_statistics(base, first, timestamp_ms=T + 3)
    assert one.last_updated_ms == T + 3
    (update,) = [u.to_json() for u in table_change(base, one).updates]
    assert update == {
        "action": "set-partition-statistics",
        "partition-statistics": {
            "snapshot-id": 1,
            "statistics-path": "s3://b/t/metadata/partition-stats-1-a.parquet",
            "file-size-in-bytes": 10,
        },
    }
    second = PartitionStatisticsFile(2, "s3://b/t/metadata/partition-stats-2-b.parquet", 20)
    again = PartitionStatisticsFile(1, "s3://b/t/metadata/partition-stats-1-c.parquet", 30)
    two = set_partition_statistics(
        set_partition_statistics(one, second, timestamp_ms=T + 4), again, timestamp_ms=T + 5
    )
    assert two.partition_statistics == (again, second)
    assert [
        u.to_json()["partition-statistics"]["statistics-path"] for u in table_change(one, two).updates
    ] == [
        again.statistics_path,
        second.statistics_path,
    ]
    gone = PartitionStatisticsFile(9, "s3://b/t/metadata/partition-stats-9-d.parquet", 1)
    with pytest.raises(CommitConflict, match="snapshot 9 is no longer in the table"):
        set_partition_statistics(base, gone, timestamp_ms=T + 6)
