"""compute-stats: number-of-distinct-values sketches of a snapshot's columns (Iceberg's
``compute_table_stats``), for cost-based optimizers.

One ``apache-datasketches-theta-v1`` blob per column, built from the rows live in the snapshot
(deletes applied) on the executors, merged on the driver, written to one Puffin statistics file
``<metadata>/<snapshot-id>-<uuid>.stats`` and committed as the table's ``statistics`` entry for
that snapshot. When the snapshot's entry already holds a sketch of every column asked for, the run
has nothing to do (``--recompute`` computes afresh, as Java's procedure always does); otherwise
the older entry for the same snapshot is replaced, and its file, no longer referenced, is left to
remove-orphans.

Default columns are Java's: the top-level primitive columns (nested struct fields when named).
Primitive columns Spark cannot read (time, nanosecond timestamps, unknown), on which Java's
procedure fails, are left out and listed in the result.

``--partition-stats`` also writes the snapshot's partition statistics file (Iceberg's
``compute_partition_stats``): one row per partition with its file and record counts, summed on the
driver from all the snapshot's manifests (no Spark), written as
``<metadata>/partition-stats-<snapshot-id>-<uuid>.parquet`` and committed as the snapshot's
``partition-statistics`` entry, in the same metadata update as the sketches.
``--partition-stats-only`` writes that file alone, without sketches or a Spark session. Java
reuses an ancestor's file to compute incrementally; tablekeeper always sums the snapshot's
manifests afresh (one read of each manifest).
"""

from __future__ import annotations

import argparse
import logging
import uuid
from dataclasses import dataclass

from tablekeeper import __version__, faults
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import CommitStateUnknown, ConfigError
from tablekeeper.files.containment import require_home
from tablekeeper.iceberg.metadata import PartitionStatisticsFile, Snapshot, StatisticsFile, TableMetadata
from tablekeeper.iceberg.partition_stats import (
    PartitionStats,
    is_partitioned,
    unified_partition_type,
    write_partition_stats,
)
from tablekeeper.iceberg.statistics import (
    THETA_BLOB_TYPE,
    StatsColumn,
    ThetaBlob,
    ndv,
    resolve_columns,
    statistics_file,
    write_statistics,
)
from tablekeeper.iceberg.updates import set_partition_statistics, set_statistics
from tablekeeper.io.uri import join_location
from tablekeeper.jobs.common.context import (
    JobContext,
    add_run_arguments,
    add_table_arguments,
    options_from_args,
)
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.tables.iceberg import metadata_directory
from tablekeeper.tables.partition_stats import compute_partition_stats, partition_stats_location

log = logging.getLogger(__name__)

JOB = "compute-stats"


@dataclass(frozen=True)
class ComputeStatsOptions:
    table: str
    columns: tuple[str, ...] | None = None  # None: Java's default columns
    snapshot_id: int | None = None  # None: the current snapshot
    recompute: bool = False
    partition_stats: bool = False  # also the partition statistics file
    partition_stats_only: bool = False  # that file alone: no sketches, no Spark
    dry_run: bool = False
    catalog: str | None = None

    def __post_init__(self) -> None:
        if self.partition_stats_only and self.columns is not None:
            raise ConfigError(
                "--columns names the columns to sketch, and --partition-stats-only computes no "
                "sketches: leave out one of them (--partition-stats computes both)"
            )

    @property
    def sketches(self) -> bool:
        return not self.partition_stats_only

    @property
    def partitions(self) -> bool:
        return self.partition_stats or self.partition_stats_only

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ComputeStatsOptions:
        columns = None
        if args.columns is not None:
            columns = tuple(c.strip() for c in args.columns.split(",") if c.strip())
            if not columns:
                raise ConfigError("--columns is empty: name at least one column, or leave it out")
        return options_from_args(cls, args, columns=columns, snapshot_id=args.snapshot)


@dataclass(frozen=True)
class StatsPlan:
    snapshot: Snapshot
    columns: tuple[StatsColumn, ...]
    skipped: dict[str, str]
    existing: StatisticsFile | None  # the entry this run replaces

    def metrics(self) -> dict[str, object]:
        out: dict[str, object] = {
            "snapshot_id": self.snapshot.snapshot_id,
            "columns": [c.name for c in self.columns],
            "field_ids": [c.field_id for c in self.columns],
        }
        if self.skipped:
            out["skipped_columns"] = dict(self.skipped)
        out["replaced_statistics_file"] = self.existing.statistics_path if self.existing else None
        return out

    @property
    def covered(self) -> bool:
        """The snapshot's entry already holds a theta sketch of every column asked for."""
        if self.existing is None:
            return False
        have = {
            b.fields[0]
            for b in self.existing.blob_metadata
            if b.type == THETA_BLOB_TYPE and b.snapshot_id == self.snapshot.snapshot_id and len(b.fields) == 1
        }
        return all(c.field_id in have for c in self.columns)


def _snapshot(meta: TableMetadata, identifier: str, options: ComputeStatsOptions) -> Snapshot | None:
    if options.snapshot_id is None:
        return meta.current_snapshot()
    snapshot = meta.snapshot(options.snapshot_id)
    if snapshot is None:
        recent = [s.snapshot_id for s in meta.snapshots[-5:]]
        raise ConfigError(
            f"--snapshot {options.snapshot_id} is not a snapshot of {identifier}: use one of "
            f"{recent or 'none (the table has no snapshots)'}"
        )
    return snapshot


def plan_stats(meta: TableMetadata, identifier: str, options: ComputeStatsOptions) -> StatsPlan | None:
    """What would be computed; None when the table has no snapshot (nothing to do)."""
    snapshot = _snapshot(meta, identifier, options)
    if snapshot is None:
        return None
    # The snapshot's own schema, as Java resolves the columns.
    schema_id = snapshot.schema_id if snapshot.schema_id is not None else meta.current_schema_id
    columns, skipped = resolve_columns(meta.schema(schema_id), options.columns)
    existing = next((s for s in meta.statistics if s.snapshot_id == snapshot.snapshot_id), None)
    return StatsPlan(snapshot, columns, skipped, existing)


def stats_location(meta: TableMetadata, snapshot_id: int) -> str:
    """Where Java puts it: the metadata directory (``write.metadata.path`` when set)."""
    return join_location(metadata_directory(meta), f"{snapshot_id}-{uuid.uuid4()}.stats")


@dataclass(frozen=True)
class PartitionStatsPlan:
    snapshot: Snapshot
    existing: PartitionStatisticsFile | None  # the entry this run replaces
    missing: bool  # the existing entry's file is gone


def plan_partition_stats(
    table: LoadedTable, identifier: str, options: ComputeStatsOptions
) -> PartitionStatsPlan | None:
    """None when the table has no snapshot; an unpartitioned table is refused by name."""
    meta = table.metadata
    snapshot = _snapshot(meta, identifier, options)
    if snapshot is None:
        return None
    if not is_partitioned(meta):
        raise ConfigError(
            f"{identifier} is unpartitioned, and partition statistics describe partitions (Iceberg "
            "Java's PartitionStatsHandler refuses such a table too: 'Table must be partitioned'): "
            f"leave out {'--partition-stats-only' if options.partition_stats_only else '--partition-stats'}"
        )
    existing = next((p for p in meta.partition_statistics if p.snapshot_id == snapshot.snapshot_id), None)
    missing = existing is not None and not table.io.exists(existing.statistics_path)
    return PartitionStatsPlan(snapshot, existing, missing)


def _no_snapshot(options: ComputeStatsOptions) -> dict[str, object]:
    metrics: dict[str, object] = {"snapshot_id": None}
    if options.sketches:
        metrics |= {"columns": [], "statistics_file": None}
    if options.partitions:
        metrics |= {"partitions": None, "partition_statistics_file": None}
    return metrics | {"note": "the table has no snapshot: nothing to do"}


def run_compute_stats(
    options: ComputeStatsOptions, catalog: Catalog, identifier: str, context: JobContext
) -> JobResult:
    clock = JobClock()
    table = catalog.require(identifier)
    require_home(table, identifier, JOB)  # a copied table would write into the original
    # Both plans before any work, so a refusal (an unpartitioned table) costs no Spark job.
    plan = plan_stats(table.metadata, identifier, options) if options.sketches else None
    partitions = plan_partition_stats(table, identifier, options) if options.partitions else None
    if plan is None and partitions is None:
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=_no_snapshot(options))
    metrics: dict[str, object] = {}
    notes: list[str] = []
    sketch = plan is not None and _plan_sketches(plan, table, options, metrics, notes)
    partition = partitions is not None and _plan_partitions(partitions, options, metrics, notes)
    if notes:
        metrics["note"] = "; ".join(notes)
    rows: tuple[PartitionStats, ...] = ()
    if partition:
        assert partitions is not None
        rows = compute_partition_stats(table.io, table.metadata, partitions.snapshot)
        metrics["partitions"] = len(rows)
        if not rows:
            # Java writes no file for a snapshot without files, and commits nothing.
            partition = False
            note = "the snapshot has no data or delete files: no partition statistics file"
            metrics["note"] = "; ".join([*notes, note])
    if options.dry_run or not (sketch or partition):
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics)
    faults.kill_point("plan.done")
    metrics |= _execute(
        plan if sketch else None,
        (partitions, rows) if partition and partitions is not None else None,
        table,
        catalog,
        identifier,
        context,
    )
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def _plan_sketches(
    plan: StatsPlan,
    table: LoadedTable,
    options: ComputeStatsOptions,
    metrics: dict[str, object],
    notes: list[str],
) -> bool:
    """Whether sketches are to be computed; their plan's metrics and notes added."""
    metrics |= plan.metrics()
    # An entry whose Puffin file is gone covers nothing: readers find no sketches there.
    missing = plan.existing is not None and not table.io.exists(plan.existing.statistics_path)
    if missing:
        assert plan.existing is not None
        notes.append(f"statistics file {plan.existing.statistics_path} is missing: recomputed")
    if plan.covered and not options.recompute and not missing:
        assert plan.existing is not None
        metrics |= {"statistics_file": plan.existing.statistics_path, "replaced_statistics_file": None}
        notes.append(
            "the snapshot already has sketches of these columns: nothing to do (--recompute to redo)"
        )
        return False
    metrics["statistics_file"] = None
    return True


def _plan_partitions(
    plan: PartitionStatsPlan, options: ComputeStatsOptions, metrics: dict[str, object], notes: list[str]
) -> bool:
    """Whether the partition statistics file is to be written; its plan's metrics and notes added."""
    existing = plan.existing.statistics_path if plan.existing else None
    metrics |= {"snapshot_id": plan.snapshot.snapshot_id, "replaced_partition_statistics_file": existing}
    if plan.missing:
        notes.append(f"partition statistics file {existing} is missing: recomputed")
    elif existing is not None and not options.recompute:
        metrics |= {
            "partitions": None,
            "partition_statistics_file": existing,
            "replaced_partition_statistics_file": None,
        }
        notes.append(
            "the snapshot already has a partition statistics file: nothing to do (--recompute to redo)"
        )
        return False
    metrics["partition_statistics_file"] = None
    return True


def _execute(
    plan: StatsPlan | None,
    partitions: tuple[PartitionStatsPlan, tuple[PartitionStats, ...]] | None,
    table: LoadedTable,
    catalog: Catalog,
    identifier: str,
    context: JobContext,
) -> dict[str, object]:
    out: dict[str, object] = {}
    written: list[str] = []
    entry: StatisticsFile | None = None
    partition_entry: PartitionStatisticsFile | None = None
    try:
        if partitions is not None:
            pplan, rows = partitions
            meta = table.metadata
            data = write_partition_stats(rows, unified_partition_type(meta), meta.format_version)
            path = partition_stats_location(meta, pplan.snapshot.snapshot_id)
            table.io.create_if_absent(path, data)
            written.append(path)
            partition_entry = PartitionStatisticsFile(pplan.snapshot.snapshot_id, path, len(data))
            out |= {"partition_statistics_file": path, "partition_statistics_file_size_in_bytes": len(data)}
        if plan is not None:
            entry, sketched = _sketch(plan, table, context, written)
            out |= sketched
        faults.kill_point("stage.written")
        Committer(catalog, identifier).update_metadata(
            lambda base, now_ms: _register(base, entry, partition_entry, now_ms)
        )
    except CommitStateUnknown:
        raise  # the new metadata may be live and name the files: they stay
    except Exception:
        # Known not committed (conflict, a refused update, I/O before the swap): nobody refers to them.
        for path in written:
            table.io.delete(path, missing_ok=True)
        raise
    for path in written:
        log.info("statistics of %s in %s", identifier, path)
    return out


def _register(
    base: TableMetadata,
    entry: StatisticsFile | None,
    partition_entry: PartitionStatisticsFile | None,
    now_ms: int,
) -> TableMetadata:
    meta = base
    if entry is not None:
        meta = set_statistics(meta, entry, timestamp_ms=now_ms)
    if partition_entry is not None:
        meta = set_partition_statistics(meta, partition_entry, timestamp_ms=now_ms)
    return meta


def _sketch(
    plan: StatsPlan, table: LoadedTable, context: JobContext, written: list[str]
) -> tuple[StatisticsFile, dict[str, object]]:
    from tablekeeper.spark.table_stats import theta_sketches

    spark = context.spark()
    snap = plan.snapshot
    sketches = theta_sketches(spark, table.metadata_location, snap.snapshot_id, plan.columns)
    blobs = [
        ThetaBlob(s.column.field_id, snap.snapshot_id, snap.sequence_number, s.sketch, ndv(s.estimate))
        for s in sketches
    ]
    puffin = write_statistics(blobs, created_by=f"tablekeeper {__version__} Spark {spark.version}")
    path = stats_location(table.metadata, snap.snapshot_id)
    table.io.create_if_absent(path, puffin.data)
    written.append(path)
    return statistics_file(path, snap.snapshot_id, puffin), {
        "ndv": {s.column.name: b.ndv for s, b in zip(sketches, blobs, strict=True)},
        "statistics_file": path,
        "statistics_file_size_in_bytes": puffin.file_size,
        "sketch_bytes": sum(len(b.sketch) for b in blobs),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument(
        "--columns",
        help="comma-separated columns (nested struct fields as a.b); default: every top-level "
        "primitive column",
    )
    parser.add_argument("--snapshot", type=int, help="snapshot id to compute stats for (default: current)")
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="compute even when the snapshot already has sketches of these columns (or, with "
        "--partition-stats, a partition statistics file)",
    )
    parser.add_argument(
        "--partition-stats",
        action="store_true",
        help="also write the snapshot's partition statistics file (per-partition file and record "
        "counts, summed on the driver from its manifests) and register it in the same commit",
    )
    parser.add_argument(
        "--partition-stats-only",
        action="store_true",
        help="write only the partition statistics file: no column sketches, no Spark session",
    )
    add_run_arguments(parser)


# The options class the command line builds (jobs.common.context's contract).
Options = ComputeStatsOptions
# Iceberg tables only: a Delta table is refused whole, before it is read (jobs.common.formats).
DELTA_OPTIONS = None


def run(options: ComputeStatsOptions, context: JobContext) -> JobResult:
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_compute_stats(options, catalog, identifier, context)
