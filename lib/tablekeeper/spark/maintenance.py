"""The Spark engine of the maintenance jobs (``files.engine``): their sets as Spark datasets.

Manifests are read, listings made, files compared, journal parts written and files deleted by
executor tasks; the driver sees counts, samples and the locations of journal parts. Each step is
one round of Python tasks, since a Python task costs a few hundred milliseconds to start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pyspark import RDD, StorageLevel
from pyspark.sql import SparkSession

from tablekeeper.files.containment import Containment
from tablekeeper.files.deletes import NOTHING, DeleteOutcome
from tablekeeper.files.engine import FileTally, KeySet, MetadataOnly, merge_tallies, tally_rows
from tablekeeper.files.inventory import Inventory, recheck
from tablekeeper.files.journal import JournalWriter, Ready, decode_rows, write_part
from tablekeeper.files.listing import Classifier
from tablekeeper.files.local import IndexCache
from tablekeeper.files.manifests import FileRow, ManifestIndex, read
from tablekeeper.files.orphans import ORPHAN, Summary
from tablekeeper.files.quarantine import Quarantine
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.io import FileIO
from tablekeeper.io.uri import strip_trailing_slash
from tablekeeper.spark.concurrent import Background
from tablekeeper.spark.listing import inventory_rows, plan_listing, tree_rows
from tablekeeper.spark.reachability import (
    delete_files,
    index_manifests,
    reachable_keys,
    unkept_files,
)
from tablekeeper.spark.unreferenced import summarize, unreferenced

SAMPLE = 100
# Rows a journal part holds at most, roughly: parts are written by the tasks that hold the rows.
ROWS_PER_PART = 200_000
# Paths a sorted listing brings to the driver at once (one partition at a time).
PATHS_PER_PART = 100_000


def _tally_partition(rows: Iterable[Any]) -> Iterator[FileTally]:
    yield tally_rows(rows)


def tally(rows: RDD[Any]) -> FileTally:
    """Counts by kind and bytes of rows (path, key, kind, size), summed on the executors."""
    return merge_tallies(rows.mapPartitions(_tally_partition).collect())


def sorted_paths(rows: RDD[Any], count: int, limit: int | None) -> Iterator[str]:
    """The rows' paths in sorted order: the first ``limit`` (each task keeps its own first), or
    all of them sorted on the executors and brought over one partition at a time."""
    paths = rows.map(lambda r: r[0])
    if limit is not None:
        return iter(paths.takeOrdered(limit) if limit > 0 and count > 0 else [])
    if count == 0:
        return iter([])
    parts = max(1, -(-count // PATHS_PER_PART))
    return paths.sortBy(lambda p: p, numPartitions=parts).toLocalIterator()


def _write_parts(rows: RDD[Any], journal: JournalWriter, parallelism: int | None) -> Ready:
    """Each partition's rows into one part, written by the task that holds them; more partitions
    than ``parallelism`` are merged first (None: never, for rows still to be computed per
    partition, whose merge would pipe them through a second Python worker)."""
    directory = journal.location

    def write(index: int, part: Iterable[Any]) -> Iterator[tuple[str, int, int]]:
        batch = [(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in part]
        if batch:
            yield write_part(directory, index, batch)

    if parallelism is not None and rows.getNumPartitions() > parallelism:
        rows = rows.coalesce(parallelism)
    return journal.ready(rows.mapPartitionsWithIndex(write).collect())


class SparkDoomed:
    def __init__(self, spark: SparkSession, files: RDD[Any]) -> None:
        self.spark = spark
        self.files = files
        self._held: RDD[Any] | None = None
        self._tally: FileTally | None = None

    def _kept(self) -> RDD[Any]:
        # A dry run reads the set twice (its tally, then its paths): the second sees the first's.
        if self._held is None:
            self._held = self.files.persist(StorageLevel.MEMORY_AND_DISK)
            self._held.localCheckpoint()
        return self._held

    def tally(self) -> FileTally:
        if self._tally is None:
            self._tally = tally(self._kept())
        return self._tally

    def paths(self, limit: int | None = None) -> Iterator[str]:
        return sorted_paths(self._kept(), self.tally().files, limit)

    def write(self, journal: JournalWriter) -> Ready:
        # A run that deletes computes the set once, in the tasks that write it.
        if self._held is not None:
            return _write_parts(self._held, journal, self.spark.sparkContext.defaultParallelism)
        return _write_parts(self.files, journal, None)


class SparkOrphans:
    def __init__(self, spark: SparkSession, found: RDD[tuple[str, str, str, int]], summary: Summary) -> None:
        self.spark = spark
        self.found = found
        self.summary = summary
        self._tallies: dict[tuple[str, ...], FileTally] = {}

    def _rows(self, statuses: Sequence[str]) -> RDD[Any]:
        wanted = tuple(statuses)
        return self.found.filter(lambda r: r[0] in wanted).map(lambda r: (r[1], r[2], ORPHAN, r[3]))

    def tally(self, statuses: Sequence[str]) -> FileTally:
        # A dry run asks for the tally, then the paths (sized by it): one pass over the set.
        wanted = tuple(statuses)
        if wanted not in self._tallies:
            self._tallies[wanted] = tally(self._rows(wanted))
        return self._tallies[wanted]

    def paths(self, statuses: Sequence[str], limit: int | None = None) -> Iterator[str]:
        return sorted_paths(self._rows(statuses), self.tally(statuses).files, limit)

    def write(self, journal: JournalWriter, statuses: Sequence[str]) -> Ready:
        return _write_parts(self._rows(statuses), journal, self.spark.sparkContext.defaultParallelism)


class SparkEngine:
    name = "spark"

    def __init__(self, spark: SparkSession, job: str, cache: IndexCache | None = None) -> None:
        self.spark = spark
        self.job = job
        self.cache = cache

    def describe(self, phase: str) -> None:
        self.spark.sparkContext.setJobDescription(f"{self.job}: {phase}")

    def index(self, meta: TableMetadata, snapshot_ids: Iterable[int], rules: PathRules) -> ManifestIndex:
        return index_manifests(self.spark, meta, snapshot_ids, rules, self.cache)

    def doomed(
        self, gone: ManifestIndex, kept: ManifestIndex, rules: PathRules, only: MetadataOnly | None = None
    ) -> SparkDoomed:
        return SparkDoomed(self.spark, unkept_files(self.spark, gone, kept, rules, only))

    def keys(
        self, index: ManifestIndex, rules: PathRules, extra: Iterable[str] = (), spread: int = 1
    ) -> KeySet:
        found = reachable_keys(self.spark, index, rules, spread)
        return KeySet(frozenset(found.known) | frozenset(extra), found.entries)

    def delete(
        self,
        files: Ready | Sequence[FileRow],
        keep: KeySet | None,
        concurrency: int,
        containment: Containment,
        quarantine: Quarantine | None = None,
    ) -> DeleteOutcome:
        sc = self.spark.sparkContext
        rows: RDD[Any]
        if isinstance(files, Ready):
            if not files.parts:
                return NOTHING
            parts = sc.parallelize(list(files.parts), max(1, min(len(files.parts), sc.defaultParallelism)))
            rows = parts.flatMap(lambda p: decode_rows(read(p), p))
        elif not files:
            return NOTHING
        else:
            rows = sc.parallelize(list(files), max(1, min(len(files), sc.defaultParallelism)))
        rows = rows.map(containment.rekey)
        if keep is not None:
            known = keep.known
            rows = rows.filter(lambda r: r[1] not in known)
            if keep.handle is not None:
                kept: RDD[Any] = keep.handle.map(lambda k: (k, None))
                rows = rows.keyBy(lambda r: r[1]).subtractByKey(kept).values()
        return delete_files(rows, concurrency, containment, quarantine)

    def scan_orphans(
        self,
        location: str,
        rules: PathRules,
        partition_names: frozenset[str],
        references: Callable[[], tuple[ManifestIndex, tuple[str, ...]]],
        cutoff_ms: int,
        deletable: Callable[[str], bool] | None,
        inventory: Inventory | None = None,
    ) -> SparkOrphans:
        sc = self.spark.sparkContext

        def referenced() -> tuple[KeySet, int]:
            index, extra = references()
            # The manifests are read beside the location's listing, whose tasks are few and long.
            return self.keys(index, rules, extra, spread=3), index.estimate + len(extra)

        # The manifest lists are read while the driver lists: both leave cores idle on their own.
        refs_job = Background(self.spark, f"{self.job}: files the table references", referenced)
        stem = strip_trailing_slash(location)
        own_key = rules.prefix(stem)[:-1]
        classifier = Classifier(stem, rules, partition_names)

        def old(row: tuple[Any, ...]) -> bool:
            return bool(row[3] < cutoff_ms and (deletable is None or deletable(row[0])))

        if inventory is not None:
            # The report is read while the manifests are; its rows are held for the comparison.
            listed, held, count = inventory_rows(sc, inventory, classifier, own_key)
            refs, estimate = refs_job.result()
            self.describe(f"compare what {inventory.manifest} lists under {location} with the table's")
            found = unreferenced(sc, [], listed.filter(old), tuple(refs.known), refs.handle, estimate + count)
            # Each unreferenced file looked at again, where it was found: the report is older
            # than the store.
            found = found.mapPartitions(lambda rows: recheck(rows, cutoff_ms))
        else:
            held = None
            # One round of tasks: each Python task costs to start.
            plan = plan_listing(FileIO.for_location(location), classifier, own_key, sc.defaultParallelism)
            refs, estimate = refs_job.result()
            self.describe(f"compare the files under {location} with the table's")

            def old_rows(directory: str) -> list[tuple[str, str, int, int]]:
                return [r for r in tree_rows(directory, classifier, own_key) if old(r)]

            trees: RDD[tuple[str, str, int, int]] | None = None
            if plan.trees:
                # Listed in the tasks that feed the shuffle: never stored and read again.
                parts = sc.parallelize(plan.trees, max(1, min(len(plan.trees), sc.defaultParallelism)))
                trees = parts.flatMap(old_rows)
            # A location holds about as many files as its table references (a bucket spills
            # past that).
            estimate = 2 * estimate + len(plan.rows)
            found = unreferenced(
                sc, [r for r in plan.rows if old(r)], trees, tuple(refs.known), refs.handle, estimate
            )
        found.persist(StorageLevel.MEMORY_AND_DISK)
        found.localCheckpoint()  # what is deleted is exactly what was counted
        summary = summarize(found, SAMPLE)
        if held is not None:
            held.unpersist()
        return SparkOrphans(self.spark, found, summary)
