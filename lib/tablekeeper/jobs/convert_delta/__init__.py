"""convert-delta: Delta versions as Iceberg snapshots, by log replay.

Data files stay where they are: the Iceberg table references the Delta table's Parquet files, so
its ``gc.enabled`` is false (no Iceberg maintenance may delete Delta's files). Deletion vectors
become v3 DVs (the Delta bytes are Iceberg's blob format: copied into a Puffin file) or v2
position delete files; none is ever dropped.

Each converted version is one snapshot, built from the difference between two Delta states (by
data file path) and committed together with the schema, spec and the ``tablekeeper.delta.version``
property it reaches: the property is the resume point of ``--mode incremental`` and can never be
ahead of or behind the snapshots. ``--history all`` records every version from the oldest that
can still be reconstructed; ``latest`` one snapshot for the newest.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql import SparkSession

from tablekeeper import faults
from tablekeeper.catalog import Catalog, LoadedTable, delta_source
from tablekeeper.clock import now_ms
from tablekeeper.commit.staged import staged_table
from tablekeeper.commit.transaction import RetryPolicy
from tablekeeper.delta.diff import diff_files
from tablekeeper.delta.segment import oldest_reconstructable
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.errors import (
    CommitConflict,
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    DataFileGone,
)
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.context import JobContext, add_run_arguments, add_table_arguments
from tablekeeper.jobs.common.engines import delta_replay, replays_on_spark
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.jobs.convert_delta.delta_files import target_state
from tablekeeper.jobs.convert_delta.executors import convert_on_executors
from tablekeeper.jobs.convert_delta.rewrite import REWRITTEN_PROPERTY, as_delta_paths
from tablekeeper.jobs.convert_delta.vacuum import expire_broken, vacuum_exposed
from tablekeeper.jobs.convert_delta.verify import Verifier, verify_rows
from tablekeeper.jobs.convert_delta.versions import (
    DELTA_VERSION_SUMMARY,
    DISTRIBUTE_ABOVE,
    HISTORY_PROPERTY,
    JOB,
    NAME_MAPPING_PROPERTY,
    SOURCE_PROPERTY,
    VERSION_PROPERTY,
    ConvertDeltaOptions,
    ConvertPlan,
    Totals,
    assumed_zone,
    columns,
    commit_version,
    create_target,
    evolve,
    with_partition_zone,
    zoneless_columns,
)
from tablekeeper.tables.delta import (
    Replay,
    history,
    list_log,
    load_snapshot,
    normalise_root,
    readable_segment,
    segment_bytes,
    touched_paths,
)

__all__ = [
    "DISTRIBUTE_ABOVE",
    "DISTRIBUTE_LOG_BYTES",
    "JOB",
    "NAME_MAPPING_PROPERTY",
    "SOURCE_PROPERTY",
    "VERSION_PROPERTY",
    "ConvertDeltaOptions",
    "ConvertPlan",
    "evolve",
    "execute_convert",
    "plan_convert",
    "run_convert",
]

log = logging.getLogger(__name__)

# Above this much log (checkpoint + commits) a full conversion keeps the Delta state in Spark and
# builds data files on the executors, so the driver never holds one object per file. Below it the
# driver alone is faster (100,000 files: 18 s against 39 s on 2 cores) and stays under 1 GiB.
DISTRIBUTE_LOG_BYTES = 64 * 1024 * 1024


def _existing(catalog: Catalog, target: str) -> LoadedTable | None:
    return catalog.load_table(target) if catalog.table_exists(target) else None


def plan_convert(options: ConvertDeltaOptions, catalog: Catalog) -> ConvertPlan:
    root = normalise_root(options.source)
    io = FileIO.for_location(root)
    entries = list_log(io, root)
    # The latest version's segment, checked as any read would check it (gaps, missing commits,
    # a checkpoint that cannot be read).
    segment, detours = readable_segment(io, root, entries)
    latest = segment.version
    oldest = oldest_reconstructable(entries, root) if options.history == "all" else latest
    table = _existing(catalog, options.target)

    def every(first: int) -> tuple[int, ...]:
        return tuple(range(first, latest + 1)) if options.history == "all" else (latest,)

    def plan(
        mode: str,
        versions: tuple[int, ...],
        base: int | None,
        resync: bool,
        format_version: int,
        exists: bool,
        note: str | None = None,
    ) -> ConvertPlan:
        said = "; ".join([*detours, *([note] if note else [])]) or None
        return ConvertPlan(
            root, mode, latest, versions, base, resync, format_version, exists, said, tuple(entries), segment
        )

    if table is None or VERSION_PROPERTY not in table.metadata.properties:
        if table is not None and table.metadata.properties.get(SOURCE_PROPERTY) != root:
            raise ConfigError(
                f"target {options.target} already exists and was not converted from {root}: "
                "pick another target or drop it"
            )
        # A target this job created but never committed to (a failed first run) is reused.
        return plan("full", every(oldest), None, False, options.format_version, table is not None)
    props = table.metadata.properties
    if props.get(SOURCE_PROPERTY) != root:
        raise ConfigError(
            f"target {options.target} was converted from {props.get(SOURCE_PROPERTY)}, not {root}: "
            "pick the matching source or another target"
        )
    last = int(props[VERSION_PROPERTY])
    if options.mode == "full":
        if last == latest and _converted_as_asked(table.metadata, options, oldest):
            # The same command ran to completion (perhaps killed just after): its work is done.
            return plan("full", (), last, False, table.metadata.format_version, True, "already converted")
        raise ConfigError(
            f"target {options.target} already exists: use --mode incremental to bring it up to date, "
            "or drop it for a full conversion"
        )
    fv = table.metadata.format_version
    if last > latest:
        raise ConfigError(
            f"target {options.target} is at Delta version {last} but {root} only has up to {latest}: "
            "the source was replaced; convert it into a new target"
        )
    if last == latest:
        return plan("incremental", (), last, False, fv, True, "already up to date")
    first_kept = oldest_reconstructable(entries, root)
    if first_kept <= last:
        versions = every(last + 1)
        return plan("incremental", versions, last, False, fv, True)
    note = (
        f"the Delta log before version {first_kept} was cleaned up, so version {last} can no longer be "
        "read: re-synced from the target's own files"
    )
    return plan("incremental", every(first_kept), last, True, fv, True, note)


def _converted_as_asked(meta: TableMetadata, options: ConvertDeltaOptions, oldest: int) -> bool:
    """Whether a target holds what this full conversion would make of the source: same format
    version and, with all history, a snapshot for every version from the oldest on."""
    if meta.format_version != options.format_version:
        return False
    if options.history != "all":
        return True
    versions = {s.summary.get(DELTA_VERSION_SUMMARY) for s in meta.snapshots}
    latest = int(meta.properties[VERSION_PROPERTY])
    if meta.properties.get(HISTORY_PROPERTY) == "all":
        # Converted with all history, and published all at once: versions missing were expired
        # (or never committed) because Delta's VACUUM removed files they reach, below the oldest
        # snapshot left or between two.
        return str(latest) in versions
    return all(str(v) in versions for v in range(oldest, latest + 1))


def _states(
    plan: ConvertPlan, options: ConvertDeltaOptions, spark: SparkSession | None
) -> Iterator[DeltaSnapshot]:
    replay = _replay(options, spark)
    if options.history == "all":
        # From the base (when readable) so each version is one commit applied to the one before.
        start = plan.base_version if plan.base_version is not None and not plan.resync else plan.versions[0]
        yield from history(plan.root, start=start, end=plan.latest_version, replay=replay)
        return
    if plan.base_version is not None and not plan.resync:
        assert plan.latest_segment is not None
        if replays_on_spark(_replay_engine(options, spark), plan.latest_segment):
            # Only what the new commits touch can differ: those files of both states come to
            # the driver, not two whole states (a million files each).
            io = FileIO.for_location(plan.root)
            paths = touched_paths(io, plan.root, plan.base_version + 1, plan.latest_version)
            replay = _replay(options, spark, paths)
            for version in (plan.base_version, plan.latest_version):
                yield load_snapshot(plan.root, version=version, replay=replay, io=io).restricted(paths)
            return
        yield load_snapshot(plan.root, version=plan.base_version, replay=replay)
    yield load_snapshot(plan.root, version=plan.latest_version, replay=replay)


def _replay_engine(options: ConvertDeltaOptions, spark: SparkSession | None) -> str:
    """Spark when asked for and there; else Spark only for logs too large for this process."""
    return "spark" if options.engine == "spark" and spark is not None else "auto"


def _replay(
    options: ConvertDeltaOptions, spark: SparkSession | None, paths: Sequence[str] | None = None
) -> Replay | None:
    return delta_replay(_replay_engine(options, spark), spark, paths)


def _distributed_full(plan: ConvertPlan, options: ConvertDeltaOptions, spark: SparkSession | None) -> bool:
    """A full, latest-only conversion whose files are built on the executors."""
    if spark is None or options.engine == "driver" or options.history != "latest":
        return False
    if options.rewrite_unreadable_files:
        return False  # the driver decides, file by file, what to rewrite
    if plan.base_version is not None or plan.resync or not plan.versions:
        return False
    if options.engine == "spark":
        return True
    assert plan.latest_segment is not None
    return segment_bytes(plan.latest_segment) > DISTRIBUTE_LOG_BYTES


def execute_convert(
    plan: ConvertPlan, options: ConvertDeltaOptions, catalog: Catalog, spark: SparkSession | None = None
) -> dict[str, object]:
    """Convert the planned versions into a staged copy of the target and publish it in one
    catalog operation (``commit.staged``): readers see the target before or after the run, never
    part of it, and a run that dies leaves files its staging journal names for the next."""
    base = catalog.require(options.target) if plan.target_exists else None
    totals = Totals()
    try:
        with staged_table(catalog, options.target, base, JOB) as run:
            metrics, latest = _convert(plan, options, run.table, spark, run.token, totals)
    except CommitStateUnknown:
        raise  # the target may reference the rewritten files: they stay
    except Exception:
        # Rewrites are named after their Delta files, not the run: staging does not know them.
        if totals.created:
            FileIO.for_location(totals.created[0]).delete_many(totals.created)
        raise
    metrics["resumed_journal"] = run.resumed
    if catalog.table_exists(options.target):
        # Also when nothing was converted: time alone moves Delta's removals past retention.
        def state(paths: Sequence[str]) -> DeltaSnapshot:
            # A history replay's states hold one commit's removes; VACUUM needs them all.
            if latest is not None and options.history == "latest":
                return latest
            replay = _replay(options, spark, paths)
            return load_snapshot(plan.root, version=plan.latest_version, replay=replay).restricted(paths)

        metrics["expired_for_vacuum"] = expire_broken(
            catalog, options.target, plan.latest_version, state, now_ms(), spark
        )
    return metrics


def _convert(
    plan: ConvertPlan,
    options: ConvertDeltaOptions,
    catalog: Catalog,
    spark: SparkSession | None,
    token: str,
    totals: Totals,
) -> tuple[dict[str, object], DeltaSnapshot | None]:
    """The run's metrics and the newest Delta state it converted (None when the executors held
    it, or nothing was converted); ``totals`` gathers what it did."""
    latest: DeltaSnapshot | None = None
    gone: dict[int, str] = {}  # Delta versions not converted: a file they reach is already gone
    size: int | None = None
    verifier = (
        Verifier(FileIO.for_location(plan.root), options.verify, zone=options.partition_zone)
        if options.verify != "off"
        else None
    )
    if _distributed_full(plan, options, spark):
        assert spark is not None
        size = convert_on_executors(plan, options, catalog, spark, totals, token, verifier)
    elif plan.versions:
        previous: pa.Table | None = None
        rewrites_in: str | None = None  # the target's location when it references rewrites
        if plan.resync:
            target = catalog.require(options.target)
            previous = target_state(target)
            if REWRITTEN_PROPERTY in target.metadata.properties:
                rewrites_in = target.metadata.location
        wanted = set(plan.versions)
        prev_version: int | None = None
        for snap in _states(plan, options, spark):
            if rewrites_in is not None and previous is not None:
                previous, rewrites_in = as_delta_paths(previous, snap.files, rewrites_in), None
            if snap.version not in wanted:
                previous, prev_version = columns(snap.files), snap.version
                continue
            # Tombstones describe one commit only when this state is one commit after the last.
            stepwise = prev_version is not None and snap.version == prev_version + 1
            diff = diff_files(previous, snap.files, snap.tombstones if stepwise else None)
            try:
                if not catalog.table_exists(options.target):
                    create_target(options, plan, catalog, snap)
                commit_version(snap, diff, options, catalog, spark, totals, token, plan.log)
            except DataFileGone as err:
                if snap.version == plan.latest_version:
                    raise  # the newest version itself lacks a file: the Delta table is broken
                # A file VACUUM already deleted and only its footer could count: the snapshot
                # would reach a file already gone, which every run expires. It is never made;
                # the next version is diffed against the last one committed.
                log.info("Delta version %d not converted: %s", snap.version, err.message)
                gone.setdefault(snap.version, err.path)
                continue
            if verifier is not None:
                _verify(verifier, snap, catalog, options, spark, token)
            previous, prev_version = columns(snap.files), snap.version
            latest = None if snap.partial else snap
    metrics: dict[str, object] = {
        "delta_version": plan.latest_version,
        "from_delta_version": plan.base_version,
        "versions_converted": (plan.latest_version - plan.base_version)
        if plan.base_version is not None
        else len(plan.versions),
        "snapshots_committed": totals.snapshots,
        "snapshot_id": totals.last_snapshot_id,
        "data_files": totals.data_files,
        "data_files_removed": totals.removed_data_files,
        "rewritten_files": totals.rewritten,
        "delete_files": totals.delete_files,
        "manifests": totals.manifests,
        "bytes_referenced": size
        if size is not None
        else (_bytes(latest.files) if latest is not None else None),
        "mode": plan.mode,
        "history": options.history,
        "resynced": plan.resync,
        "note": plan.note,
        "format_version": plan.format_version,
        "manifest_writer": "executors" if totals.executors_used else "driver",
        "verified": verifier.metrics() if verifier is not None else None,
        "row_lineage": totals.lineage.metrics() if totals.lineage is not None else None,
        "partition_timezone": options.partition_timezone,
        "partition_timezone_assumed": assumed_zone(totals.zoneless),
    }
    if gone:
        metrics["not_converted_for_vacuum"] = {
            "delta_versions": sorted(gone),
            "reason": "they reach a file already gone whose record count only its footer had "
            f"(e.g. {next(iter(gone.values()))})",
        }
    return metrics, latest


def _verify(
    verifier: Verifier,
    snap: DeltaSnapshot,
    catalog: Catalog,
    options: ConvertDeltaOptions,
    spark: SparkSession | None,
    token: str,
) -> None:
    table = catalog.require(options.target)
    verifier.check(snap, table.metadata)
    if options.verify == "rows":
        assert spark is not None
        verify_rows(verifier, spark, snap, table.metadata, token)


def _bytes(files: pa.Table) -> int:
    sizes: Iterable[int | None] = files.column("size").to_pylist()
    return sum(s or 0 for s in sizes)


def run_convert(
    options: ConvertDeltaOptions, catalog: Catalog, spark: SparkSession | None = None
) -> JobResult:
    clock = JobClock()
    existing = _existing(catalog, options.target)
    options = with_partition_zone(options, existing.metadata if existing is not None else None)
    if options.verify == "rows" and spark is None and not options.dry_run:
        raise ConfigError("--verify rows counts rows through Spark: run it with a Spark session")
    if not options.dry_run:
        return clock.result(JOB, options.target, dry_run=False, metrics=_run(options, catalog, spark))
    plan = plan_convert(options, catalog)
    metrics: dict[str, object] = {
        "delta_version": plan.latest_version,
        "from_delta_version": plan.base_version,
        "versions_to_convert": list(plan.versions),
        "mode": plan.mode,
        "resync": plan.resync,
        "note": plan.note,
        "format_version": plan.format_version,
        "partition_timezone": options.partition_timezone,
    }
    snap = load_snapshot(plan.root, version=plan.latest_version)
    if options.partition_timezone is None:
        metrics["partition_timezone_assumed"] = assumed_zone(zoneless_columns(snap, snap.files))
    if catalog.table_exists(options.target):
        metrics["would_expire_for_vacuum"] = vacuum_exposed(
            catalog.require(options.target), plan.latest_version, snap, now_ms()
        )
    if plan.versions:
        without_dv = snap.files.column("dv_id").null_count
        metrics |= {
            "data_files": snap.num_files,
            "files_with_deletion_vectors": snap.num_files - without_dv,
            "bytes_referenced": _bytes(snap.files),
            "partition_columns": list(snap.partition_columns),
        }
    return clock.result(JOB, options.target, dry_run=True, metrics=metrics)


def _run(options: ConvertDeltaOptions, catalog: Catalog, spark: SparkSession | None) -> dict[str, object]:
    """Plan and convert; a target another writer changed while the run staged is planned again
    (the staged files are removed), up to the table's commit retries."""
    attempt = 0
    while True:
        plan = plan_convert(options, catalog)
        faults.kill_point("plan.done")
        try:
            return execute_convert(plan, options, catalog, spark)
        except CommitFailed as err:
            retries = 0
            if plan.target_exists:
                retries = RetryPolicy.from_metadata(catalog.require(options.target).metadata).num_retries
            if attempt >= retries:
                raise CommitConflict(
                    f"{options.target} kept changing while it was converted ({err.message}); run again"
                ) from err
            log.info("the target moved while staging (%s): converting again", err.message)
            attempt += 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        required=True,
        help="Delta table path or URI, or <catalog>.<database>.<table> for a Delta table a catalog "
        "registers by name (glue, hive)",
    )
    parser.add_argument("--target", required=True, help="<namespace>.<table> in the Iceberg catalog")
    add_table_arguments(parser, flag="--target")
    parser.add_argument(
        "--mode",
        default="full",
        choices=["full", "incremental"],
        help="full: (re)create the target; incremental: convert only the versions after the one it holds",
    )
    parser.add_argument(
        "--history",
        default="latest",
        choices=["latest", "all"],
        help="latest: one snapshot of the newest version; all: a snapshot per Delta version",
    )
    parser.add_argument(
        "--format-version", type=int, default=2, choices=[2, 3], help="the target's Iceberg format version"
    )
    parser.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "driver", "spark"],
        help="who writes manifests (auto: the executors of a spark-submit session for large tables)",
    )
    parser.add_argument(
        "--verify",
        nargs="?",
        const="metadata",
        default="off",
        choices=["off", "metadata", "rows"],
        help="check every converted version before publishing: live rows per partition from both "
        "sides' metadata (--verify or --verify metadata), also counted through Spark (rows)",
    )
    parser.add_argument(
        "--partition-timezone",
        metavar="ZONE",
        help="IANA zone (e.g. America/New_York) of the Spark session that wrote the table's "
        "timestamp partition values without a zone; default: the catalog's "
        "delta-partition-timezone, else UTC (the result says when it was assumed)",
    )
    parser.add_argument(
        "--rewrite-unreadable-files",
        action="store_true",
        help="rewrite into the target's location the Delta data files Iceberg readers cannot read "
        "(column-mapped lists/maps without nested field ids, columns widened beyond Iceberg's "
        "promotions), with field ids and the Iceberg types; all other files stay in place",
    )
    add_run_arguments(parser)


# The options class the command line builds (jobs.common.context's contract).
Options = ConvertDeltaOptions
# No --table: --source is a Delta table and --target an Iceberg one by role (jobs.common.formats).
DELTA_OPTIONS = None


def run(options: ConvertDeltaOptions, context: JobContext) -> JobResult:
    # The catalogs file's default for the target's catalog (validated when the file was read).
    default = context.catalogs.get(options.catalog).delta_partition_timezone
    # A Delta table registered in a catalog by name (Glue, a metastore) is converted from where it lives.
    source = delta_source(options.source, context.catalogs)
    options = replace(options, default_partition_timezone=default, source=source)
    counting = options.verify == "rows" and not options.dry_run
    spark = context.spark() if counting else context.session_for(options.engine)
    return run_convert(options, context.catalog(options.catalog), spark)
