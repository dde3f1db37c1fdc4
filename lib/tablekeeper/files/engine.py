"""What the maintenance jobs ask of an engine, so one job runs in this process or on Spark.

The driver engine (``files.local``) reads and deletes with threads in this process: no JVM, and
the right choice for tables whose metadata fits in memory. The Spark engine
(``spark.maintenance``) does the same reads, comparisons and deletes in executor tasks. A job is
written once against this protocol; the sets it builds stay inside the engine (Python sets, or
Spark datasets) and only counts, samples and journal parts come out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tablekeeper.errors import CorruptMetadataError, TablekeeperError, as_error, java_cause, task_error
from tablekeeper.files.containment import Containment
from tablekeeper.files.deletes import DeleteOutcome
from tablekeeper.files.inventory import Inventory
from tablekeeper.files.journal import JournalWriter, Ready
from tablekeeper.files.manifests import FileRow, ManifestIndex
from tablekeeper.files.orphans import Summary
from tablekeeper.files.quarantine import Quarantine
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.reachable import MANIFEST, MANIFEST_LIST, STATISTICS

# Above these, a table's files are read on Spark executors (when the job may use Spark).
DRIVER_MAX_SNAPSHOTS = 2_000
DRIVER_MAX_MANIFESTS = 2_000
DRIVER_MAX_FILES = 200_000
DRIVER_MAX_LISTED = 250_000


@dataclass(frozen=True)
class MetadataOnly:
    """Of the files to delete, only a table's own metadata (manifests, lists, statistics files
    under its metadata location): for a table whose data files another table owns."""

    prefix: str  # the comparison key prefix of the metadata location

    def __call__(self, row: FileRow) -> bool:
        return row[2] in (MANIFEST, MANIFEST_LIST, STATISTICS) and row[1].startswith(self.prefix)


@dataclass(frozen=True)
class KeySet:
    """Keys of files to keep: held here, or (``handle``) as a dataset of the engine's own."""

    known: frozenset[str]
    handle: Any = None


@dataclass(frozen=True)
class FileTally:
    """How many files of each kind a set holds, and their bytes: what a dry run reports without
    bringing the set to the driver."""

    counts: Mapping[str, int]
    bytes: int

    @property
    def files(self) -> int:
        return sum(self.counts.values())


def tally_rows(rows: Iterable[FileRow]) -> FileTally:
    counts: dict[str, int] = {}
    size = 0
    for _, _, kind, nbytes in rows:
        counts[kind] = counts.get(kind, 0) + 1
        size += nbytes
    return FileTally(counts, size)


def first_sorted(paths: Iterable[str], limit: int | None) -> Iterator[str]:
    """``paths`` in sorted order, the first ``limit`` of them: for sets already in memory."""
    return iter(sorted(paths)[:limit])


def merge_tallies(parts: Iterable[FileTally]) -> FileTally:
    counts: dict[str, int] = {}
    size = 0
    for part in parts:
        for kind, n in part.counts.items():
            counts[kind] = counts.get(kind, 0) + n
        size += part.bytes
    return FileTally(counts, size)


class Doomed(Protocol):
    """Files some snapshots reach that others do not."""

    def tally(self) -> FileTally:
        """Counts by kind and bytes, computed where the set is (dry runs)."""

    def paths(self, limit: int | None = None) -> Iterator[str]:
        """Their locations in sorted order (the first ``limit``), streamed: never all at once."""

    def write(self, journal: JournalWriter) -> Ready:
        """Into the journal's parts, then ``ready.json``; reads everything the set depends on."""


class OrphanScan(Protocol):
    @property
    def summary(self) -> Summary: ...

    def tally(self, statuses: Sequence[str]) -> FileTally:
        """Count and bytes of the files with these statuses (dry runs)."""

    def paths(self, statuses: Sequence[str], limit: int | None = None) -> Iterator[str]:
        """Locations of the files with these statuses in sorted order (the first ``limit``),
        streamed: never all at once."""

    def write(self, journal: JournalWriter, statuses: Sequence[str]) -> Ready: ...


class Engine(Protocol):
    name: str

    def describe(self, phase: str) -> None:
        """Name what comes next (Spark shows it as the job description of its work)."""

    def index(self, meta: TableMetadata, snapshot_ids: Iterable[int], rules: PathRules) -> ManifestIndex:
        """The snapshots' manifest lists, read."""

    def doomed(
        self, gone: ManifestIndex, kept: ManifestIndex, rules: PathRules, only: MetadataOnly | None = None
    ) -> Doomed:
        """Files ``gone`` reaches and ``kept`` does not (of them, those ``only`` allows)."""

    def keys(self, index: ManifestIndex, rules: PathRules, extra: Iterable[str] = ()) -> KeySet:
        """Every file the index reaches (all its manifests read), plus ``extra`` keys."""

    def delete(
        self,
        files: Ready | Sequence[FileRow],
        keep: KeySet | None,
        concurrency: int,
        containment: Containment,
        quarantine: Quarantine | None = None,
    ) -> DeleteOutcome:
        """Delete the files (a journal's parts, or rows), except those whose key (derived from
        the path by ``containment``'s rules, never a row's own) ``keep`` holds; a file outside
        ``containment`` is a failure, never deleted. With ``quarantine``: moved there instead."""

    def scan_orphans(
        self,
        location: str,
        rules: PathRules,
        partition_names: frozenset[str],
        references: Callable[[], tuple[ManifestIndex, tuple[str, ...]]],
        cutoff_ms: int,
        deletable: Callable[[str], bool] | None,
        inventory: Inventory | None = None,
    ) -> OrphanScan:
        """List ``location`` (or read what ``inventory`` lists under it); the listed files older
        than ``cutoff_ms`` that no reference names (an inventory's looked at again, those gone
        or written since as ``changed``).

        ``references`` gives the index of what the table's snapshots reach and the keys of its
        other files (metadata files, the hint); engines may run it beside the listing.
        ``deletable``, when given, keeps any file it refuses out of the orphans.
        """


def task_failure(err: BaseException, what: str) -> TablekeeperError:
    """An engine's failure as one typed line: the tablekeeper error a task raised, if any (Spark
    wraps it in a Java exception whose text ends with the Python traceback), a Java reader's
    failure on an input file as the refusal naming it, else an unexpected failure (a lost
    executor, memory), never mistaken for a refusal, its Java cause and file first."""
    typed = task_error(err)
    if typed is not None:
        return as_error(_TASK_ERRORS.get(type(typed).__name__, type(typed)), f"{what}: {typed.message}")
    text = str(err)
    first = java_cause(text) or next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return TablekeeperError(f"{what}: {first[:300] or err.__class__.__name__}")


# A task's error -> what the run reports (a referenced file gone is metadata that lies).
_TASK_ERRORS: dict[str, type[TablekeeperError]] = {
    "FileNotFound": CorruptMetadataError,
    "DataFileGone": CorruptMetadataError,
}


def failed(err: Exception, what: str) -> TablekeeperError:
    """``err`` with what it means for the run in front (the class, so the exit code, kept)."""
    if isinstance(err, TablekeeperError):
        return as_error(type(err), f"{what}: {err.message}")
    return task_failure(err, what)


class ListingTooLarge(Exception):
    """The driver engine stopped listing: the location holds more files than it should hold."""
