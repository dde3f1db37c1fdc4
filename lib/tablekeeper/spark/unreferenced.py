"""Listed files that no reference names, found in one shuffle of Python rows.

Both sides are bucketed by the path part of their key (``files.orphans``), so every bucket holds,
for its paths, the listed files and the keys the table references, and one pass over a bucket
classifies them. The rows stay Python rows end to end: the JVM only moves their pickled bytes,
which costs far less than converting them to and from Spark SQL rows and compiling the joins for
one run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark import RDD, SparkContext

from tablekeeper.cycles import no_cycle_collection
from tablekeeper.files.orphans import (
    MISMATCH,
    ORPHAN,
    Summary,
    bucket_of,
    classify,
    listed_pair,
    path_part,
    reference_pair,
    summary,
    tally,
)

__all__ = [
    "MISMATCH",
    "ORPHAN",
    "ROWS_PER_BUCKET",
    "Summary",
    "bucket_of",
    "classify_bucket",
    "listed_pair",
    "path_part",
    "reference_pair",
    "summarize",
    "unreferenced",
]

# A bucket holds all references of its paths in memory: bound it.
ROWS_PER_BUCKET = 400_000


def classify_bucket(pairs: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, str, str, int]]:
    with no_cycle_collection():
        out = classify(pairs)
    return iter(out)


def unreferenced(
    sc: SparkContext,
    listed_rows: Sequence[tuple[Any, ...]],
    listed: RDD[Any] | None,
    reference_keys: Sequence[str],
    references: RDD[str] | None,
    estimate: int,
) -> RDD[tuple[str, str, str, int]]:
    """Listed rows ``(path, key, size, ...)`` whose key no reference names, as (status, path,
    key, size). Each side comes as rows the driver holds and rows executor tasks produce;
    ``estimate`` counts both sides together, to size the buckets."""
    buckets = max(1, sc.defaultParallelism, -(-estimate // ROWS_PER_BUCKET))
    # What the driver holds goes in one partition: one Python task, not one per kind.
    known = [listed_pair(r) for r in listed_rows] + [reference_pair(k) for k in reference_keys]
    sides: list[RDD[Any]] = [sc.parallelize(known, 1)] if known else []
    if listed is not None:
        sides.append(listed.map(listed_pair))
    if references is not None:
        sides.append(references.map(reference_pair))
    if not sides:
        return sc.emptyRDD()
    return sc.union(sides).partitionBy(buckets, bucket_of).mapPartitions(classify_bucket)


def summarize(found: RDD[tuple[str, str, str, int]], sample: int) -> Summary:
    """Counts, bytes and samples (the first paths in sorted order of per-bucket samples)."""
    return summary(found.mapPartitions(lambda rows: tally(rows, sample)).collect(), sample)
