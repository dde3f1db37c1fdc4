"""Runs that build a table's next state out of sight and publish it in one catalog operation.

``staged_run`` stages the table (``catalog.staged``), writes a staging journal naming where the
run's files go (their names carry the run's token), and on leaving publishes: readers see the
table as it was or as the run left it, never in between. A known failure removes every file the
run wrote; an unknown commit state keeps them and the journal; a run killed anywhere leaves the
journal, which the next run finishes (``files.finish``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.catalog.staged import StagedTable
from tablekeeper.errors import CommitFailed, CommitStateUnknown
from tablekeeper.files.containment import require_home
from tablekeeper.files.finish import discard, finish_journals
from tablekeeper.files.journal import JournalWriter, Staged
from tablekeeper.files.local import LocalEngine
from tablekeeper.io import FileIO
from tablekeeper.io.uri import location_to_path
from tablekeeper.tables.iceberg import load_manifests

log = logging.getLogger(__name__)

# Where a staged table's new files go: manifests and lists, and delete files.
STAGED_DIRECTORIES = ("metadata", "data")
DELETE_THREADS = 8


@dataclass
class StagedRun:
    table: StagedTable
    token: str  # every file the run writes has it in its name
    journal: JournalWriter
    resumed: dict[str, Any] | None  # the journals of dead runs this one finished first
    published: LoadedTable | None = None


@contextmanager
def staged_run(catalog: Catalog, identifier: str, base: LoadedTable | None, job: str) -> Iterator[StagedRun]:
    """Stage ``identifier`` (``base``: the table as loaded, None to create it) for the body of the
    ``with``; publish what it committed to the staged table when the body returns."""
    if base is not None:
        require_home(base, identifier, job)  # a copied table would write into the original
    location = base.metadata.location if base is not None else catalog.new_table_location(identifier)
    io = base.io if base is not None else FileIO.for_location(location)
    # Whatever dead runs left is checked against the table as it is now, not as loaded before:
    # one of them may have published since.
    current = partial(catalog.load_if_exists, identifier)
    resumed = finish_journals(io, location, current, LocalEngine(), DELETE_THREADS).metric()
    token = uuid.uuid4().hex[:12]
    with JournalWriter.start(
        io,
        location,
        job=job,
        table=identifier,
        kind="stage",
        base_metadata=base.metadata_location if base is not None else None,
        staged=tuple(Staged(f"{location.rstrip('/')}/{d}", token) for d in STAGED_DIRECTORIES),
        run_id=token,
        settle_ms=catalog.commit_settle_ms,
    ) as journal:
        run = StagedRun(StagedTable(catalog, identifier, base, location), token, journal, resumed)
        try:
            yield run
            if run.table.changed:
                faults.kill_point("stage.written")
                if not journal.intact():
                    raise CommitFailed(
                        f"the staging journal {journal.location} is gone or went quiet: another run may "
                        "have taken this one for dead and removed its files; run the job again"
                    )
                _require_new_files(run)
                run.published = run.table.publish()
                journal.committed(run.published.metadata_location)
        except CommitStateUnknown:
            raise  # the catalog may show the table: its files stay, and so does the journal
        except Exception:
            # Known failures only; an interrupt may come after the publish landed, so its files
            # stay with the journal, like those of an unknown commit.
            discard(journal, current)
            raise
        journal.remove()


def _require_new_files(run: StagedRun) -> None:
    """The manifest lists of the snapshots the run staged, then the manifests it wrote that the
    current one lists (a history's older snapshots share most of them), are all still there."""
    current = run.table.current
    if current is None:
        return
    before = {s.snapshot_id for s in run.table.base.metadata.snapshots} if run.table.base else set()
    new = [s for s in current.snapshots if s.snapshot_id not in before]
    require_staged([s.manifest_list for s in new if s.manifest_list], run.journal.location)
    head = current.current_snapshot()
    if head is not None and head.snapshot_id not in before:
        manifests = [m.manifest_path for m in load_manifests(run.table.io, head)]
        require_staged(dict.fromkeys(m for m in manifests if run.token in m), run.journal.location)


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
