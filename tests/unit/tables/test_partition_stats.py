"""A snapshot's partition statistics summed from the manifests of a table tablekeeper committed
(two specs, position deletes or a DV, an equality delete, a partition emptied), and read back
from the file the metadata registers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.metadata import PartitionStatisticsFile
from tablekeeper.iceberg.partition_stats import PartitionStats, unified_partition_type, write_partition_stats
from tablekeeper.iceberg.updates import new_table_metadata, set_partition_statistics
from tablekeeper.tables.partition_stats import (
    compute_partition_stats,
    partition_stats_location,
    read_partition_stats,
)
from tests.support.partitioned_tables import SCHEMA, evolved_table


@pytest.mark.parametrize("version", [2, 3])
def test_counts_and_last_updates_from_every_manifest(tmp_path: Path, version: int) -> None:
    catalog, (s1, s2, s3, s4) = evolved_table(tmp_path, version)
    table = catalog.require("db.t")
    snapshot = table.metadata.current_snapshot()
    assert snapshot is not None and snapshot.snapshot_id == s4
    rows = compute_partition_stats(table.io, table.metadata, snapshot, threads=4)
    dvs = version - 2
    assert rows == (
        PartitionStats(
            partition={"cat": "a", "id_bucket": None},
            spec_id=0,
            data_record_count=10,
            data_file_count=1,
            total_data_file_size_in_bytes=100,
            position_delete_record_count=3,
            position_delete_file_count=1 - dvs,
            equality_delete_record_count=0,
            equality_delete_file_count=0,
            last_updated_at=table.metadata.snapshot(s3).timestamp_ms,  # type: ignore[union-attr]
            last_updated_snapshot_id=s3,
            dv_count=dvs,
        ),
        PartitionStats(
            partition={"cat": "a", "id_bucket": 1},
            spec_id=1,
            data_record_count=20,
            data_file_count=1,
            total_data_file_size_in_bytes=200,
            position_delete_record_count=0,
            position_delete_file_count=0,
            equality_delete_record_count=2,
            equality_delete_file_count=1,
            last_updated_at=table.metadata.snapshot(s3).timestamp_ms,  # type: ignore[union-attr]
            last_updated_snapshot_id=s3,
        ),
        # Emptied by s4: a row of zeros, its removal the last update (as Java keeps it).
        PartitionStats(
            partition={"cat": "b", "id_bucket": None},
            spec_id=0,
            data_record_count=0,
            data_file_count=0,
            total_data_file_size_in_bytes=0,
            last_updated_at=table.metadata.snapshot(s4).timestamp_ms,  # type: ignore[union-attr]
            last_updated_snapshot_id=s4,
        ),
    )
    # Same sums in one thread; an older snapshot sees only its own files.
    assert compute_partition_stats(table.io, table.metadata, snapshot, threads=1) == rows
    first = compute_partition_stats(table.io, table.metadata, table.metadata.snapshot(s1))  # type: ignore[arg-type]
    assert [(r.partition["cat"], r.data_file_count, r.last_updated_snapshot_id) for r in first] == [
        ("a", 1, s1),
        ("b", 1, s1),
    ]
    # A snapshot whose adding snapshot is expired keeps its counts but updates nothing.
    pruned = replace(
        table.metadata, snapshots=tuple(s for s in table.metadata.snapshots if s.snapshot_id != s2)
    )
    kept = compute_partition_stats(table.io, pruned, snapshot)
    assert [r.data_file_count for r in kept] == [1, 1, 0] and kept[1].last_updated_snapshot_id == s3


def test_unpartitioned_tables_are_refused(tmp_path: Path) -> None:
    catalog = SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", str(tmp_path))
    location = catalog.default_table_location("db.flat")
    catalog.create_table("db.flat", new_table_metadata(schema=SCHEMA, location=location, timestamp_ms=1))
    Committer(catalog, "db.flat").commit_snapshot(
        SnapshotChange(
            "append", added_files=(DataFile(DATA, f"{location}/data/x.parquet", "PARQUET", (), 1, 1),)
        )
    )
    table = catalog.require("db.flat")
    with pytest.raises(UnsupportedFeatureError, match="'Table must be partitioned'"):
        compute_partition_stats(table.io, table.metadata, table.metadata.current_snapshot())  # type: ignore[arg-type]


def test_reader_finds_the_file_registered_for_a_snapshot(tmp_path: Path) -> None:
    catalog, ids = evolved_table(tmp_path, 2)
    table = catalog.require("db.t")
    meta = table.metadata
    assert read_partition_stats(table.io, meta) is None  # nothing registered
    snapshot = meta.current_snapshot()
    assert snapshot is not None
    rows = compute_partition_stats(table.io, meta, snapshot)
    data = write_partition_stats(rows, unified_partition_type(meta), 2)
    path = partition_stats_location(meta, snapshot.snapshot_id)
    assert path.startswith(f"{meta.location}/metadata/partition-stats-{snapshot.snapshot_id}-")
    assert path.endswith(".parquet")
    table.io.write(path, data)
    registered = set_partition_statistics(
        meta, PartitionStatisticsFile(snapshot.snapshot_id, path, len(data)), timestamp_ms=1
    )
    assert read_partition_stats(table.io, registered) == rows
    assert read_partition_stats(table.io, registered, ids[0]) is None  # another snapshot: none
    table.io.delete(path)
    with pytest.raises(CorruptMetadataError, match="is missing"):
        read_partition_stats(table.io, registered)
