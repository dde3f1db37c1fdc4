"""Runs that build a table's next state out of sight and publish it in one catalog operation.

``staged_table`` stages the table (``catalog.staged``) inside the commit service's ``staging``:
readers see the table as it was or as the run left it, never in between. The service's rules
hold (``commit.service``): a known failure removes every file the run wrote; an unknown publish
state keeps them and the journal; a run killed anywhere leaves the journal, which the next run
finishes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.catalog.staged import StagedTable
from tablekeeper.commit.service import Staging, require_staged, staging
from tablekeeper.files.containment import require_home
from tablekeeper.files.journal import JournalWriter, Staged
from tablekeeper.io import FileIO
from tablekeeper.tables.iceberg import load_manifests

# Where a staged table's new files go: manifests and lists, and delete files.
STAGED_DIRECTORIES = ("metadata", "data")


@dataclass
class StagedRun:
    table: StagedTable
    staging: Staging
    published: LoadedTable | None = None

    @property
    def token(self) -> str:
        return self.staging.token

    @property
    def journal(self) -> JournalWriter:
        return self.staging.journal

    @property
    def resumed(self) -> dict[str, Any] | None:
        return self.staging.resumed


@contextmanager
def staged_table(
    catalog: Catalog, identifier: str, base: LoadedTable | None, job: str
) -> Iterator[StagedRun]:
    """Stage ``identifier`` (``base``: the table as loaded, None to create it) for the body of the
    ``with``; publish what it committed to the staged table when the body returns."""
    if base is not None:
        require_home(base, identifier, job)  # a copied table would write into the original
    location = base.metadata.location if base is not None else catalog.new_table_location(identifier)
    io = base.io if base is not None else FileIO.for_location(location)
    root = location.rstrip("/")
    with staging(
        catalog,
        identifier,
        job=job,
        io=io,
        location=location,
        base_metadata=base.metadata_location if base is not None else None,
        staged=lambda token: [Staged(f"{root}/{d}", token) for d in STAGED_DIRECTORIES],
        # The table may not exist yet (a first conversion), or may have been published since.
        load=partial(catalog.load_if_exists, identifier),
    ) as service:
        run = StagedRun(StagedTable(catalog, identifier, base, location), service)
        yield run
        if run.table.changed:
            run.published = service.commit(run.table.publish, partial(_new_files, run))
            service.journal.committed(run.published.metadata_location)


def _new_files(run: StagedRun) -> list[str]:
    """The manifest lists of the snapshots the run staged (checked here, before they are read),
    then the manifests it wrote that the current one lists (a history's older snapshots share
    most of them)."""
    current = run.table.current
    if current is None:
        return []
    before = {s.snapshot_id for s in run.table.base.metadata.snapshots} if run.table.base else set()
    new = [s for s in current.snapshots if s.snapshot_id not in before]
    require_staged([s.manifest_list for s in new if s.manifest_list], run.journal.location)
    head = current.current_snapshot()
    if head is None or head.snapshot_id in before:
        return []
    manifests = [m.manifest_path for m in load_manifests(run.table.io, head)]
    return list(dict.fromkeys(m for m in manifests if run.token in m))
