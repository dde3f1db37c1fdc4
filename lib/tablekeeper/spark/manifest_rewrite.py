"""A manifest rewrite on the executors: tasks read the manifests to replace, Spark range-sorts
their live entries by partition, and each output task writes one manifest.

Entries cross the shuffle already encoded as their final Avro records (with the few fields the
manifest-list row needs), so the writing side only concatenates bytes. The driver gets the new
manifests' list rows back and commits them; nothing here decides what to commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import SparkSession

from tablekeeper.iceberg.content import ManifestFile
from tablekeeper.iceberg.manifest import EncodedEntry, entry_encoder, read_manifest, write_encoded_manifest
from tablekeeper.iceberg.manifest_rewrite import as_existing, partition_sort_key
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.types import Schema
from tablekeeper.io import FileIO

# Input tasks per core: manifests differ in size, so a few tasks each keep both cores busy.
_TASKS_PER_CORE = 4


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
    partition_type = spec.partition_type(schema)

    def read(part: Iterable[ManifestFile]) -> Iterator[tuple[tuple[Any, ...], EncodedEntry]]:
        encode = entry_encoder(format_version, spec, schema, content)
        for m in part:
            data = FileIO.for_location(m.manifest_path).read(m.manifest_path)
            for e in read_manifest(data, m, partition_type):
                if e.is_live:
                    f = e.data_file
                    yield (partition_sort_key(f.partition, positions), f.file_path), encode(as_existing(e))

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
    # sortByKey counts and samples its input before the shuffle: keep the read entries rather
    # than reading every manifest three times.
    pairs = sc.parallelize(list(manifests), slices).mapPartitions(read).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        ordered = pairs.sortByKey(True, max(1, target_count))  # type: ignore[call-overload]
        return list(ordered.mapPartitionsWithIndex(write).collect())
    finally:
        pairs.unpersist()
