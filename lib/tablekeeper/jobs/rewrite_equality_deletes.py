"""rewrite-equality-deletes: resolve equality deletes into deletion vectors (v3) or position
delete files (v2), so readers stop joining every data file against every equality delete. No data
file is rewritten: row lineage (``_row_id``, ``_last_updated_sequence_number``) stays as it is.

Plan (``iceberg.equality_delete_plan``): every live data file some equality delete applies to,
grouped per spec and partition. Execute (``spark.equality_deletes``): one Spark task per group
finds the rows the deletes remove and writes their positions. Commit: ``replace`` snapshots (the
table's rows do not change), one for the whole run or, with ``--partial-progress``, one per batch
of groups; each removes the equality delete files it finished resolving (the plan says which may
go, and why the others stay) and replaces the DVs it merged into.

Each commit checks the table it lands on: when other commits landed since the plan, every data
file it writes positions for must still be live with the DV the plan merged (another would hold
deletes the new one lacks), no position delete file the plan did not see may name it (a DV would
shadow it), and no data file may have appeared under an older data sequence number in the scope of
an equality delete file it removes (a rewrite keeping its starting sequence number: that delete
still applies to it). Any of these makes the commit a conflict: its files are removed and the job
plans again on the table as it is (up to ``MAX_PLANS`` times, then exit 4).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.commit.producer import SnapshotChange
from tablekeeper.commit.service import finish_dead_runs, plan_again, staging
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import CommitConflict, CorruptMetadataError
from tablekeeper.files.containment import require_home
from tablekeeper.files.finish import pending_journals
from tablekeeper.files.journal import Staged
from tablekeeper.iceberg.arrow_project import written_fields
from tablekeeper.iceberg.content import DATA, POSITION_DELETES, DataFile
from tablekeeper.iceberg.delete_index import field_lookup, referenced_file
from tablekeeper.iceberg.equality_delete_plan import (
    DEFAULT_MAX_GROUP_FILES,
    EqualityDeletePlan,
    EqualityGroup,
    Target,
    plan_equality_deletes,
)
from tablekeeper.iceberg.metadata import MAIN_BRANCH, TableMetadata
from tablekeeper.iceberg.position_delete_plan import scope_of
from tablekeeper.iceberg.types import NestedField
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.context import (
    JobContext,
    add_run_arguments,
    add_table_arguments,
    options_from_args,
    positive,
)
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.jobs.rewrite_position_deletes import delete_codec, session_getter
from tablekeeper.spark.equality import path_of
from tablekeeper.spark.equality_deletes import (
    GroupOutput,
    GroupWork,
    TargetWork,
    resolve_groups,
)
from tablekeeper.spark.position_deletes import keep_reported, partitions_matching
from tablekeeper.spark.rewrite import name_mapping
from tablekeeper.tables.iceberg import live_files

log = logging.getLogger(__name__)

JOB = "rewrite-equality-deletes"
# Iceberg's own switch for how many position delete files a writer makes: one per data file
# ("file", its default) or one per partition ("partition").
DELETE_GRANULARITY = "write.delete.granularity"
MAX_PLANS = 3


@dataclass(frozen=True)
class RewriteEqualityDeletesOptions:
    table: str
    where: str | None = None
    partial_progress: bool = False
    max_commits: int = 10
    max_group_files: int = DEFAULT_MAX_GROUP_FILES
    dry_run: bool = False
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RewriteEqualityDeletesOptions:
        return options_from_args(cls, args)


def plan(
    table: LoadedTable, options: RewriteEqualityDeletesOptions, spark: Callable[[], SparkSession]
) -> tuple[EqualityDeletePlan, frozenset[str]]:
    """The plan, and the paths of the live data files it saw (what a commit compares against)."""
    meta = table.metadata
    snapshot = meta.ref_snapshot(MAIN_BRANCH)
    if snapshot is None or meta.format_version < 2:
        return EqualityDeletePlan((), (), {}, ()), frozenset()
    files = live_files(table.io, meta, snapshot)
    matches = None
    if options.where:
        session = spark()
        session.sparkContext.setJobDescription(f"{JOB}: partitions where {options.where}")
        scopes = partitions_matching(session, meta, [e.data_file for e in files.data], options.where)

        def matches(f: DataFile) -> bool:
            return scope_of(f) in scopes

    the_plan = plan_equality_deletes(
        files.data,
        files.deletes,
        meta.unpartitioned_spec_ids,
        fields=field_lookup(meta.schemas),
        matches=matches,
        max_group_files=options.max_group_files,
    )
    return the_plan, frozenset(e.data_file.file_path for e in files.data)


def _work(
    meta: TableMetadata, the_plan: EqualityDeletePlan, directory: str, token: str, codec: str
) -> list[GroupWork]:
    schema = meta.schema()
    columns = written_fields(schema.fields)
    mapping = name_mapping(meta)
    work = []
    for g in the_plan.groups:
        ids = {fid for t in g.targets for e in t.equalities for fid in (e.data_file.equality_ids or ())}
        tops = set()
        for fid in ids:
            found = path_of(columns, fid)
            if found is None:
                raise CorruptMetadataError(
                    f"an equality delete of {meta.location} deletes by field id {fid}, which is not a "
                    "primitive column of the current schema outside lists and maps"
                )
            tops.add(found[0])
        fields = tuple(columns[i] for i in sorted(tops))
        index = {f.id: n for n, f in enumerate(fields)}
        identity = meta.spec(g.spec_id).identity_columns(schema)
        targets = tuple(_target(t, index, identity) for t in g.targets)
        work.append(
            GroupWork(
                g.index,
                g.spec_id,
                g.partition,
                fields,
                mapping,
                targets,
                directory,
                token,
                meta.format_version >= 3,
                codec,
                meta.properties.get(DELETE_GRANULARITY, "file").lower() != "partition",
            )
        )
    return work


def _target(t: Target, index: dict[int, int], identity: Sequence[tuple[int, NestedField]]) -> TargetWork:
    dv = None
    if t.dv is not None:
        f = t.dv.data_file
        if f.content_offset is None or f.content_size_in_bytes is None:
            raise CorruptMetadataError(f"deletion vector {f.file_path} has no content offset or size")
        dv = (f.file_path, f.content_offset, f.content_size_in_bytes, f.record_count)
    # Identity partition columns are matched as Iceberg Java reads them: the partition tuple's
    # value in every row (files converted from Delta hold none; an imported file may contradict it).
    fills = tuple(
        (index[field.id], field.type, t.file.partition[i]) for i, field in identity if field.id in index
    )
    return TargetWork(
        t.file.file_path,
        t.file.record_count,
        dv,
        tuple(sorted({(p.data_file.file_path, p.data_file.file_format.upper()) for p in t.positions})),
        fills,
        tuple((e.data_file.file_path, tuple(e.data_file.equality_ids or ())) for e in t.equalities),
    )


def _validator(
    io: FileIO,
    start_id: int,
    seen_data: frozenset[str],
    done: Sequence[tuple[EqualityGroup, GroupOutput]],
    removing: Sequence[tuple[str, int, tuple[int, tuple[object, ...]], bool]],
) -> Callable[[TableMetadata, int], TableMetadata]:
    """The checks of each commit attempt's base (see the module's docstring). ``removing``: the
    equality delete files the commit removes, as (path, data sequence number, scope, global)."""
    new = {r.location for _, out in done for r in out.resolved if r.new}
    written = {t.file.file_path: t for g, _ in done for t in g.targets if t.file.file_path in new}
    read = {p.data_file.file_path for t in written.values() for p in t.positions}
    scopes = {scope_of(t.file) for t in written.values()}

    def planned_dv(t: Target) -> tuple[str, int] | None:
        dv = t.dv
        return (dv.data_file.file_path, dv.data_file.content_offset or 0) if dv is not None else None

    def check(base: TableMetadata, _timestamp_ms: int) -> TableMetadata:
        snapshot = base.ref_snapshot(MAIN_BRANCH)
        if snapshot is None or snapshot.snapshot_id == start_id:
            return base
        files = live_files(io, base, snapshot)
        data = {e.data_file.file_path: e for e in files.data if e.data_file.content == DATA}
        dvs = {
            e.data_file.referenced_data_file: (e.data_file.file_path, e.data_file.content_offset or 0)
            for e in files.deletes
            if e.data_file.is_dv and e.data_file.referenced_data_file is not None
        }
        for path, target in written.items():
            if path not in data or dvs.get(path) != planned_dv(target):
                raise CommitConflict(
                    f"another commit removed {path} or changed its deletion vector since the job "
                    f"planned: nothing committed; {JOB} plans again"
                )
        unread = next(
            (
                f.file_path
                for f in (e.data_file for e in files.deletes)
                if f.content == POSITION_DELETES
                and not f.is_dv
                and f.file_path not in read
                and scope_of(f) in scopes
                and (referenced_file(f) is None or referenced_file(f) in written)
                and base.format_version >= 3
            ),
            None,
        )
        if unread is not None:
            raise CommitConflict(
                f"another commit added position delete file {unread}, which the new deletion vectors "
                f"would shadow: nothing committed; {JOB} plans again"
            )
        arrived = [e for p, e in data.items() if p not in seen_data]  # usually none
        for path, sequence, scope, is_global in removing if arrived else ():
            newcomer = next(
                (
                    e.data_file.file_path
                    for e in arrived
                    if (e.sequence_number or 0) < sequence and (is_global or scope_of(e.data_file) == scope)
                ),
                None,
            )
            if newcomer is not None:
                raise CommitConflict(
                    f"another commit added {newcomer} under a data sequence number older than equality "
                    f"delete file {path}, which still applies to it: nothing committed; {JOB} plans again"
                )
        return base

    return check


def _commit(
    catalog: Catalog,
    identifier: str,
    table: LoadedTable,
    seen_data: frozenset[str],
    done: Sequence[tuple[EqualityGroup, GroupOutput]],
    removing: Sequence[str],
    the_plan: EqualityDeletePlan,
    token: str,
) -> int | None:
    """One commit of ``done``'s new files, removing the equality delete files ``removing``.
    ``table`` is the table as planned (its snapshot is what each attempt's base is checked against)."""
    meta = table.metadata
    start = meta.ref_snapshot(MAIN_BRANCH)
    assert start is not None
    added = tuple(f for _, out in done for f in out.added)
    by_path = {e.data_file.file_path: e for e in the_plan.equality_deletes}
    unpartitioned = meta.unpartitioned_spec_ids
    removed = [
        (
            p,
            int(by_path[p].sequence_number or 0),
            scope_of(by_path[p].data_file),
            by_path[p].data_file.spec_id in unpartitioned,
        )
        for p in removing
        if p in by_path
    ]
    # The DV of a data file that gets a new one is replaced, by data file.
    replaced = frozenset(f.referenced_data_file for f in added if f.is_dv and f.referenced_data_file)
    change = SnapshotChange(
        operation="replace",
        added_files=added,
        removed_paths=frozenset(removing),
        removed_dvs_for=replaced,
        prepare=_validator(table.io, start.snapshot_id, seen_data, done, removed),
        summary={"tablekeeper.job": JOB},
    )
    result = Committer(catalog, identifier, file_prefix=token).commit_snapshot(change)
    return result.snapshot.snapshot_id if result.snapshot is not None else None


def run_rewrite_equality_deletes(
    options: RewriteEqualityDeletesOptions,
    catalog: Catalog,
    identifier: str,
    spark: SparkSession | Callable[[], SparkSession],
) -> JobResult:
    clock = JobClock()
    return plan_again(lambda plans: _run_once(options, catalog, identifier, spark, clock, plans), MAX_PLANS)


def _group_json(g: EqualityGroup, out: GroupOutput | None = None) -> dict[str, object]:
    row: dict[str, object] = {
        "group": g.index,
        "spec_id": g.spec_id,
        "partition": list(g.partition),
        "data_files": len(g.targets),
        "data_bytes": g.data_bytes,
        "equality_delete_files": len({e.data_file.file_path for t in g.targets for e in t.equalities}),
    }
    if out is not None:
        row |= {
            "matched_rows": sum(r.matched for r in out.resolved),
            "resolved_rows": out.new_rows,
            "added_delete_files": len(out.added),
        }
    return row


def _planned_metrics(meta: TableMetadata, the_plan: EqualityDeletePlan) -> dict[str, object]:
    return {
        "format_version": meta.format_version,
        "live_equality_delete_files": len(the_plan.equality_deletes),
        "live_equality_delete_rows": sum(e.data_file.record_count for e in the_plan.equality_deletes),
        "planned_groups": len(the_plan.groups),
        "data_files_to_resolve": the_plan.target_files,
        "data_bytes_to_resolve": the_plan.data_bytes,
        "equality_delete_files_to_remove": len(the_plan.removable),
        "kept_equality_delete_files": [{"path": k.path, "reason": k.reason} for k in the_plan.kept],
    }


def _run_once(
    options: RewriteEqualityDeletesOptions,
    catalog: Catalog,
    identifier: str,
    spark: SparkSession | Callable[[], SparkSession],
    clock: JobClock,
    plans: int,
) -> JobResult:
    session = session_getter(spark)
    table = catalog.require(identifier)
    require_home(table, identifier, JOB)  # a copied table would write into the original
    meta = table.metadata
    the_plan, seen_data = plan(table, options, session)
    faults.kill_point("plan.done")
    metrics = _planned_metrics(meta, the_plan)
    if options.dry_run or not the_plan.equality_deletes:
        metrics["groups"] = [_group_json(g) for g in the_plan.groups]
        if not the_plan.equality_deletes:
            metrics["note"] = "no equality delete files: nothing to resolve"
        if options.dry_run:
            journals = pending_journals(table.io, meta.location)
            if journals:
                metrics["journals_to_finish"] = journals
        else:
            metrics["resumed_journal"] = finish_dead_runs(
                table.io, meta.location, lambda: catalog.require(identifier)
            )
        metrics |= _zero()
        metrics["snapshot_ids"] = []
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics)
    root = meta.data_location
    codec = delete_codec(meta)
    snapshot_ids: list[int] = []
    removed: list[str] = []
    done: list[tuple[EqualityGroup, GroupOutput]] = []
    with staging(
        catalog,
        identifier,
        job=JOB,
        io=table.io,
        location=meta.location,
        base_metadata=table.metadata_location,
        staged=lambda token: (
            Staged(root, token, directories=True),
            Staged(f"{meta.location.rstrip('/')}/metadata", token),  # a killed commit's manifests
        ),
    ) as run:
        metrics["resumed_journal"] = run.resumed
        directory = f"{root}/{JOB}-{run.token}"
        work = _work(meta, the_plan, directory, run.token, codec)
        spark_session = session()
        spark_session.sparkContext.setJobDescription(f"{JOB}: {len(work)} group(s)")
        outputs = {o.index: o for o in resolve_groups(spark_session, work)}
        keep_reported(directory, list(outputs.values()))
        done = [(g, outputs[g.index]) for g in the_plan.groups]
        batches = _batches(done, options) if done else [[]]
        committed: set[int] = set()
        for batch in batches:
            committed |= {g.index for g, _ in batch}
            going = [p for p, needs in the_plan.removable.items() if needs <= committed and p not in removed]
            if not going and not any(out.added for _, out in batch):
                continue
            snapshot_id = run.commit(
                lambda batch=batch, going=going: _commit(  # type: ignore[misc]
                    catalog, identifier, table, seen_data, batch, going, the_plan, run.token
                ),
                [f.file_path for _, out in batch for f in out.added],
            )
            removed.extend(going)
            if snapshot_id is not None:
                snapshot_ids.append(snapshot_id)
    metrics |= _counts(done, removed, the_plan)
    metrics["plans"] = plans
    metrics["groups"] = [_group_json(g, o) for g, o in done]
    metrics["snapshot_ids"] = snapshot_ids
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def _batches(
    done: Sequence[tuple[EqualityGroup, GroupOutput]], options: RewriteEqualityDeletesOptions
) -> list[list[tuple[EqualityGroup, GroupOutput]]]:
    if not options.partial_progress:
        return [list(done)]
    per_commit = -(-len(done) // options.max_commits)
    return [list(done[i : i + per_commit]) for i in range(0, len(done), per_commit)]


def _counts(
    done: Sequence[tuple[EqualityGroup, GroupOutput]], removed: Sequence[str], the_plan: EqualityDeletePlan
) -> dict[str, object]:
    added = [f for _, out in done for f in out.added]
    rows = {e.data_file.file_path: e.data_file.record_count for e in the_plan.equality_deletes}
    return {
        "matched_rows": sum(r.matched for _, out in done for r in out.resolved),
        "resolved_rows": sum(out.new_rows for _, out in done),
        "added_dvs_count": sum(1 for f in added if f.is_dv),
        "added_position_delete_files_count": sum(1 for f in added if not f.is_dv),
        "removed_equality_delete_files_count": len(removed),
        "removed_equality_delete_rows": sum(rows.get(p, 0) for p in removed),
    }


def _zero() -> dict[str, object]:
    return {
        "matched_rows": 0,
        "resolved_rows": 0,
        "added_dvs_count": 0,
        "added_position_delete_files_count": 0,
        "removed_equality_delete_files_count": 0,
        "removed_equality_delete_rows": 0,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument(
        "--where", help="only partitions whose identity partition values match this Spark SQL predicate"
    )
    parser.add_argument(
        "--partial-progress", action="store_true", help="commit batches of groups as they finish"
    )
    parser.add_argument("--max-commits", type=positive, default=10, help="with --partial-progress (10)")
    parser.add_argument(
        "--max-group-files",
        type=positive,
        default=DEFAULT_MAX_GROUP_FILES,
        help=f"data files per Spark task (default {DEFAULT_MAX_GROUP_FILES})",
    )
    add_run_arguments(parser)


# The options class the command line builds (jobs.common.context's contract).
Options = RewriteEqualityDeletesOptions
# Iceberg tables only: a Delta table is refused whole, before it is read (jobs.common.formats).
DELTA_OPTIONS = None


def run(options: RewriteEqualityDeletesOptions, context: JobContext) -> JobResult:
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_rewrite_equality_deletes(options, catalog, identifier, context.spark)
