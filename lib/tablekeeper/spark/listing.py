"""Distributed listing of a table location, for orphan detection.

The driver lists the first levels (breadth first, until there are enough subtrees to spread);
each executor task lists whole subtrees through the FileIO. What a listing keeps (hidden paths,
nested tables) is decided by ``files.listing``, the same rules the driver engine lists by.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import RDD, StorageLevel
from pyspark.sql import SparkSession

from tablekeeper.cycles import no_cycle_collection
from tablekeeper.files.listing import Classifier, is_hidden, markers, nested
from tablekeeper.files.rules import PathRules
from tablekeeper.io import FileIO
from tablekeeper.io.uri import strip_trailing_slash

__all__ = ["Listing", "is_hidden", "list_location"]

_DRIVER_DEPTH = 3


def _list_tree(location: str, classify: Classifier) -> Iterator[tuple[Any, ...]]:
    with no_cycle_collection():
        rows = list(classify.rows(FileIO.for_location(location).list(location, recursive=True)))
    return iter(rows)


@dataclass(frozen=True)
class Listing:
    """The files of a location that are not hidden and not in a nested table, as rows (path,
    key, size, mtime_ms): those the driver listed, and those executor tasks listed (listed once:
    checkpointed, since a second listing could differ)."""

    driver_rows: tuple[tuple[str, str, int, int], ...]
    rows: RDD[tuple[str, str, int, int]] | None
    count: int


def list_location(
    spark: SparkSession, location: str, rules: PathRules, partition_names: frozenset[str]
) -> Listing:
    """List ``location``: the driver the first levels, executor tasks whole subtrees."""
    io = FileIO.for_location(location)
    stem = strip_trailing_slash(location)
    classify = Classifier(stem, rules, partition_names)
    sc = spark.sparkContext
    wanted = sc.defaultParallelism  # one round of tasks: each Python task costs to start
    driver_rows: list[tuple[Any, ...]] = []
    frontier = [stem]
    for _ in range(_DRIVER_DEPTH):
        if len(frontier) >= wanted:
            break
        deeper: list[str] = []
        for d in frontier:
            files, dirs = io.list_dir(d)
            driver_rows.extend(classify.rows(files))
            deeper.extend(dirs)
        frontier = deeper
    visible = sum(1 for r in driver_rows if not r[4])
    roots = {r[5] for r in driver_rows if r[5] is not None}
    trees = None
    if frontier:
        slices = max(1, min(len(frontier), wanted))
        trees = sc.parallelize(frontier, slices).flatMap(lambda d: _list_tree(d, classify))
        # Persisted first: a Python RDD that is only checkpointed would still be pipelined into
        # (and so recomputed by) every RDD derived from it.
        trees.persist(StorageLevel.MEMORY_AND_DISK)
        trees.localCheckpoint()
        for count, found in trees.mapPartitions(lambda rows: [markers(rows)]).collect():
            visible += count
            roots |= found
    inner = tuple(root + "/" for root in nested(roots, rules.prefix(stem)[:-1]))

    def keep(row: tuple[Any, ...]) -> bool:
        return not row[4] and not (inner and row[1].startswith(inner))

    return Listing(
        tuple((r[0], r[1], r[2], r[3]) for r in driver_rows if keep(r)),
        trees.filter(keep).map(lambda r: (r[0], r[1], r[2], r[3])) if trees is not None else None,
        visible,
    )
