"""A table's partition statistics: computed from a snapshot's manifests on this machine, and read
back from the file the table's metadata registers for a snapshot.

The manifests are fetched and summed by a pool of threads (the fetches overlap; the Avro decoding
takes turns on the interpreter), one manifest per task, so memory holds one manifest's bytes per
thread and one row per partition.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

from tablekeeper.errors import CorruptMetadataError, FileNotFound, UnsupportedFeatureError
from tablekeeper.iceberg.conversions import json_value
from tablekeeper.iceberg.metadata import PartitionStatisticsFile, Snapshot, TableMetadata
from tablekeeper.iceberg.partition_stats import (
    PartitionStats,
    is_partitioned,
    read_partition_stats_bytes,
    unified_partition_type,
)
from tablekeeper.iceberg.partition_stats_tally import PartitionStatsTally
from tablekeeper.io import FileIO
from tablekeeper.io.uri import join_location
from tablekeeper.tables.iceberg import load_manifests, metadata_directory, read_manifest_bytes

MANIFEST_THREADS = 8


def partition_stats_location(meta: TableMetadata, snapshot_id: int) -> str:
    """Java's name: ``<metadata dir>/partition-stats-<snapshot id>-<uuid>.parquet``."""
    return join_location(metadata_directory(meta), f"partition-stats-{snapshot_id}-{uuid.uuid4()}.parquet")


def compute_partition_stats(
    io: FileIO, meta: TableMetadata, snapshot: Snapshot, threads: int = MANIFEST_THREADS
) -> tuple[PartitionStats, ...]:
    """The snapshot's partition statistics from all its manifests, in the file's row order; empty
    when the snapshot has no file at all. An unpartitioned table is refused, as Java refuses it."""
    if not is_partitioned(meta):
        raise UnsupportedFeatureError(
            "the table is unpartitioned: partition statistics describe partitions "
            "(Iceberg Java's PartitionStatsHandler refuses it too: 'Table must be partitioned')"
        )
    tally = PartitionStatsTally(meta)
    manifests = load_manifests(io, snapshot)
    if len(manifests) <= 1 or threads <= 1:
        return tally.rows(tally.collect(read_manifest_bytes(io, m), m) for m in manifests)
    with ThreadPoolExecutor(max_workers=min(threads, len(manifests))) as pool:
        parts = list(pool.map(lambda m: tally.collect(read_manifest_bytes(io, m), m), manifests))
    return tally.rows(parts)


def partition_statistics_file(
    meta: TableMetadata, snapshot_id: int | None = None
) -> PartitionStatisticsFile | None:
    """The metadata's partition statistics entry for ``snapshot_id`` (default: the current snapshot)."""
    wanted = meta.current_snapshot_id if snapshot_id is None else snapshot_id
    if wanted is None:
        return None
    return next((p for p in meta.partition_statistics if p.snapshot_id == wanted), None)


def read_partition_stats(
    io: FileIO, meta: TableMetadata, snapshot_id: int | None = None
) -> tuple[PartitionStats, ...] | None:
    """The rows of the partition statistics file registered for ``snapshot_id`` (default: the
    current snapshot), their partitions by the table's current unified partition type's field
    names; None when the metadata registers no file for it. A registered file that is gone or
    unreadable is ``CorruptMetadataError``."""
    entry = partition_statistics_file(meta, snapshot_id)
    if entry is None:
        return None
    try:
        data = io.read(entry.statistics_path)
    except FileNotFound:
        raise CorruptMetadataError(
            f"partition statistics file {entry.statistics_path} of snapshot {entry.snapshot_id} is missing"
        ) from None
    return read_partition_stats_bytes(
        data, unified_partition_type(meta), f"partition statistics file {entry.statistics_path}"
    )


def partition_stats_summary(
    meta: TableMetadata, rows: tuple[PartitionStats, ...] | None, limit: int = 5
) -> dict[str, object]:
    """For a report: the current snapshot's partition statistics file (None: none registered),
    its row count, and the ``limit`` partitions with the most data files (values JSON-ready)."""
    entry = partition_statistics_file(meta)
    if entry is None or rows is None:
        return {
            "file": None if entry is None else entry.statistics_path,
            "partitions": None,
            "top_by_data_files": [],
        }
    ranked = sorted(rows, key=lambda r: (-r.data_file_count, -r.total_data_file_size_in_bytes))[:limit]
    return {
        "file": entry.statistics_path,
        "partitions": len(rows),
        "top_by_data_files": [
            {
                "spec_id": r.spec_id,
                "partition": {k: json_value(v) for k, v in r.partition.items()},
                "data_files": r.data_file_count,
                "data_records": r.data_record_count,
                "data_bytes": r.total_data_file_size_in_bytes,
                "delete_files": r.delete_file_count,
                "last_updated_at": r.last_updated_at,
            }
            for r in ranked
        ],
    }
