"""Deleting files named by rows, counting what went by kind."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tablekeeper import faults, progress
from tablekeeper.errors import TablekeeperError
from tablekeeper.files.containment import Containment
from tablekeeper.files.manifests import FileRow
from tablekeeper.io import FileIO
from tablekeeper.io.uri import location_to_path


@dataclass(frozen=True)
class DeleteOutcome:
    deleted: Mapping[str, int]  # by kind
    bytes_freed: int
    missing: int
    failures: tuple[tuple[str, str], ...]
    # Paths outside the table (files/containment.py): never deleted by any run, so unlike a
    # failure they give no reason to keep a journal for a retry.
    refused: tuple[tuple[str, str], ...] = ()

    def count(self, kind: str) -> int:
        return int(self.deleted.get(kind, 0))

    @property
    def total(self) -> int:
        return sum(self.deleted.values())

    @classmethod
    def merge(cls, outcomes: Iterable[DeleteOutcome]) -> DeleteOutcome:
        deleted: dict[str, int] = {}
        freed = missing = 0
        failures: list[tuple[str, str]] = []
        refused: list[tuple[str, str]] = []
        for o in outcomes:
            for kind, n in o.deleted.items():
                deleted[kind] = deleted.get(kind, 0) + n
            freed += o.bytes_freed
            missing += o.missing
            failures.extend(o.failures)
            refused.extend(o.refused)
        return cls(deleted, freed, missing, tuple(failures), tuple(refused))


NOTHING = DeleteOutcome({}, 0, 0, ())


def by_store(rows: Iterable[FileRow]) -> dict[tuple[str, str], list[FileRow]]:
    stores: dict[tuple[str, str], list[FileRow]] = {}
    for row in rows:
        parts = location_to_path(row[0])
        stores.setdefault((parts.scheme, parts.authority), []).append(row)
    return stores


def each_row(rows: Sequence[FileRow], one: Callable[[FileRow], str | None], threads: int) -> DeleteOutcome:
    """``one`` on every row (``threads`` at once), counted by kind: it returns None when the file
    went, "" when it was already missing, otherwise the failure's reason."""
    with progress.phase("deleting files", len(rows)) as shown:

        def counted(row: FileRow) -> str | None:
            try:
                return one(row)
            finally:
                shown.advance()

        if threads > 1 and len(rows) > 1:
            with ThreadPoolExecutor(max_workers=min(threads, len(rows))) as pool:
                outcomes = list(pool.map(counted, rows))
        else:
            outcomes = [counted(r) for r in rows]
    gone: dict[str, int] = {}
    size = missing = 0
    failures: list[tuple[str, str]] = []
    for row, outcome in zip(rows, outcomes, strict=True):
        if outcome is None:
            gone[row[2]] = gone.get(row[2], 0) + 1
            size += row[3]
        elif outcome == "":
            missing += 1
        else:
            failures.append((row[0], outcome))
    return DeleteOutcome(gone, size, missing, tuple(failures))


def _one_by_one(io: FileIO, rows: Sequence[FileRow], threads: int) -> DeleteOutcome:
    def one(row: FileRow) -> str | None:
        try:
            return None if io.delete(row[0], missing_ok=True) else ""
        except TablekeeperError as err:
            return err.message

    return each_row(rows, one, threads)


def _batched(io: FileIO, rows: Sequence[FileRow], threads: int) -> DeleteOutcome:
    # Batched deletes count a key already gone as deleted: only failures are told apart.
    with progress.phase("deleting files", len(rows)) as shown:
        report = io.delete_many([r[0] for r in rows], max_workers=threads)
        shown.advance(len(rows))
    failed = dict(report.failures)
    deleted: dict[str, int] = {}
    freed = 0
    for row in rows:
        if row[0] not in failed:
            deleted[row[2]] = deleted.get(row[2], 0) + 1
            freed += row[3]
    return DeleteOutcome(deleted, freed, 0, tuple(report.failures))


def contained(
    rows: Iterable[FileRow], containment: Containment
) -> tuple[list[FileRow], list[tuple[str, str]]]:
    """The rows inside the table, and a failure (path, why) for each of the others."""
    seen: dict[str, str | None] = {}
    inside: list[FileRow] = []
    refused: list[tuple[str, str]] = []
    for row in rows:
        why = containment.refusal(row[0], seen)
        if why is None:
            inside.append(row)
        else:
            refused.append((row[0], f"refused, not deleted: {why}"))
    return inside, refused


def delete_rows(
    rows: Sequence[FileRow],
    containment: Containment,
    threads: int = 1,
    kill: faults.RemoteKill | None = None,
) -> DeleteOutcome:
    """Delete every row's path that lies inside the table (``containment``: every engine's
    deletes come through here), carrying on past failures and reporting each one; a path outside
    is never deleted and is reported apart (``refused``).

    ``kill`` (crash tests only) fires once the first file is gone: a run dies mid-delete.
    """
    rest, refused = contained(rows, containment)
    outcomes = [DeleteOutcome({}, 0, 0, (), tuple(refused))] if refused else []
    if kill is not None and rest:
        first, rest = rest[:1], rest[1:]
        outcomes.append(_one_by_one(FileIO.for_location(first[0][0]), first, 1))
        kill.fire()
    for group in by_store(rest).values():
        io = FileIO.for_location(group[0][0])
        outcomes.append((_batched if io.batches_deletes else _one_by_one)(io, group, threads))
    return DeleteOutcome.merge(outcomes)
