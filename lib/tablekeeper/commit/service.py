"""The one commit service: how every job that writes new files commits them.

Iceberg Java's rewrite actions share one commit service; tablekeeper's jobs share this one. A run
that writes files (compact's data files, rewrite-position-deletes' delete files, rewrite-manifests'
and backfill-row-lineage's manifests, a conversion's whole table) does so inside ``staging``:

1. journals of dead runs are finished first, against the table as it is now;
2. a staging journal names where this run's files go (their names carry the run's token), so a
   run killed anywhere leaves files the next run can find and check;
3. each commit goes through ``Staging.commit``: the ``stage.written`` kill point, no commit after
   one whose state is unknown, the journal still ours, every file it names still there;
4. on leaving: a known failure deletes what the run staged and the table does not reference (a
   batch that did commit keeps its files); an unknown commit state or an interrupt keeps every
   file and the journal, because the commit may have landed.

``plan_again`` is the other half: a commit a concurrent change made impossible leaves nothing
behind (step 4) and the job plans again on the table as it is.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.errors import CommitConflict, CommitFailed, CommitStateUnknown
from tablekeeper.files.engine import Engine
from tablekeeper.files.finish import discard, finish_journals
from tablekeeper.files.journal import JournalWriter, Staged, list_journals
from tablekeeper.files.local import LocalEngine
from tablekeeper.io import FileIO
from tablekeeper.io.uri import location_to_path

log = logging.getLogger(__name__)

T = TypeVar("T")
DELETE_THREADS = 8


@dataclass
class Staging:
    """One run's staging: its token, its journal, and the one way it commits."""

    token: str  # every file the run writes has it in its name
    journal: JournalWriter
    resumed: dict[str, Any] | None  # the journals of dead runs this one finished first
    _unknown: list[CommitStateUnknown] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def location(self) -> str:
        return self.journal.location

    def commit(self, apply: Callable[[], T], files: Iterable[str] | Callable[[], Iterable[str]] = ()) -> T:
        """Commit through ``apply`` once the run may: ``files`` (or a function giving them, for
        files known only once the staged state is final) are the ones the commit names."""
        faults.kill_point("stage.written")
        with self._lock:
            if self._unknown:
                raise self._unknown[0]  # nothing more may be committed or cleaned until someone looks
        if not self.journal.intact():
            raise CommitFailed(
                f"the staging journal {self.journal.location} is gone or went quiet: another run may "
                "have taken this one for dead and removed its files; nothing more is committed, run "
                "the job again"
            )
        require_staged(files() if callable(files) else files, self.journal.location)
        try:
            return apply()
        except CommitStateUnknown as err:
            with self._lock:
                self._unknown.append(err)
            raise


def finish_dead_runs(
    io: FileIO,
    location: str,
    load: Callable[[], LoadedTable | None],
    engine: Callable[[], Engine] | None = None,
    threads: int = DELETE_THREADS,
) -> dict[str, Any] | None:
    """Finish what killed runs left under ``location`` (their staged files, or another job's
    deletes), checked against the table as ``load`` gives it now: one of them may have published
    since. ``engine`` builds the engine that lists and deletes, only when there is a journal."""
    if not list_journals(io, location):
        return None
    used = engine() if engine is not None else LocalEngine()
    return finish_journals(io, location, load, used, threads).metric()


@contextmanager
def staging(
    catalog: Catalog,
    identifier: str,
    *,
    job: str,
    io: FileIO,
    location: str,
    base_metadata: str | None,
    staged: Callable[[str], Sequence[Staged]],
    load: Callable[[], LoadedTable | None] | None = None,
    engine: Callable[[], Engine] | None = None,
    threads: int = DELETE_THREADS,
) -> Iterator[Staging]:
    """Stage a run on the table at ``location`` for the body of the ``with``.

    ``staged(token)`` says where the run's files go; ``load`` gives the table as it is now (by
    default ``catalog.require``; a table a conversion creates may not exist yet)."""
    current = load if load is not None else (lambda: catalog.require(identifier))
    resumed = finish_dead_runs(io, location, current, engine, threads)
    token = uuid.uuid4().hex[:12]
    with JournalWriter.start(
        io,
        location,
        job=job,
        table=identifier,
        kind="stage",
        base_metadata=base_metadata,
        staged=tuple(staged(token)),
        run_id=token,
        settle_ms=catalog.commit_settle_ms,
    ) as journal:
        run = Staging(token, journal, resumed)
        try:
            yield run
        except CommitStateUnknown:
            raise  # the catalog may show the commit: its files stay, and so does the journal
        except Exception:
            # Known failures only; an interrupt may come after a commit landed, so its files stay
            # with the journal, like those of an unknown commit.
            discard(journal, current)
            raise
        journal.remove()


def plan_again(
    run_once: Callable[[int], T], max_plans: int, conflict: type[CommitConflict] = CommitConflict
) -> T:
    """Run ``run_once(plans)``; a commit a concurrent change made impossible (``conflict``) left
    nothing behind, so the job plans again on the table as it is, up to ``max_plans`` times."""
    for plans in range(1, max_plans + 1):
        try:
            return run_once(plans)
        except conflict as err:
            if plans == max_plans:
                raise
            log.info("planning again (%s)", err.message)
    raise AssertionError("unreachable")


def require_staged(paths: Iterable[str], journal: str) -> None:
    """Right before a commit: every file the run wrote is still there. A commit naming a file
    something deleted meanwhile (a remove-orphans with a short retention) would leave a table
    no reader can read; refused, nothing committed."""
    wanted = list(paths)
    if not wanted:
        return
    stores: dict[tuple[str, str], FileIO] = {}

    def gone(path: str) -> bool:
        parts = location_to_path(path)
        io = stores.get((parts.scheme, parts.authority))
        if io is None:
            io = stores.setdefault((parts.scheme, parts.authority), FileIO.for_location(path))
        return not io.exists(path)

    with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
        missing = [p for p, lost in zip(wanted, pool.map(gone, wanted), strict=True) if lost]
    if missing:
        raise CommitFailed(
            f"{len(missing)} files this run wrote are gone (e.g. {missing[0]}): something deleted them "
            f"while the run staged them under the journal {journal}; nothing committed, run the job again"
        )
