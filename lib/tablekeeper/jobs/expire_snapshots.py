"""expire-snapshots: drop old snapshots, then delete the files only they reached.

The order survives a kill at any point:

1. finish the journals earlier runs left (``files.finish``);
2. plan (pure, ``iceberg.expire``): which snapshots and refs expire under Iceberg's rules;
3. read everything the decision needs: the manifests of the snapshots that expire and of those
   kept. The files only the expiring ones reach are written to a journal under the table's
   metadata location. Any unreadable list or manifest refuses the run here, table untouched;
4. commit the metadata without them, retried on a newer base if another writer committed, but
   never expiring more than the plan did (so the journal covers whatever the commit expires);
5. delete the journal's files, minus any the table reaches after the commit (read again, so a
   concurrent commit's files stay), with bounded concurrency; then remove the journal.

A commit whose outcome is unknown deletes nothing and leaves the journal: the next run finishes
it against the table as it then is. The driver engine does all of this in this process for small
tables; the Spark engine on the executors (``jobs.common.engines``).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.clock import now_ms
from tablekeeper.commit.service import finish_dead_runs
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import CommitStateUnknown, ConfigError, SafetyRefusal, TablekeeperError
from tablekeeper.files.containment import Containment, require_home
from tablekeeper.files.deletes import contained
from tablekeeper.files.engine import Engine, KeySet, MetadataOnly, failed, task_failure
from tablekeeper.files.finish import metadata_files, pending_journals
from tablekeeper.files.journal import JournalWriter, Ready
from tablekeeper.files.local import IndexCache
from tablekeeper.files.manifests import ManifestIndex, index_difference, statistics_rows
from tablekeeper.files.quarantine import Quarantine, move_rows, seal
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.expire import ExpirePlan, ExpirePolicy, apply_expiry, plan_expiry
from tablekeeper.iceberg.manifest import read_manifest_list
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.reachable import (
    DATA_FILE,
    EQUALITY_DELETE_FILE,
    MANIFEST,
    MANIFEST_LIST,
    POSITION_DELETE_FILE,
    STATISTICS,
)
from tablekeeper.io import FileIO
from tablekeeper.io.fileio import DeleteReport
from tablekeeper.io.uri import join_location
from tablekeeper.jobs.common.context import (
    JobContext,
    add_engine_argument,
    add_quarantine_argument,
    add_run_arguments,
    add_table_arguments,
    delta_root,
    int_list,
    options_from_args,
    positive,
)
from tablekeeper.jobs.common.engines import (
    DRIVER_DELETE_THREADS,
    GC_ENABLED,
    SparkSource,
    check_engine,
    choose_engine,
)
from tablekeeper.jobs.common.formats import delta_options, refused
from tablekeeper.jobs.common.options import parse_older_than, report_files
from tablekeeper.jobs.common.result import JobClock, JobResult

log = logging.getLogger(__name__)

JOB = "expire-snapshots"
DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
# Iceberg's procedure output columns, by file kind.
METRIC_BY_KIND = {
    DATA_FILE: "deleted_data_files_count",
    POSITION_DELETE_FILE: "deleted_position_delete_files_count",
    EQUALITY_DELETE_FILE: "deleted_equality_delete_files_count",
    MANIFEST: "deleted_manifest_files_count",
    MANIFEST_LIST: "deleted_manifest_lists_count",
    STATISTICS: "deleted_statistics_files_count",
}
FAILURE_SAMPLE = 20


@dataclass(frozen=True)
class ExpireSnapshotsOptions:
    table: str
    older_than: str | None = None
    retain_last: int | None = None
    snapshot_ids: tuple[int, ...] = ()
    clean_expired_metadata: bool = False
    max_concurrent_deletes: int | None = None
    dry_run: bool = False
    file_list: str | None = None
    engine: str = "auto"
    # Delete only the table's own metadata (manifests, lists, statistics): for gc.enabled=false
    # tables, whose data and delete files may be another table's (a converted Delta table's).
    metadata_only: bool = False
    # None: the catalog's default (jobs.common.context.quarantine), decided before the run.
    quarantine: bool | None = None
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExpireSnapshotsOptions:
        return options_from_args(cls, args)

    def __post_init__(self) -> None:
        check_engine(self.engine)

    def policy(self, now_ms: int) -> ExpirePolicy:
        older = parse_older_than(self.older_than, now_ms) if self.older_than is not None else None
        return ExpirePolicy(now_ms, older, self.retain_last, self.snapshot_ids)


def _check_gc(meta: TableMetadata, table: str, metadata_only: bool) -> None:
    if not metadata_only and not meta.property_bool(GC_ENABLED, True):
        raise SafetyRefusal(
            f"{table} has gc.enabled=false (its files may belong to another table, e.g. a converted "
            "Delta table): expire-snapshots deletes none of its data files; use --metadata-only to "
            "expire snapshots and delete only their metadata, or set gc.enabled=true if the files are "
            "its own"
        )


def metadata_only(table: LoadedTable, rules: PathRules) -> MetadataOnly:
    return MetadataOnly(rules.prefix(join_location(table.metadata.location, "metadata")))


def _spec_ids(io: FileIO, meta: TableMetadata) -> Callable[[Iterable[int]], set[int]]:
    """The partition spec ids the manifests of the given snapshots use (for clean-expired-metadata)."""

    def spec_ids_of(snapshot_ids: Iterable[int]) -> set[int]:
        out: set[int] = set()
        for sid in snapshot_ids:
            s = meta.snapshot(sid)
            if s is None or s.manifest_list is None:
                continue
            for m in read_manifest_list(io.read(s.manifest_list), f"manifest list {s.manifest_list}"):
                out.add(m.partition_spec_id)
        return out

    return spec_ids_of


def _expiry(io: FileIO, meta: TableMetadata, policy: ExpirePolicy, clean: bool, now: int) -> TableMetadata:
    plan = plan_expiry(meta, policy)
    return apply_expiry(meta, plan, timestamp_ms=now, spec_ids_of=_spec_ids(io, meta) if clean else None)


def _removed_metadata_files(before: LoadedTable, after: LoadedTable) -> list[str]:
    """Metadata files the commit dropped from the log, when the table asks for them to go."""
    if not after.metadata.property_bool(DELETE_AFTER_COMMIT, False):
        return []
    kept = {e.metadata_file for e in after.metadata.metadata_log} | {after.metadata_location}
    old = [e.metadata_file for e in before.metadata.metadata_log] + [before.metadata_location]
    return [m for m in old if m not in kept]


def _metrics(plan: ExpirePlan, counts: dict[str, int]) -> dict[str, Any]:
    metrics: dict[str, Any] = {name: counts.get(kind, 0) for kind, name in METRIC_BY_KIND.items()}
    metrics |= {
        "expired_snapshot_ids": list(plan.expired_snapshot_ids),
        "expired_snapshots_count": len(plan.expired_snapshot_ids),
        "removed_refs": list(plan.removed_refs),
        "expire_older_than_ms": plan.expire_older_than_ms,
        "retain_last": plan.min_snapshots_to_keep,
    }
    return metrics


def _reached_since(
    engine: Engine, table: LoadedTable, kept: ManifestIndex, kept_ids: Iterable[int], rules: PathRules
) -> KeySet:
    """What ``table`` reaches beyond the snapshots the plan kept: snapshots committed since (or
    kept by a commit that expired less than planned), their manifests the plan did not read, and
    every statistics and metadata file."""
    meta = table.metadata
    known = set(kept_ids)
    newer = [s.snapshot_id for s in meta.snapshots if s.snapshot_id not in known]
    unread = index_difference(engine.index(meta, newer, rules), kept)
    extra = [r[1] for r in statistics_rows(meta, [s.snapshot_id for s in meta.snapshots], rules)]
    extra += [rules.key(p) for p in metadata_files(table)]
    return engine.keys(unread, rules, extra)


def run_expire(
    options: ExpireSnapshotsOptions, catalog: Catalog, identifier: str, spark: SparkSource = None
) -> JobResult:
    clock = JobClock()
    now = now_ms()
    policy = options.policy(now)
    table = catalog.require(identifier)
    require_home(table, identifier, JOB)
    _check_gc(table.metadata, identifier, options.metadata_only)
    rules = PathRules()
    engine = choose_engine(options.engine, table.metadata, spark, JOB, rules, IndexCache())
    concurrency = options.max_concurrent_deletes or _default_concurrency(engine, spark)
    try:
        if options.dry_run:
            return _dry_run(options, identifier, table, policy, engine, rules, now, clock)
        resumed = finish_dead_runs(
            table.io,
            table.metadata.location,
            lambda: catalog.require(identifier),
            lambda: engine,
            concurrency,
        )
        metrics = _execute(options, catalog, identifier, table, policy, engine, rules, concurrency, now)
    except TablekeeperError:
        raise
    except Exception as err:  # a journal it wrote is finished by the next run
        raise task_failure(err, f"{JOB} {identifier} failed") from err
    metrics["resumed_journal"] = resumed
    metrics["engine"] = engine.name
    metrics["metadata_only"] = options.metadata_only
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def _default_concurrency(engine: Engine, spark: SparkSource) -> int:
    if engine.name == "spark" and spark is not None:
        from tablekeeper.jobs.common.engines import spark_session

        return max(1, spark_session(spark, JOB).sparkContext.defaultParallelism)
    return DRIVER_DELETE_THREADS


def _plan(
    table: LoadedTable,
    policy: ExpirePolicy,
    options: ExpireSnapshotsOptions,
    engine: Engine,
    rules: PathRules,
    now: int,
) -> tuple[ExpirePlan, list[int], ManifestIndex, Any]:
    """The plan, the snapshots it keeps, their index, and the files only the expired ones reach."""
    meta = table.metadata
    plan = plan_expiry(meta, policy)
    after = _expiry(table.io, meta, policy, options.clean_expired_metadata, now)
    kept_ids = [s.snapshot_id for s in after.snapshots]
    engine.describe(f"manifest lists of the {len(kept_ids)} retained snapshots")
    kept = engine.index(meta, kept_ids, rules)
    engine.describe(f"manifest lists of {len(plan.expired_snapshot_ids)} expired snapshots")
    gone = engine.index(meta, plan.expired_snapshot_ids, rules)
    only = metadata_only(table, rules) if options.metadata_only else None
    doomed = engine.doomed(gone, kept, rules, only)
    engine.describe("files only the expired snapshots reach")
    return plan, kept_ids, kept, doomed


@dataclass(frozen=True)
class ExpirePreview:
    """What a run with the table's own rules would expire and free (health's estimate)."""

    expired_snapshots: int
    retained_snapshots: int
    files: Mapping[str, int]  # Iceberg's procedure output names -> count
    bytes: int


def preview(table: LoadedTable, now: int, spark: SparkSource = None) -> ExpirePreview:
    """The plan of a dry run with every option at its default (the table's ``history.expire.*``);
    metadata only when ``gc.enabled`` is false, as the job would have to be told."""
    meta = table.metadata
    options = ExpireSnapshotsOptions(
        table=table.identifier, metadata_only=not meta.property_bool(GC_ENABLED, True)
    )
    policy = options.policy(now)
    plan = plan_expiry(meta, policy)
    if not plan.expired_snapshot_ids:
        return ExpirePreview(0, len(meta.snapshots), {}, 0)
    rules = PathRules()
    engine = choose_engine(options.engine, meta, spark, JOB, rules, IndexCache())
    plan, kept_ids, _, doomed = _plan(table, policy, options, engine, rules, now)
    found = doomed.tally()
    counts: dict[str, int] = {}
    for kind, n in found.counts.items():
        name = METRIC_BY_KIND.get(kind, kind)
        counts[name] = counts.get(name, 0) + n
    return ExpirePreview(len(plan.expired_snapshot_ids), len(kept_ids), counts, found.bytes)


def _dry_run(
    options: ExpireSnapshotsOptions,
    identifier: str,
    table: LoadedTable,
    policy: ExpirePolicy,
    engine: Engine,
    rules: PathRules,
    now: int,
    clock: JobClock,
) -> JobResult:
    try:
        plan, _, _, doomed = _plan(table, policy, options, engine, rules, now)
        found = doomed.tally()
        report = report_files(doomed.paths, found.files, options.file_list)
    except ConfigError:
        raise
    except Exception as err:
        raise failed(err, f"{JOB} {identifier}: nothing would be deleted safely") from err
    metrics = (
        _metrics(plan, dict(found.counts))
        | {"bytes_to_free": found.bytes, "engine": engine.name, "metadata_only": options.metadata_only}
        | report.metrics
    )
    journals = pending_journals(table.io, table.metadata.location)
    if journals:
        metrics["journals_to_finish"] = journals
    return clock.result(JOB, identifier, dry_run=True, metrics=metrics, files=report.listed)


def _execute(
    options: ExpireSnapshotsOptions,
    catalog: Catalog,
    identifier: str,
    table: LoadedTable,
    policy: ExpirePolicy,
    engine: Engine,
    rules: PathRules,
    concurrency: int,
    now: int,
) -> dict[str, Any]:
    clean = options.clean_expired_metadata
    unchanged = f"{JOB} {identifier}: nothing expired, nothing deleted"
    try:
        plan, kept_ids, kept, doomed = _plan(table, policy, options, engine, rules, now)
    except Exception as err:
        raise failed(err, unchanged) from err
    faults.kill_point("plan.done")
    if not plan.changes_anything:
        return _metrics(plan, {}) | {"bytes_freed": 0, "note": "nothing to expire"}
    with JournalWriter.start(
        table.io,
        table.metadata.location,
        job=JOB,
        table=identifier,
        kind="delete",
        base_metadata=table.metadata_location,
        rules=rules,
        settle_ms=catalog.commit_settle_ms,
        quarantine=bool(options.quarantine),
    ) as journal:
        aside = journal.header.quarantine
        quarantine = Quarantine.for_run(table.metadata.location, aside) if aside else None
        try:
            try:
                ready = doomed.write(journal)  # every manifest is read here: unreadable -> no commit
            except Exception as err:
                raise failed(err, unchanged) from err
            faults.kill_point("journal.written")
            bounded = policy.within(plan)
            committed = (
                Committer(catalog, identifier)
                .update_metadata(lambda base, ts: _expiry(table.io, base, bounded, clean, ts))
                .table
            )
        except CommitStateUnknown:
            raise  # the journal stays: the next run finishes it against the table as it then is
        except Exception:
            journal.remove()  # nothing was committed (an interrupt leaves it: the commit may have)
            raise
        journal.committed(committed.metadata_location)
        retained = {s.snapshot_id for s in committed.metadata.snapshots}
        done = replace(
            plan,
            expired_snapshot_ids=tuple(
                s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id not in retained
            ),
        )
        try:
            refreshed = catalog.require(identifier)  # files of commits made since ours count as live
            keep = _reached_since(engine, refreshed, kept, kept_ids, rules)
            engine.describe("delete unreachable files")
            containment = Containment.for_table(refreshed.metadata, rules)
            outcome = engine.delete(ready, keep, concurrency, containment, quarantine)
        except Exception as err:
            raise failed(
                err,
                f"{JOB} {identifier}: snapshots expired, their files not deleted yet (the next run of any "
                "destructive job on the table deletes them from the journal)",
            ) from err
        # The metadata log is read from storage too: a file it names outside the table stays.
        logged = [(m, rules.key(m), "metadata", 0) for m in _removed_metadata_files(table, committed)]
        inside, refused = contained(logged, containment)
        if quarantine is None:
            report = committed.io.delete_many([r[0] for r in inside])
        else:  # moved aside too: the quarantine's listing, not its parts, is what restore reads
            aside_meta = move_rows(inside, quarantine)
            report = DeleteReport(aside_meta.total, aside_meta.missing, aside_meta.failures)
        # Files outside the table (imported, or a converted table's source) are never deleted by
        # any run: they are reported, and keep no journal waiting for a retry that cannot come.
        kept_outside = list(outcome.refused) + refused
        sealed = None
        if not outcome.failures:
            if quarantine is not None and (ready.files or report.deleted):
                head = journal.header
                sealed = seal(quarantine, JOB, identifier, head.run_id, head.created_ms, *_plan_of(ready))
            journal.remove()
        failures = list(outcome.failures) + list(report.failures)
        metrics = _metrics(done, dict(outcome.deleted))
        if quarantine is not None:
            # Moved, not freed: purge frees them, restore puts them back.
            if sealed is not None:
                metrics["quarantine"] = sealed.describe()
            metrics["quarantined_files_count"] = outcome.total + report.deleted
        metrics |= {
            "bytes_freed": 0 if quarantine is not None else outcome.bytes_freed,
            "deleted_metadata_files_count": report.deleted,
            "already_missing_count": outcome.missing + report.missing,
            "failed_deletes_count": len(failures),
            "kept_outside_table_count": len(kept_outside),
        }
        if kept_outside:
            metrics["kept_outside_table"] = [f"{p}: {why}" for p, why in kept_outside[:FAILURE_SAMPLE]]
            log.warning(
                "%d files outside the table location were not deleted; first: %s",
                len(kept_outside),
                kept_outside[0][0],
            )
        if failures:
            metrics["failed_deletes"] = [f"{path}: {reason}" for path, reason in failures[:FAILURE_SAMPLE]]
            log.warning(
                "%d deletes failed (the journal keeps them for the next run); first: %s",
                len(failures),
                failures[0],
            )
        return metrics


def _plan_of(ready: Ready) -> tuple[tuple[str, ...], int, int]:
    return ready.parts, ready.files, ready.bytes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument(
        "--older-than",
        help="expire snapshots older than this: ISO-8601 time (UTC unless zoned), epoch ms, or a "
        "duration like 5d (default: history.expire.max-snapshot-age-ms, else 5 days)",
    )
    parser.add_argument(
        "--retain-last",
        type=positive,
        help="keep at least this many ancestors of each branch "
        "(default: history.expire.min-snapshots-to-keep, else 1)",
    )
    parser.add_argument(
        "--snapshot-ids", type=int_list, default=(), help="also expire these ids (comma-separated)"
    )
    parser.add_argument(
        "--clean-expired-metadata",
        action="store_true",
        help="also remove partition specs and schemas no retained snapshot uses",
    )
    parser.add_argument(
        "--metadata-only",
        action="store_true",
        help="delete only the table's own manifests, lists and statistics, never a data or delete "
        "file (for gc.enabled=false tables, e.g. a converted Delta table)",
    )
    parser.add_argument(
        "--max-concurrent-deletes", type=positive, help="delete tasks at once (default: one per core)"
    )
    parser.add_argument(
        "--file-list", help="dry run: write every file it would delete here instead of the JSON"
    )
    add_quarantine_argument(parser)
    add_engine_argument(parser)
    add_run_arguments(parser)


# The options class the command line builds (jobs.common.context's contract).
Options = ExpireSnapshotsOptions
_LOG_RETENTION = "Delta keeps its log for the table's delta.logRetentionDuration: set that instead"
# expire-snapshots on a Delta table is a checkpoint and delta-spark's log cleanup (jobs.common.formats).
DELTA_OPTIONS = delta_options(
    {
        "older_than": refused(_LOG_RETENTION),
        "retain_last": refused(_LOG_RETENTION),
        "snapshot_ids": refused("Delta versions cannot be expired one by one; drop it"),
        "clean_expired_metadata": refused("Delta keeps one schema and partitioning; drop it"),
        "metadata_only": refused("Delta's log cleanup deletes only log files already; drop it"),
        "max_concurrent_deletes": refused("delta-spark's log cleanup has no such setting; drop it"),
        "file_list": refused("a dry run on a Delta table lists no files; drop it"),
        "engine": refused("the log cleanup always runs on Spark; drop it for Delta tables"),
        "quarantine": refused("Delta's log cleanup deletes log files itself; drop it for Delta tables"),
    }
)


def run(options: ExpireSnapshotsOptions, context: JobContext) -> JobResult:
    delta = delta_root(options.table)
    if delta is not None:
        from tablekeeper.jobs.common.delta_maintenance import run_log_cleanup

        return run_log_cleanup(delta, context.spark(), dry_run=options.dry_run)
    catalog, identifier = context.resolve(options.table, options.catalog)
    chosen = context.quarantine(options.quarantine, options.table, options.catalog)
    return run_expire(replace(options, quarantine=chosen), catalog, identifier, context.spark)
