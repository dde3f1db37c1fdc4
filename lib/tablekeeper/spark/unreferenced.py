"""Listed files that no reference names, found in one shuffle of Python rows.

Both sides are bucketed by the path part of their key (``files.orphans``), so every bucket holds,
for its paths, the listed files and the keys the table references, and one pass over a bucket
classifies them. The rows stay Python rows end to end: the JVM only moves their pickled bytes,
which costs far less than converting them to and from Spark SQL rows and compiling the joins for
one run.

The listing goes into the shuffle as it is made, so the bucket count comes from the references
alone: a bucket keeps its references in memory (bounded by the count) and spills listed rows past
``LISTED_IN_MEMORY`` to a local file, since a location may hold far more files than its table.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

from pyspark import RDD, SparkContext

from tablekeeper.cycles import no_cycle_collection
from tablekeeper.files.orphans import (
    MISMATCH,
    ORPHAN,
    ListedPair,
    Summary,
    bucket_of,
    gather,
    judge,
    listed_pair,
    path_part,
    reference_pair,
    summary,
    tally,
)

__all__ = [
    "LISTED_IN_MEMORY",
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
# Listed rows a bucket holds in memory; more go to a local file in batches of this many.
LISTED_IN_MEMORY = 500_000


class _Spilled:
    """Listed pairs held in memory up to a bound, the rest pickled to a temporary file."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.held: list[ListedPair] = []
        self.file: IO[bytes] | None = None

    def append(self, pair: ListedPair) -> None:
        self.held.append(pair)
        if len(self.held) >= self.bound:
            if self.file is None:
                local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None
                # Open across appends and read back once; unlinked on creation, so never left.
                self.file = tempfile.TemporaryFile(dir=local)  # noqa: SIM115
            pickle.dump(self.held, self.file, pickle.HIGHEST_PROTOCOL)
            self.held = []

    def __iter__(self) -> Iterator[ListedPair]:
        if self.file is not None:
            self.file.seek(0)
            while True:
                try:
                    batch: list[ListedPair] = pickle.load(self.file)
                except EOFError:
                    break
                yield from batch
            self.file.close()
        yield from self.held


def classify_bucket(pairs: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, str, str, int]]:
    listed = _Spilled(LISTED_IN_MEMORY)
    with no_cycle_collection():
        referenced = gather(pairs, listed.append)
    return judge(referenced, listed)


def unreferenced(
    sc: SparkContext,
    listed_rows: Sequence[tuple[Any, ...]],
    listed: RDD[Any] | None,
    reference_keys: Sequence[str],
    references: RDD[str] | None,
    estimate: int,
) -> RDD[tuple[str, str, str, int]]:
    """Listed rows ``(path, key, size, ...)`` whose key no reference names, as (status, path,
    key, size). Each side comes as rows the driver holds and rows executor tasks produce (the
    listing first: its tasks are the longest); ``estimate`` guesses the rows of both sides, to
    size the buckets (past it, buckets spill listed rows)."""
    buckets = max(1, sc.defaultParallelism, -(-estimate // ROWS_PER_BUCKET))
    sides: list[RDD[Any]] = []
    if listed is not None:
        sides.append(listed.map(listed_pair))
    if references is not None:
        sides.append(references.map(reference_pair))
    # What the driver holds goes in one partition: one Python task, not one per kind.
    known = [listed_pair(r) for r in listed_rows] + [reference_pair(k) for k in reference_keys]
    if known:
        sides.append(sc.parallelize(known, 1))
    if not sides:
        return sc.emptyRDD()
    return sc.union(sides).partitionBy(buckets, bucket_of).mapPartitions(classify_bucket)


def summarize(found: RDD[tuple[str, str, str, int]], sample: int) -> Summary:
    """Counts, bytes and samples (the first paths in sorted order of per-bucket samples)."""
    return summary(found.mapPartitions(lambda rows: tally(rows, sample)).collect(), sample)
