"""Reachable-file sets and bulk deletes, computed on the executors.

A table's reachable files are its snapshots' manifest lists, the manifests they name, the live
entries of those manifests (data files, delete files, DV Puffin files) and the statistics files.
Executors read the manifest lists and manifests; the driver only sees per-task counts and the
deletes that failed. Paths carry a comparison key (``normalize_location``), so spellings of one
file (``s3a://`` and ``s3://``) count as one.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark import RDD
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tablekeeper.errors import CorruptMetadataError, TablekeeperError
from tablekeeper.iceberg.manifest import ManifestFile, read_manifest_list
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.reachable import KINDS, MANIFEST, MANIFEST_LIST, STATISTICS, live_files
from tablekeeper.io import FileIO
from tablekeeper.io.uri import DEFAULT_EQUIVALENT_SCHEMES, location_to_path, normalize_location
from tablekeeper.spark.concurrent import no_cycle_collection

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
        # Files of one directory share their key's prefix: normalising the directory once makes a
        # key a lookup and a concatenation (millions of keys per run).
        slash = location.rfind("/")
        authority = location.find("://")
        # The last slash must end a path segment, not the "//" before an authority.
        if slash > 0 and (authority < 0 or 0 <= location.find("/", authority + 3) <= slash):
            name = location[slash + 1 :]
            if name not in ("", ".", ".."):
                return self.prefix(location[:slash]) + name
        return normalize_location(location, self.equivalent_schemes, self.equivalent_authorities)

    def __post_init__(self) -> None:
        # Hashable copies of the rules, for the prefix cache.
        schemes = tuple(sorted(self.equivalent_schemes.items()))
        authorities = tuple(sorted((self.equivalent_authorities or {}).items()))
        object.__setattr__(self, "_rules", (schemes, authorities))

    def prefix(self, directory: str) -> str:
        """What the key of every file directly in ``directory`` starts with (ends with ``/``)."""
        schemes, authorities = self.__dict__["_rules"]
        return _key_prefix(directory, schemes, authorities)


@functools.lru_cache(maxsize=1 << 16)
def _key_prefix(
    parent: str, schemes: tuple[tuple[str, str], ...], authorities: tuple[tuple[str, str], ...]
) -> str:
    """The key of ``parent/x`` without the ``x``: what every child's key starts with."""
    return normalize_location(parent + "/x", dict(schemes), dict(authorities) or None)[:-1]


# Manifest entries one task decodes at most: a larger manifest is split by Avro blocks.
ENTRIES_PER_TASK = 40_000


@dataclass(frozen=True)
class ManifestIndex:
    """What some snapshots' manifest lists name, collected on the driver (one row per manifest,
    so small next to the entries): rows for the lists and manifests themselves, and the
    manifests to read with their live-entry counts (-1 when the list does not say)."""

    rows: tuple[tuple[str, str, str, int], ...]
    manifests: tuple[tuple[str, str, int], ...]

    @property
    def manifest_keys(self) -> frozenset[str]:
        return frozenset(key for _, key, _ in self.manifests)


def _read(location: str) -> bytes:
    return FileIO.for_location(location).read(location)


def _live_count(m: ManifestFile) -> int:
    if m.added_files_count is None or m.existing_files_count is None:
        return -1
    return int(m.added_files_count) + int(m.existing_files_count)


def _snapshot_manifests(
    seed: tuple[str | None, tuple[str, ...]], rules: PathRules
) -> Iterator[tuple[str, str, str, int, int]]:
    manifest_list, embedded = seed
    if manifest_list is not None:
        data = _read(manifest_list)
        yield (manifest_list, rules.key(manifest_list), MANIFEST_LIST, len(data), 0)
        for m in read_manifest_list(data, f"manifest list {manifest_list}"):
            path = m.manifest_path
            yield (path, rules.key(path), MANIFEST, int(m.manifest_length), _live_count(m))
    for path in embedded:  # v1 snapshots without a list
        yield (path, rules.key(path), MANIFEST, 0, -1)


def index_manifests(
    spark: SparkSession, meta: TableMetadata, snapshot_ids: Iterable[int], rules: PathRules
) -> ManifestIndex:
    """Read the given snapshots' manifest lists on the executors. Unreadable lists fail the job."""
    wanted = set(snapshot_ids)
    seeds = [(s.manifest_list, tuple(s.manifests)) for s in meta.snapshots if s.snapshot_id in wanted]
    stat_files = [(s.snapshot_id, s.statistics_path, s.file_size_in_bytes) for s in meta.statistics]
    stat_files += [
        (s.snapshot_id, s.statistics_path, s.file_size_in_bytes) for s in meta.partition_statistics
    ]
    rows: dict[tuple[str, str], tuple[str, str, str, int]] = {}
    for sid, path, size in stat_files:
        if sid in wanted:
            key = rules.key(path)
            rows[(key, STATISTICS)] = (path, key, STATISTICS, int(size))
    manifests: dict[str, tuple[str, str, int]] = {}
    if seeds:
        sc = spark.sparkContext
        # One round of tasks: a Python task costs a few hundred milliseconds to start.
        slices = max(1, min(len(seeds), sc.defaultParallelism))
        found = sc.parallelize(seeds, slices).flatMap(lambda seed: _snapshot_manifests(seed, rules)).collect()
        for path, key, kind, size, live in found:
            rows.setdefault((key, kind), (path, key, kind, size))
            if kind == MANIFEST:
                seen = manifests.get(key)
                # Lists disagreeing on a manifest's counts: trust neither.
                count = live if seen is None or seen[2] == live else -1
                manifests[key] = (path, key, count)
    return ManifestIndex(tuple(rows.values()), tuple(manifests.values()))


def _manifest_entries(task: tuple[str, int, int], rules: PathRules) -> Iterator[tuple[Any, ...]]:
    path, part, parts = task
    with no_cycle_collection():
        rows = [
            (f.path, rules.key(f.path), f.kind, f.size) for f in live_files(_read(path), path, part, parts)
        ]
    return iter(rows)


def _manifest_keys(task: tuple[str, int, int], rules: PathRules) -> Iterator[str]:
    path, part, parts = task
    with no_cycle_collection():
        keys = [rules.key(f.path) for f in live_files(_read(path), path, part, parts)]
    return iter(keys)


def _tasks(
    index: ManifestIndex, parallelism: int, skip_manifests: frozenset[str], skip_empty: bool
) -> list[tuple[str, int, int]]:
    """(manifest, slice, slices) to read: large manifests split so they spread over the
    executors, and their slices first."""
    tasks: list[tuple[str, int, int]] = []
    for path, key, live in index.manifests:
        if key in skip_manifests or (skip_empty and live == 0):
            continue
        parts = max(1, min(-(-live // ENTRIES_PER_TASK), parallelism))
        tasks.extend((path, part, parts) for part in range(parts))
    tasks.sort(key=lambda t: -t[2])
    return tasks


def reachable_files(
    spark: SparkSession,
    index: ManifestIndex,
    rules: PathRules,
    skip_manifests: frozenset[str] = frozenset(),
    skip_empty: bool = False,
) -> DataFrame:
    """Every file the indexed snapshots reach (columns path, key, kind, size; one row per key and
    kind); manifests are read on the executors, large ones split across tasks.

    ``skip_manifests`` (keys) are not opened: callers pass manifests whose entries are counted
    elsewhere. ``skip_empty`` trusts the lists' counts and leaves manifests without live entries
    unopened; only for sets where a missed file means keeping it, never for what must be kept.
    Unreadable manifests fail the job with the file's name.
    """
    sc = spark.sparkContext
    tasks = _tasks(index, sc.defaultParallelism, skip_manifests, skip_empty)
    out = spark.createDataFrame(list(index.rows), FILES_SCHEMA, verifySchema=False)
    if tasks:
        slices = max(1, min(len(tasks), sc.defaultParallelism))  # one round of Python tasks
        entries = sc.parallelize(tasks, slices).flatMap(lambda task: _manifest_entries(task, rules))
        out = out.unionByName(spark.createDataFrame(entries, FILES_SCHEMA, verifySchema=False))
    return out.dropDuplicates(["key", "kind"])


@dataclass(frozen=True)
class ReachableKeys:
    """The keys of every file some snapshots reach: the lists, manifests and statistics files
    (known on the driver) and the entries of the manifests (read by executor tasks; a file
    several manifests list comes once per listing)."""

    known: tuple[str, ...]
    entries: RDD[str] | None
    estimate: int  # of all keys


def reachable_keys(spark: SparkSession, index: ManifestIndex, rules: PathRules) -> ReachableKeys:
    sc = spark.sparkContext
    tasks = _tasks(index, sc.defaultParallelism, frozenset(), False)
    entries = None
    if tasks:
        slices = max(1, min(len(tasks), sc.defaultParallelism))
        entries = sc.parallelize(tasks, slices).flatMap(lambda task: _manifest_keys(task, rules))
    estimate = len(index.rows) + sum(max(live, 0) for _, _, live in index.manifests)
    return ReachableKeys(tuple(row[1] for row in index.rows), entries, estimate)


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


def delete_files(files: DataFrame | RDD[Any], max_concurrent: int) -> DeleteOutcome:
    """Delete every row's ``path`` (rows path, key, kind, size) with at most ``max_concurrent``
    tasks at once; a failed delete is reported and the others carry on."""
    parts = max(1, max_concurrent)
    rdd = files.rdd if isinstance(files, DataFrame) else files
    # Fewer partitions only merge (no shuffle); more spread the deletes over the executors.
    if rdd.getNumPartitions() > parts:
        rdd = rdd.coalesce(parts)
    elif rdd.getNumPartitions() < parts:
        rdd = files.repartition(parts).rdd if isinstance(files, DataFrame) else files.repartition(parts)
    outputs = rdd.mapPartitions(_delete_partition).collect()
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
