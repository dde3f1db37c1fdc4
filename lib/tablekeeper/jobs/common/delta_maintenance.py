"""remove-orphans and expire-snapshots on Delta tables, through delta-spark itself.

Delta's own rules decide what is safe there: ``VACUUM`` for files no version inside
``delta.deletedFileRetentionDuration`` references (its 7-day floor kept unless
``--force-short-retention``), and a checkpoint followed by delta-spark's expired-log cleanup
(``delta.logRetentionDuration``) for the log. The result has the same shape as the Iceberg jobs'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import SparkSession

from tablekeeper.clock import now_ms
from tablekeeper.delta.values import (
    DEFAULT_RETENTION,
    OPTIMIZE_MIN_FILE_SIZE,
    RETENTION_PROPERTY,
    interval_hours,
)
from tablekeeper.errors import (
    ConfigError,
    CorruptMetadataError,
    SafetyRefusal,
    TablekeeperError,
    UnsupportedFeatureError,
    java_cause,
    unreadable_input,
)
from tablekeeper.files.engine import first_sorted
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.options import parse_older_than, report_files
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.spark.session import scoped_conf


class CompactChoices(Protocol):
    """What OPTIMIZE takes of compact's options (jobs.compact.options.CompactOptions; named by
    shape, as compact_options sits above this module's importers)."""

    @property
    def strategy(self) -> str: ...
    @property
    def sort_order(self) -> str | None: ...
    @property
    def where(self) -> str | None: ...
    @property
    def target_file_size(self) -> str | None: ...
    @property
    def min_file_size(self) -> str | None: ...
    @property
    def max_concurrent_groups(self) -> int: ...
    @property
    def partial_progress(self) -> bool: ...
    @property
    def max_commits(self) -> int: ...
    @property
    def dry_run(self) -> bool: ...


RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# delta-spark lists the table with this many tasks (Spark's default is 10,000: minutes on 2 cores).
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
LOG_DIR = "_delta_log"
# delta-spark's OPTIMIZE and VACUUM settings compact's and remove-orphans' options map onto.
OPTIMIZE_MAX_SIZE = "spark.databricks.delta.optimize.maxFileSize"
OPTIMIZE_MIN_SIZE = "spark.databricks.delta.optimize.minFileSize"
OPTIMIZE_MAX_THREADS = "spark.databricks.delta.optimize.maxThreads"
OPTIMIZE_BATCH_SIZE = "spark.databricks.delta.optimize.batchSize"
VACUUM_PARALLEL_DELETE = "spark.databricks.delta.vacuum.parallelDelete.enabled"
VACUUM_PARALLELISM = "spark.databricks.delta.vacuum.parallelDelete.parallelism"


def _retention_floor(spark: SparkSession, path: str) -> float:
    rows = spark.sql(f"SHOW TBLPROPERTIES {_quoted(path)}").collect()
    props = {str(r[0]): str(r[1]) for r in rows}
    return interval_hours(props.get(RETENTION_PROPERTY, DEFAULT_RETENTION))


def is_delta_table(location: str) -> bool:
    root = location.rstrip("/")
    io = FileIO.for_location(root)
    return any(True for _ in io.list(f"{root}/{LOG_DIR}", recursive=False))


def _quoted(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _reason(err: BaseException) -> str:
    text = str(err)
    cause = java_cause(text)  # the root cause and the file it names, never cut off
    if cause is not None and "retention" not in text.lower():
        return cause[:400]
    for line in text.splitlines():
        if "Exception:" in line or "retention" in line.lower():
            return line.strip()[:400]
    return (text.splitlines() or [err.__class__.__name__])[0][:400]


def _failed(err: BaseException, what: str) -> TablekeeperError:
    """delta-spark's failure: a file it could not read is the refusal naming it (exit 3, as the
    driver engine); anything else refuses the operation with delta-spark's reason."""
    unreadable = unreadable_input(str(err))
    if unreadable is not None:
        return CorruptMetadataError(f"{what}: {unreadable.message}")
    return UnsupportedFeatureError(f"{what}: {_reason(err)}")


def _vacuum_list(spark: SparkSession, path: str, hours: float | None) -> list[str]:
    retain = "" if hours is None else f" RETAIN {hours:.3f} HOURS"
    rows = spark.sql(f"VACUUM {_quoted(path)}{retain} DRY RUN").collect()
    return sorted(str(r[0]) for r in rows)


def _sizes(spark: SparkSession, paths: list[str]) -> int:
    if not paths:
        return 0

    def size(p: str) -> int:
        try:
            return FileIO.for_location(p).size(p)
        except TablekeeperError:
            return 0

    return int(spark.sparkContext.parallelize(paths, max(1, min(len(paths) // 1000, 64))).map(size).sum())


def run_vacuum(
    path: str,
    spark: SparkSession,
    *,
    older_than: str | None,
    force_short_retention: bool,
    dry_run: bool,
    file_list: str | None,
    max_concurrent_deletes: int | None = None,
) -> JobResult:
    """delta-spark's VACUUM; ``older_than`` None means the table's deletedFileRetentionDuration,
    ``max_concurrent_deletes`` its parallel delete with that many tasks (1: one at a time)."""
    clock = JobClock()
    now = now_ms()
    hours = None
    if older_than is not None:
        # Whole thousandths of an hour, rounded up: never retain less than asked.
        hours = max(0.0, math.ceil((now - parse_older_than(older_than, now)) / 3600) / 1000)
    if hours is not None and not force_short_retention:
        floor = _retention_floor(spark, path)
        if hours < floor:
            raise SafetyRefusal(
                f"--older-than {older_than} keeps {hours:g} hours of {path}, under its "
                f"{RETENTION_PROPERTY} of {floor:g} hours: readers of older versions could fail; keep at "
                "least that, or --force-short-retention when no reader or writer needs older versions"
            )
    previous = spark.conf.get(RETENTION_CHECK, "true") or "true"
    previous_listing = spark.conf.get(LISTING_PARALLELISM, None)
    spark.conf.set(LISTING_PARALLELISM, str(max(8, spark.sparkContext.defaultParallelism * 8)))
    if force_short_retention:
        spark.conf.set(RETENTION_CHECK, "false")
    deletes: dict[str, str] = {}
    if max_concurrent_deletes is not None:
        deletes[VACUUM_PARALLEL_DELETE] = str(max_concurrent_deletes > 1).lower()
        if max_concurrent_deletes > 1:
            deletes[VACUUM_PARALLELISM] = str(max_concurrent_deletes)
    try:
        spark.sparkContext.setJobDescription("remove-orphans: VACUUM DRY RUN")
        paths = _vacuum_list(spark, path, hours)
        if not dry_run:
            spark.sparkContext.setJobDescription("remove-orphans: VACUUM")
            size = _sizes(spark, paths)
            retain = "" if hours is None else f" RETAIN {hours:.3f} HOURS"
            with scoped_conf(spark, deletes):
                spark.sql(f"VACUUM {_quoted(path)}{retain}").collect()
    except TablekeeperError:
        raise
    except Exception as err:
        reason = _reason(err)
        if "retention" in reason.lower():
            raise SafetyRefusal(
                f"delta-spark refuses this retention for {path}: {reason}; keep at least the table's "
                "delta.deletedFileRetentionDuration, or --force-short-retention when no reader or writer "
                "needs older versions"
            ) from err
        raise _failed(err, f"VACUUM of {path} failed, nothing reported deleted") from err
    finally:
        spark.conf.set(RETENTION_CHECK, previous)
        if previous_listing is None:
            spark.conf.unset(LISTING_PARALLELISM)
        else:
            spark.conf.set(LISTING_PARALLELISM, previous_listing)
    metrics: dict[str, Any] = {"format": "delta", "retain_hours": hours, "orphan_file_count": len(paths)}
    files: list[str] | None = None
    if dry_run:
        metrics["bytes_to_free"] = _sizes(spark, paths)
    else:
        metrics |= {
            "deleted_files_count": len(paths),
            "bytes_freed": size,
            "orphan_file_location_sample": paths[:100],
        }
    if file_list or dry_run:
        report = report_files(lambda limit: first_sorted(paths, limit), len(paths), file_list)
        metrics |= report.metrics
        files = report.listed
    return clock.result("remove-orphans", path, dry_run=dry_run, metrics=metrics, files=files)


def _log_files(path: str) -> set[str]:
    root = path.rstrip("/")
    return {i.location for i in FileIO.for_location(root).list(f"{root}/{LOG_DIR}", recursive=False)}


def run_log_cleanup(path: str, spark: SparkSession, *, dry_run: bool) -> JobResult:
    """A checkpoint at the latest version, then delta-spark's cleanup of log files older than
    ``delta.logRetentionDuration`` (what delta-spark does after its own checkpoints)."""
    clock = JobClock()
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    before = _log_files(path)
    metrics: dict[str, Any] = {"format": "delta", "log_files_before": len(before)}
    if dry_run:
        metrics["note"] = (
            "dry run: would write a checkpoint at the latest version and clean expired log files"
        )
    else:
        try:
            spark.sparkContext.setJobDescription("expire-snapshots: Delta checkpoint and log cleanup")
            log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
            snapshot = log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
            log.checkpoint(snapshot, jvm.scala.Option.empty())
            log.doLogCleanup(snapshot, jvm.scala.Option.empty())
        except Exception as err:
            raise _failed(err, f"Delta checkpoint of {path} failed, nothing deleted") from err
        after = _log_files(path)
        removed = sorted(before - after)
        metrics |= {
            "checkpoint_version": int(snapshot.version()),
            "deleted_log_files_count": len(removed),
            "deleted_log_files_sample": removed[:100],
        }
    return clock.result("expire-snapshots", path, dry_run=dry_run, metrics=metrics)


def _optimize_candidates(path: str, zorder: bool, min_size: int) -> tuple[int, int, int, int]:
    """(live files, candidate files, their bytes, partitions touched) as delta-spark's OPTIMIZE
    picks them: files under its minimum size in partitions holding more than one, or every file
    of a partition with Z-order."""
    from tablekeeper.tables.delta import load_snapshot

    files = load_snapshot(path).files
    sizes = files.column("size").to_pylist()
    parts = [
        tuple(sorted((v or {}).items()) if isinstance(v, dict) else (v or []))
        for v in files.column("partition_values").to_pylist()
    ]
    by_part: dict[object, list[int]] = {}
    for size, part in zip(sizes, parts, strict=True):
        if zorder or size < min_size:
            by_part.setdefault(part, []).append(int(size))
    chosen = {p: s for p, s in by_part.items() if zorder or len(s) > 1}
    return len(sizes), sum(len(s) for s in chosen.values()), sum(sum(s) for s in chosen.values()), len(chosen)


@dataclass(frozen=True)
class OptimizeSettings:
    """compact's options as delta-spark's OPTIMIZE settings (None: delta-spark's own default)."""

    zorder: tuple[str, ...]
    max_file_size: int | None
    min_file_size: int | None
    max_threads: int
    max_commits: int | None  # --partial-progress: commit in at most this many batches

    @classmethod
    def of(cls, options: CompactChoices) -> OptimizeSettings:
        from tablekeeper.jobs.common.options import parse_size, parse_sort_order

        zorder: tuple[str, ...] = ()
        if options.sort_order:
            spec = parse_sort_order(options.sort_order)
            if not spec.zorder:
                raise UnsupportedFeatureError(
                    "Delta tables compact by bin-packing or zorder(c1,c2): a linear --sort-order is "
                    "Iceberg-only"
                )
            zorder = spec.zorder
        if options.strategy == "sort" and not zorder:
            raise UnsupportedFeatureError(
                "--strategy sort on a Delta table needs --sort-order zorder(c1, c2): a Delta table has "
                "no sort order of its own"
            )
        if options.strategy == "binpack" and zorder:
            raise ConfigError("--sort-order needs --strategy sort")
        if options.dry_run and options.where:
            # The plan is read from the log, which cannot evaluate a SQL predicate: it would list
            # files --where leaves out.
            raise ConfigError(
                "--where with --dry-run on a Delta table: the plan is read from the log and cannot "
                "apply a SQL predicate; run OPTIMIZE without --dry-run, or plan without --where"
            )
        target = (
            None
            if options.target_file_size is None
            else parse_size(options.target_file_size, "--target-file-size")
        )
        low = None if options.min_file_size is None else parse_size(options.min_file_size, "--min-file-size")
        # delta-spark's defaults keep minFileSize == maxFileSize: files under the target are compacted.
        if low is None and target is not None:
            low = target
        return cls(
            zorder=zorder,
            max_file_size=target,
            min_file_size=low,
            max_threads=options.max_concurrent_groups,
            max_commits=options.max_commits if options.partial_progress else None,
        )

    def conf(self, candidate_bytes: int) -> dict[str, str]:
        conf = {OPTIMIZE_MAX_THREADS: str(self.max_threads)}
        if self.max_file_size is not None:
            conf[OPTIMIZE_MAX_SIZE] = str(self.max_file_size)
        if self.min_file_size is not None:
            conf[OPTIMIZE_MIN_SIZE] = str(self.min_file_size)
        if self.max_commits is not None:
            conf[OPTIMIZE_BATCH_SIZE] = str(max(1, math.ceil(candidate_bytes / self.max_commits)))
        return conf


def run_optimize(path: str, spark: SparkSession, options: CompactChoices) -> JobResult:
    """compact on a Delta table: delta-spark's OPTIMIZE (bin-pack, or Z-order with
    ``--sort-order zorder(c1,c2)``; ``--where`` on partition columns), its file sizes, threads and
    batches set from compact's options for this command only."""
    clock = JobClock()
    settings = OptimizeSettings.of(options)
    zorder = settings.zorder
    min_size = OPTIMIZE_MIN_FILE_SIZE if settings.min_file_size is None else settings.min_file_size
    live, candidates, size, partitions = _optimize_candidates(path, bool(zorder), min_size)
    metrics: dict[str, Any] = {
        "format": "delta",
        "strategy": "zorder" if zorder else "binpack",
        "live_data_files": live,
        "files_to_rewrite": candidates,
        "bytes_to_rewrite": size,
        "partitions_to_rewrite": partitions,
    }
    if dry_run := options.dry_run:
        metrics["note"] = "planned from the Delta log as OPTIMIZE picks files; nothing written"
        return clock.result("compact", path, dry_run=dry_run, metrics=metrics)
    sql = f"OPTIMIZE {_quoted(path)}"
    if options.where:
        sql += f" WHERE {options.where}"
    if zorder:
        sql += " ZORDER BY (" + ", ".join("`" + c.replace("`", "``") + "`" for c in zorder) + ")"
    try:
        spark.sparkContext.setJobDescription("compact: Delta OPTIMIZE")
        with scoped_conf(spark, settings.conf(size)):
            row = spark.sql(sql).collect()[0]
    except Exception as err:
        raise _failed(err, f"OPTIMIZE of {path} failed, nothing committed") from err
    m = row["metrics"]
    metrics |= {
        "rewritten_data_files_count": int(m["numFilesRemoved"]),
        "added_data_files_count": int(m["numFilesAdded"]),
        "rewritten_bytes_count": int(m["filesRemoved"]["totalSize"] or 0),
        "added_bytes_count": int(m["filesAdded"]["totalSize"] or 0),
        "failed_data_files_count": 0,
        "removed_delete_files_count": int(m["numDeletionVectorsRemoved"] or 0)
        if "numDeletionVectorsRemoved" in m.asDict()
        else 0,
        "partitions_optimized": int(m["partitionsOptimized"]),
    }
    return clock.result("compact", path, dry_run=False, metrics=metrics)
