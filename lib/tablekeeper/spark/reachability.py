"""Reachable-file sets and bulk deletes, computed on the executors.

A table's reachable files are its snapshots' manifest lists, the manifests they name, the live
entries of those manifests (data files, delete files, DV Puffin files) and the statistics files.
Executors read the manifest lists and manifests; the driver only sees per-task counts and the
deletes that failed. Paths carry a comparison key (``normalize_location``), so spellings of one
file (``s3a://`` and ``s3://``) count as one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tablekeeper.errors import CorruptMetadataError, TablekeeperError
from tablekeeper.iceberg.manifest import read_manifest_list
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.reachable import KINDS, MANIFEST, MANIFEST_LIST, STATISTICS, live_files
from tablekeeper.io import FileIO
from tablekeeper.io.uri import DEFAULT_EQUIVALENT_SCHEMES, location_to_path, normalize_location

log = logging.getLogger(__name__)

FILES_SCHEMA = StructType(
    [
        StructField("path", StringType(), False),
        StructField("key", StringType(), False),
        StructField("kind", StringType(), False),
        StructField("size", LongType(), False),
    ]
)


@dataclass(frozen=True)
class PathRules:
    """How locations compare (pickled to executors)."""

    equivalent_schemes: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_EQUIVALENT_SCHEMES))
    equivalent_authorities: Mapping[str, str] | None = None

    def key(self, location: str) -> str:
        return normalize_location(location, self.equivalent_schemes, self.equivalent_authorities)


def _read(location: str) -> bytes:
    return FileIO.for_location(location).read(location)


def _snapshot_manifests(
    seed: tuple[str | None, tuple[str, ...]], rules: PathRules
) -> Iterator[tuple[Any, ...]]:
    manifest_list, embedded = seed
    if manifest_list is not None:
        data = _read(manifest_list)
        yield (manifest_list, rules.key(manifest_list), MANIFEST_LIST, len(data))
        for m in read_manifest_list(data, f"manifest list {manifest_list}"):
            yield (m.manifest_path, rules.key(m.manifest_path), MANIFEST, int(m.manifest_length))
    for path in embedded:  # v1 snapshots without a list
        yield (path, rules.key(path), MANIFEST, 0)


def _manifest_entries(path: str, rules: PathRules) -> Iterator[tuple[Any, ...]]:
    for f in live_files(_read(path), path):
        yield (f.path, rules.key(f.path), f.kind, f.size)


def reachable_files(
    spark: SparkSession, meta: TableMetadata, snapshot_ids: Iterable[int], rules: PathRules
) -> DataFrame:
    """Every file the given snapshots reach (columns path, key, kind, size; one row per key and
    kind). Unreadable manifests or lists fail the job with the file's name."""
    wanted = set(snapshot_ids)
    seeds = [(s.manifest_list, tuple(s.manifests)) for s in meta.snapshots if s.snapshot_id in wanted]
    stat_files = [(s.snapshot_id, s.statistics_path, s.file_size_in_bytes) for s in meta.statistics]
    stat_files += [
        (s.snapshot_id, s.statistics_path, s.file_size_in_bytes) for s in meta.partition_statistics
    ]
    stats = [
        (path, rules.key(path), STATISTICS, int(size)) for sid, path, size in stat_files if sid in wanted
    ]
    sc = spark.sparkContext
    slices = max(1, min(len(seeds), sc.defaultParallelism * 4))
    # Materialised once: the lists are read here, and the manifests are both rows and inputs.
    manifests = (
        spark.createDataFrame(
            sc.parallelize(seeds, slices).flatMap(lambda seed: _snapshot_manifests(seed, rules)), FILES_SCHEMA
        )
        .dropDuplicates(["key", "kind"])
        .localCheckpoint()
    )
    readable = manifests.where(manifests.kind == MANIFEST).select("path").dropDuplicates()
    content = spark.createDataFrame(
        readable.rdd.flatMap(lambda row: _manifest_entries(row[0], rules)), FILES_SCHEMA
    )
    out = manifests.unionByName(content)
    if stats:
        out = out.unionByName(spark.createDataFrame(stats, FILES_SCHEMA))
    return out.dropDuplicates(["key", "kind"])


@dataclass(frozen=True)
class DeleteOutcome:
    deleted: Mapping[str, int]  # by kind
    bytes_freed: int
    missing: int
    failures: tuple[tuple[str, str], ...]

    def count(self, kind: str) -> int:
        return int(self.deleted.get(kind, 0))


def _delete_partition(rows: Iterable[Any]) -> Iterator[tuple[dict[str, int], int, int, list[Any]]]:
    by_kind: dict[str, int] = {}
    freed = missing = 0
    failures: list[tuple[str, str]] = []
    stores: dict[tuple[str, str], FileIO] = {}  # one filesystem per store, not per file
    for path, _, kind, size in rows:
        parts = location_to_path(path)
        io = stores.get((parts.scheme, parts.authority))
        if io is None:
            io = stores[(parts.scheme, parts.authority)] = FileIO.for_location(path)
        try:
            if io.delete(path, missing_ok=True):
                by_kind[kind] = by_kind.get(kind, 0) + 1
                freed += int(size)
            else:
                missing += 1
        except TablekeeperError as err:
            failures.append((path, err.message))
    yield by_kind, freed, missing, failures


def delete_files(files: DataFrame, max_concurrent: int) -> DeleteOutcome:
    """Delete every row's ``path`` with at most ``max_concurrent`` tasks at once; a failed
    delete is reported and the others carry on."""
    parts = max(1, max_concurrent)
    outputs = files.repartition(parts).rdd.mapPartitions(_delete_partition).collect()
    deleted: dict[str, int] = dict.fromkeys(KINDS, 0)
    freed = missing = 0
    failures: list[tuple[str, str]] = []
    for by_kind, size, gone, failed in outputs:
        for k, n in by_kind.items():
            deleted[k] = deleted.get(k, 0) + n
        freed += size
        missing += gone
        failures.extend(failed)
    return DeleteOutcome(deleted, freed, missing, tuple(failures))


def task_failure(err: BaseException, what: str) -> TablekeeperError:
    """An executor's failure as one typed line: the tablekeeper error the task raised if any."""
    text = str(err)
    for raw in reversed(text.splitlines()):
        line = raw.strip()
        for name in ("CorruptMetadataError", "FileNotFound", "StorageError", "UnsupportedFeatureError"):
            marker = f"tablekeeper.errors.{name}: "
            if marker in line:
                return CorruptMetadataError(f"{what}: {line.split(marker, 1)[1]}")
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), err.__class__.__name__)
    return CorruptMetadataError(f"{what}: {first[:300]}")
