"""A manifest rewrite on the executors: tasks read the manifests to replace, Spark range-sorts
their live entries by partition, and each output task writes one manifest.

Entries cross the shuffle already encoded as their final Avro records (with the few fields the
manifest-list row needs), so the writing side only concatenates bytes. The driver gets the new
manifests' list rows back and commits them; nothing here decides what to commit.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import SparkSession

from tablekeeper.iceberg.content import ManifestFile
from tablekeeper.iceberg.manifest import EncodedEntry, write_encoded_manifest
from tablekeeper.iceberg.manifest_rewrite import partition_sort_key
from tablekeeper.iceberg.manifest_splice import existing_entries
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.types import Schema
from tablekeeper.io import FileIO

# Input tasks per core: manifests differ in size, so a few tasks each keep both cores busy.
_TASKS_PER_CORE = 4
# Sampled keys per output manifest for the range bounds (Spark's range partitioner takes 20).
_SAMPLES_PER_PART = 60


def new_manifest_path(table_location: str, name_prefix: str, index: int) -> str:
    return f"{table_location.rstrip('/')}/metadata/{name_prefix}{uuid.uuid4()}-m{index}.avro"


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

    def read(part: Iterable[ManifestFile]) -> Iterator[tuple[tuple[Any, ...], EncodedEntry]]:
        for m in part:
            data = FileIO.for_location(m.manifest_path).read(m.manifest_path)
            for e in existing_entries(data, m, format_version=format_version, spec=spec, schema=schema):
                yield (partition_sort_key(e.partition, positions), e.path), e

    def write(index: int, part: Iterable[tuple[Any, EncodedEntry]]) -> Iterator[ManifestFile]:
        entries = [entry for _, entry in part]
        if not entries:
            return
        path = new_manifest_path(table_location, name_prefix, index)
        data, manifest = write_encoded_manifest(
            path,
            entries,
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
    if parts == 1:
        ordered = pairs.repartitionAndSortWithinPartitions(1, lambda _: 0)  # type: ignore[call-overload]
        return list(ordered.mapPartitionsWithIndex(write).collect())
    # Range bounds from a sample, as sortByKey takes them, but without its extra pass to count:
    # the manifest list already says how many entries there are. The sample and the shuffle both
    # read the entries kept after the first read.
    pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        live = sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in manifests)
        fraction = min(1.0, parts * _SAMPLES_PER_PART / max(1, live))
        sample = sorted(pairs.sample(False, fraction, 17).keys().collect())
        step = len(sample) / parts
        bounds = [sample[int(step * i)] for i in range(1, parts) if sample]

        def partition(key: Any) -> int:
            return bisect.bisect_left(bounds, key)

        ordered = pairs.repartitionAndSortWithinPartitions(parts, partition)  # type: ignore[call-overload]
        return list(ordered.mapPartitionsWithIndex(write).collect())
    finally:
        pairs.unpersist()
