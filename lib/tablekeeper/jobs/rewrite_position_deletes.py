"""rewrite-position-deletes: merge small position delete files (Iceberg's
``rewrite_position_delete_files``); on v3 tables, leave every data file with at most one deletion
vector and no position delete file.

Plan (``iceberg.position_delete_plan``): groups of position delete files per spec and partition.
Execute (``spark.position_deletes``): one Spark task per group reads its delete files, keeps the
entries that still apply (dangling ones, whose data file is gone, are dropped) and writes sorted
Parquet position delete files of the target size, or on v3 one Puffin file of DVs merged with the
data files' existing DVs. Commit: one ``replace`` snapshot. New files keep the largest data
sequence number of the files they replace, as Iceberg's rewrite does: every entry kept applied
before at that number or lower, and names only its own data file, so no row changes.

A concurrent commit that removed a delete file the plan replaces, or (v3) a data file it writes a
DV for, or changed one of those data files' deletes, fails the commit: its new files are removed
and the job plans again (up to ``MAX_PLANS`` times, then exit 4). New files are staged under a
journal, so a killed run's files are collected by the next run of any staging job.
"""

from __future__ import annotations

import argparse
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.commit.producer import SnapshotChange
from tablekeeper.commit.service import finish_dead_runs, plan_again, staging
from tablekeeper.commit.summary import SummaryDelta
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import (
    CommitConflict,
    ConfigError,
    UnsupportedFeatureError,
)
from tablekeeper.files.containment import require_home
from tablekeeper.files.finish import pending_journals
from tablekeeper.files.journal import Staged
from tablekeeper.iceberg.content import (
    ADDED,
    DATA,
    MANIFEST_DELETES,
    POSITION_DELETES,
    DataFile,
    ManifestEntry,
    ManifestFile,
)
from tablekeeper.iceberg.delete_index import referenced_file
from tablekeeper.iceberg.manifest import write_manifest
from tablekeeper.iceberg.metadata import MAIN_BRANCH, TableMetadata
from tablekeeper.iceberg.position_delete_plan import (
    DEFAULT_MIN_INPUT_FILES,
    DEFAULT_TARGET_FILE_SIZE,
    TARGET_FILE_SIZE,
    DeleteGroup,
    DeletePlanOptions,
    PositionDeletePlan,
    plan_position_deletes,
    scope_of,
)
from tablekeeper.iceberg.updates import new_snapshot_id
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.context import (
    JobContext,
    add_run_arguments,
    add_table_arguments,
    options_from_args,
    positive,
)
from tablekeeper.jobs.common.options import parse_size
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.spark.position_deletes import (
    GroupOutput,
    GroupWork,
    keep_reported,
    partitions_matching,
    rewrite_groups,
)
from tablekeeper.tables.iceberg import live_files

log = logging.getLogger(__name__)

JOB = "rewrite-position-deletes"
_CODEC_PROPERTIES = ("write.delete.parquet.compression-codec", "write.parquet.compression-codec")
# Spark's lz4 is Hadoop's framing, pyarrow's is not: only codecs both write alike.
_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "uncompressed": "none", "none": "none"}
# A concurrent commit that makes the rewrite's commit impossible makes it plan again, this often.
MAX_PLANS = 3


@dataclass(frozen=True)
class RewritePositionDeletesOptions:
    table: str
    where: str | None = None
    rewrite_all: bool = False
    target_file_size: str | None = None
    min_input_files: int = DEFAULT_MIN_INPUT_FILES
    dry_run: bool = False
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RewritePositionDeletesOptions:
        return options_from_args(cls, args)

    def plan_options(self, properties: dict[str, str]) -> DeletePlanOptions:
        if self.target_file_size is not None:
            target = parse_size(self.target_file_size, "--target-file-size")
        else:
            try:
                target = int(properties.get(TARGET_FILE_SIZE, DEFAULT_TARGET_FILE_SIZE))
            except ValueError:
                raise ConfigError(f"table property {TARGET_FILE_SIZE} is not a number of bytes") from None
        return DeletePlanOptions(
            target_file_size=target, min_input_files=self.min_input_files, rewrite_all=self.rewrite_all
        )


def delete_codec(meta: TableMetadata) -> str:
    """The Parquet codec of the table's delete files (write.delete.parquet.compression-codec)."""
    codec = next((meta.properties[p] for p in _CODEC_PROPERTIES if p in meta.properties), "zstd").lower()
    if codec not in _CODECS:
        raise UnsupportedFeatureError(f"compression codec {codec} is not one tablekeeper writes Parquet with")
    return _CODECS[codec]


def plan(
    table: LoadedTable, options: RewritePositionDeletesOptions, spark: Callable[[], SparkSession]
) -> PositionDeletePlan:
    meta = table.metadata
    snapshot = meta.ref_snapshot(MAIN_BRANCH)
    plan_options = options.plan_options(dict(meta.properties))
    if snapshot is None or meta.format_version < 2:
        return PositionDeletePlan((), 0, 0)
    files = live_files(table.io, meta, snapshot)
    matches = None
    if options.where:
        session = spark()
        session.sparkContext.setJobDescription(f"{JOB}: partitions where {options.where}")
        candidates = [e.data_file for e in files.deletes if e.data_file.content == POSITION_DELETES]
        scopes = partitions_matching(session, meta, candidates, options.where)

        def matches(f: DataFile) -> bool:
            return scope_of(f) in scopes

    return plan_position_deletes(files.data, files.deletes, meta.format_version, plan_options, matches)


def _group_json(g: DeleteGroup, out: GroupOutput | None = None) -> dict[str, object]:
    row: dict[str, object] = {
        "group": g.index,
        "spec_id": g.spec_id,
        "partition": list(g.partition),
        "delete_files": len(g.deletes),
        "bytes": g.input_size,
        "records": g.input_records,
        "to_dvs": g.to_dvs,
    }
    if out is not None:
        row |= {
            "added_files": len(out.added),
            "merged_dvs": len(out.merged_dvs),
            "dangling_deletes": out.dangling,
        }
    return row


def _sequence(group: DeleteGroup, out: GroupOutput) -> int:
    """The new files' data sequence number: the largest of the files they replace (Java's)."""
    return max([group.sequence_number, *(d.sequence_number for d in out.merged_dvs)])


def _write_manifests(
    table: LoadedTable,
    meta: TableMetadata,
    done: Sequence[tuple[DeleteGroup, GroupOutput]],
    snapshot_id: int,
    token: str,
) -> list[ManifestFile]:
    """Delete manifests for the new files, each entry with its group's data sequence number and
    no file sequence number (it inherits the commit's, as Java's ``addFile(file, seq)`` does)."""
    by_spec: dict[int, list[ManifestEntry]] = {}
    for group, out in done:
        seq = _sequence(group, out)
        for f in out.added:
            by_spec.setdefault(f.spec_id, []).append(ManifestEntry(ADDED, snapshot_id, f, seq, None))
    written: list[ManifestFile] = []
    try:
        for spec_id, entries in sorted(by_spec.items()):
            path = f"{meta.location.rstrip('/')}/metadata/{token}-{uuid.uuid4()}-m{len(written)}.avro"
            data, manifest = write_manifest(
                path,
                entries,
                format_version=meta.format_version,
                spec=meta.spec(spec_id),
                schema=meta.schema(),
                snapshot_id=snapshot_id,
                content=MANIFEST_DELETES,
            )
            table.io.create_if_absent(path, data)
            written.append(manifest)
    except BaseException:
        table.io.delete_many([m.manifest_path for m in written])
        raise
    return written


def _validator(
    io: FileIO, start_id: int, done: Sequence[tuple[DeleteGroup, GroupOutput]]
) -> Callable[[TableMetadata, int], TableMetadata]:
    """A check of each commit attempt's base: when other commits landed since the plan, the DVs
    this commit replaces must still be the live ones for their data files (another DV would hold
    deletes this one lacks), those data files must still be live, and no position delete file
    the run did not read may name one of them: the new DV would shadow its deletes (a DV must
    hold every delete of its file's position delete files)."""
    targets: dict[str, tuple[str, int] | None] = {}
    scopes: set[tuple[int, tuple[Any, ...]]] = set()
    read = {d.file.file_path for g, _ in done for d in g.deletes}
    for _, out in done:
        seen = {str(d.file.referenced_data_file): d.file for d in out.merged_dvs}
        for f in out.added:
            if f.is_dv and f.referenced_data_file is not None:
                old = seen.get(f.referenced_data_file)
                targets[f.referenced_data_file] = (
                    (old.file_path, old.content_offset or 0) if old is not None else None
                )
                scopes.add(scope_of(f))

    def check(base: TableMetadata, _timestamp_ms: int) -> TableMetadata:
        snapshot = base.ref_snapshot(MAIN_BRANCH)
        if not targets or snapshot is None or snapshot.snapshot_id == start_id:
            return base
        files = live_files(io, base, snapshot)
        data = {e.data_file.file_path for e in files.data if e.data_file.content == DATA}
        dvs = {
            e.data_file.referenced_data_file: (e.data_file.file_path, e.data_file.content_offset or 0)
            for e in files.deletes
            if e.data_file.is_dv and e.data_file.referenced_data_file is not None
        }
        for path, old in targets.items():
            if path not in data or dvs.get(path) != old:
                raise CommitConflict(
                    f"another commit removed {path} or changed its deletion vector since the job "
                    "planned: nothing committed; run rewrite-position-deletes again"
                )
        unread = next(
            (
                f.file_path
                for f in (e.data_file for e in files.deletes)
                if f.content == POSITION_DELETES
                and not f.is_dv
                and f.file_path not in read
                and scope_of(f) in scopes
                and (referenced_file(f) is None or referenced_file(f) in targets)
            ),
            None,
        )
        if unread is not None:
            raise CommitConflict(
                f"another commit added position delete file {unread}, which the new deletion vectors "
                "would shadow: nothing committed; run rewrite-position-deletes again"
            )
        return base

    return check


def _commit(
    catalog: Catalog,
    identifier: str,
    table: LoadedTable,
    done: Sequence[tuple[DeleteGroup, GroupOutput]],
    token: str,
) -> int | None:
    meta = table.metadata
    start = meta.ref_snapshot(MAIN_BRANCH)
    assert start is not None
    snapshot_id = new_snapshot_id()
    added = tuple(f for _, out in done for f in out.added)
    manifests = _write_manifests(table, meta, done, snapshot_id, token)
    removed = frozenset(d.file.file_path for g, _ in done for d in g.deletes)
    # DVs share Puffin files with other data files' DVs: they are replaced by data file. Only DVs:
    # a position delete file goes only by path, when the run read it.
    replaced_dvs = frozenset(f.referenced_data_file for f in added if f.is_dv and f.referenced_data_file)
    partitions = {(g.spec_id, scope_of(d.file)[1]) for g, _ in done for d in g.deletes}
    change = SnapshotChange(
        operation="replace",
        added_manifests=tuple(manifests),
        added_manifests_delta=SummaryDelta.of(added),
        removed_paths=removed,
        removed_dvs_for=replaced_dvs,
        prepare=_validator(table.io, start.snapshot_id, done),
        summary={"tablekeeper.job": JOB, "changed-partition-count": str(len(partitions))},
    )
    result = Committer(catalog, identifier, file_prefix=token).commit_snapshot(change, snapshot_id)
    return result.snapshot.snapshot_id if result.snapshot is not None else None


def _counts(done: Sequence[tuple[DeleteGroup, GroupOutput]]) -> dict[str, object]:
    def size(f: DataFile) -> int:
        return (
            f.content_size_in_bytes
            if f.is_dv and f.content_size_in_bytes is not None
            else f.file_size_in_bytes
        )

    rewritten = [d.file for g, out in done for d in (*g.deletes, *out.merged_dvs)]
    added = [f for _, out in done for f in out.added]
    return {
        "rewritten_delete_files_count": len(rewritten),
        "added_delete_files_count": len(added),
        "rewritten_bytes_count": sum(size(f) for f in rewritten),
        "added_bytes_count": sum(size(f) for f in added),
        "dangling_deletes_removed": sum(out.dangling for _, out in done),
        "rewritten_position_delete_files_count": sum(len(g.deletes) for g, _ in done),
        "merged_dvs_count": sum(len(out.merged_dvs) for _, out in done),
        "added_dvs_count": sum(1 for f in added if f.is_dv),
    }


def _zero() -> dict[str, object]:
    return _counts([])


def run_rewrite_position_deletes(
    options: RewritePositionDeletesOptions,
    catalog: Catalog,
    identifier: str,
    spark: SparkSession | Callable[[], SparkSession],
) -> JobResult:
    """Plan, rewrite, commit; a commit that a concurrent change made impossible (a planned file
    removed, a DV changed) leaves nothing behind and the job plans again on the table as it is."""
    clock = JobClock()
    return plan_again(lambda plans: _run_once(options, catalog, identifier, spark, clock, plans), MAX_PLANS)


def _run_once(
    options: RewritePositionDeletesOptions,
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
    the_plan = plan(table, options, session)
    faults.kill_point("plan.done")
    metrics: dict[str, object] = {
        "format_version": meta.format_version,
        "target_file_size_bytes": options.plan_options(dict(meta.properties)).target_file_size,
        "live_position_delete_files": the_plan.position_delete_files,
        "live_dvs": the_plan.dvs,
        "planned_groups": len(the_plan.groups),
        "files_to_rewrite": the_plan.files,
        "bytes_to_rewrite": the_plan.bytes,
    }
    if options.dry_run or not the_plan.groups:
        metrics["groups"] = [_group_json(g) for g in the_plan.groups]
        metrics |= _zero()
        if not the_plan.groups:
            metrics["note"] = "nothing to rewrite"
        if options.dry_run:
            journals = pending_journals(table.io, meta.location)
            if journals:
                metrics["journals_to_finish"] = journals
        else:
            metrics["resumed_journal"] = finish_dead_runs(
                table.io, meta.location, lambda: catalog.require(identifier)
            )
        metrics["snapshot_ids"] = []
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics)
    root = meta.data_location
    codec = delete_codec(meta)
    plan_options = options.plan_options(dict(meta.properties))
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
        work = [
            GroupWork(g, directory, run.token, plan_options.target_file_size, codec) for g in the_plan.groups
        ]
        spark_session = session()
        spark_session.sparkContext.setJobDescription(f"{JOB}: {len(work)} group(s)")
        outputs = rewrite_groups(spark_session, work)
        keep_reported(directory, outputs)
        by_index = {o.index: o for o in outputs}
        done = [(g, by_index[g.index]) for g in the_plan.groups]
        snapshot_id = run.commit(lambda: _commit(catalog, identifier, table, done, run.token))
    metrics |= _counts(done)
    metrics["plans"] = plans
    metrics["groups"] = [_group_json(g, o) for g, o in done]
    metrics["snapshot_ids"] = [snapshot_id] if snapshot_id is not None else []
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def session_getter(spark: SparkSession | Callable[[], SparkSession]) -> Callable[[], SparkSession]:
    """A session, or a function starting one, as a function."""
    if isinstance(spark, SparkSession):
        given = spark
        return lambda: given
    return spark


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument(
        "--where", help="only partitions whose identity partition values match this Spark SQL predicate"
    )
    parser.add_argument(
        "--rewrite-all", action="store_true", help="rewrite every position delete file, whatever its size"
    )
    parser.add_argument(
        "--target-file-size",
        help="e.g. 64MB (default: write.delete.target-file-size-bytes, else 64MB)",
    )
    parser.add_argument(
        "--min-input-files",
        type=positive,
        default=DEFAULT_MIN_INPUT_FILES,
        help="rewrite a partition's small delete files once there are this many (default 5)",
    )
    add_run_arguments(parser)


# The options class the command line builds (jobs.common.context's contract).
Options = RewritePositionDeletesOptions
# Iceberg tables only: a Delta table is refused whole, before it is read (jobs.common.formats).
DELTA_OPTIONS = None


def run(options: RewritePositionDeletesOptions, context: JobContext) -> JobResult:
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_rewrite_position_deletes(options, catalog, identifier, context.spark)
