"""Distributed manifest writing: executors turn groups of data files into manifest Avro files.

The driver hands out groups of files (frozen DataFile models travel as pickles), each task writes
its manifests with the pure writer and returns their manifest-list rows; the driver then commits
them with the manifest list and metadata. Nothing here decides what to commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

from pyspark.sql import SparkSession

from tablekeeper.iceberg.content import (
    ADDED,
    DATA,
    MANIFEST_DATA,
    MANIFEST_DELETES,
    DataFile,
    ManifestEntry,
    ManifestFile,
)
from tablekeeper.iceberg.manifest import write_manifest
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.types import Schema
from tablekeeper.io import FileIO


def write_manifest_group(
    group: Sequence[DataFile],
    *,
    table_location: str,
    format_version: int,
    specs: dict[int, PartitionSpec],
    schema: Schema,
    snapshot_id: int,
    name_prefix: str = "",
    data_sequence_numbers: Mapping[str, int] | None = None,
) -> list[ManifestFile]:
    """One manifest per (content kind, spec) of ``group``, written where the task runs; names
    start with ``name_prefix`` (e.g. a commit id, so a failed commit's manifests can be found).
    Files in ``data_sequence_numbers`` (by path) keep their own data sequence number."""
    own = data_sequence_numbers or {}
    out: list[ManifestFile] = []
    by_kind: dict[tuple[int, int], list[DataFile]] = {}
    for f in group:
        by_kind.setdefault((MANIFEST_DATA if f.content == DATA else MANIFEST_DELETES, f.spec_id), []).append(
            f
        )
    for (kind, spec_id), files in sorted(by_kind.items()):
        path = f"{table_location.rstrip('/')}/metadata/{name_prefix}{uuid.uuid4()}-m0.avro"
        data, manifest = write_manifest(
            path,
            [ManifestEntry(ADDED, snapshot_id, f, own.get(f.file_path), own.get(f.file_path)) for f in files],
            format_version=format_version,
            spec=specs[spec_id],
            schema=schema,
            snapshot_id=snapshot_id,
            content=kind,
        )
        FileIO.for_location(path).create_if_absent(path, data)
        out.append(manifest)
    return out


def write_manifests_distributed(
    spark: SparkSession,
    files: Sequence[DataFile],
    *,
    table_location: str,
    format_version: int,
    specs: dict[int, PartitionSpec],
    schema: Schema,
    snapshot_id: int,
    files_per_manifest: int = 20_000,
    name_prefix: str = "",
    data_sequence_numbers: Mapping[str, int] | None = None,
) -> list[ManifestFile]:
    """Write the manifests for ``files`` on the executors; returns their manifest-list rows."""
    if not files:
        return []
    own = data_sequence_numbers or {}
    chunks = (list(files[i : i + files_per_manifest]) for i in range(0, len(files), files_per_manifest))
    groups = [(g, {f.file_path: own[f.file_path] for f in g if f.file_path in own}) for g in chunks]

    def task(part: Iterable[tuple[list[DataFile], dict[str, int]]]) -> Iterable[ManifestFile]:
        for group, sequence_numbers in part:
            yield from write_manifest_group(
                group,
                table_location=table_location,
                format_version=format_version,
                specs=specs,
                schema=schema,
                snapshot_id=snapshot_id,
                name_prefix=name_prefix,
                data_sequence_numbers=sequence_numbers,
            )

    rdd = spark.sparkContext.parallelize(groups, numSlices=len(groups))
    return list(rdd.mapPartitions(task).collect())
