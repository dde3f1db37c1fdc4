"""Reachable-file sets and bulk deletes, computed on the executors.

A table's reachable files are its snapshots' manifest lists, the manifests they name, the live
entries of those manifests (data files, delete files, DV Puffin files) and the statistics files.
Executors read the manifest lists and manifests, and compare the files some snapshots reach with
those others keep; the driver only sees per-task counts and the deletes that failed. Paths carry
a comparison key (``normalize_location``), so spellings of one file (``s3a://`` and ``s3://``)
count as one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import RDD
from pyspark.sql import DataFrame, SparkSession

from tablekeeper import faults
from tablekeeper.cycles import no_cycle_collection
from tablekeeper.files.containment import Containment
from tablekeeper.files.deletes import DeleteOutcome
from tablekeeper.files.doomed import DoomedPair, candidate_pair, kept_pair, unkept_pairs
from tablekeeper.files.engine import MetadataOnly, task_failure
from tablekeeper.files.local import IndexCache
from tablekeeper.files.manifests import (
    FileRow,
    ListedRow,
    ManifestIndex,
    Seed,
    Task,
    agreed_count,
    build_index,
    entry_keys,
    entry_rows,
    manifest_tasks,
    read,
    seeds,
    snapshot_manifests,
    statistics_rows,
    tasks,
)
from tablekeeper.files.orphans import bucket_of
from tablekeeper.files.quarantine import Quarantine, dispose
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.reachable import DATA_FILE, live_files
from tablekeeper.spark.unreferenced import ROWS_PER_BUCKET

__all__ = [
    "DeleteOutcome",
    "ManifestIndex",
    "PathRules",
    "ReachableKeys",
    "delete_files",
    "index_manifests",
    "listed_files",
    "reachable_keys",
    "task_failure",
    "unkept_files",
    "unlisted_data_files",
]

log = logging.getLogger(__name__)

# Manifest lists the driver reads itself rather than in a Spark job.
DRIVER_LISTS = 32


def index_manifests(
    spark: SparkSession,
    meta: TableMetadata,
    snapshot_ids: Iterable[int],
    rules: PathRules,
    cache: IndexCache | None = None,
) -> ManifestIndex:
    """Read the given snapshots' manifest lists on the executors, or a few on the driver (those
    ``cache`` holds are not read again). Unreadable lists fail the job."""
    ids = list(snapshot_ids)
    wanted = seeds(meta, ids)
    known = cache.found if cache is not None else {}
    missing = [s for s in wanted if s not in known]
    if len(missing) <= DRIVER_LISTS:
        # A few lists read by driver threads take milliseconds; a job takes a round of tasks
        # and, in a run's first job, the Python workers' start.
        return (cache if cache is not None else IndexCache()).index(meta, ids, rules)
    found: list[ListedRow] = [r for s in wanted if s in known for r in known[s]]
    found += listed_files(spark, missing, rules).collect()
    return build_index(statistics_rows(meta, ids, rules), found)


def listed_files(spark: SparkSession, wanted: list[Seed], rules: PathRules) -> RDD[ListedRow]:
    """The snapshots' lists and the manifests they name, read by executor tasks: one row per
    distinct file. Snapshots share most manifests (an append-only table's n-th lists n), so
    rows per listing would bring snapshots x manifests rows to the driver."""
    sc = spark.sparkContext
    # One round of tasks: a Python task costs a few hundred milliseconds to start.
    slices = max(1, min(len(wanted), sc.defaultParallelism))
    listed = sc.parallelize(wanted, slices).flatMap(lambda seed: snapshot_manifests(seed, rules))
    return listed.keyBy(lambda r: (r[1], r[2])).reduceByKey(same_listing, slices).values()


def same_listing(a: ListedRow, b: ListedRow) -> ListedRow:
    """Two lists' rows for one file, with the count ``build_index`` would keep."""
    return (a[0], a[1], a[2], a[3], agreed_count(a[4], b[4]))


def _manifest_keys(task: Task, rules: PathRules) -> Iterator[str]:
    with no_cycle_collection():
        keys = entry_keys(task, rules)
    return iter(keys)


def _side_pairs(item: tuple[bool, Task], rules: PathRules) -> Iterator[DoomedPair]:
    gone, task = item
    with no_cycle_collection():
        if gone:
            pairs = [candidate_pair(row) for row in entry_rows(task, rules)]
        else:
            # A kept file several of this manifest's entries name is one reference.
            pairs = [kept_pair(key) for key in set(entry_keys(task, rules))]
    return iter(pairs)


def _unkept_bucket(pairs: Iterable[DoomedPair], only: MetadataOnly | None) -> Iterator[FileRow]:
    with no_cycle_collection():
        rows = unkept_pairs(pairs, only)
    return iter(rows)


def unkept_files(
    spark: SparkSession,
    gone: ManifestIndex,
    kept: ManifestIndex,
    rules: PathRules,
    only: MetadataOnly | None = None,
) -> RDD[FileRow]:
    """Files (path, key, kind, size) ``gone`` reaches and ``kept`` does not, one per key and
    kind; of them, those ``only`` allows. One round of tasks reads both sides' manifests (large
    ones split), one shuffle of Python rows brings each key's rows to one bucket, and a pass over
    the bucket decides: the rows never become Spark SQL rows, whose conversion and join cost more
    than the comparison.

    A manifest ``kept`` also lists holds only files it keeps, and one without live entries holds
    none: the candidates need neither opened. Every kept manifest is read, since a missed
    reference would delete a live file. Unreadable manifests fail the job with the file's name.
    """
    sc = spark.sparkContext
    n = sc.defaultParallelism
    work = [(True, t) for t in tasks(gone, n, kept.manifest_keys, True)]
    work += [(False, t) for t in tasks(kept, n)]
    # What the driver holds (lists, manifests, statistics files) goes in one partition.
    known = [candidate_pair(r) for r in gone.rows] + [kept_pair(r[1]) for r in kept.rows]
    sides: list[RDD[DoomedPair]] = [sc.parallelize(known, 1)] if known else []
    if work:
        slices = max(1, min(len(work), n))  # one round of Python tasks
        sides.append(sc.parallelize(work, slices).flatMap(lambda item: _side_pairs(item, rules)))
    if not sides:
        return sc.emptyRDD()
    buckets = max(1, n, -(-(gone.estimate + kept.estimate) // ROWS_PER_BUCKET))
    return (
        sc.union(sides)
        .partitionBy(buckets, bucket_of)
        .mapPartitions(lambda pairs: _unkept_bucket(pairs, only))
    )


@dataclass(frozen=True)
class ReachableKeys:
    """The keys of every file some snapshots reach: the lists, manifests and statistics files
    (known on the driver) and the entries of the manifests (read by executor tasks; a file
    several manifests list comes once per listing)."""

    known: tuple[str, ...]
    entries: RDD[str] | None
    estimate: int  # of all keys


def reachable_keys(
    spark: SparkSession, index: ManifestIndex, rules: PathRules, spread: int = 1
) -> ReachableKeys:
    """``spread`` tasks per core: more, smaller reads balance a stage whose other tasks are long."""
    sc = spark.sparkContext
    tasks_wanted = sc.defaultParallelism * max(1, spread)
    work = tasks(index, tasks_wanted)
    entries = None
    if work:
        slices = max(1, min(len(work), tasks_wanted))
        entries = sc.parallelize(work, slices).flatMap(lambda task: _manifest_keys(task, rules))
    return ReachableKeys(tuple(row[1] for row in index.rows), entries, index.estimate)


def _delete_partition(
    rows: Iterable[Any],
    containment: Containment,
    kill: faults.RemoteKill | None,
    quarantine: Quarantine | None,
) -> Iterator[DeleteOutcome]:
    batch = [(r[0], r[1], r[2], int(r[3])) for r in rows]
    yield dispose(batch, containment, kill=kill, quarantine=quarantine)


def delete_files(
    files: DataFrame | RDD[Any],
    max_concurrent: int,
    containment: Containment,
    quarantine: Quarantine | None = None,
) -> DeleteOutcome:
    """Delete every row's ``path`` (rows path, key, kind, size) with at most ``max_concurrent``
    tasks at once (or move it into ``quarantine``); a failed delete is reported and the others
    carry on, and a path outside ``containment`` is refused in the task that holds it."""
    parts = max(1, max_concurrent)
    rdd = files.rdd if isinstance(files, DataFrame) else files
    # Fewer partitions only merge (no shuffle); more spread the deletes over the executors.
    if rdd.getNumPartitions() > parts:
        rdd = rdd.coalesce(parts)
    elif rdd.getNumPartitions() < parts:
        rdd = files.repartition(parts).rdd if isinstance(files, DataFrame) else files.repartition(parts)
    kill = faults.remote_kill("delete.mid")
    deleted = rdd.mapPartitions(lambda rows: _delete_partition(rows, containment, kill, quarantine))
    return DeleteOutcome.merge(deleted.collect())


def _live_data(task: Task, with_manifest: bool) -> Iterator[tuple[str, str | None]]:
    path, part, parts = task
    with no_cycle_collection():
        rows = [
            (f.path, path if with_manifest else None)
            for f in live_files(read(path), path, part, parts)
            if f.kind == DATA_FILE
        ]
    return iter(rows)


def unlisted_data_files(
    spark: SparkSession, manifests: Iterable[tuple[str, int]], kept: Iterable[tuple[str, int]]
) -> list[tuple[str, str | None]]:
    """(data file, manifest) for the live data files of ``manifests`` ((path, live entries))
    that no ``kept`` manifest lists: both sides are read by executor tasks and compared in a
    shuffle, so only the files ``kept`` lacks reach the driver. Unreadable manifests fail."""
    sc = spark.sparkContext
    n = sc.defaultParallelism
    old_tasks = manifest_tasks(manifests, n)
    if not old_tasks:
        return []
    old = sc.parallelize(old_tasks, min(len(old_tasks), n)).flatMap(lambda t: _live_data(t, True))
    kept_tasks = manifest_tasks(kept, n)
    if kept_tasks:
        cur = sc.parallelize(kept_tasks, min(len(kept_tasks), n)).flatMap(lambda t: _live_data(t, False))
        old = old.subtractByKey(cur, n)
    return old.collect()
