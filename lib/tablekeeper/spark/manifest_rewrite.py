"""A manifest rewrite on the executors: tasks read the manifests to replace, Spark range-partitions
their live entries by partition, and each output task sorts its range and writes one manifest.

Entries cross the shuffle already encoded as their final Avro records (with the few fields the
manifest-list row needs), so the writing side only concatenates bytes. The driver gets the new
manifests' list rows back and commits them; nothing here decides what to commit.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql import SparkSession

from tablekeeper.iceberg.content import EXISTING, ManifestFile
from tablekeeper.iceberg.manifest import EncodedEntry, write_encoded_manifest
from tablekeeper.iceberg.manifest_rewrite import new_manifest_path, partition_sort_key
from tablekeeper.iceberg.manifest_splice import existing_entries
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.types import Schema
from tablekeeper.io import FileIO

# Input tasks per core: manifests differ in size, so a few tasks each keep both cores busy.
_TASKS_PER_CORE = 4
# Manifests read on the driver for the range bounds of the output manifests.
_SAMPLED_MANIFESTS = 24
# What crosses the shuffle per entry: record count, data sequence number, partition, Avro record.
_Row = tuple[int, "int | None", tuple[Any, ...], bytes]


def rewrite_on_executors(
    spark: SparkSession,
    manifests: Sequence[ManifestFile],
    *,
    target_count: int,
    content: int,
    table_location: str,
    format_version: int,
    spec: PartitionSpec,
    schema: Schema,
    positions: Sequence[int],
    snapshot_id: int,
    name_prefix: str,
) -> list[ManifestFile]:
    """The live entries of ``manifests`` (all of ``spec`` and ``content``) as ``target_count``
    manifests written for ``snapshot_id``, ordered by partition (then path, which also spreads
    one partition's entries evenly over several manifests)."""

    def entries_of(m: ManifestFile) -> Iterator[EncodedEntry]:
        data = FileIO.for_location(m.manifest_path).read(m.manifest_path)
        return existing_entries(data, m, format_version=format_version, spec=spec, schema=schema)

    def read(part: Iterable[ManifestFile]) -> Iterator[tuple[tuple[Any, ...], _Row]]:
        for m in part:
            for e in entries_of(m):
                # The path travels once, in the key; the value is a plain tuple (cheap to pickle).
                yield (
                    (partition_sort_key(e.partition, positions), e.path),
                    (
                        e.record_count,
                        e.sequence_number,
                        e.partition,
                        e.record,
                    ),
                )

    def write(index: int, part: Iterable[tuple[tuple[Any, ...], _Row]]) -> Iterator[ManifestFile]:
        rows = sorted(part, key=_first)
        if not rows:
            return
        path = new_manifest_path(table_location, name_prefix, index)
        data, manifest = write_encoded_manifest(
            path,
            (EncodedEntry(EXISTING, c, q, pv, k[1], r) for k, (c, q, pv, r) in rows),
            format_version=format_version,
            spec=spec,
            schema=schema,
            snapshot_id=snapshot_id,
            content=content,
        )
        FileIO.for_location(path).create_if_absent(path, data)
        yield manifest

    sc = spark.sparkContext
    slices = max(1, min(len(manifests), sc.defaultParallelism * _TASKS_PER_CORE))
    pairs = sc.parallelize(list(manifests), slices).mapPartitions(read)
    parts = max(1, target_count)
    # Range bounds from the keys of a few manifests spread over the list, read here: one pass
    # over the entries instead of Spark's count, sample and shuffle passes. Each task sorts its
    # own range in memory (an output manifest is bounded by the target size).
    bounds: list[Any] = []
    if parts > 1:
        step = max(1, len(manifests) // _SAMPLED_MANIFESTS)
        keys = sorted(
            (partition_sort_key(e.partition, positions), e.path)
            for m in manifests[::step]
            for e in entries_of(m)
        )
        bounds = [keys[len(keys) * i // parts] for i in range(1, parts)] if keys else []

    def partition(key: Any) -> int:
        return bisect.bisect_left(bounds, key)

    ordered = pairs.partitionBy(parts, partition)
    return list(ordered.mapPartitionsWithIndex(write).collect())


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]
