"""health of one Iceberg table: its metadata read once, summed, and held against the thresholds.

Every estimate comes from the planning code of the job it recommends (compact's file selection and
packing, expire-snapshots' plan and reachability, rewrite-manifests' and
rewrite-position-deletes' plans, remove-orphans' dry run), so what health predicts is what the job
then does on the unchanged table.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.errors import TablekeeperError
from tablekeeper.iceberg.content import MANIFEST_DATA, ManifestFile
from tablekeeper.iceberg.delete_index import DeleteIndex, field_lookup
from tablekeeper.iceberg.health import (
    CompactionEstimate,
    Tally,
    estimate_compaction,
    histogram_rows,
    top_small_partitions,
)
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.rewrite_plan import RewriteOptions
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.engines import SparkSource
from tablekeeper.jobs.common.result import iso_ms
from tablekeeper.jobs.compact.options import CompactOptions
from tablekeeper.jobs.health.layout import check_layout
from tablekeeper.jobs.health.model import Recommendation, TableHealth, Thresholds
from tablekeeper.tables.iceberg import iter_entries, load_manifests, tally_manifests

log = logging.getLogger(__name__)

# Reads the data manifests into one tally (on the driver, or on executors for a big table).
# Below this many manifests a table is read in this process (more processes or tasks cost more).
SPARK_MIN_MANIFESTS = 64
TallyReader = Callable[[LoadedTable, Sequence[ManifestFile], DeleteIndex, RewriteOptions], Tally]


def tally_on_driver(
    table: LoadedTable, manifests: Sequence[ManifestFile], index: DeleteIndex, options: RewriteOptions
) -> Tally:
    return tally_manifests(table.io, table.metadata, manifests, index, options)


def tally_in_processes(
    table: LoadedTable, manifests: Sequence[ManifestFile], index: DeleteIndex, options: RewriteOptions
) -> Tally:
    """The manifests split into one contiguous slice per core, each read by its own process
    (decoding Avro holds the GIL, so threads would take turns), merged back in order."""
    live = [m for m in manifests if m.has_live_files()]
    workers = max(1, min(os.cpu_count() or 1, len(live) // SPARK_MIN_MANIFESTS * 2 or 1))
    if workers == 1:
        return tally_on_driver(table, live, index, options)
    step = -(-len(live) // workers)
    slices = [live[i : i + step] for i in range(0, len(live), step)]
    meta = table.metadata
    # forkserver: a fork of a process that holds a JVM gateway or threads is not safe.
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(len(slices), mp_context=context) as pool:
        parts = list(pool.map(_tally_slice, [(meta, part, index, options) for part in slices]))
    tally = parts[0]
    for part in parts[1:]:
        tally.merge(part)
    return tally


def _tally_slice(args: tuple[TableMetadata, Sequence[ManifestFile], DeleteIndex, RewriteOptions]) -> Tally:
    meta, manifests, index, options = args
    io = FileIO.for_location(manifests[0].manifest_path)
    return tally_manifests(io, meta, manifests, index, options)


def _reader(spark: SparkSource, manifests: int) -> TallyReader:
    """Executors for a table of many manifests when a session is there, else one process per
    core; a small table in this process."""
    if manifests < SPARK_MIN_MANIFESTS:
        return tally_on_driver
    if spark is not None and not callable(spark):
        from tablekeeper.spark.health import spark_tally

        return spark_tally(spark)
    return tally_in_processes


def iceberg_health(
    catalog: Catalog,
    identifier: str,
    base: Thresholds,
    cli: Mapping[str, str],
    *,
    now_ms: int,
    list_files: bool = False,
    spark: SparkSource = None,
    reader: TallyReader | None = None,
    layout_columns: Sequence[str] | None = None,
) -> TableHealth:
    table = catalog.require(identifier)
    meta = table.metadata
    thresholds = base.for_table(meta.properties, cli)
    options = CompactOptions(table=identifier).rewrite_options(dict(meta.properties))
    snapshot = meta.current_snapshot()
    manifests = load_manifests(table.io, snapshot)
    data_manifests = [m for m in manifests if m.content == MANIFEST_DATA]
    delete_manifests = [m for m in manifests if m.content != MANIFEST_DATA]
    deletes = list(iter_entries(table.io, meta, delete_manifests))
    # As Java's planning pairs them (and compact does): a delete the statistics rule out is not counted.
    index = DeleteIndex(deletes, meta.unpartitioned_spec_ids, field_lookup(meta.schemas))
    read = reader or _reader(spark, len(data_manifests))
    tally = read(table, data_manifests, index, options)
    for entry in deletes:
        tally.add_delete(entry)
    estimate = estimate_compaction(tally, options)
    names = {s.spec_id: tuple(f.name for f in s.fields) for s in meta.partition_specs}
    metrics: dict[str, Any] = {
        "format_version": meta.format_version,
        "row_lineage": meta.format_version >= 3 and meta.next_row_id is not None,
        "current_snapshot_id": snapshot.snapshot_id if snapshot else None,
        "data_files": tally.data_files,
        "data_bytes": tally.data_bytes,
        "data_records": tally.data_records,
        "target_file_size": options.target_file_size,
        "small_file_size": options.min_file_size,
        "small_files": tally.small_files,
        "small_bytes": tally.small_bytes,
        "size_histogram": histogram_rows(tally),
        "position_delete_files": tally.position_delete_files,
        "deletion_vectors": tally.dv_files,
        "equality_delete_files": tally.equality_delete_files,
        "delete_bytes": tally.delete_bytes,
        "position_deleted_rows": tally.position_deleted_rows,
        "equality_delete_rows": tally.equality_delete_rows,
        "deleted_rows_share": round(tally.position_deleted_rows / tally.data_records, 4)
        if tally.data_records
        else 0.0,
        "data_manifests": len(data_manifests),
        "data_manifest_bytes": sum(m.manifest_length for m in data_manifests),
        "delete_manifests": len(delete_manifests),
        "delete_manifest_bytes": sum(m.manifest_length for m in delete_manifests),
        "snapshots": len(meta.snapshots),
        "oldest_snapshot_at": iso_ms(min(s.timestamp_ms for s in meta.snapshots)) if meta.snapshots else None,
        "metadata_json_bytes": _size(table),
        "metadata_log_entries": len(meta.metadata_log),
        "top_small_file_partitions": top_small_partitions(tally, names),
    }
    advice: list[Recommendation] = []
    notes: list[str] = []
    _compact(advice, estimate, tally, options, thresholds)
    check_layout(advice, metrics, table, data_manifests, options, thresholds, layout_columns, notes)
    _expire(advice, metrics, table, thresholds, now_ms, spark, notes)
    _manifests(advice, table, identifier, thresholds, notes)
    _position_deletes(advice, table, identifier, tally, thresholds, notes)
    _equality_deletes(advice, metrics, table, identifier, tally, thresholds, notes)
    _statistics(metrics, table, identifier, notes)
    if list_files:
        _orphans(advice, metrics, catalog, identifier, thresholds, spark, notes)
    if thresholds.v3_readiness and meta.format_version < 3:
        advice.append(
            Recommendation(
                "backfill-row-lineage",
                f"format version {meta.format_version}: v3 readiness asked for, and row lineage needs v3",
                "v3-readiness=true",
                {
                    "format_version_before": meta.format_version,
                    "format_version_after": 3,
                    "rows_given_ids": tally.data_records,
                },
            )
        )
    if notes:
        metrics["notes"] = notes
    return TableHealth(
        identifier, "iceberg", metrics, tuple(advice), thresholds=thresholds.as_keys(meta.properties)
    )


def _size(table: LoadedTable) -> int | None:
    try:
        return table.io.size(table.metadata_location)
    except TablekeeperError:
        return None


def _compact(
    advice: list[Recommendation],
    estimate: CompactionEstimate,
    tally: Tally,
    options: RewriteOptions,
    th: Thresholds,
) -> None:
    if estimate.files < max(1, th.compact_min_files):
        return
    advice.append(
        Recommendation(
            "compact",
            f"{estimate.files} of {tally.data_files} data files are below {options.min_file_size} bytes "
            f"(75% of the {options.target_file_size}-byte target), above {options.max_file_size}, or "
            "read with too many deletes",
            f"compact.min-files={th.compact_min_files}",
            {
                "data_files_before": estimate.live_files,
                # The plan's count from the input bytes; compact rolls files by the bytes it
                # writes, so it writes fewer when merged rows shed footers or compress better,
                # more when they compress worse. Every group with live rows writes at least one.
                "data_files_after": estimate.files_after,
                "data_files_after_at_least": estimate.live_files - estimate.files + estimate.groups,
                "files_rewritten": estimate.files,
                "bytes_rewritten": estimate.bytes,
                "groups": estimate.groups,
            },
            files_removed=max(0, estimate.live_files - estimate.files_after),
        )
    )


def _expire(
    advice: list[Recommendation],
    metrics: dict[str, Any],
    table: LoadedTable,
    th: Thresholds,
    now_ms: int,
    spark: SparkSource,
    notes: list[str],
) -> None:
    from tablekeeper.jobs.expire_snapshots import preview

    try:
        p = preview(table, now_ms, spark)
    except TablekeeperError as err:
        notes.append(f"expire-snapshots not estimated: {err.message}")
        return
    files = sum(p.files.values())
    metrics |= {
        "expirable_snapshots": p.expired_snapshots,
        "expirable_files": files,
        "expirable_bytes": p.bytes,
    }
    if p.expired_snapshots < max(1, th.expire_min_snapshots) or p.bytes < th.expire_min_bytes:
        return
    advice.append(
        Recommendation(
            "expire-snapshots",
            f"{p.expired_snapshots} snapshots are past the table's history.expire rules",
            f"expire-snapshots.min-snapshots={th.expire_min_snapshots}",
            {
                "snapshots_before": p.expired_snapshots + p.retained_snapshots,
                "snapshots_after": p.retained_snapshots,
                "files_deleted": files,
                "bytes_freed": p.bytes,
                **dict(p.files),
            },
            bytes_freed=p.bytes,
            files_removed=files,
        )
    )


def _manifests(
    advice: list[Recommendation], table: LoadedTable, identifier: str, th: Thresholds, notes: list[str]
) -> None:
    from tablekeeper.jobs.rewrite_manifests import RewriteManifestsOptions, plan_rewrite

    try:
        minimum = th.min_manifests(table.metadata.properties)
        plan, manifests = plan_rewrite(RewriteManifestsOptions(table=identifier), table, identifier)
    except TablekeeperError as err:
        notes.append(f"rewrite-manifests not estimated: {err.message}")
        return
    data = [m for m in manifests if m.content == MANIFEST_DATA]
    groups = [g for g in plan.groups if g.content == MANIFEST_DATA]
    rewritten = sum(len(g.manifests) for g in groups)
    after = len(data) - rewritten + sum(g.target_count for g in groups)
    if len(data) < minimum or not groups or after > len(data) * th.rewrite_manifests_max_share_after:
        return
    advice.append(
        Recommendation(
            "rewrite-manifests",
            f"{len(data)} data manifests ({sum(m.manifest_length for m in data)} bytes) regroup into {after}",
            f"rewrite-manifests.min-manifests={minimum}",
            {
                "data_manifests_before": len(data),
                "data_manifests_after": after,
                "manifests_rewritten": rewritten,
                "bytes_rewritten": sum(g.bytes for g in groups),
            },
            files_removed=len(data) - after,
        )
    )


def _statistics(metrics: dict[str, Any], table: LoadedTable, identifier: str, notes: list[str]) -> None:
    """Statistics entries whose Puffin file is gone: engines planning with them find nothing."""
    missing = [s for s in table.metadata.statistics if not table.io.exists(s.statistics_path)]
    metrics["missing_statistics_files"] = len(missing)
    for entry in missing:
        notes.append(
            f"statistics file {entry.statistics_path} of snapshot {entry.snapshot_id} is missing: "
            f"run compute-stats --table {identifier} --snapshot {entry.snapshot_id}"
        )
    # The current snapshot's partition statistics (compute-stats --partition-stats), when registered.
    from tablekeeper.tables.partition_stats import partition_stats_summary, read_partition_stats

    try:
        rows = read_partition_stats(table.io, table.metadata)
    except TablekeeperError as err:
        rows = None
        notes.append(f"partition statistics not read: {err.message}")
    metrics["partition_stats"] = partition_stats_summary(table.metadata, rows)


def _position_deletes(
    advice: list[Recommendation],
    table: LoadedTable,
    identifier: str,
    tally: Tally,
    th: Thresholds,
    notes: list[str],
) -> None:
    if tally.position_delete_files < max(1, th.rewrite_position_deletes_min_files):
        return
    from tablekeeper.jobs import rewrite_position_deletes as rpd

    try:
        plan = rpd.plan(table, rpd.RewritePositionDeletesOptions(table=identifier), _no_spark)
    except TablekeeperError as err:
        notes.append(f"rewrite-position-deletes not estimated: {err.message}")
        return
    if plan.files < th.rewrite_position_deletes_min_files:
        return
    options = rpd.RewritePositionDeletesOptions(table=identifier).plan_options(
        dict(table.metadata.properties)
    )
    outputs = sum(
        min(len(g.data_files), g.input_records) if g.to_dvs else options.expected_output_files(g.input_size)
        for g in plan.groups
    )
    before = tally.position_delete_files + tally.dv_files
    advice.append(
        Recommendation(
            "rewrite-position-deletes",
            f"{plan.files} small position delete files in {len(plan.groups)} partitions merge into {outputs}",
            f"rewrite-position-deletes.min-files={th.rewrite_position_deletes_min_files}",
            {
                "delete_files_before": before,
                "delete_files_after": before - plan.files + outputs,
                "files_rewritten": plan.files,
                "bytes_rewritten": plan.bytes,
            },
            files_removed=max(0, plan.files - outputs),
        )
    )


def _equality_deletes(
    advice: list[Recommendation],
    metrics: dict[str, Any],
    table: LoadedTable,
    identifier: str,
    tally: Tally,
    th: Thresholds,
    notes: list[str],
) -> None:
    """Read amplification: the data files and bytes every scan joins against equality deletes."""
    if not tally.equality_delete_files:
        return
    from tablekeeper.jobs import rewrite_equality_deletes as red

    try:
        plan, _ = red.plan(table, red.RewriteEqualityDeletesOptions(table=identifier), _no_spark)
    except TablekeeperError as err:
        notes.append(f"rewrite-equality-deletes not estimated: {err.message}")
        return
    metrics["equality_delete_data_files"] = plan.target_files
    metrics["equality_delete_data_bytes"] = plan.data_bytes
    applying = len(plan.equality_deletes) - sum(1 for needs in plan.removable.values() if not needs)
    if len(plan.equality_deletes) < max(1, th.rewrite_equality_deletes_min_files):
        return
    advice.append(
        Recommendation(
            "rewrite-equality-deletes",
            f"{len(plan.equality_deletes)} equality delete files ({applying} applying) make every scan "
            f"join {plan.target_files} data files ({plan.data_bytes} bytes) against them",
            f"rewrite-equality-deletes.min-files={th.rewrite_equality_deletes_min_files}",
            {
                "equality_delete_files_before": len(plan.equality_deletes),
                "equality_delete_files_after": len(plan.kept),
                "equality_delete_rows_before": tally.equality_delete_rows,
                "data_files_joined_before": plan.target_files,
                "data_files_joined_after": 0,
                "data_bytes_joined_before": plan.data_bytes,
                "data_bytes_joined_after": 0,
            },
            files_removed=len(plan.removable),
        )
    )


def _no_spark() -> Any:
    raise AssertionError("health plans rewrite-position-deletes without --where: no Spark needed")


def _orphans(
    advice: list[Recommendation],
    metrics: dict[str, Any],
    catalog: Catalog,
    identifier: str,
    th: Thresholds,
    spark: SparkSource,
    notes: list[str],
) -> None:
    from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans

    try:
        found = run_orphans(RemoveOrphansOptions(table=identifier, dry_run=True), catalog, identifier, spark)
    except TablekeeperError as err:
        notes.append(f"orphans not estimated: {err.message}")
        return
    count = int(found.metrics.get("orphan_file_count", 0))
    size = int(found.metrics.get("bytes_to_free", 0))
    metrics |= {"orphan_files": count, "orphan_bytes": size}
    if count < max(1, th.remove_orphans_min_files):
        return
    advice.append(
        Recommendation(
            "remove-orphans",
            f"{count} files under the table location are past the orphan age and referenced by no metadata",
            f"remove-orphans.min-files={th.remove_orphans_min_files}",
            {"orphan_files": count, "bytes_freed": size},
            bytes_freed=size,
            files_removed=count,
        )
    )
