"""purge: delete the quarantined runs of a table that are past their time.

A run's time is when its files were moved aside (``run.json``); runs still moving (no
``run.json``: their journal finishes them) and runs being restored are never purged. A run's files
go first and its ``run.json`` last, so a purge killed midway is finished by the next one.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog
from tablekeeper.clock import now_ms
from tablekeeper.files.quarantine import list_runs, read_run, remove_run
from tablekeeper.jobs.common.context import (
    JobContext,
    add_run_arguments,
    add_table_arguments,
    options_from_args,
)
from tablekeeper.jobs.common.options import parse_older_than
from tablekeeper.jobs.common.result import JobClock, JobResult

JOB = "purge"
DEFAULT_OLDER_THAN = "7d"


@dataclass(frozen=True)
class PurgeOptions:
    table: str
    older_than: str = DEFAULT_OLDER_THAN
    dry_run: bool = False
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PurgeOptions:
        return options_from_args(cls, args)


def run_purge(options: PurgeOptions, catalog: Catalog, identifier: str) -> JobResult:
    clock = JobClock()
    table = catalog.require(identifier)
    cutoff = parse_older_than(options.older_than, now_ms())
    due, kept, moving = [], 0, 0
    for quarantine in list_runs(table.metadata.location):
        sealed = read_run(quarantine)
        if sealed is None:
            moving += 1  # its journal is still moving files into it
        elif sealed.restoring or sealed.quarantined_ms >= cutoff:
            kept += 1
        else:
            due.append(sealed)
    metrics: dict[str, object] = {
        "older_than_ms": cutoff,
        "runs_to_purge": [r.describe() for r in due],
        "runs_kept_count": kept,
        "runs_still_moving_count": moving,
    }
    if options.dry_run:
        metrics["bytes_to_free"] = sum(r.bytes for r in due)
        return clock.result(JOB, identifier, dry_run=True, metrics=metrics)
    deleted = 0
    for run in due:
        deleted += remove_run(run.quarantine, faults.remote_kill("purge.mid"))
    metrics |= {
        "purged_runs_count": len(due),
        "deleted_files_count": deleted,
        "bytes_freed": sum(r.bytes for r in due),
    }
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument(
        "--older-than",
        default=DEFAULT_OLDER_THAN,
        help="purge runs quarantined before this: ISO-8601 time, epoch ms or a duration (default 7d)",
    )
    add_run_arguments(parser)


Options = PurgeOptions
# Iceberg tables only: tablekeeper quarantines no Delta table's files (VACUUM deletes its own).
DELTA_OPTIONS = None


def run(options: PurgeOptions, context: JobContext) -> JobResult:
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_purge(options, catalog, identifier)
