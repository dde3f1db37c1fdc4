"""Snapshot expiry (Iceberg's RemoveSnapshots rules), ``--older-than`` parsing, live files of a manifest."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest

from tablekeeper.errors import ConfigError, CorruptMetadataError, SafetyRefusal
from tablekeeper.iceberg import content as model
from tablekeeper.iceberg import manifest as mf
from tablekeeper.iceberg import reachable as rc
from tablekeeper.iceberg.expire import ExpirePlan, ExpirePolicy, apply_expiry, plan_expiry
from tablekeeper.iceberg.metadata import (
    PartitionStatisticsFile,
    Snapshot,
    SnapshotLogEntry,
    SnapshotRef,
    StatisticsFile,
    TableMetadata,
)
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import LONG, STRING, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.jobs.common.options import parse_older_than

NOW = 1_800_000_000_000
DAY = 86_400_000
LOCATION = "s3://bucket/warehouse/db/events"
SCHEMA = Schema(0, (NestedField(1, "id", LONG, required=True), NestedField(2, "cat", STRING)))


def snap(sid: int, age_days: float, parent: int | None = None, schema_id: int | None = 0) -> Snapshot:
    ts, manifest_list = NOW - int(age_days * DAY), f"{LOCATION}/metadata/snap-{sid}.avro"
    return Snapshot(sid, ts, manifest_list, sid, parent, {"operation": "append"}, schema_id)


def chain(*ages: float) -> list[Snapshot]:
    """A linear history with ids 1, 2, ... (oldest first) and the given ages in days."""
    return [snap(i, age, i - 1 if i > 1 else None) for i, age in enumerate(ages, start=1)]


def table(
    snapshots: Iterable[Snapshot],
    current: int | None,
    refs: Mapping[str, SnapshotRef] | None = None,
    format_version: int = 2,
    **changes: Any,
) -> TableMetadata:
    """Valid metadata holding ``snapshots``; ``changes`` replace any other field (properties, log...)."""
    base = new_table_metadata(schema=SCHEMA, location=LOCATION, timestamp_ms=0, format_version=format_version)
    snaps = tuple(snapshots)
    if refs is None:
        refs = {} if current is None or format_version == 1 else {"main": SnapshotRef(current, "branch")}
    seq = max((s.sequence_number for s in snaps), default=0)
    changes = {"last_sequence_number": seq, "last_updated_ms": NOW - DAY // 2, **changes}
    return replace(base, snapshots=snaps, current_snapshot_id=current, refs=dict(refs), **changes)


def plan(meta: TableMetadata, **policy: Any) -> ExpirePlan:
    return plan_expiry(meta, ExpirePolicy(now_ms=NOW, **policy))


def ids(meta: TableMetadata) -> set[int]:
    return {s.snapshot_id for s in meta.snapshots}


# -- plan_expiry ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expired"),
    [
        ({}, (1, 2, 3)),  # defaults: 5 days, keep 1
        ({"retain_last": 4}, (1,)),
        ({"older_than_ms": NOW - 9 * DAY}, (1,)),
        ({"older_than_ms": NOW - 4 * DAY}, (1, 2, 3)),  # exactly at the cut-off is kept
        ({"older_than_ms": NOW, "retain_last": 2}, (1, 2, 3)),
        ({"older_than_ms": NOW - 100 * DAY, "retain_last": 1}, ()),
    ],
)
def test_linear_history(policy: dict[str, int], expired: tuple[int, ...]) -> None:
    meta = table(chain(10, 8, 6, 4, 2), current=5)
    result = plan(meta, **policy)
    assert result.expired_snapshot_ids == expired
    assert result.retained_snapshot_ids == tuple(i for i in range(1, 6) if i not in expired)
    assert result.removed_refs == ()
    assert result.changes_anything == bool(expired)
    assert apply_expiry(meta, result, timestamp_ms=NOW).current_snapshot_id == 5


def test_branch_walk_stops_at_first_ancestor_failing_both_rules() -> None:
    # 2 is newer than the cut-off but sits behind 3, which is old: Java stops at 3.
    snaps = [snap(1, 1, None), snap(2, 1, 1), snap(3, 9, 2), snap(4, 1, 3)]
    result = plan(table(snaps, current=4))
    assert result.expired_snapshot_ids == (1, 2, 3)


@pytest.mark.parametrize(
    ("branch", "expired"),
    [
        (SnapshotRef(12, "branch"), (1, 2, 11)),  # the job's settings apply to the branch too
        (SnapshotRef(12, "branch", min_snapshots_to_keep=2), (1, 2)),
        (SnapshotRef(12, "branch", min_snapshots_to_keep=3), (1,)),
        (SnapshotRef(12, "branch", max_snapshot_age_ms=11 * DAY + 1), (1, 2)),
        (SnapshotRef(12, "branch", max_snapshot_age_ms=30 * DAY), ()),
    ],
)
def test_branch_settings_win_over_the_job(branch: SnapshotRef, expired: tuple[int, ...]) -> None:
    # main: 1 -> 2 -> 3; branch "audit": 2 -> 11 -> 12.
    snaps = [snap(1, 20), snap(2, 12, 1), snap(3, 1, 2), snap(11, 11, 2), snap(12, 10, 11)]
    meta = table(snaps, current=3, refs={"main": SnapshotRef(3, "branch"), "audit": branch})
    result = plan(meta, retain_last=1, older_than_ms=NOW - 3 * DAY)
    assert result.expired_snapshot_ids == expired
    assert result.removed_refs == ()
    assert set(apply_expiry(meta, result, timestamp_ms=NOW).refs) == {"main", "audit"}


def test_tag_keeps_its_old_snapshot_but_not_its_ancestors() -> None:
    refs = {"main": SnapshotRef(3, "branch"), "v1": SnapshotRef(1, "tag")}
    meta = table(chain(30, 20, 1), current=3, refs=refs)
    result = plan(meta)
    assert result.expired_snapshot_ids == (2,)
    after = apply_expiry(meta, result, timestamp_ms=NOW)
    assert ids(after) == {1, 3}
    assert after.refs["v1"] == SnapshotRef(1, "tag")


@pytest.mark.parametrize(
    ("tag", "properties", "removed"),
    [
        (SnapshotRef(1, "tag", max_ref_age_ms=10 * DAY), {}, True),
        (SnapshotRef(1, "tag", max_ref_age_ms=40 * DAY), {}, False),
        (SnapshotRef(1, "tag"), {"history.expire.max-ref-age-ms": str(10 * DAY)}, True),
        # The ref's own age wins; main (1 day old) survives a 1 ms table max-ref-age.
        (SnapshotRef(1, "tag", max_ref_age_ms=40 * DAY), {"history.expire.max-ref-age-ms": "1"}, False),
        (SnapshotRef(1, "branch", max_ref_age_ms=10 * DAY), {}, True),
    ],
)
def test_ref_older_than_max_ref_age_is_removed(
    tag: SnapshotRef, properties: dict[str, str], removed: bool
) -> None:
    refs = {"main": SnapshotRef(3, "branch"), "old": tag}
    meta = table(chain(30, 20, 1), current=3, refs=refs, properties=properties)
    result = plan(meta)
    assert result.removed_refs == (("old",) if removed else ())
    assert result.expired_snapshot_ids == ((1, 2) if removed else (2,))
    kept = {"main"} if removed else {"main", "old"}
    assert set(apply_expiry(meta, result, timestamp_ms=NOW).refs) == kept


def test_ref_to_missing_snapshot_is_removed() -> None:
    refs = {"main": SnapshotRef(2, "branch"), "ghost": SnapshotRef(999, "branch")}
    meta = table(chain(2, 1), current=2, refs=refs)
    result = plan(meta)
    assert result.removed_refs == ("ghost",)
    assert result.expired_snapshot_ids == ()
    assert result.changes_anything
    assert set(apply_expiry(meta, result, timestamp_ms=NOW).refs) == {"main"}


@pytest.mark.parametrize(("age", "expired"), [(1, False), (5, False), (5.001, True)])  # 5 days: the cut-off
def test_staged_snapshot_kept_while_newer_than_cut_off(age: float, expired: bool) -> None:
    snaps = [*chain(2, 1), snap(50, age, parent=1)]  # a WAP snapshot no ref reaches
    result = plan(table(snaps, current=2))
    assert (50 in result.expired_snapshot_ids) is expired
    assert result.expired_snapshot_ids == ((50,) if expired else ())


def test_table_properties_are_the_defaults() -> None:
    defaults = plan(table(chain(1), current=1))
    assert (defaults.expire_older_than_ms, defaults.min_snapshots_to_keep) == (NOW - 5 * DAY, 1)
    props = {"history.expire.min-snapshots-to-keep": "3", "history.expire.max-snapshot-age-ms": str(DAY)}
    snaps = [*chain(10, 8, 6, 4, 2), snap(50, 2, parent=5)]
    meta = table(snaps, current=5, properties=props)
    result = plan(meta)
    assert result.min_snapshots_to_keep == 3
    assert result.expire_older_than_ms == NOW - DAY
    assert result.expired_snapshot_ids == (1, 2, 50)
    # The job's options win over the table's.
    overridden = plan(meta, retain_last=1, older_than_ms=NOW - 5 * DAY)
    assert overridden.expired_snapshot_ids == (1, 2, 3)


def test_retain_last_below_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        ExpirePolicy(now_ms=NOW, retain_last=0)


def test_explicit_snapshot_ids_expire_even_when_recent() -> None:
    meta = table(chain(3, 2, 1), current=3)
    result = plan(meta, snapshot_ids=(2,), retain_last=3)
    assert result.expired_snapshot_ids == (2,)
    assert result.retained_snapshot_ids == (1, 3)
    after = apply_expiry(meta, result, timestamp_ms=NOW)
    assert ids(after) == {1, 3}


@pytest.mark.parametrize(("sid", "ref"), [(2, "v2"), (3, "main")])
def test_explicit_snapshot_id_held_by_a_ref_is_refused(sid: int, ref: str) -> None:
    refs = {"main": SnapshotRef(3, "branch"), "v2": SnapshotRef(2, "tag")}
    meta = table(chain(3, 2, 1), current=3, refs=refs)
    with pytest.raises(SafetyRefusal, match=f"{sid}.*{ref}"):
        plan(meta, snapshot_ids=(sid,))


def test_explicit_snapshot_id_of_a_removed_ref_is_allowed() -> None:
    refs = {"main": SnapshotRef(3, "branch"), "v2": SnapshotRef(2, "tag", max_ref_age_ms=DAY)}
    result = plan(table(chain(3, 2, 1), current=3, refs=refs), snapshot_ids=(2,))
    assert result.removed_refs == ("v2",)
    assert result.expired_snapshot_ids == (2,)


def test_v1_metadata_without_refs_implies_main() -> None:
    meta = table(chain(30, 20, 10), current=3, format_version=1)
    assert meta.refs == {}
    result = plan(meta)
    assert result.expired_snapshot_ids == (1, 2)
    assert result.removed_refs == ()
    after = apply_expiry(meta, result, timestamp_ms=NOW)
    assert after.current_snapshot_id == 3
    assert after.refs == {}
    assert ids(after) == {3}


# -- apply_expiry ---------------------------------------------------------------------------------


def log(*entries: tuple[int, float]) -> tuple[SnapshotLogEntry, ...]:
    return tuple(SnapshotLogEntry(NOW - int(age * DAY), sid) for sid, age in entries)


def test_snapshot_log_drops_history_before_a_removed_entry() -> None:
    # 1 <- 2, then a rollback to 1 and a new commit 3 on top of 1; a tag keeps 1 alive.
    snaps = [snap(1, 30), snap(2, 20, 1), snap(3, 1, 1)]
    refs = {"main": SnapshotRef(3, "branch"), "t": SnapshotRef(1, "tag")}
    meta = table(snaps, current=3, refs=refs, snapshot_log=log((1, 30), (2, 20), (1, 10), (3, 1)))
    result = plan(meta)
    assert result.expired_snapshot_ids == (2,)
    after = apply_expiry(meta, result, timestamp_ms=NOW)
    assert after.snapshot_log == log((1, 10), (3, 1))


def test_snapshot_log_entry_for_an_already_missing_snapshot_drops_history() -> None:
    # Java (TableMetadata.Builder.updateSnapshotLog) clears the log at ANY entry whose snapshot is
    # not in the resulting metadata once snapshots are removed, not only at entries just removed.
    meta = table(chain(30, 20, 1), current=3, snapshot_log=log((1, 30), (99, 25), (2, 20), (3, 1)))
    result = plan(meta, retain_last=2)
    assert result.expired_snapshot_ids == (1,)
    assert apply_expiry(meta, result, timestamp_ms=NOW).snapshot_log == log((2, 20), (3, 1))


def test_statistics_of_removed_snapshots_are_dropped() -> None:
    stats = tuple(StatisticsFile(s, f"{LOCATION}/metadata/{s}.stats", 100 + s, 10) for s in (1, 3))
    pstats = tuple(PartitionStatisticsFile(s, f"{LOCATION}/metadata/p{s}.parquet", 50) for s in (1, 3))
    meta = table(chain(30, 20, 1), current=3, statistics=stats, partition_statistics=pstats)
    after = apply_expiry(meta, plan(meta), timestamp_ms=NOW)
    assert ids(after) == {3}
    assert after.statistics == (stats[1],)
    assert after.partition_statistics == (pstats[1],)
    assert after.last_updated_ms == NOW


def test_apply_refuses_to_remove_the_current_snapshot() -> None:
    meta = table(chain(30, 20), current=2)
    bad = ExpirePlan((2,), (), (1,), NOW, 1)
    with pytest.raises(SafetyRefusal, match="current snapshot 2"):
        apply_expiry(meta, bad, timestamp_ms=NOW)


SPECS = (
    PartitionSpec(0),
    PartitionSpec(1, (PartitionField(1, 1000, "id_bucket", "bucket[4]"),)),
    PartitionSpec(2, (PartitionField(2, 1001, "cat", "identity"),)),
)
SCHEMAS = tuple(replace(SCHEMA, schema_id=i) for i in range(3))
SPECS_OF_SNAPSHOT = {1: {0}, 2: {1}, 3: {1}}


def evolved_table(schema_of_2: int | None) -> TableMetadata:
    snaps = [snap(1, 30, None, 0), snap(2, 20, 1, schema_of_2), snap(3, 1, 2, 1)]
    specs: dict[str, Any] = {"partition_specs": SPECS, "default_spec_id": 2, "last_partition_id": 1001}
    return table(snaps, current=3, schemas=SCHEMAS, current_schema_id=2, **specs)


def test_clean_expired_metadata_removes_unused_specs_and_schemas() -> None:
    meta = evolved_table(schema_of_2=1)
    asked: list[list[int]] = []

    def spec_ids_of(snapshot_ids: Iterable[int]) -> set[int]:
        asked.append(list(snapshot_ids))
        return set().union(*(SPECS_OF_SNAPSHOT[s] for s in asked[-1]))

    result = plan(meta, retain_last=2)
    assert result.expired_snapshot_ids == (1,)
    after = apply_expiry(meta, result, timestamp_ms=NOW, spec_ids_of=spec_ids_of)
    assert sorted(asked[0]) == [2, 3]
    assert [s.spec_id for s in after.partition_specs] == [1, 2]  # 2 is the default
    assert [s.schema_id for s in after.schemas] == [1, 2]  # 2 is current
    # Without spec_ids_of nothing but snapshots changes.
    plain = apply_expiry(meta, result, timestamp_ms=NOW)
    assert plain.partition_specs == SPECS
    assert plain.schemas == SCHEMAS


def test_clean_expired_metadata_keeps_schemas_when_a_snapshot_has_no_schema_id() -> None:
    meta = evolved_table(schema_of_2=None)
    after = apply_expiry(meta, plan(meta, retain_last=2), timestamp_ms=NOW, spec_ids_of=lambda _: {1})
    assert [s.schema_id for s in after.schemas] == [0, 1, 2]
    assert [s.spec_id for s in after.partition_specs] == [1, 2]


# -- parse_older_than -----------------------------------------------------------------------------

NOV_1_2026 = 1_793_491_200_000


@pytest.fixture
def non_utc_local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A local zone far from UTC, so a timestamp read in local time would show."""
    monkeypatch.setenv("TZ", "America/Los_Angeles")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("text", "back_ms"),
    [
        *[("3d", 3 * DAY), ("12H", 12 * 3_600_000), ("90m", 90 * 60_000), ("30s", 30_000)],
        *[("2W", 14 * DAY), ("250ms", 250), (" 7 d ", 7 * DAY), ("0d", 0)],
    ],
)
def test_durations_count_back_from_now(text: str, back_ms: int) -> None:
    assert parse_older_than(text, NOW) == NOW - back_ms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1793491200000", NOV_1_2026),
        ("123456789", 123_456_789),  # 9 digits: epoch millis, not a date
        ("2026-11-01T00:00:00Z", NOV_1_2026),
        ("2026-11-01T00:00:00z", NOV_1_2026),
        ("2026-11-01T02:00:00+02:00", NOV_1_2026),
        ("2026-10-31T17:00:00-07:00", NOV_1_2026),
        ("2026-11-01T00:00:00", NOV_1_2026),  # no zone: UTC, not the local zone
        ("2026-11-01", NOV_1_2026),
        ("2026-11-01T00:00:00.250Z", NOV_1_2026 + 250),
        ("2004-03-15T07:55:47.472Z", 1_079_337_347_472),  # exact milliseconds, no float truncation
    ],
)
@pytest.mark.usefixtures("non_utc_local_zone")
def test_absolute_times(text: str, expected: int) -> None:
    assert parse_older_than(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "3x", "-3d", "12345", "", "2026-13-01T00:00:00Z"])
def test_bad_older_than_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_older_than(text, NOW)
    assert repr(text) in err.value.message
    assert "2026-11-01T00:00:00Z" in err.value.message
    assert "3d" in err.value.message


# -- live_files -----------------------------------------------------------------------------------

SPEC = SPECS[2]


def entry(status: int, name: str, content: int = model.DATA, size: int = 1000) -> model.ManifestEntry:
    eq_ids = (1,) if content == model.EQUALITY_DELETES else None
    path = f"{LOCATION}/data/{name}.parquet"
    f = model.DataFile(content, path, "PARQUET", ("books",), 5, size, SPEC.spec_id, equality_ids=eq_ids)
    return model.ManifestEntry(status, 7, f, sequence_number=None if status == model.ADDED else 3)


def manifest(
    entries: list[model.ManifestEntry], version: int = 2, content: int = model.MANIFEST_DATA
) -> bytes:
    data, _ = mf.write_manifest(
        "m0.avro", entries, format_version=version, spec=SPEC, schema=SCHEMA, snapshot_id=7, content=content
    )
    return data


@pytest.mark.parametrize("version", [1, 2, 3])
def test_live_data_files(version: int) -> None:
    entries = [
        entry(model.ADDED, "a", size=11),
        entry(model.EXISTING, "b", size=22),
        entry(model.DELETED, "c", size=33),
    ]
    assert rc.live_files(manifest(entries, version), "m0") == [
        rc.LiveFile(f"{LOCATION}/data/a.parquet", rc.DATA_FILE, 11),
        rc.LiveFile(f"{LOCATION}/data/b.parquet", rc.DATA_FILE, 22),
    ]


@pytest.mark.parametrize("version", [2, 3])
def test_live_delete_files(version: int) -> None:
    entries = [
        entry(model.ADDED, "pos-a", model.POSITION_DELETES, 101),
        entry(model.DELETED, "pos-gone", model.POSITION_DELETES, 102),
        entry(model.EXISTING, "eq-b", model.EQUALITY_DELETES, 103),
        entry(model.DELETED, "eq-gone", model.EQUALITY_DELETES, 104),
        entry(model.ADDED, "eq-c", model.EQUALITY_DELETES, 105),
    ]
    assert rc.live_files(manifest(entries, version, model.MANIFEST_DELETES), "m1") == [
        rc.LiveFile(f"{LOCATION}/data/pos-a.parquet", rc.POSITION_DELETE_FILE, 101),
        rc.LiveFile(f"{LOCATION}/data/eq-b.parquet", rc.EQUALITY_DELETE_FILE, 103),
        rc.LiveFile(f"{LOCATION}/data/eq-c.parquet", rc.EQUALITY_DELETE_FILE, 105),
    ]


@pytest.mark.parametrize("junk", [b"not an avro file at all", b"", b"Obj\x01\x00garbage"])
def test_garbage_is_corrupt_metadata(junk: bytes) -> None:
    with pytest.raises(CorruptMetadataError, match="m9"):
        rc.live_files(junk, "m9")


def test_truncated_manifest_is_corrupt_metadata() -> None:
    data = manifest([entry(model.ADDED, f"f{i}") for i in range(50)])
    with pytest.raises(CorruptMetadataError, match="m8"):
        rc.live_files(data[: len(data) - 40], "m8")
