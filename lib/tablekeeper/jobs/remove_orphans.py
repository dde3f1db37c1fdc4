"""remove-orphans: delete files under a table location that no metadata references.

Plan: list the location on the executors (hidden paths and nested tables skipped), keep files
older than ``--older-than`` (3 days by default, never under 24 hours without
``--force-short-retention``, so an in-flight writer's new files survive), and compare them with
every file the table references: all manifests of all snapshots and what they list, manifest
lists, statistics, every metadata.json in the log and the version hint (``spark.unreferenced``).
Paths compare by normalised URI; a file whose path matches a reference but whose scheme or
authority does not (after ``--equal-schemes`` / ``--equal-authorities``) is a prefix mismatch: an
error by default.
Nothing outside the table location is ever listed or deleted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Literal

from pyspark import StorageLevel
from pyspark.sql import SparkSession

from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.errors import ConfigError, SafetyRefusal, TablekeeperError
from tablekeeper.io.uri import DEFAULT_EQUIVALENT_SCHEMES, is_under, join_location
from tablekeeper.jobs.expire_snapshots import GC_ENABLED
from tablekeeper.jobs.options import parse_older_than, write_file_list
from tablekeeper.jobs.result import JobClock, JobResult
from tablekeeper.spark.concurrent import Background
from tablekeeper.spark.listing import list_location
from tablekeeper.spark.reachability import (
    PathRules,
    ReachableKeys,
    delete_files,
    index_manifests,
    reachable_keys,
    task_failure,
)
from tablekeeper.spark.unreferenced import MISMATCH, ORPHAN, summarize, unreferenced

log = logging.getLogger(__name__)

JOB = "remove-orphans"
DEFAULT_OLDER_THAN = "3d"
MIN_RETENTION_MS = 24 * 3600 * 1000
SAMPLE = 100
PrefixMismatch = Literal["error", "ignore", "delete"]


def parse_equivalences(text: str | None, what: str) -> dict[str, str]:
    """``a=b,c=d`` as {a: b, c: d}."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        left, sep, right = part.partition("=")
        if not sep or not left.strip() or not right.strip():
            raise ConfigError(f"{what} {part!r} is not name=name: use e.g. s3a=s3,s3n=s3")
        out[left.strip()] = right.strip()
    return out


@dataclass(frozen=True)
class OrphanOptions:
    table: str
    older_than: str = DEFAULT_OLDER_THAN
    location: str | None = None
    equal_schemes: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_EQUIVALENT_SCHEMES))
    equal_authorities: dict[str, str] = field(default_factory=dict)
    prefix_mismatch: PrefixMismatch = "error"
    force_short_retention: bool = False
    max_concurrent_deletes: int | None = None
    dry_run: bool = False
    file_list: str | None = None


def _referenced(spark: SparkSession, table: LoadedTable, rules: PathRules) -> ReachableKeys:
    """Keys of every file the table references: what all snapshots reach, every metadata.json
    in the log and the version hint."""
    meta = table.metadata
    index = index_manifests(spark, meta, [s.snapshot_id for s in meta.snapshots], rules)
    reached = reachable_keys(spark, index, rules)
    metadata_files = [table.metadata_location, *(e.metadata_file for e in meta.metadata_log)]
    metadata_files.append(join_location(meta.location, "metadata", "version-hint.text"))
    known = reached.known + tuple(rules.key(p) for p in metadata_files if p)
    return replace(reached, known=known, estimate=reached.estimate + len(metadata_files))


def _partition_names(table: LoadedTable) -> frozenset[str]:
    return frozenset(f.name for spec in table.metadata.partition_specs for f in spec.fields)


def _check(options: OrphanOptions, table: LoadedTable, now: int) -> tuple[str, int]:
    meta = table.metadata
    if not meta.property_bool(GC_ENABLED, True):
        raise SafetyRefusal(
            f"{options.table} has gc.enabled=false (its files may belong to another table, e.g. a "
            "converted Delta table): remove-orphans deletes nothing there"
        )
    cutoff = parse_older_than(options.older_than, now)
    if now - cutoff < MIN_RETENTION_MS and not options.force_short_retention:
        raise SafetyRefusal(
            f"--older-than {options.older_than} is under 24 hours: files of writes still in flight could "
            "be deleted; use a longer retention, or --force-short-retention when no writer is running"
        )
    location = options.location or meta.location
    rules = PathRules(options.equal_schemes, options.equal_authorities or None)
    if not is_under(location, meta.location, rules.equivalent_schemes, rules.equivalent_authorities):
        raise SafetyRefusal(
            f"--location {location} is outside the table location {meta.location}: "
            "remove-orphans only deletes inside its table"
        )
    return location, cutoff


def run_orphans(options: OrphanOptions, catalog: Catalog, identifier: str, spark: SparkSession) -> JobResult:
    clock = JobClock()
    now = int(time.time() * 1000)
    table = catalog.require(identifier)
    location, cutoff = _check(options, table, now)
    rules = PathRules(options.equal_schemes, options.equal_authorities or None)
    sc = spark.sparkContext
    try:
        # The manifest lists are read while the driver lists: both leave cores idle on their own.
        refs_job = Background(
            spark, f"{JOB}: files the table references", lambda: _referenced(spark, table, rules)
        )
        sc.setJobDescription(f"{JOB}: list {location}")
        listing = list_location(spark, location, rules, _partition_names(table))
        refs = refs_job.result()
        sc.setJobDescription(f"{JOB}: compare")
        old_rows = [r for r in listing.driver_rows if r[3] < cutoff]
        old = listing.rows.filter(lambda r: r[3] < cutoff) if listing.rows is not None else None
        found = unreferenced(sc, old_rows, old, refs.known, refs.entries, listing.count + refs.estimate)
        found.persist(StorageLevel.MEMORY_AND_DISK)
        found.localCheckpoint()  # what is deleted is exactly what was counted
        summary = summarize(found, SAMPLE)
        if summary.mismatches and options.prefix_mismatch == "error":
            raise SafetyRefusal(
                f"{summary.mismatches} files match referenced paths under another scheme or authority "
                f"(e.g. {summary.mismatch_sample[0]}): pass --equal-schemes/--equal-authorities, or "
                "--prefix-mismatch ignore|delete once you know which is right"
            )
        wanted = (ORPHAN, MISMATCH) if options.prefix_mismatch == "delete" else (ORPHAN,)
        orphans = found.filter(lambda r: r[0] in wanted).map(lambda r: (r[1], r[2], "orphan", r[3]))
        rows = orphans.map(lambda r: (r[0], r[3])).collect() if options.dry_run else None
        outcome = None
        if not options.dry_run:
            sc.setJobDescription(f"{JOB}: delete orphans")
            outcome = delete_files(orphans, options.max_concurrent_deletes or sc.defaultParallelism)
            full = orphans.map(lambda r: r[0]).collect() if options.file_list else None
    except TablekeeperError:
        raise
    except Exception as err:
        raise task_failure(err, f"{JOB} {identifier}: nothing deleted") from err
    metrics: dict[str, object] = {
        "location": location,
        "older_than_ms": cutoff,
        "prefix_mismatch_count": summary.mismatches,
    }
    files: list[str] | None = None
    if rows is not None:
        paths = sorted(r[0] for r in rows)
        metrics |= {"orphan_file_count": len(paths), "bytes_to_free": sum(int(r[1]) for r in rows)}
        if options.file_list:
            write_file_list(options.file_list, paths)
            metrics["file_list"] = options.file_list
        else:
            files = paths
    else:
        assert outcome is not None
        metrics |= {
            "orphan_file_count": outcome.count("orphan") + len(outcome.failures) + outcome.missing,
            "deleted_files_count": outcome.count("orphan"),
            "bytes_freed": outcome.bytes_freed,
            "failed_deletes_count": len(outcome.failures),
            "orphan_file_location_sample": list(summary.sample),
        }
        if outcome.failures:
            metrics["failed_deletes"] = [f"{p}: {why}" for p, why in outcome.failures[:20]]
        if full is not None and options.file_list:
            write_file_list(options.file_list, sorted(full))
            metrics["file_list"] = options.file_list
    return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics, files=files)
