"""Listed files that no reference names, found in one shuffle of Python rows.

Both sides are bucketed by the path part of their key (no scheme or authority), so every bucket
holds, for its paths, the listed files and the keys the table references. One pass over a bucket
then tells a referenced file (its key is referenced), a prefix mismatch (its path is referenced
under another scheme or authority) and an orphan (its path is referenced under no spelling).

The rows stay Python rows end to end: the JVM only moves their pickled bytes, which costs far
less than converting them to and from Spark SQL rows and compiling the joins for one run.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import RDD, SparkContext

from tablekeeper.spark.concurrent import no_cycle_collection

ORPHAN = "orphan"
MISMATCH = "mismatch"

# A bucket holds all references of its paths in memory: bound it.
ROWS_PER_BUCKET = 400_000


def path_part(key: str) -> str:
    """The path of a comparison key without its ``scheme://authority``."""
    colon = key.find(":")
    if colon > 0 and key.startswith("//", colon + 1) and "/" not in key[:colon]:
        slash = key.find("/", colon + 3)
        return key[slash:] if slash >= 0 else ""
    return key


def bucket_of(path: str) -> int:
    # Stable across processes (unlike hash() of a str), so both sides of a path meet.
    return zlib.crc32(path.encode("utf-8", "surrogatepass"))


def listed_pair(row: tuple[Any, ...]) -> tuple[str, tuple[str, str, int]]:
    """A listed (path, key, size, ...) row keyed by its path part."""
    path, key, size = row[0], row[1], row[2]
    return path_part(key), (key, path, size)


def reference_pair(key: str) -> tuple[str, str]:
    return path_part(key), key


def classify(pairs: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, str, str, int]]:
    """(status, path, key, size) of each unreferenced listed file in one bucket: ``orphan``, or
    ``mismatch`` when its path is referenced under another scheme or authority."""
    with no_cycle_collection():
        referenced: dict[str, set[str] | str] = {}
        listed: list[tuple[str, tuple[str, str, int]]] = []
        for path, value in pairs:
            if isinstance(value, str):
                seen = referenced.get(path)
                if seen is None:
                    referenced[path] = value  # nearly every path has one spelling: no set for it
                elif isinstance(seen, str):
                    if seen != value:
                        referenced[path] = {seen, value}
                else:
                    seen.add(value)
            else:
                listed.append((path, value))
        out: list[tuple[str, str, str, int]] = []
        for path, (key, location, size) in listed:
            keys = referenced.get(path)
            if keys is None:
                out.append((ORPHAN, location, key, size))
            elif not (keys == key if isinstance(keys, str) else key in keys):
                out.append((MISMATCH, location, key, size))
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
    return sc.union(sides).partitionBy(buckets, bucket_of).mapPartitions(classify)


@dataclass(frozen=True)
class Summary:
    """What one pass over the unreferenced files found (collected on the driver)."""

    orphans: int
    orphan_bytes: int
    mismatches: int
    sample: tuple[str, ...]  # orphan paths
    mismatch_sample: tuple[str, ...]


Tally = tuple[int, int, int, list[str], list[str]]


def _tally(rows: Iterable[tuple[str, str, str, int]], sample: int) -> Iterator[Tally]:
    orphans = size = mismatches = 0
    paths: list[str] = []
    mismatched: list[str] = []
    for status, path, _, nbytes in rows:
        if status == ORPHAN:
            orphans += 1
            size += nbytes
            if len(paths) < sample:
                paths.append(path)
        else:
            mismatches += 1
            if len(mismatched) < sample:
                mismatched.append(path)
    yield orphans, size, mismatches, paths, mismatched


def summarize(found: RDD[tuple[str, str, str, int]], sample: int) -> Summary:
    """Counts, bytes and samples (the first paths in sorted order of per-bucket samples)."""
    tallies = found.mapPartitions(lambda rows: _tally(rows, sample)).collect()
    paths = sorted(p for t in tallies for p in t[3])[:sample]
    mismatched = sorted(p for t in tallies for p in t[4])[:sample]
    return Summary(
        sum(t[0] for t in tallies),
        sum(t[1] for t in tallies),
        sum(t[2] for t in tallies),
        tuple(paths),
        tuple(mismatched),
    )
