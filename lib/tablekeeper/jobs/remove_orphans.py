"""remove-orphans: delete files under a table location that no metadata references.

Plan: finish the journals earlier runs left, then list the location (hidden paths and nested
tables skipped), keep files older than ``--older-than`` (3 days by default, never under 24 hours
without ``--force-short-retention``, so an in-flight writer's new files survive), and compare them
with every file the table references: all manifests of all snapshots and what they list, manifest
lists, statistics, every metadata.json in the log and the version hint. Paths compare by
normalised URI; a file whose path matches a reference but whose scheme or authority does not
(after ``--equal-schemes`` / ``--equal-authorities``) is a prefix mismatch: an error by default.
The orphans are journaled, then deleted, then the journal goes.

With ``--inventory`` the store's own inventory report (S3 Inventory, Storage Insights, Azure blob
inventory: ``files.inventory``) stands for the listing: judged before anything is read (finished,
whole, newer than the cut-off, of this bucket and not filtered short of the location), read a data
file per task, and each orphan it yields looked at again before the journal.

A table with ``gc.enabled=false`` (a converted Delta table: its data files are the source's) is
scanned only under its own metadata location, and only metadata files there are deleted: what a
killed conversion or commit left, never a data file. Nothing outside the table location is ever
listed or deleted.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.clock import now_ms
from tablekeeper.commit.service import finish_dead_runs
from tablekeeper.errors import ConfigError, SafetyRefusal, TablekeeperError
from tablekeeper.files.containment import Containment, require_home
from tablekeeper.files.engine import Engine, ListingTooLarge, OrphanScan, failed, task_failure
from tablekeeper.files.finish import Protected, metadata_files, pending_journals, protected
from tablekeeper.files.inventory import Inventory, open_inventory
from tablekeeper.files.inventory import Scope as InventoryScope
from tablekeeper.files.journal import JournalWriter, journals_location
from tablekeeper.files.listing import is_metadata_file
from tablekeeper.files.local import IndexCache
from tablekeeper.files.manifests import ManifestIndex
from tablekeeper.files.orphans import MISMATCH, ORPHAN
from tablekeeper.files.quarantine import Quarantine, seal
from tablekeeper.files.rules import PathRules
from tablekeeper.io.uri import DEFAULT_EQUIVALENT_SCHEMES, is_under, join_location
from tablekeeper.jobs.common.context import (
    JobContext,
    add_engine_argument,
    add_quarantine_argument,
    add_run_arguments,
    add_table_arguments,
    delta_root,
    options_from_args,
    positive,
)
from tablekeeper.jobs.common.engines import (
    DRIVER_DELETE_THREADS,
    GC_ENABLED,
    SparkSource,
    check_engine,
    choose_engine,
    spark_engine,
)
from tablekeeper.jobs.common.formats import delta_options, honoured, refused
from tablekeeper.jobs.common.options import parse_older_than, report_files, write_file_list
from tablekeeper.jobs.common.result import JobClock, JobResult

log = logging.getLogger(__name__)

JOB = "remove-orphans"
DEFAULT_OLDER_THAN = "3d"
MIN_RETENTION_MS = 24 * 3600 * 1000
SAMPLE = 100
SOURCE_PROPERTY = "tablekeeper.delta.source"
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
class RemoveOrphansOptions:
    table: str
    # None: DEFAULT_OLDER_THAN (Delta paths: the table's delta.deletedFileRetentionDuration).
    older_than: str | None = None
    location: str | None = None
    equal_schemes: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_EQUIVALENT_SCHEMES))
    equal_authorities: dict[str, str] = field(default_factory=dict)
    prefix_mismatch: PrefixMismatch = "error"
    force_short_retention: bool = False
    max_concurrent_deletes: int | None = None
    dry_run: bool = False
    file_list: str | None = None
    # An object store's inventory report (its manifest, or the directory of its runs) read
    # instead of listing the location.
    inventory: str | None = None
    # None: the catalog's default (jobs.common.context.quarantine), decided before the run.
    quarantine: bool | None = None
    engine: str = "auto"
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RemoveOrphansOptions:
        return options_from_args(
            cls,
            args,
            equal_schemes=parse_equivalences(args.equal_schemes, "--equal-schemes"),
            equal_authorities=parse_equivalences(args.equal_authorities, "--equal-authorities"),
        )

    def __post_init__(self) -> None:
        check_engine(self.engine)


def _partition_names(table: LoadedTable) -> frozenset[str]:
    return frozenset(f.name for spec in table.metadata.partition_specs for f in spec.fields)


@dataclass(frozen=True)
class _Scope:
    location: str
    cutoff: int
    metadata_only: bool
    inventory: Inventory | None = None


def _check(options: RemoveOrphansOptions, table: LoadedTable, rules: PathRules, now: int) -> _Scope:
    meta = table.metadata
    older_than = options.older_than or DEFAULT_OLDER_THAN
    cutoff = parse_older_than(older_than, now)
    if now - cutoff < MIN_RETENTION_MS and not options.force_short_retention:
        raise SafetyRefusal(
            f"--older-than {older_than} is under 24 hours: files of writes still in flight could "
            "be deleted; use a longer retention, or --force-short-retention when no writer is running"
        )
    metadata_only = not meta.property_bool(GC_ENABLED, True)
    own = join_location(meta.location, "metadata") if metadata_only else meta.location
    location = options.location or own
    schemes, authorities = rules.equivalent_schemes, rules.equivalent_authorities
    # A table copied or moved as files keeps its old location in its metadata: listing that
    # location would take another table's files, or a live copy's, for orphans.
    require_home(table, options.table, JOB)
    if not is_under(location, meta.location, schemes, authorities):
        raise SafetyRefusal(
            f"--location {location} is outside the table location {meta.location}: "
            "remove-orphans only deletes inside its table"
        )
    # Compared as strings it may still climb out: through '..' or a symbolic link.
    Containment.of((meta.location,)).check_directory(location, "--location")
    if is_under(location, journals_location(meta.location), schemes, authorities):
        raise SafetyRefusal(
            f"--location {location} is inside the journals of {options.table}: they hold the plans of "
            "destructive runs, which the next run finishes; they are never orphans"
        )
    if metadata_only:
        if not is_under(location, own, schemes, authorities):
            raise SafetyRefusal(
                f"{options.table} has gc.enabled=false (its data files may belong to another table, e.g. "
                f"a converted Delta table): remove-orphans only cleans its metadata location {own}, "
                f"not {location}"
            )
        source = meta.properties.get(SOURCE_PROPERTY)
        if source and (
            is_under(source, own, schemes, authorities) or is_under(own, source, schemes, authorities)
        ):
            raise SafetyRefusal(
                f"{options.table}'s metadata location {own} overlaps its Delta source {source}: "
                "remove-orphans deletes nothing there"
            )
    inventory = None
    if options.inventory:
        inventory = open_inventory(options.inventory, InventoryScope.of(location), cutoff)
    return _Scope(location, cutoff, metadata_only, inventory)


def run_orphans(
    options: RemoveOrphansOptions, catalog: Catalog, identifier: str, spark: SparkSource = None
) -> JobResult:
    clock = JobClock()
    now = now_ms()
    table = catalog.require(identifier)
    rules = PathRules(options.equal_schemes, options.equal_authorities or None)
    scope = _check(options, table, rules, now)
    cache = IndexCache()
    engine = choose_engine(options.engine, table.metadata, spark, JOB, rules, cache)
    concurrency = options.max_concurrent_deletes or _concurrency(engine)
    resumed = None
    try:
        if not options.dry_run:
            resumed = finish_dead_runs(
                table.io,
                table.metadata.location,
                lambda: catalog.require(identifier),
                lambda: engine,
                concurrency,
            )
        try:
            try:
                found = _scan(engine, table, scope, rules)
            except ListingTooLarge as err:
                if options.engine != "auto" or spark is None:
                    raise
                log.info("%s: listing on Spark instead", err)
                engine = spark_engine(spark, JOB, cache)
                found = _scan(engine, table, scope, rules)
        except ListingTooLarge:
            raise
        except Exception as err:
            raise failed(err, f"{JOB} {identifier}: nothing deleted") from err
        metrics = _act(options, identifier, table, scope, engine, found, concurrency, rules)
    except TablekeeperError:
        raise
    except ListingTooLarge as err:
        raise ConfigError(f"{JOB} {identifier}: {err}: run it with --engine spark") from None
    except Exception as err:  # a journal it wrote is finished by the next run
        raise task_failure(err, f"{JOB} {identifier} failed") from err
    metrics |= {"engine": engine.name, "mode": "metadata-only" if scope.metadata_only else "all"}
    if not options.dry_run:
        metrics["resumed_journal"] = resumed
    files = metrics.pop("files", None)
    return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics, files=files)


def _concurrency(engine: Engine) -> int:
    if engine.name == "spark":
        spark = getattr(engine, "spark", None)
        if spark is not None:
            return max(1, int(spark.sparkContext.defaultParallelism))
    return DRIVER_DELETE_THREADS


@dataclass(frozen=True)
class _Deletable:
    """Which listed files may be orphans at all (pickled to executors): none a journal names,
    and with ``metadata_only`` only metadata files."""

    journals: Protected
    metadata_only: bool

    def __call__(self, location: str) -> bool:
        if self.metadata_only and not is_metadata_file(location):
            return False
        return not (self.journals and self.journals(location))


def _scan(engine: Engine, table: LoadedTable, scope: _Scope, rules: PathRules) -> OrphanScan:
    meta = table.metadata

    def references() -> tuple[ManifestIndex, tuple[str, ...]]:
        index = engine.index(meta, [s.snapshot_id for s in meta.snapshots], rules)
        return index, tuple(rules.key(p) for p in metadata_files(table))

    # Read before the listing: a run journaled since writes only files newer than the cutoff.
    journals = protected(table.io, meta.location, rules)
    deletable = _Deletable(journals, scope.metadata_only)
    return engine.scan_orphans(
        scope.location,
        rules,
        _partition_names(table),
        references,
        scope.cutoff,
        deletable if journals or scope.metadata_only else None,
        scope.inventory,
    )


def _act(
    options: RemoveOrphansOptions,
    identifier: str,
    table: LoadedTable,
    scope: _Scope,
    engine: Engine,
    found: OrphanScan,
    concurrency: int,
    rules: PathRules,
) -> dict[str, Any]:
    summary = found.summary
    faults.kill_point("plan.done")
    if summary.mismatches and options.prefix_mismatch == "error":
        raise SafetyRefusal(
            f"{summary.mismatches} files match referenced paths under another scheme or authority "
            f"(e.g. {summary.mismatch_sample[0]}): pass --equal-schemes/--equal-authorities, or "
            "--prefix-mismatch ignore|delete once you know which is right"
        )
    wanted = (ORPHAN, MISMATCH) if options.prefix_mismatch == "delete" else (ORPHAN,)
    metrics: dict[str, Any] = {
        "location": scope.location,
        "older_than_ms": scope.cutoff,
        "prefix_mismatch_count": summary.mismatches,
    }
    if scope.inventory is not None:
        metrics["inventory"] = scope.inventory.describe()
        # Listed as old by the report, but gone or written again since: never deleted.
        metrics["changed_since_inventory_count"] = summary.changed
    if options.dry_run:
        tally = found.tally(wanted)
        metrics |= {"orphan_file_count": tally.files, "bytes_to_free": tally.bytes}
        journals = pending_journals(table.io, table.metadata.location)
        if journals:
            metrics["journals_to_finish"] = journals
        report = report_files(lambda limit: found.paths(wanted, limit), tally.files, options.file_list)
        metrics |= report.metrics
        if report.listed is not None:
            metrics["files"] = report.listed
        return metrics
    with JournalWriter.start(
        table.io,
        table.metadata.location,
        job=JOB,
        table=identifier,
        kind="delete",
        base_metadata=table.metadata_location,
        rules=rules,
        quarantine=bool(options.quarantine),
    ) as journal:
        aside = journal.header.quarantine
        quarantine = Quarantine.for_run(table.metadata.location, aside) if aside else None
        try:
            ready = found.write(journal, wanted)
        except Exception:
            journal.remove()
            raise
        faults.kill_point("journal.written")
        engine.describe("delete orphans")
        containment = Containment.for_table(table.metadata, rules)
        outcome = engine.delete(ready, None, concurrency, containment, quarantine)
        if not outcome.failures:
            if quarantine is not None and ready.files:  # nothing moved: no quarantine
                head = journal.header
                run = seal(
                    quarantine,
                    JOB,
                    identifier,
                    head.run_id,
                    head.created_ms,
                    ready.parts,
                    ready.files,
                    ready.bytes,
                )
                metrics["quarantine"] = run.describe()
            journal.remove()
        moved = quarantine is not None
        metrics |= {
            "orphan_file_count": ready.files,
            "deleted_files_count": 0 if moved else outcome.count(ORPHAN),
            "quarantined_files_count": outcome.count(ORPHAN) if moved else 0,
            "bytes_freed": 0 if moved else outcome.bytes_freed,
            "failed_deletes_count": len(outcome.failures),
            "kept_outside_table_count": len(outcome.refused),
            "orphan_file_location_sample": list(summary.sample),
        }
        if outcome.refused:
            metrics["kept_outside_table"] = [f"{p}: {why}" for p, why in outcome.refused[:20]]
        if outcome.failures:
            metrics["failed_deletes"] = [f"{p}: {why}" for p, why in outcome.failures[:20]]
        if options.file_list:
            write_file_list(options.file_list, found.paths(wanted))
            metrics["file_list"] = options.file_list
        return metrics


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument(
        "--older-than",
        help="only files older than this: ISO-8601 time, epoch ms or a duration (default 3d, Delta: "
        "delta.deletedFileRetentionDuration; under 24h needs --force-short-retention)",
    )
    parser.add_argument(
        "--location", help="scan this directory inside the table location (default: all of it)"
    )
    parser.add_argument(
        "--equal-schemes",
        default=",".join(f"{a}={b}" for a, b in DEFAULT_EQUIVALENT_SCHEMES.items()),
        help="schemes that name one store",
    )
    parser.add_argument("--equal-authorities", help="authorities that name one store (a=b,c=d)")
    parser.add_argument("--prefix-mismatch", default="error", choices=["error", "ignore", "delete"])
    parser.add_argument("--force-short-retention", action="store_true", help="allow --older-than under 24h")
    parser.add_argument(
        "--max-concurrent-deletes", type=positive, help="delete tasks at once (default: one per core)"
    )
    parser.add_argument(
        "--file-list", help="write every orphan location here (the JSON keeps a count and sample)"
    )
    parser.add_argument(
        "--inventory",
        help="read the store's inventory report instead of listing: its manifest (S3 Inventory's "
        "manifest.json, Storage Insights' <config>_<time>_manifest.json, Azure's <rule>-manifest.json) "
        "or the directory of its runs (the latest finished one); it must be newer than --older-than",
    )
    add_quarantine_argument(parser)
    add_engine_argument(parser)
    add_run_arguments(parser)


# The options class the command line builds (jobs.common.context's contract).
Options = RemoveOrphansOptions
# remove-orphans on a Delta table runs delta-spark's VACUUM (jobs.common.formats).
DELTA_OPTIONS = delta_options(
    {
        "older_than": honoured("VACUUM RETAIN n HOURS, never under delta.deletedFileRetentionDuration"),
        "force_short_retention": honoured("VACUUM under the table's retention (its check switched off)"),
        "max_concurrent_deletes": honoured(
            "spark.databricks.delta.vacuum.parallelDelete.enabled and .parallelism"
        ),
        "file_list": honoured("VACUUM's file list written there"),
        "inventory": refused("VACUUM lists the table itself; drop it for Delta tables"),
        "quarantine": refused("VACUUM deletes files itself; drop it for Delta tables"),
        "location": refused("VACUUM always scans the whole table; drop it for Delta tables"),
        "equal_schemes": refused("VACUUM compares paths itself; drop it for Delta tables"),
        "equal_authorities": refused("VACUUM compares paths itself; drop it for Delta tables"),
        "prefix_mismatch": refused("VACUUM compares paths itself; drop it for Delta tables"),
        "engine": refused("VACUUM always runs on Spark; drop it for Delta tables"),
    }
)


def run(options: RemoveOrphansOptions, context: JobContext) -> JobResult:
    delta = delta_root(options.table)
    if delta is not None:
        from tablekeeper.jobs.common.delta_maintenance import run_vacuum

        return run_vacuum(
            delta,
            context.spark(),
            older_than=options.older_than,
            force_short_retention=options.force_short_retention,
            dry_run=options.dry_run,
            file_list=options.file_list,
            max_concurrent_deletes=options.max_concurrent_deletes,
        )
    catalog, identifier = context.resolve(options.table, options.catalog)
    chosen = context.quarantine(options.quarantine, options.table, options.catalog)
    return run_orphans(replace(options, quarantine=chosen), catalog, identifier, context.spark)
