"""Finishing the journals of runs that died: the first thing every destructive run does.

A journal names files a run meant to delete (or files it staged); whether its commit landed or not
is read from the table itself. So finishing one re-checks every file in it against everything the
table references now (every snapshot's files, its metadata files and the version hint) and deletes
only the rest: a file the table still needs is kept whatever the dead run did. Journals whose
owner may still be running are left alone. So are unreadable and hostile ones (a part that does
not decode, a path outside the table, a staged location outside it or without a token): they are
reported and left for a person, and remove-orphans deletes nothing any journal names
(``protected``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tablekeeper import clock
from tablekeeper.catalog.base import LoadedTable
from tablekeeper.errors import TablekeeperError
from tablekeeper.files.containment import Containment, table_roots
from tablekeeper.files.deletes import DeleteOutcome
from tablekeeper.files.engine import Engine, KeySet
from tablekeeper.files.journal import (
    STALE_AFTER_MS,
    Journal,
    JournalWriter,
    Staged,
    decode_rows,
    list_journals,
    own_part,
    read_parts,
    remove,
)
from tablekeeper.files.listing import is_metadata_file
from tablekeeper.files.local import LocalEngine
from tablekeeper.files.manifests import FileRow
from tablekeeper.files.quarantine import Quarantine, seal
from tablekeeper.files.rules import PathRules
from tablekeeper.io import FileIO
from tablekeeper.io.uri import join_location

log = logging.getLogger(__name__)

STAGED = "staged"


def metadata_files(table: LoadedTable) -> list[str]:
    """The table's metadata files a reader may follow: the current one, its log and the hint."""
    meta = table.metadata
    files = [table.metadata_location, *(e.metadata_file for e in meta.metadata_log)]
    files.append(join_location(meta.location, "metadata", "version-hint.text"))
    return [f for f in files if f]


def table_keys(engine: Engine, table: LoadedTable | None, rules: PathRules) -> KeySet:
    """Every file the table references now."""
    if table is None:
        return KeySet(frozenset())
    meta = table.metadata
    index = engine.index(meta, [s.snapshot_id for s in meta.snapshots], rules)
    return engine.keys(index, rules, [rules.key(p) for p in metadata_files(table)])


def staged_refusal(staged: Staged, containment: Containment) -> str | None:
    """Why a staging journal's location may not be cleaned (None: it may): it must lie inside the
    table, links resolved, and name its files by a token (an empty one names every file)."""
    token = staged.token.strip()
    if not token or "/" in token or token in (".", ".."):
        return f"staged location {staged.location} names its files by the token {staged.token!r}"
    why = containment.refusal(f"{staged.location.rstrip('/')}/x")
    return None if why is None else f"staged location {staged.location} is refused: {why}"


def staged_files(staged: Staged, rules: PathRules) -> list[FileRow]:
    """The files a staging run wrote under one of its locations."""
    io = FileIO.for_location(staged.location)
    files, dirs = io.list_dir(staged.location)
    if staged.directories:
        found = [i for d in dirs if staged.token in d.rsplit("/", 1)[-1] for i in io.list(d, recursive=True)]
    else:
        found = [i for i in files if staged.token in i.location.rsplit("/", 1)[-1]]
    return [(i.location, rules.key(i.location), STAGED, i.size) for i in found]


@dataclass
class Finished:
    """What finishing the journals found and did."""

    finished: list[dict[str, Any]] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    outcomes: list[DeleteOutcome] = field(default_factory=list)
    kept: int = 0

    def metric(self) -> dict[str, Any] | None:
        """The ``resumed_journal`` of a job's result (None when there was nothing to finish)."""
        if not (self.finished or self.pending or self.unreadable):
            return None
        done = DeleteOutcome.merge(self.outcomes)
        out: dict[str, Any] = {
            "journals": self.finished,
            "deleted_files_count": done.total,
            "kept_files_count": self.kept,
            "bytes_freed": done.bytes_freed,
            "failed_deletes_count": len(done.failures),
        }
        if done.failures:
            out["failed_deletes"] = [f"{p}: {why}" for p, why in done.failures[:20]]
        if self.pending:
            out["left_to_running_owners"] = self.pending
        if self.unreadable:
            out["unreadable"] = self.unreadable
        return out


def pending_journals(io: FileIO, table_location: str) -> list[dict[str, Any]]:
    """The journals a dry run would finish (or leave), described."""
    now = clock.now_ms()
    return [
        {**j.describe(), "abandoned": j.abandoned(now), "problem": j.problem}
        for j in list_journals(io, table_location)
    ]


class _Current:
    """The table as it is now, loaded once, and the keys of every file it references."""

    def __init__(self, load: Callable[[], LoadedTable | None], engine: Engine) -> None:
        self._load = load
        self._engine = engine
        self._table: list[LoadedTable | None] = []
        self._keys: dict[str, KeySet] = {}

    @property
    def table(self) -> LoadedTable | None:
        if not self._table:
            self._table.append(self._load())
        return self._table[0]

    def keep(self, rules: PathRules) -> KeySet:
        name = repr(sorted((k, sorted(v.items())) for k, v in rules.to_json().items()))
        if name not in self._keys:
            self._keys[name] = table_keys(self._engine, self.table, rules)
        return self._keys[name]

    def containment(self, table_location: str, rules: PathRules) -> Containment:
        """Where the journal's files may lie: the table's locations as it is now (the location
        its journals are under when it does not exist); keys derived by the journal's rules."""
        table = self.table
        roots = table_roots(table.metadata) if table is not None else (table_location,)
        return Containment.of(roots, rules)

    def only_metadata(self) -> Callable[[str], bool] | None:
        """With ``gc.enabled=false`` (its data files may be another table's, as a converted
        Delta table's are): which files may still go, those of its own metadata location."""
        table = self.table
        if table is None or table.metadata.property_bool("gc.enabled", True):
            return None
        own = f"{table.metadata.location.rstrip('/')}/metadata/"
        return lambda path: path.startswith(own) and is_metadata_file(path)


def finish_journals(
    io: FileIO,
    table_location: str,
    load: Callable[[], LoadedTable | None],
    engine: Engine,
    concurrency: int,
) -> Finished:
    """Finish every abandoned journal of the table at ``table_location``.

    ``load`` gives the table as it is now (None: it does not exist, e.g. a full conversion that
    died before creating it). Deleting nothing it references is the whole point, so a failure to
    read the table fails the run before anything is deleted.
    """
    result = Finished()
    journals = list_journals(io, table_location)
    if not journals:
        return result
    now = clock.now_ms()
    current = _Current(load, engine)
    for journal in journals:
        if journal.empty:
            if now - journal.touched_ms > STALE_AFTER_MS:
                remove(FileIO.for_location(journal.location), journal.location)
            else:  # its run may be writing the header right now
                result.pending.append(journal.location)
            continue
        if journal.problem is not None:
            log.warning("leaving journal %s alone: %s", journal.location, journal.problem)
            result.unreadable.append(journal.problem)
            continue
        if not journal.abandoned(now):
            result.pending.append(journal.location)
            continue
        _finish(journal, table_location, current, engine, concurrency, result)
    return result


def discard(
    writer: JournalWriter, load: Callable[[], LoadedTable | None], engine: Engine | None = None
) -> None:
    """After a known failure, finish this run's own staging journal now: what it staged and the
    table does not reference is deleted (a batch that did commit keeps its files), then the
    journal goes. Whatever fails here is left to the next run, which finishes the journal."""
    writer.release()
    journal = Journal(writer.location, writer.header, None, None, 0)
    try:
        used = engine or LocalEngine()
        _finish(journal, writer.table_location, _Current(load, used), used, 8, Finished())
    except TablekeeperError as err:
        log.warning("left the journal %s for the next run: %s", writer.location, err.message)


def hostile(journal: Journal, containment: Containment) -> str | None:
    """Why a readable journal may not be finished (None: it may): a part that does not decode,
    a row outside the table, a staged location outside it. Every row is read and checked before
    anything is deleted, so a journal is finished whole or not at all."""
    header = journal.header
    assert header is not None
    if header.kind == "stage":
        return next((w for w in (staged_refusal(s, containment) for s in header.staged) if w), None)
    if journal.ready is None:
        return None
    seen: dict[str, str | None] = {}
    for part in journal.ready.parts:
        if not own_part(journal.location, part):
            return f"journal {journal.location} names a part outside it: {part}"
        try:
            rows = decode_rows(FileIO.for_location(part).read(part), part)
        except TablekeeperError as err:
            return f"journal {journal.location}: {err.message}"
        for row in rows:
            why = containment.refusal(row[0], seen)
            if why is not None:
                return f"journal {journal.location} names {row[0]}: {why}"
    return None


def _finish(
    journal: Journal,
    table_location: str,
    current: _Current,
    engine: Engine,
    concurrency: int,
    result: Finished,
) -> None:
    header = journal.header
    assert header is not None
    containment = current.containment(table_location, header.rules)
    problem = hostile(journal, containment)
    if problem is not None:
        log.warning("leaving journal %s for a person: %s", journal.location, problem)
        result.unreadable.append(problem)
        return
    files: Any = None
    if header.kind == "delete" and journal.ready is not None:
        files = journal.ready
        planned = journal.ready.files
        allowed = current.only_metadata()
        if allowed is not None:  # the table no longer owns its data files: leave them be
            files = [r for r in read_parts(journal.ready) if allowed(r[0])]
    elif header.kind == "stage":
        files = [row for s in header.staged for row in staged_files(s, header.rules)]
        planned = len(files)
    else:
        planned = 0  # a plan the dead run never completed: it committed nothing
    outcome = None
    # A run that moved its files aside is finished the same way (the name is one segment).
    quarantine = Quarantine.for_run(table_location, header.quarantine) if header.quarantine else None
    if files is not None and planned:
        outcome = engine.delete(files, current.keep(header.rules), concurrency, containment, quarantine)
        result.outcomes.append(outcome)
        result.kept += planned - outcome.total - outcome.missing - len(outcome.failures)
    summary = {**journal.describe(), "planned_files_count": planned}
    if outcome is not None:
        summary["deleted_files_count"] = outcome.total
    result.finished.append(summary)
    if outcome is not None and outcome.failures:
        log.warning("journal %s kept: %d deletes failed", journal.location, len(outcome.failures))
        return
    try:
        if quarantine is not None and journal.ready is not None and journal.ready.files:
            ready = journal.ready
            seal(
                quarantine,
                header.job,
                header.table,
                header.run_id,
                header.created_ms,
                ready.parts,
                ready.files,
                ready.bytes,
            )
            summary["quarantine"] = quarantine.name
        remove(FileIO.for_location(journal.location), journal.location)
    except TablekeeperError as err:
        log.warning("%s", err.message)


@dataclass(frozen=True)
class Protected:
    """Files that journals still on storage name (pickled to executors): remove-orphans never
    deletes one, whatever its age. A live staging run's files, its journal naming them only by
    their directory and token, are younger than any sane retention but not a forced short one;
    an unfinished journal's are what a person must see."""

    keys: frozenset[str]
    staged: tuple[tuple[str, str, bool], ...]  # key prefix of the location, token, directories
    rules: PathRules

    def __call__(self, location: str) -> bool:
        key = self.rules.key(location)
        if key in self.keys:
            return True
        for prefix, token, directories in self.staged:
            if key.startswith(prefix):
                rest = key[len(prefix) :]
                first, slash, _ = rest.partition("/")
                # An empty token names every file there: protect them all (fail closed).
                if token in first and bool(slash) == directories:
                    return True
        return False

    def __bool__(self) -> bool:
        return bool(self.keys or self.staged)


def protected(io: FileIO, table_location: str, rules: PathRules) -> Protected:
    """What every journal under the table names, readable or not (an unreadable part names
    nothing this run can see; its journal is reported by the finishing step)."""
    keys: set[str] = set()
    staged: list[tuple[str, str, bool]] = []
    for journal in list_journals(io, table_location):
        header = journal.header
        if header is None:
            continue
        for s in header.staged:
            staged.append((rules.prefix(s.location.rstrip("/")), s.token.strip(), s.directories))
        for part in journal.ready.parts if journal.ready is not None else ():
            if not own_part(journal.location, part):
                continue  # never read a file a journal merely names
            try:
                keys.update(rules.key(r[0]) for r in decode_rows(io.read(part), part))
            except TablekeeperError as err:
                log.warning("cannot read %s: %s", part, err.message)
    return Protected(frozenset(keys), tuple(staged), rules)
