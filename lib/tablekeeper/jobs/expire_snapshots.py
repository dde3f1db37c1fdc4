"""expire-snapshots: drop old snapshots, then delete the files only they reached.

Plan (pure): which snapshots and refs expire, under Iceberg's rules (``iceberg.expire``).
Commit first: the metadata without them, re-planned on the refreshed base if another writer
committed meanwhile. Then, on the executors, the files the expired snapshots reached minus every
file the table reaches after the commit, read again from the catalog so a concurrent commit's
files count as live; those are deleted with bounded concurrency. A commit whose outcome is
unknown, or any manifest that cannot be read, deletes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from pyspark.sql import DataFrame, SparkSession

from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import SafetyRefusal, TablekeeperError
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
from tablekeeper.jobs.options import parse_older_than, write_file_list
from tablekeeper.jobs.result import JobClock, JobResult
from tablekeeper.spark.reachability import (
    PathRules,
    delete_files,
    index_manifests,
    reachable_files,
    task_failure,
)

log = logging.getLogger(__name__)

JOB = "expire-snapshots"
GC_ENABLED = "gc.enabled"
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
class ExpireOptions:
    table: str
    older_than: str | None = None
    retain_last: int | None = None
    snapshot_ids: tuple[int, ...] = ()
    clean_expired_metadata: bool = False
    max_concurrent_deletes: int | None = None
    dry_run: bool = False
    file_list: str | None = None

    def policy(self, now_ms: int) -> ExpirePolicy:
        older = parse_older_than(self.older_than, now_ms) if self.older_than is not None else None
        return ExpirePolicy(now_ms, older, self.retain_last, self.snapshot_ids)


def _check_gc(meta: TableMetadata, table: str) -> None:
    if not meta.property_bool(GC_ENABLED, True):
        raise SafetyRefusal(
            f"{table} has gc.enabled=false (its files may belong to another table, e.g. a converted "
            "Delta table): expire-snapshots deletes nothing there; set gc.enabled=true if the files are "
            "its own"
        )


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


def _doomed(
    spark: SparkSession, original: TableMetadata, expired: list[int], after: TableMetadata, rules: PathRules
) -> DataFrame:
    sc = spark.sparkContext
    sc.setJobDescription(f"{JOB}: manifest lists of the {len(after.snapshots)} retained snapshots")
    retained = index_manifests(spark, after, [s.snapshot_id for s in after.snapshots], rules)
    sc.setJobDescription(f"{JOB}: manifest lists of {len(expired)} expired snapshots")
    gone = index_manifests(spark, original, expired, rules)
    # A manifest the retained snapshots also list holds only files they keep, and one without
    # live entries holds none: the candidates need neither opened.
    candidates = reachable_files(spark, gone, rules, skip_manifests=retained.manifest_keys, skip_empty=True)
    valid = reachable_files(spark, retained, rules)
    sc.setJobDescription(f"{JOB}: files only the expired snapshots reach")
    return candidates.join(valid.select("key"), on="key", how="left_anti")


def _metrics(plan: ExpirePlan, counts: dict[str, int]) -> dict[str, object]:
    metrics: dict[str, object] = {name: counts.get(kind, 0) for kind, name in METRIC_BY_KIND.items()}
    metrics |= {
        "expired_snapshot_ids": list(plan.expired_snapshot_ids),
        "expired_snapshots_count": len(plan.expired_snapshot_ids),
        "removed_refs": list(plan.removed_refs),
        "expire_older_than_ms": plan.expire_older_than_ms,
        "retain_last": plan.min_snapshots_to_keep,
    }
    return metrics


def run_expire(options: ExpireOptions, catalog: Catalog, identifier: str, spark: SparkSession) -> JobResult:
    clock = JobClock()
    now = int(time.time() * 1000)
    policy = options.policy(now)
    table = catalog.require(identifier)
    _check_gc(table.metadata, identifier)
    plan = plan_expiry(table.metadata, policy)
    rules = PathRules()
    concurrency = options.max_concurrent_deletes or max(1, spark.sparkContext.defaultParallelism)
    files: list[str] | None = None
    if options.dry_run:
        after = _expiry(table.io, table.metadata, policy, options.clean_expired_metadata, now)
        try:
            doomed = _doomed(spark, table.metadata, list(plan.expired_snapshot_ids), after, rules)
            rows = doomed.select("path", "kind", "size").collect()
        except TablekeeperError:
            raise
        except Exception as err:
            raise task_failure(err, f"{JOB} {identifier}: nothing would be deleted safely") from err
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["kind"]] = counts.get(r["kind"], 0) + 1
        metrics = _metrics(plan, counts) | {"bytes_to_free": sum(int(r["size"]) for r in rows)}
        paths = sorted(r["path"] for r in rows)
        if options.file_list:
            write_file_list(options.file_list, paths)
            metrics["file_list"] = options.file_list
        else:
            files = paths
    else:
        metrics = _execute(options, catalog, identifier, table, policy, plan, rules, concurrency, spark, now)
    return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics, files=files)


def _execute(
    options: ExpireOptions,
    catalog: Catalog,
    identifier: str,
    table: LoadedTable,
    policy: ExpirePolicy,
    plan: ExpirePlan,
    rules: PathRules,
    concurrency: int,
    spark: SparkSession,
    now: int,
) -> dict[str, object]:
    if not plan.changes_anything:
        return _metrics(plan, {}) | {"bytes_freed": 0, "note": "nothing to expire"}
    clean = options.clean_expired_metadata
    committer = Committer(catalog, identifier)
    # Re-planned on every attempt: a concurrent commit may have moved refs or added snapshots.
    committed = committer.update_metadata(lambda base, ts: _expiry(table.io, base, policy, clean, ts)).table
    kept = {s.snapshot_id for s in committed.metadata.snapshots}
    expired = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id not in kept]
    done = replace(plan, expired_snapshot_ids=tuple(expired))
    refreshed = catalog.require(identifier)  # files of commits made since ours count as live
    try:
        doomed = _doomed(spark, table.metadata, expired, refreshed.metadata, rules)
        spark.sparkContext.setJobDescription(f"{JOB}: delete unreachable files")
        outcome = delete_files(doomed, concurrency)
    except TablekeeperError:
        raise
    except Exception as err:
        raise task_failure(
            err, f"{JOB} {identifier}: snapshots expired, no file deleted (run again once readable)"
        ) from err
    old_metadata = _removed_metadata_files(table, committed)
    report = committed.io.delete_many(old_metadata)
    failures = list(outcome.failures) + list(report.failures)
    metrics = _metrics(done, dict(outcome.deleted))
    metrics |= {
        "bytes_freed": outcome.bytes_freed,
        "deleted_metadata_files_count": report.deleted,
        "already_missing_count": outcome.missing + report.missing,
        "failed_deletes_count": len(failures),
    }
    if failures:
        metrics["failed_deletes"] = [f"{path}: {reason}" for path, reason in failures[:FAILURE_SAMPLE]]
        log.warning("%d deletes failed; first: %s", len(failures), failures[0])
    return metrics
