"""compact: rewrite small (or too large, or heavily deleted) data files into files of the target
size, with deletes applied and row lineage kept.

Plan (``iceberg.rewrite_plan``): Iceberg's ``rewrite_data_files`` rules pick files and pack them
into groups per partition. Execute (``spark.rewrite``): each group is read on Spark by field id
with its position deletes, DVs and equality deletes applied, and written as Parquet (sorted with
``--strategy sort``). Commit: one ``replace`` snapshot for all groups, or one per batch of groups
with ``--partial-progress``. Each commit keeps the starting snapshot's data sequence number for
the new files (equality deletes committed meanwhile still apply to them) and fails, cleaning up
its new files, when a file it replaces was removed or got new position deletes since the start;
with ``--partial-progress`` the partitions of such groups are then planned again on the table as
it is and committed group by group (``_replan``), so a live writer does not starve compaction.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import SparkSession

from tablekeeper import faults, progress
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.commit.producer import SnapshotChange
from tablekeeper.commit.service import Staging, finish_dead_runs, staging
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import (
    CommitConflict,
    CommitStateUnknown,
    ConfigError,
    TablekeeperError,
    UnsupportedFeatureError,
    as_error,
)
from tablekeeper.files.containment import require_home
from tablekeeper.files.engine import Engine, task_failure
from tablekeeper.files.finish import pending_journals
from tablekeeper.files.journal import Staged
from tablekeeper.files.local import IndexCache
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.content import DataFile, ManifestEntry
from tablekeeper.iceberg.delete_index import DeleteIndex, field_lookup
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.rewrite_plan import FileGroup, FileTask, RewriteOptions, RewritePlan, plan_rewrite
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.context import JobContext, delta_root
from tablekeeper.jobs.common.engines import SparkSource, choose_engine
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.jobs.compact import options as compact_options
from tablekeeper.jobs.compact import order as compact_order
from tablekeeper.jobs.compact.options import CompactOptions, Writer
from tablekeeper.jobs.compact.order import RowOrder
from tablekeeper.spark.arrow_rewrite import arrow_blocker
from tablekeeper.spark.data_read import path_key
from tablekeeper.spark.rewrite import (
    WriteTarget,
    new_directory,
    rewrite_conf,
    rewrite_files,
)
from tablekeeper.spark.where import files_matching
from tablekeeper.tables.iceberg import live_files

log = logging.getLogger(__name__)

JOB = "compact"
COMPRESSION = "write.parquet.compression-codec"
_CODECS = {
    "zstd": "zstd",
    "snappy": "snappy",
    "gzip": "gzip",
    "lz4": "lz4",
    "uncompressed": "none",
    "none": "none",
}


@dataclass
class _Outcome:
    group: FileGroup
    added: tuple[DataFile, ...] = ()
    directories: tuple[str, ...] = ()
    error: str | None = None
    # The class of the group's failure: the run's failure keeps it (a corrupt input exits 3).
    failure: type[TablekeeperError] = TablekeeperError
    writers: tuple[str, ...] = ()
    committed: bool = False
    snapshot_id: int | None = None
    # --partial-progress: its commit met a concurrent change to its files; its partition was
    # planned again on the table as it then was (``replanned_as``: the groups that replaced it).
    conflict: str | None = None
    replanned_as: tuple[int, ...] = ()


class _Session:
    """The Spark session, started the first time the run needs it."""

    def __init__(self, source: SparkSession | Callable[[], SparkSession]) -> None:
        self._source = source
        self._spark: SparkSession | None = None

    def get(self) -> SparkSession:
        if self._spark is None:
            self._spark = self._source() if callable(self._source) else self._source
        return self._spark

    def source(self) -> SparkSource:
        return self._spark if self._spark is not None else self.get


def _engine(table: LoadedTable, session: _Session) -> Callable[[], Engine]:
    """The engine that finishes dead runs' journals, built only when there is one."""
    return lambda: choose_engine("auto", table.metadata, session.source(), JOB, PathRules(), IndexCache())


def plan(
    spark: SparkSession | _Session, table: LoadedTable, options: CompactOptions
) -> tuple[RewritePlan, RewriteOptions]:
    meta = table.metadata
    rewrite = options.rewrite_options(dict(meta.properties))
    snapshot = meta.ref_snapshot(options.branch)
    if snapshot is None:
        return RewritePlan((), 0, 0), rewrite
    files = live_files(table.io, meta, snapshot)
    # Java's planning skips an equality delete a data file's statistics rule out: so do rewrites.
    index = DeleteIndex(files.deletes, meta.unpartitioned_spec_ids, field_lookup(meta.schemas))
    matches = None
    if options.where:
        session = spark.get() if isinstance(spark, _Session) else spark
        session.sparkContext.setJobDescription(f"{JOB}: files with rows where {options.where}")
        with rewrite_conf(session):
            keys = files_matching(session, meta, [e.data_file for e in files.data], options.where)

        def matches(entry: ManifestEntry) -> bool:
            return path_key(entry.data_file.file_path) in keys

    scope = compact_order.coerce_into(meta, compact_order.output_spec(options, meta))
    return plan_rewrite(files.data, index, rewrite, matches, scope), rewrite


def _group_json(o: _Outcome | FileGroup) -> dict[str, object]:
    g = o.group if isinstance(o, _Outcome) else o
    out: dict[str, object] = {
        "group": g.index,
        "spec_id": g.spec_id,
        "partition": list(g.partition),
        "files": len(g.tasks),
        "bytes": g.input_size,
        "delete_files": len(g.delete_files),
        "expected_output_files": g.expected_output_files,
    }
    if isinstance(o, _Outcome):
        out |= {
            "added_files": len(o.added),
            "writer": "+".join(sorted(set(o.writers))),
            "committed": o.committed,
        }
        if o.error:
            out["error"] = o.error
        if o.conflict:
            out["conflict"] = o.conflict
            out["replanned_as"] = list(o.replanned_as)
    return out


def _targets(
    group: FileGroup,
    meta: TableMetadata,
    rewrite: RewriteOptions,
    order: RowOrder,
    token: str,
    writer: Writer,
) -> list[tuple[list[FileTask], WriteTarget]]:
    """One write per partition among the group's files of the output spec, and one for its files
    of other specs (their rows are partitioned by the output spec as they are written). Spark's
    writer cannot repartition rows: with it, files of other specs are rewritten within their own
    spec and partition."""
    codec = meta.properties.get(COMPRESSION, "zstd").lower()
    if codec not in _CODECS:
        raise UnsupportedFeatureError(f"{COMPRESSION}={codec} is not a Parquet codec tablekeeper writes")
    own_spec = writer == "spark" or arrow_blocker(meta, _CODECS[codec]) is not None
    by_scope: dict[tuple[int, tuple[Any, ...]], list[FileTask]] = {}
    for t in group.tasks:
        scope = (
            (t.file.spec_id, partition_key(t.file.partition))
            if t.file.spec_id == order.spec.spec_id or own_spec
            else (-1, ())
        )
        by_scope.setdefault(scope, []).append(t)
    root = meta.data_location
    out = []
    for (spec_id, _), tasks in by_scope.items():
        size = sum(t.size for t in tasks)
        records = max(1, sum(t.file.record_count for t in tasks))
        per_record = max(1.0, size / records)
        target = WriteTarget(
            spec=meta.spec(spec_id) if spec_id >= 0 else order.spec,
            # the values (the key compares floats by bits)
            partition=tasks[0].file.partition if spec_id >= 0 else None,
            directory=new_directory(root, f"{token}-g{group.index}"),
            compression=_CODECS[codec],
            max_records_per_file=max(1, int(rewrite.write_max_file_size / per_record)),
            output_files=rewrite.expected_output_files(size),
            sizes=(rewrite.target_file_size, rewrite.min_file_size, rewrite.max_file_size),
            ordering=order.ordering,
            global_sort=order.global_sort,
        )
        out.append((tasks, target))
    return out


def _rewrite_group(
    spark: SparkSession,
    meta: TableMetadata,
    group: FileGroup,
    rewrite: RewriteOptions,
    order: RowOrder,
    writer: Writer,
    token: str,
) -> _Outcome:
    outcome = _Outcome(group)
    spark.sparkContext.setJobDescription(f"{JOB}: group {group.index} ({len(group.tasks)} files)")
    added: list[DataFile] = []
    directories: list[str] = []
    try:
        for tasks, target in _targets(group, meta, rewrite, order, token, writer):
            directories.append(target.directory)
            done = rewrite_files(spark, meta, tasks, target, order.sort_order_id, writer)
            added.extend(done.files)
            outcome.writers += (done.writer,)
    except Exception as err:
        typed = err if isinstance(err, TablekeeperError) else task_failure(err, "rewrite")
        outcome.error = typed.message
        outcome.failure = type(typed)
        _clean(directories)
        directories = []
        added = []
    outcome.added = tuple(added)
    outcome.directories = tuple(directories)
    return outcome


def _clean(directories: Sequence[str]) -> None:
    for d in directories:
        try:
            io = FileIO.for_location(d)
            io.delete_many([i.location for i in io.list(d, recursive=True)])
        except TablekeeperError as err:
            log.warning("could not remove %s: %s", d, err.message)


def _commit(
    catalog: Catalog,
    identifier: str,
    start: TableMetadata,
    branch: str,
    batch: Sequence[_Outcome],
    file_prefix: str,
) -> int:
    """Commit a batch of rewritten groups; returns the delete files the commit removed."""
    snapshot = start.ref_snapshot(branch)
    assert snapshot is not None
    removed = frozenset(t.file.file_path for o in batch for t in o.group.tasks)
    added = tuple(f for o in batch for f in o.added)
    change = SnapshotChange(
        operation="replace",
        added_files=added,
        removed_paths=removed,
        branch=branch,
        data_sequence_number=snapshot.sequence_number if start.format_version >= 2 else None,
        validate_deletes_since=snapshot.snapshot_id,
        drop_obsolete_deletes=True,
        summary={"tablekeeper.job": JOB},
    )
    try:
        result = Committer(catalog, identifier, file_prefix=file_prefix).commit_snapshot(change)
    except CommitStateUnknown as err:
        for o in batch:  # the new metadata may be live and name these files: keep them
            o.error = f"commit state unknown: {err.message}"
        raise
    except Exception as err:
        _clean([d for o in batch for d in o.directories])
        message = err.message if isinstance(err, TablekeeperError) else f"{err.__class__.__name__}: {err}"
        for o in batch:
            o.error = f"commit failed: {message}"
        if isinstance(err, TablekeeperError):
            raise
        raise TablekeeperError(f"{JOB} {identifier}: commit failed, new files removed ({message})") from err
    for o in batch:
        o.committed = True
        o.snapshot_id = result.snapshot.snapshot_id if result.snapshot is not None else None
    summary = result.snapshot.summary if result.snapshot is not None else {}
    return int(summary.get("removed-delete-files", "0"))


def run_compact(
    options: CompactOptions,
    catalog: Catalog,
    identifier: str,
    spark: SparkSession | Callable[[], SparkSession],
) -> JobResult:
    clock = JobClock()
    if options.max_commits < 1 or options.max_concurrent_groups < 1:
        raise ConfigError("--max-commits and --max-concurrent-groups must be at least 1")
    table = catalog.require(identifier)
    require_home(table, identifier, JOB)  # a copied table would write into the original
    meta = table.metadata
    order = compact_order.resolve(options, meta)
    compact_order.refuse_unwritable(options, meta, order)
    session = _Session(spark)
    the_plan, rewrite = plan(session, table, options)
    compact_order.check_plan(order, meta, [t.file.spec_id for g in the_plan.groups for t in g.tasks])
    faults.kill_point("plan.done")
    metrics: dict[str, object] = {
        "strategy": options.strategy,
        "target_file_size_bytes": rewrite.target_file_size,
        "live_data_files": the_plan.live_files,
        "skipped_non_parquet_files": the_plan.skipped_files,
        "planned_groups": the_plan.planned_groups,
        "files_to_rewrite": the_plan.files,
        "bytes_to_rewrite": the_plan.bytes,
    }
    if options.dry_run or not the_plan.groups:
        metrics["groups"] = [_group_json(g) for g in the_plan.groups]
        if not the_plan.groups:
            metrics["note"] = "nothing to rewrite"
        metrics |= _counts([], 0)
        if options.dry_run:
            journals = pending_journals(table.io, meta.location)
            if journals:
                metrics["journals_to_finish"] = journals
        else:
            metrics["resumed_journal"] = finish_dead_runs(
                table.io, meta.location, lambda: catalog.require(identifier), _engine(table, session)
            )
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics)
    metadata_dir = f"{meta.location.rstrip('/')}/metadata"
    with staging(
        catalog,
        identifier,
        job=JOB,
        io=table.io,
        location=meta.location,
        base_metadata=table.metadata_location,
        staged=lambda token: (
            Staged(meta.data_location, f"compact-{token}-", directories=True),
            Staged(metadata_dir, token),  # a killed commit's manifests
        ),
        engine=_engine(table, session),
    ) as run:
        metrics["resumed_journal"] = run.resumed
        outcomes, removed_deletes = _execute(
            options, catalog, identifier, session.get(), meta, the_plan, rewrite, order, run
        )
    metrics |= _counts(outcomes, removed_deletes)
    metrics["groups"] = [_group_json(o) for o in outcomes]
    metrics["snapshot_ids"] = sorted({o.snapshot_id for o in outcomes if o.snapshot_id is not None})
    if order.ordering.zorder is not None:
        committed = [o for o in outcomes if o.committed]
        ids = order.ordering.zorder_ids
        metrics["clustering"] = {
            "measure": "average fraction of files a 1% range of the column overlaps",
            "before": compact_order.clustering(meta, ids, [t.file for o in committed for t in o.group.tasks]),
            "after": compact_order.clustering(meta, ids, [f for o in committed for f in o.added]),
        }
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def _execute(
    options: CompactOptions,
    catalog: Catalog,
    identifier: str,
    spark: SparkSession,
    meta: TableMetadata,
    the_plan: RewritePlan,
    rewrite: RewriteOptions,
    order: RowOrder,
    run: Staging,
) -> tuple[list[_Outcome], int]:
    groups = the_plan.groups
    per_commit = -(-len(groups) // options.max_commits) if options.partial_progress else len(groups)
    lock = threading.Lock()
    removed_deletes: list[int] = []
    attempted: list[int] = []
    pending: list[_Outcome] = []
    outcomes: list[_Outcome] = []
    failures: list[TablekeeperError] = []

    conflicts: list[_Outcome] = []

    def commit(batch: list[_Outcome], start: TableMetadata = meta) -> None:
        attempted.append(len(batch))
        try:
            removed_deletes.append(
                run.commit(
                    lambda: _commit(catalog, identifier, start, options.branch, batch, run.token),
                    (f.file_path for o in batch for f in o.added),
                )
            )
        except CommitStateUnknown:
            raise  # the service refuses every later commit; the run's files stay
        except CommitConflict as err:
            if not options.partial_progress:
                raise
            # A concurrent writer changed files of this batch: its partitions are planned again
            # once the other groups are done; the rest of the run goes on.
            log.warning("groups %s met a concurrent commit: %s", [o.group.index for o in batch], err.message)
            attempted.pop()
            for o in batch:
                o.conflict = err.message
            conflicts.extend(batch)
        except TablekeeperError as err:
            if not options.partial_progress:
                raise
            log.warning("commit of groups %s failed: %s", [o.group.index for o in batch], err.message)
            failures.append(err)

    def one(group: FileGroup) -> None:
        outcome = _rewrite_group(
            spark,
            meta,
            group,
            rewrite,
            order,
            options.writer,
            run.token,
        )
        with lock:
            outcomes.append(outcome)
            if outcome.error is None and options.partial_progress:
                pending.append(outcome)
                if len(pending) >= per_commit:
                    batch = pending[:]
                    pending.clear()
                    commit(batch)

    try:
        with (
            progress.phase("rewriting groups", len(groups), "groups") as shown,
            rewrite_conf(spark),
            ThreadPoolExecutor(max_workers=options.max_concurrent_groups) as pool,
        ):
            futures = [pool.submit(one, g) for g in groups]
            for f in futures:
                f.add_done_callback(lambda _: shown.advance())
            for f in futures:
                f.result()
    except Exception as err:
        # Not on an interrupt either: a batch's commit may have landed without being marked.
        if not isinstance(err, CommitStateUnknown):
            _clean([d for o in outcomes if not o.committed for d in o.directories])
        raise
    outcomes.sort(key=lambda o: o.group.index)
    failed = [o for o in outcomes if o.error is not None]
    if not options.partial_progress:
        if failed:
            _clean([d for o in outcomes for d in o.directories])
            raise as_error(
                failed[0].failure,
                f"{JOB} {identifier}: group {failed[0].group.index} failed ({failed[0].error}); nothing "
                "committed. Use --partial-progress to commit the groups that succeed",
            )
        commit(outcomes)
    elif pending:
        commit(pending)
    if conflicts:
        outcomes += _replan(options, catalog, identifier, spark, order, run, conflicts, len(groups), commit)
    if options.partial_progress and failures and len(failures) == len(attempted):
        raise failures[0]  # not one batch committed
    return outcomes, sum(removed_deletes)


def _replan(
    options: CompactOptions,
    catalog: Catalog,
    identifier: str,
    spark: SparkSession,
    order: RowOrder,
    run: Staging,
    conflicts: Sequence[_Outcome],
    numbered: int,
    commit: Callable[[list[_Outcome], TableMetadata], None],
) -> list[_Outcome]:
    """The partitions of groups whose commit met a concurrent change, planned again on the table
    as it is now (its starting sequence number and deletes the new start), rewritten and
    committed group by group; a group that meets another conflict stays uncommitted. Only those
    partitions: the groups that committed are not looked at again."""
    now = catalog.require(identifier)

    def scopes_of(group: FileGroup) -> set[tuple[int, tuple[Any, ...]]]:
        return {(t.file.spec_id, partition_key(t.file.partition)) for t in group.tasks}

    wanted = set().union(*(scopes_of(o.group) for o in conflicts))
    fresh, rewrite = plan(spark, now, options)
    redo = [
        replace(g, index=numbered + n + 1)
        for n, g in enumerate(g for g in fresh.groups if scopes_of(g) & wanted)
    ]
    for o in conflicts:
        o.replanned_as = tuple(g.index for g in redo if scopes_of(g) & scopes_of(o.group))
    done = []
    for g in redo:
        outcome = _rewrite_group(spark, now.metadata, g, rewrite, order, options.writer, run.token)
        done.append(outcome)
        if outcome.error is None:
            commit([outcome], now.metadata)
    return done


def _counts(outcomes: Sequence[_Outcome], removed_deletes: int) -> dict[str, object]:
    committed = [o for o in outcomes if o.committed]
    return {
        "rewritten_data_files_count": sum(len(o.group.tasks) for o in committed),
        "added_data_files_count": sum(len(o.added) for o in committed),
        "rewritten_bytes_count": sum(o.group.input_size for o in committed),
        "failed_data_files_count": sum(len(o.group.tasks) for o in outcomes if _failed(o)),
        # DVs of rewritten files, and delete files no live data file can need any more.
        "removed_delete_files_count": removed_deletes,
        "failed_groups_count": sum(1 for o in outcomes if _failed(o)),
        "conflicted_groups_count": sum(1 for o in outcomes if o.conflict),
    }


def _failed(o: _Outcome) -> bool:
    """Not committed, and not replaced by groups planned again (which count on their own)."""
    return not o.committed and not o.replanned_as


# The options class the command line builds and its arguments (jobs.common.context's contract).
Options = CompactOptions
add_arguments = compact_options.add_arguments
DELTA_OPTIONS = compact_options.DELTA_OPTIONS


def run(options: CompactOptions, context: JobContext) -> JobResult:
    delta = delta_root(options.table)
    if delta is not None:
        from tablekeeper.jobs.common.delta_maintenance import run_optimize

        return run_optimize(delta, context.spark(), options)
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_compact(options, catalog, identifier, context.spark)
