"""Reading what snapshots reach: manifest lists, then the live entries of their manifests.

Plain functions over locations, so the driver (threads) and Spark tasks run the same code. Each
row is ``(path, key, kind, size)``; ``key`` compares spellings of one file as one
(``PathRules.key``). Every read failure names the file: a set of files to keep that misses one
would let a live file be deleted, so an unreadable list or manifest fails the whole computation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tablekeeper.errors import CorruptMetadataError, FileNotFound
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.content import ManifestFile
from tablekeeper.iceberg.manifest import read_manifest_list
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.reachable import MANIFEST, MANIFEST_LIST, STATISTICS, live_files
from tablekeeper.io import FileIO

FileRow = tuple[str, str, str, int]  # path, key, kind, size
# Manifest entries one task decodes at most: a larger manifest is split by Avro blocks.
ENTRIES_PER_TASK = 40_000

Seed = tuple[str | None, tuple[str, ...]]  # a snapshot's manifest list, or its embedded manifests (v1)
Task = tuple[str, int, int]  # manifest, slice, slices
ListedRow = tuple[str, str, str, int, int]  # path, key, kind, size, live entries (-1: unknown)


@dataclass(frozen=True)
class ManifestIndex:
    """What some snapshots' manifest lists name (one row per manifest, so small next to the
    entries): rows for the lists, manifests and statistics files themselves, and the manifests
    to read with their live-entry counts (-1 when the list does not say)."""

    rows: tuple[FileRow, ...]
    manifests: tuple[tuple[str, str, int], ...]

    @property
    def manifest_keys(self) -> frozenset[str]:
        return frozenset(key for _, key, _ in self.manifests)

    @property
    def estimate(self) -> int:
        """Files the indexed snapshots reach, at least (entries counted by the lists)."""
        return len(self.rows) + sum(max(live, 0) for _, _, live in self.manifests)

    @property
    def uncounted(self) -> int:
        return sum(1 for _, _, live in self.manifests if live < 0)


def read(location: str) -> bytes:
    try:
        return FileIO.for_location(location).read(location)
    except FileNotFound:
        raise CorruptMetadataError(f"{location} is missing: the table's metadata references it") from None


def live_count(m: ManifestFile) -> int:
    """A manifest's live entries as its list counts them; -1 when the list does not say."""
    if m.added_files_count is None or m.existing_files_count is None:
        return -1
    return int(m.added_files_count) + int(m.existing_files_count)


def agreed_count(seen: int, live: int) -> int:
    """Two lists' live counts for one manifest: the count when they agree; else trust neither."""
    return live if seen == live else -1


def seeds(meta: TableMetadata, snapshot_ids: Iterable[int]) -> list[Seed]:
    wanted = set(snapshot_ids)
    return [(s.manifest_list, tuple(s.manifests)) for s in meta.snapshots if s.snapshot_id in wanted]


def statistics_rows(meta: TableMetadata, snapshot_ids: Iterable[int], rules: PathRules) -> list[FileRow]:
    wanted = set(snapshot_ids)
    stats = [(s.snapshot_id, s.statistics_path, s.file_size_in_bytes) for s in meta.statistics]
    stats += [(s.snapshot_id, s.statistics_path, s.file_size_in_bytes) for s in meta.partition_statistics]
    return [(path, rules.key(path), STATISTICS, int(size)) for sid, path, size in stats if sid in wanted]


def snapshot_manifests(seed: Seed, rules: PathRules) -> Iterator[ListedRow]:
    """(path, key, kind, size, live entries) of a snapshot's list and each manifest it names."""
    manifest_list, embedded = seed
    if manifest_list is not None:
        data = read(manifest_list)
        yield (manifest_list, rules.key(manifest_list), MANIFEST_LIST, len(data), 0)
        for m in read_manifest_list(data, f"manifest list {manifest_list}"):
            path = m.manifest_path
            yield (path, rules.key(path), MANIFEST, int(m.manifest_length), live_count(m))
    for path in embedded:  # v1 snapshots without a list
        yield (path, rules.key(path), MANIFEST, 0, -1)


def build_index(stat_rows: Iterable[FileRow], found: Iterable[ListedRow]) -> ManifestIndex:
    rows: dict[tuple[str, str], FileRow] = {}
    for row in stat_rows:
        rows[(row[1], row[2])] = row
    manifests: dict[str, tuple[str, str, int]] = {}
    for path, key, kind, size, live in found:
        rows.setdefault((key, kind), (path, key, kind, size))
        if kind == MANIFEST:
            seen = manifests.get(key)
            manifests[key] = (path, key, live if seen is None else agreed_count(seen[2], live))
    return ManifestIndex(tuple(rows.values()), tuple(manifests.values()))


def entry_rows(task: Task, rules: PathRules) -> list[FileRow]:
    path, part, parts = task
    return [(f.path, rules.key(f.path), f.kind, f.size) for f in live_files(read(path), path, part, parts)]


def entry_keys(task: Task, rules: PathRules) -> list[str]:
    path, part, parts = task
    return [rules.key(f.path) for f in live_files(read(path), path, part, parts)]


def tasks(
    index: ManifestIndex,
    parallelism: int,
    skip_manifests: frozenset[str] = frozenset(),
    skip_empty: bool = False,
) -> list[Task]:
    """(manifest, slice, slices) to read: large manifests split so they spread over workers, and
    their slices first.

    ``skip_manifests`` (keys) are not opened: callers pass manifests whose entries are counted
    elsewhere. ``skip_empty`` trusts the lists' counts and leaves manifests without live entries
    unopened; only for sets where a missed file means keeping it, never for what must be kept.
    """
    return manifest_tasks(
        (
            (path, live)
            for path, key, live in index.manifests
            if key not in skip_manifests and not (skip_empty and live == 0)
        ),
        parallelism,
    )


def manifest_tasks(manifests: Iterable[tuple[str, int]], parallelism: int) -> list[Task]:
    """(manifest, slice, slices) for manifests given as (path, live entries, -1 if unknown):
    large ones split so they spread over workers, and their slices first."""
    out: list[Task] = []
    for path, live in manifests:
        parts = max(1, min(-(-live // ENTRIES_PER_TASK), parallelism))
        out.extend((path, part, parts) for part in range(parts))
    out.sort(key=lambda t: -t[2])
    return out


def index_difference(new: ManifestIndex, known: ManifestIndex) -> ManifestIndex:
    """What ``new`` indexes that ``known`` does not: its rows absent from ``known``, and its
    manifests ``known`` does not list (manifests never change, so a shared one reaches the same
    files)."""
    known_rows = {(r[1], r[2]) for r in known.rows}
    known_manifests = known.manifest_keys
    return ManifestIndex(
        tuple(r for r in new.rows if (r[1], r[2]) not in known_rows),
        tuple(m for m in new.manifests if m[1] not in known_manifests),
    )
