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
from tablekeeper.iceberg.metadata import Snapshot, StatisticsFile, TableMetadata
from tablekeeper.iceberg.statistics import (
    THETA_BLOB_TYPE,
    StatsColumn,
    ThetaBlob,
    ndv,
    resolve_columns,
    statistics_file,
    write_statistics,
)
from tablekeeper.iceberg.updates import set_statistics
from tablekeeper.io.uri import join_location
from tablekeeper.jobs.common.context import (
    JobContext,
    add_run_arguments,
    add_table_arguments,
    options_from_args,
)
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.tables.iceberg import metadata_directory

log = logging.getLogger(__name__)

JOB = "compute-stats"


@dataclass(frozen=True)
class ComputeStatsOptions:
    table: str
    columns: tuple[str, ...] | None = None  # None: Java's default columns
    snapshot_id: int | None = None  # None: the current snapshot
    recompute: bool = False
    dry_run: bool = False
    catalog: str | None = None

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


def plan_stats(meta: TableMetadata, identifier: str, options: ComputeStatsOptions) -> StatsPlan | None:
    """What would be computed; None when the table has no snapshot (nothing to do)."""
    if options.snapshot_id is not None:
        snapshot = meta.snapshot(options.snapshot_id)
        if snapshot is None:
            recent = [s.snapshot_id for s in meta.snapshots[-5:]]
            raise ConfigError(
                f"--snapshot {options.snapshot_id} is not a snapshot of {identifier}: use one of "
                f"{recent or 'none (the table has no snapshots)'}"
            )
    else:
        snapshot = meta.current_snapshot()
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


def run_compute_stats(
    options: ComputeStatsOptions, catalog: Catalog, identifier: str, context: JobContext
) -> JobResult:
    clock = JobClock()
    table = catalog.require(identifier)
    require_home(table, identifier, JOB)  # a copied table would write into the original
    plan = plan_stats(table.metadata, identifier, options)
    if plan is None:
        metrics: dict[str, object] = {
            "snapshot_id": None,
            "columns": [],
            "statistics_file": None,
            "note": "the table has no snapshot: nothing to do",
        }
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics)
    metrics = plan.metrics()
    # An entry whose Puffin file is gone covers nothing: readers find no sketches there.
    missing = plan.existing is not None and not table.io.exists(plan.existing.statistics_path)
    if missing:
        assert plan.existing is not None
        metrics["note"] = f"statistics file {plan.existing.statistics_path} is missing: recomputed"
    if plan.covered and not options.recompute and not missing:
        assert plan.existing is not None
        metrics |= {
            "statistics_file": plan.existing.statistics_path,
            "replaced_statistics_file": None,
            "note": "the snapshot already has sketches of these columns: nothing to do (--recompute to redo)",
        }
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics)
    if options.dry_run:
        metrics["statistics_file"] = None
        return clock.result(JOB, identifier, dry_run=True, metrics=metrics)
    faults.kill_point("plan.done")
    metrics |= _execute(plan, table, catalog, identifier, context)
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def _execute(
    plan: StatsPlan, table: LoadedTable, catalog: Catalog, identifier: str, context: JobContext
) -> dict[str, object]:
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
    faults.kill_point("stage.written")
    entry = statistics_file(path, snap.snapshot_id, puffin)
    try:
        Committer(catalog, identifier).update_metadata(
            lambda base, now_ms: set_statistics(base, entry, timestamp_ms=now_ms)
        )
    except CommitStateUnknown:
        raise  # the new metadata may be live and name the file: it stays
    except Exception:
        # Known not committed (conflict, a refused update, I/O before the swap): nobody refers to it.
        table.io.delete(path, missing_ok=True)
        raise
    log.info("statistics of snapshot %d of %s in %s", snap.snapshot_id, identifier, path)
    return {
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
        help="compute even when the snapshot already has sketches of these columns",
    )
    add_run_arguments(parser)


# The options class the command line builds (jobs.common.context's contract).
Options = ComputeStatsOptions
# Iceberg tables only: a Delta table is refused whole, before it is read (jobs.common.formats).
DELTA_OPTIONS = None


def run(options: ComputeStatsOptions, context: JobContext) -> JobResult:
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_compute_stats(options, catalog, identifier, context)
