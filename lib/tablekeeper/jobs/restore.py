"""restore: put the files a quarantined run moved aside back where they were, byte for byte.

The run's quarantine (``files.quarantine``) is read by listing its ``files/`` directory, not by
trusting its parts: every file there goes back to the path it came from, which must lie inside the
table (its containment, as for a delete). A file whose path is taken again (a writer reused the
name) is left in the quarantine and reported; one already back (a restore killed after its copy)
is counted once. A ``restoring`` marker is written first, so ``purge`` never deletes a run being
restored, and the run's directory goes last: running restore again after a crash finishes it.

Putting files back does not put snapshots back: files an expire-snapshots run moved are
referenced again only by a metadata file of the time before it (the table's metadata log names
them, e.g. for a catalog's register or rollback), and until then they are orphans to
remove-orphans like any unreferenced file.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog
from tablekeeper.errors import ConfigError, SafetyRefusal
from tablekeeper.files.containment import Containment
from tablekeeper.files.quarantine import (
    RESTORING,
    Quarantine,
    list_runs,
    move,
    quarantine_location,
    read_run,
    remove_run,
)
from tablekeeper.files.rules import PathRules
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.context import (
    JobContext,
    add_run_arguments,
    add_table_arguments,
    options_from_args,
)
from tablekeeper.jobs.common.result import JobClock, JobResult

JOB = "restore"
THREADS = 16


@dataclass(frozen=True)
class RestoreOptions:
    table: str
    run: str
    dry_run: bool = False
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RestoreOptions:
        return options_from_args(cls, args)


def find_run(table_location: str, run: str) -> Quarantine:
    """The quarantine ``run`` names: its full name or its run id (the name's last part)."""
    runs = [q for q in list_runs(table_location) if q.name == run or q.name.endswith(f"-{run}")]
    if len(runs) != 1:
        where = quarantine_location(table_location)
        raise ConfigError(
            f"--run {run}: {'no' if not runs else 'more than one'} quarantined run of that name "
            f"under {where}: use the name a run's result gives as quarantine.run"
        )
    return runs[0]


def run_restore(options: RestoreOptions, catalog: Catalog, identifier: str) -> JobResult:
    clock = JobClock()
    table = catalog.require(identifier)
    meta = table.metadata
    quarantine = find_run(meta.location, options.run)
    sealed = read_run(quarantine)
    io = FileIO.for_location(quarantine.location)
    moved = list(io.list(f"{quarantine.location}/files"))
    containment = Containment.for_table(meta, PathRules())
    seen: dict[str, str | None] = {}
    pairs = []
    for info in moved:
        original = quarantine.original(info.location)
        why = containment.refusal(original, seen)
        if why is not None:  # a quarantine is inside the table: a path out of it is hostile
            raise SafetyRefusal(
                f"{JOB}: {info.location} would go back to {original}: {why}; nothing restored"
            )
        pairs.append((info.location, original, info.size))
    metrics: dict[str, object] = {
        "run": quarantine.name,
        "job": sealed.job if sealed else None,
        "files_to_restore": len(pairs),
        "bytes_to_restore": sum(p[2] for p in pairs),
    }
    if options.dry_run:
        return clock.result(JOB, identifier, dry_run=True, metrics=metrics, files=[p[1] for p in pairs])
    io.write(f"{quarantine.location}/{RESTORING}", b"restoring")

    def back(pair: tuple[str, str, int]) -> str:
        target, original, size = pair
        there = io.file_info(original)
        if there is not None:  # back already (a copy whose delete was cut short), or taken again
            if there.size == size:
                io.delete(target, missing_ok=True)
                return "restored"
            return "taken"
        return "restored" if move(io, target, original) else "gone"

    first = [back(pairs[0])] if pairs else []
    faults.kill_point("restore.mid")  # crash tests: a restore dies with one file back
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        outcomes = first + list(pool.map(back, pairs[1:]))
    taken = [p[1] for p, o in zip(pairs, outcomes, strict=True) if o == "taken"]
    metrics |= {
        "restored_files_count": outcomes.count("restored"),
        "restored_bytes": sum(p[2] for p, o in zip(pairs, outcomes, strict=True) if o == "restored"),
        "taken_again_count": len(taken),
    }
    if taken:
        metrics["taken_again"] = taken[:20]
        metrics["note"] = "files whose paths were written again stay in the quarantine, with the run"
    else:
        remove_run(quarantine)
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument(
        "--run", required=True, help="the quarantined run: its name (a result's quarantine.run) or run id"
    )
    add_run_arguments(parser)


Options = RestoreOptions
# Iceberg tables only: tablekeeper quarantines no Delta table's files (VACUUM deletes its own).
DELTA_OPTIONS = None


def run(options: RestoreOptions, context: JobContext) -> JobResult:
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_restore(options, catalog, identifier)
