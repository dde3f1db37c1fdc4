"""Planning a manifest rewrite: which manifests, into how many, in what order."""

from __future__ import annotations

import math
import uuid
from dataclasses import replace
from decimal import Decimal

import pytest

from tablekeeper.errors import ConfigError, CorruptMetadataError
from tablekeeper.iceberg.content import MANIFEST_DATA, MANIFEST_DELETES, ManifestFile
from tablekeeper.iceberg.manifest_rewrite import (
    partition_sort_key,
    plan_manifest_rewrite,
    sort_positions,
    split_evenly,
)
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec

SPEC = PartitionSpec(1, (PartitionField(1, 1000, "a", "identity"), PartitionField(2, 1001, "b", "identity")))
MB = 1024 * 1024


def manifest(
    n: int, size: int, content: int = MANIFEST_DATA, spec_id: int = 1, files: int = 10
) -> ManifestFile:
    return ManifestFile(
        manifest_path=f"m{n}.avro",
        manifest_length=size,
        partition_spec_id=spec_id,
        added_snapshot_id=1,
        content=content,
        sequence_number=1,
        min_sequence_number=1,
        added_files_count=files,
        existing_files_count=0,
        deleted_files_count=0,
        added_rows_count=files * 10,
        existing_rows_count=0,
        deleted_rows_count=0,
    )


def test_small_manifests_become_ceil_bytes_over_target_and_other_specs_stay() -> None:
    ms = [manifest(i, 3 * MB) for i in range(10)] + [manifest(99, MB, spec_id=0)]
    plan = plan_manifest_rewrite(ms, spec=SPEC, target_size=8 * MB)
    (group,) = plan.groups
    assert group.content == MANIFEST_DATA and group.target_count == math.ceil(30 / 8)
    assert "m99.avro" not in {m.manifest_path for m in plan.rewritten}
    assert [c for c, _ in plan.skipped] == ["deletes"]


def test_nothing_to_do_unless_the_count_drops_and_rewrite_all_behaves_like_iceberg() -> None:
    settled = [manifest(i, 7 * MB) for i in range(3)]
    assert plan_manifest_rewrite(settled, spec=SPEC, target_size=8 * MB).is_empty
    assert not plan_manifest_rewrite(settled, spec=SPEC, target_size=8 * MB, rewrite_all=True).is_empty
    single = [manifest(0, MB)]
    assert plan_manifest_rewrite(single, spec=SPEC, rewrite_all=True).is_empty


def test_delete_manifests_are_planned_apart_from_data() -> None:
    ms = [manifest(i, MB) for i in range(3)] + [manifest(10 + i, MB, MANIFEST_DELETES) for i in range(4)]
    plan = plan_manifest_rewrite(ms, spec=SPEC)
    assert [(g.content, len(g.manifests), g.target_count) for g in plan.groups] == [
        (MANIFEST_DATA, 3, 1),
        (MANIFEST_DELETES, 4, 1),
    ]


def test_never_more_manifests_than_live_entries() -> None:
    ms = [manifest(i, 5 * MB, files=1) for i in range(2)]
    (group,) = plan_manifest_rewrite(ms, spec=SPEC, target_size=1, rewrite_all=True).groups
    assert group.target_count == 2


def test_manifests_without_counts_are_refused() -> None:
    ms = [manifest(0, MB), replace(manifest(1, MB), added_files_count=None)]
    with pytest.raises(CorruptMetadataError, match="no file counts"):
        plan_manifest_rewrite(ms, spec=SPEC)


def test_sort_by_names_partition_fields_first_and_unknown_ones_are_refused() -> None:
    assert sort_positions(SPEC, ()) == (0, 1)
    assert sort_positions(SPEC, ("b",)) == (1, 0)
    with pytest.raises(ConfigError, match="not a partition field"):
        sort_positions(SPEC, ("c",))
    with pytest.raises(ConfigError, match="positive"):
        plan_manifest_rewrite([], spec=SPEC, target_size=0)


def test_sort_keys_put_nulls_first_and_nan_last_and_order_every_type() -> None:
    values = [None, float("nan"), 2.5, -1.0]
    keys = sorted(values, key=lambda v: partition_sort_key((v,), (0,)))
    assert keys[0] is None and keys[1:3] == [-1.0, 2.5] and math.isnan(keys[3])
    u1, u2 = uuid.UUID(int=1), uuid.UUID(int=2)
    assert partition_sort_key((u1,), (0,)) < partition_sort_key((u2,), (0,))
    assert partition_sort_key((Decimal("1.5"),), (0,)) < partition_sort_key((Decimal("10"),), (0,))


def test_split_evenly_keeps_order_and_sizes_within_one() -> None:
    runs = split_evenly(list(range(10)), 3)
    assert [list(r) for r in runs] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert split_evenly([1], 5) == [[1]]


def test_a_spec_over_a_dropped_column_is_refused_before_any_work(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.catalog.base import LoadedTable
    from tablekeeper.errors import UnsupportedFeatureError
    from tablekeeper.iceberg.types import LONG, NestedField, Schema
    from tablekeeper.iceberg.updates import new_table_metadata
    from tablekeeper.io import FileIO
    from tablekeeper.jobs.rewrite_manifests import RewriteManifestsOptions, plan_rewrite

    spec = PartitionSpec(0, (PartitionField(9, 1000, "gone", "identity"),))
    schema = Schema(0, (NestedField(1, "id", LONG, True),))
    meta = new_table_metadata(schema=schema, location=str(tmp_path), timestamp_ms=1, spec=spec)
    table = LoadedTable("db.t", str(tmp_path / "m.json"), meta, FileIO.for_location(str(tmp_path)))
    with pytest.raises(UnsupportedFeatureError, match="dropped column"):
        plan_rewrite(RewriteManifestsOptions("db.t"), table, "db.t")
