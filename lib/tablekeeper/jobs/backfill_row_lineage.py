"""backfill-row-lineage: upgrade a table to Iceberg v3 and give every existing row a row id,
without rewriting data.

Under the final v3 rules a data file without ``first_row_id`` inherits one from its manifest,
and a manifest without one gets a range from the manifest list that commits it. So the job is
one metadata commit per branch: a ``replace`` snapshot (no data change) whose list carries the
branch's manifests unchanged, each data manifest without ``first_row_id`` given the next range
(its added plus existing rows) from the table's ``next-row-id``. Manifests from v1 lists, which
hold no row counts, are rewritten with their live entries as EXISTING first. Tables written under
the October-2024 draft (a ``row-lineage`` flag) are read as v3 and normalised on commit.

A concurrent commit makes the commit retry on the refreshed table, so the ranges are reassigned
from its ``next-row-id``; a second run finds every manifest assigned and does nothing.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog
from tablekeeper.commit.producer import SnapshotChange
from tablekeeper.commit.service import staging
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import ConfigError, UnsupportedFeatureError
from tablekeeper.files.containment import require_home
from tablekeeper.files.journal import Staged
from tablekeeper.iceberg.content import MANIFEST_DATA, ManifestFile
from tablekeeper.iceberg.metadata import MAIN_BRANCH, TableMetadata
from tablekeeper.iceberg.updates import upgrade_format_version
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.context import (
    JobContext,
    add_run_arguments,
    add_table_arguments,
    options_from_args,
)
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.tables.iceberg import load_manifests, read_entries

log = logging.getLogger(__name__)

JOB = "backfill-row-lineage"
LINEAGE_COLUMNS = ("_row_id", "_last_updated_sequence_number")


@dataclass(frozen=True)
class BackfillRowLineageOptions:
    table: str
    branches: tuple[str, ...] = ()
    dry_run: bool = False
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BackfillRowLineageOptions:
        return options_from_args(cls, args, branches=tuple(args.branch))


@dataclass(frozen=True)
class BranchNeed:
    branch: str
    manifests: int  # data manifests without a first_row_id
    rows: int  # rows they hold (added + existing)
    uncounted: int  # of them, v1 manifests without row counts (rewritten)


def _rows(io: FileIO, meta: TableMetadata, m: ManifestFile) -> int:
    if m.added_rows_count is not None and m.existing_rows_count is not None:
        return int(m.added_rows_count) + int(m.existing_rows_count)
    return sum(e.data_file.record_count for e in read_entries(io, meta, m) if e.is_live)


def _need(io: FileIO, meta: TableMetadata, branch: str) -> BranchNeed:
    snapshot = meta.ref_snapshot(branch)
    if snapshot is None:
        return BranchNeed(branch, 0, 0, 0)
    todo = [
        m
        for m in load_manifests(io, snapshot)
        if m.content == MANIFEST_DATA and m.first_row_id is None and m.has_live_files()
    ]
    uncounted = sum(1 for m in todo if m.added_rows_count is None or m.existing_rows_count is None)
    return BranchNeed(branch, len(todo), sum(_rows(io, meta, m) for m in todo), uncounted)


def _check(meta: TableMetadata, identifier: str, branches: Sequence[str]) -> None:
    if meta.format_version not in (1, 2, 3):
        raise UnsupportedFeatureError(
            f"{identifier} has format version {meta.format_version}: only 1-3 upgrade"
        )
    clash = [f.name for f in meta.schema().fields if f.name in LINEAGE_COLUMNS]
    if clash:
        raise UnsupportedFeatureError(
            f"{identifier} has a column named {clash[0]}, which v3 reserves for row lineage: rename it first"
        )
    for b in branches:
        ref = meta.refs.get(b)
        if ref is None or not ref.is_branch:
            raise ConfigError(
                f"--branch {b!r} is not a branch of {identifier}: use one of {sorted(meta.refs)}"
            )


def _upgrade(meta: TableMetadata, timestamp_ms: int) -> TableMetadata:
    return upgrade_format_version(meta, 3, timestamp_ms=timestamp_ms)


def run_backfill(options: BackfillRowLineageOptions, catalog: Catalog, identifier: str) -> JobResult:
    clock = JobClock()
    table = catalog.require(identifier)
    require_home(table, identifier, JOB)  # a copied table would write into the original
    meta = table.metadata
    branches = (MAIN_BRANCH, *(b for b in options.branches if b != MAIN_BRANCH))
    _check(meta, identifier, branches[1:])
    before = meta.format_version
    needs = [_need(table.io, meta, b) for b in branches]
    start = meta.next_row_id if meta.format_version >= 3 and meta.next_row_id is not None else 0
    metrics: dict[str, object] = {
        "format_version_before": before,
        "format_version_after": 3,
        "branches": [n.branch for n in needs],
        "manifests_assigned": sum(n.manifests for n in needs),
        "manifests_rewritten": sum(n.uncounted for n in needs),
        "rows_assigned": sum(n.rows for n in needs),
    }
    todo = [n for n in needs if n.manifests]
    if not todo and before >= 3:
        metrics |= {"snapshot_ids": [], "note": "every live data manifest already has row ids: nothing to do"}
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics)
    if options.dry_run:
        total = sum(n.rows for n in needs)
        metrics["row_id_range"] = [start, start + total - 1] if total else None
        metrics["snapshot_ids"] = []
        return clock.result(JOB, identifier, dry_run=True, metrics=metrics)
    faults.kill_point("plan.done")
    snapshot_ids: list[int] = []
    low: int | None = None
    high: int | None = None
    location = meta.location
    # The manifests the commits rewrite, their lists and metadata carry the run's token: a run
    # killed before a commit leaves them to the next run, which removes what the table does not
    # reference.
    with staging(
        catalog,
        identifier,
        job=JOB,
        io=table.io,
        location=location,
        base_metadata=table.metadata_location,
        staged=lambda token: (Staged(f"{location.rstrip('/')}/metadata", token),),
    ) as run:
        metrics["resumed_journal"] = run.resumed
        committer = Committer(catalog, identifier, file_prefix=run.token)
        if not todo:
            run.commit(lambda: committer.update_metadata(_upgrade))  # no live data yet: the upgrade alone
        for n in todo:
            change = SnapshotChange(
                operation="replace",
                branch=n.branch,
                prepare=_upgrade,
                rewrite_uncounted_manifests=True,
                summary={"tablekeeper.job": JOB},
            )
            snap = run.commit(partial(committer.commit_snapshot, change)).snapshot
            if snap is None:
                continue
            snapshot_ids.append(snap.snapshot_id)
            if snap.first_row_id is not None and snap.added_rows:
                low = snap.first_row_id if low is None else min(low, snap.first_row_id)
                last = snap.first_row_id + snap.added_rows - 1
                high = last if high is None else max(high, last)
    metrics["snapshot_ids"] = snapshot_ids
    metrics["row_id_range"] = [low, high] if low is not None else None
    after = catalog.require(identifier).metadata
    metrics["next_row_id"] = after.next_row_id
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument(
        "--branch",
        action="append",
        default=[],
        help="also assign ids on this branch (repeatable; main always)",
    )
    add_run_arguments(parser)


# The options class the command line builds (jobs.common.context's contract).
Options = BackfillRowLineageOptions
# Iceberg tables only: a Delta table is refused whole, before it is read (jobs.common.formats).
DELTA_OPTIONS = None


def run(options: BackfillRowLineageOptions, context: JobContext) -> JobResult:
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_backfill(options, catalog, identifier)
