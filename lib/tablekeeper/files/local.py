"""The driver engine: the maintenance jobs' reads, comparisons and deletes in this process.

Manifest lists and manifests are read by a thread pool (the reads are I/O; fastavro decodes
without holding the interpreter long), sets are Python sets, and deletes go through the FileIO in
threads (batched on S3). No JVM starts, so a small table's expiry takes a second, not the dozen a
Spark session costs to start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, TypeVar

from tablekeeper import faults
from tablekeeper.cycles import no_cycle_collection
from tablekeeper.files.containment import Containment
from tablekeeper.files.deletes import DeleteOutcome
from tablekeeper.files.doomed import unkept
from tablekeeper.files.engine import (
    DRIVER_MAX_LISTED,
    FileTally,
    KeySet,
    ListingTooLarge,
    MetadataOnly,
    first_sorted,
    tally_rows,
)
from tablekeeper.files.inventory import Inventory, Scope, read_part, recheck
from tablekeeper.files.journal import JournalWriter, Ready, read_parts, write_part
from tablekeeper.files.listing import Classifier, table_rows
from tablekeeper.files.manifests import (
    FileRow,
    ListedRow,
    ManifestIndex,
    Seed,
    build_index,
    entry_keys,
    entry_rows,
    seeds,
    snapshot_manifests,
    statistics_rows,
    tasks,
)
from tablekeeper.files.orphans import ORPHAN, Summary, classify, listed_pair, reference_pair, summary, tally
from tablekeeper.files.quarantine import Quarantine, dispose
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.io import FileIO
from tablekeeper.io.fileio import FileInfo
from tablekeeper.io.uri import strip_trailing_slash

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
THREADS = 16
SAMPLE = 100


def parallel_map(fn: Callable[[T], R], items: Sequence[T], threads: int = THREADS) -> list[R]:
    """``fn`` over ``items`` in threads, in order; the first error is raised."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(fn, items))


@dataclass
class IndexCache:
    """Manifest lists already read in this run (they never change): engines index from it."""

    found: dict[Seed, list[ListedRow]] = field(default_factory=dict)

    def fill(self, wanted: Sequence[Seed], rules: PathRules) -> None:
        missing = [s for s in wanted if s not in self.found]
        for seed, rows in zip(
            missing, parallel_map(lambda s: list(snapshot_manifests(s, rules)), missing), strict=True
        ):
            self.found[seed] = rows

    def index(self, meta: TableMetadata, snapshot_ids: Iterable[int], rules: PathRules) -> ManifestIndex:
        ids = list(snapshot_ids)
        wanted = seeds(meta, ids)
        self.fill(wanted, rules)
        return build_index(statistics_rows(meta, ids, rules), (r for s in wanted for r in self.found[s]))


def _entries(index: ManifestIndex, rules: PathRules, skip: frozenset[str], skip_empty: bool) -> list[FileRow]:
    work = tasks(index, 1, skip, skip_empty)
    with no_cycle_collection():
        chunks = parallel_map(lambda t: entry_rows(t, rules), work)
    return [r for chunk in chunks for r in chunk]


@dataclass(frozen=True)
class LocalDoomed:
    files: tuple[FileRow, ...]

    def tally(self) -> FileTally:
        return tally_rows(self.files)

    def paths(self, limit: int | None = None) -> Iterator[str]:
        return first_sorted((r[0] for r in self.files), limit)

    def write(self, journal: JournalWriter) -> Ready:
        return journal.ready([write_part(journal.location, 0, self.files)])


@dataclass(frozen=True)
class LocalOrphans:
    found: tuple[tuple[str, str, str, int], ...]  # status, path, key, size
    summary: Summary

    def _rows(self, statuses: Sequence[str]) -> list[FileRow]:
        return [(path, key, ORPHAN, size) for status, path, key, size in self.found if status in statuses]

    def tally(self, statuses: Sequence[str]) -> FileTally:
        return tally_rows(self._rows(statuses))

    def paths(self, statuses: Sequence[str], limit: int | None = None) -> Iterator[str]:
        return first_sorted((r[0] for r in self._rows(statuses)), limit)

    def write(self, journal: JournalWriter, statuses: Sequence[str]) -> Ready:
        return journal.ready([write_part(journal.location, 0, self._rows(statuses))])


class LocalEngine:
    name = "driver"

    def __init__(self, cache: IndexCache | None = None, max_listed: int = DRIVER_MAX_LISTED) -> None:
        self.cache = cache or IndexCache()
        self.max_listed = max_listed

    def describe(self, phase: str) -> None:
        log.debug("%s", phase)

    def index(self, meta: TableMetadata, snapshot_ids: Iterable[int], rules: PathRules) -> ManifestIndex:
        return self.cache.index(meta, snapshot_ids, rules)

    def doomed(
        self, gone: ManifestIndex, kept: ManifestIndex, rules: PathRules, only: MetadataOnly | None = None
    ) -> LocalDoomed:
        # A manifest the kept snapshots also list holds only files they keep, and one without
        # live entries holds none: the candidates need neither opened.
        candidates = chain(gone.rows, _entries(gone, rules, kept.manifest_keys, True))
        return LocalDoomed(tuple(unkept(candidates, self.keys(kept, rules).known, only)))

    def keys(self, index: ManifestIndex, rules: PathRules, extra: Iterable[str] = ()) -> KeySet:
        work = tasks(index, 1)
        with no_cycle_collection():
            chunks = parallel_map(lambda t: entry_keys(t, rules), work)
        known = {r[1] for r in index.rows}
        known.update(extra)
        for chunk in chunks:
            known.update(chunk)
        return KeySet(frozenset(known))

    def delete(
        self,
        files: Ready | Sequence[FileRow],
        keep: KeySet | None,
        concurrency: int,
        containment: Containment,
        quarantine: Quarantine | None = None,
    ) -> DeleteOutcome:
        rows = [containment.rekey(r) for r in (read_parts(files) if isinstance(files, Ready) else files)]
        if keep is not None:
            assert keep.handle is None, "the driver engine keeps its keys in memory"
            rows = [r for r in rows if r[1] not in keep.known]
        kill = faults.remote_kill("delete.mid")
        return dispose(rows, containment, max(1, concurrency), kill, quarantine)

    def scan_orphans(
        self,
        location: str,
        rules: PathRules,
        partition_names: frozenset[str],
        references: Callable[[], tuple[ManifestIndex, tuple[str, ...]]],
        cutoff_ms: int,
        deletable: Callable[[str], bool] | None,
        inventory: Inventory | None = None,
    ) -> LocalOrphans:
        listed = self._list(location, rules, partition_names, inventory)
        index, extra = references()
        refs = self.keys(index, rules, extra).known
        old = (r for r in listed if r[3] < cutoff_ms and (deletable is None or deletable(r[0])))
        pairs: Iterator[tuple[str, Any]] = (listed_pair(r) for r in old)
        with no_cycle_collection():
            found = classify([*pairs, *(reference_pair(k) for k in refs)])
        if inventory is not None:
            # Looked at again, a few per thread: the report is older than the store.
            chunks = [found[i : i + 64] for i in range(0, len(found), 64)]
            found = [
                r for chunk in parallel_map(lambda c: list(recheck(c, cutoff_ms)), chunks) for r in chunk
            ]
        return LocalOrphans(tuple(found), summary(tally(found, SAMPLE), SAMPLE))

    def _list(
        self,
        location: str,
        rules: PathRules,
        partition_names: frozenset[str],
        inventory: Inventory | None = None,
    ) -> list[tuple[str, str, int, int]]:
        stem = strip_trailing_slash(location)
        classifier = Classifier(stem, rules, partition_names)
        if inventory is None:
            infos: Iterable[FileInfo] = FileIO.for_location(location).list(location, recursive=True)
        else:
            scope = Scope.of(stem)
            infos = chain.from_iterable(read_part(inventory, p, scope) for p in inventory.parts)
        rows: list[tuple[Any, ...]] = []
        with no_cycle_collection():
            for row in classifier.rows(infos):
                rows.append(row)
                if len(rows) > self.max_listed:
                    raise ListingTooLarge(f"{location} holds over {self.max_listed} files")
        return table_rows(rows, rules.prefix(stem)[:-1])
