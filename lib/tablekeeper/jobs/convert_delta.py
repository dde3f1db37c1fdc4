"""convert-delta: Delta versions as Iceberg snapshots, by log replay.

Data files stay where they are: the Iceberg table references the Delta table's Parquet files, so
its ``gc.enabled`` is false (no Iceberg maintenance may delete Delta's files). Deletion vectors
become v3 DVs (the Delta bytes are Iceberg's blob format: copied into a Puffin file) or v2
position delete files; none is ever dropped.

Each converted version is one snapshot, built from the difference between two Delta states (by
data file path) and committed together with the schema, spec and the ``tablekeeper.delta.version``
property it reaches: the property is the resume point of ``--mode incremental`` and can never be
ahead of or behind the snapshots. ``--history all`` records every version from the oldest that
can still be reconstructed; ``latest`` one snapshot for the newest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from tablekeeper import faults
from tablekeeper.catalog import Catalog, LoadedTable
from tablekeeper.commit import Committer, SnapshotChange, SummaryDelta
from tablekeeper.commit.producer import new_commit_uuid
from tablekeeper.commit.transaction import RetryPolicy
from tablekeeper.delta.diff import FileDiff, diff_files
from tablekeeper.delta.segment import LogEntry, LogSegment, oldest_reconstructable
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta.to_iceberg import MappedSchema, map_schema, partition_spec
from tablekeeper.delta_table import (
    commit_time,
    history,
    list_log,
    load_snapshot,
    normalise_root,
    readable_segment,
    segment_bytes,
)
from tablekeeper.errors import (
    CommitConflict,
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    UnsupportedFeatureError,
)
from tablekeeper.files.journal import JournalWriter
from tablekeeper.iceberg.manifest import DATA
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.name_mapping import merge_name_mappings, name_mapping_to_json, parse_name_mapping
from tablekeeper.iceberg.updates import (
    add_partition_spec,
    add_schema,
    new_snapshot_id,
    new_table_metadata,
    set_properties,
)
from tablekeeper.io import FileIO
from tablekeeper.jobs.delta_files import WrittenDeletes, data_files, delete_files, target_state
from tablekeeper.jobs.result import JobClock, JobResult
from tablekeeper.jobs.staging import staged_run

log = logging.getLogger(__name__)

JOB = "convert-delta"
SOURCE_PROPERTY = "tablekeeper.delta.source"
VERSION_PROPERTY = "tablekeeper.delta.version"
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
DISTRIBUTE_ABOVE = 50_000
# Above this much log (checkpoint + commits) a full conversion keeps the Delta state in Spark and
# builds data files on the executors, so the driver never holds one object per file. Below it the
# driver alone is faster (100,000 files: 18 s against 39 s on 2 cores) and stays under 1 GiB.
DISTRIBUTE_LOG_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ConvertOptions:
    source: str
    target: str
    mode: str = "full"
    history: str = "latest"
    format_version: int = 2
    dry_run: bool = False
    # driver: manifests written by this process; spark: by the executors; auto: spark above
    # DISTRIBUTE_ABOVE files when a session is at hand.
    engine: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in ("full", "incremental"):
            raise ConfigError(f"--mode {self.mode!r} is not full or incremental")
        if self.history not in ("latest", "all"):
            raise ConfigError(f"--history {self.history!r} is not latest or all")
        if self.engine not in ("auto", "driver", "spark"):
            raise ConfigError(f"--engine {self.engine!r} is not auto, driver or spark")
        if self.format_version not in (2, 3):
            raise ConfigError(f"--format-version {self.format_version} is not 2 or 3")


@dataclass(frozen=True)
class ConvertPlan:
    root: str
    mode: str  # full (new target) or incremental (existing target)
    latest_version: int
    versions: tuple[int, ...]  # Delta versions that become snapshots, ascending
    base_version: int | None  # converted version the first snapshot is diffed from
    resync: bool  # the log after base_version is gone: diff against the target's own files
    format_version: int
    target_exists: bool
    note: str | None = None
    # The listing and latest segment the plan was made from, reused rather than listed again.
    log: tuple[LogEntry, ...] = ()
    latest_segment: LogSegment | None = None


def _existing(catalog: Catalog, target: str) -> LoadedTable | None:
    return catalog.load_table(target) if catalog.table_exists(target) else None


def plan_convert(options: ConvertOptions, catalog: Catalog) -> ConvertPlan:
    root = normalise_root(options.source)
    io = FileIO.for_location(root)
    entries = list_log(io, root)
    # The latest version's segment, checked as any read would check it (gaps, missing commits,
    # a checkpoint that cannot be read).
    segment, detours = readable_segment(io, root, entries)
    latest = segment.version
    oldest = oldest_reconstructable(entries, root) if options.history == "all" else latest
    table = _existing(catalog, options.target)

    def every(first: int) -> tuple[int, ...]:
        return tuple(range(first, latest + 1)) if options.history == "all" else (latest,)

    def plan(
        mode: str,
        versions: tuple[int, ...],
        base: int | None,
        resync: bool,
        format_version: int,
        exists: bool,
        note: str | None = None,
    ) -> ConvertPlan:
        said = "; ".join([*detours, *([note] if note else [])]) or None
        return ConvertPlan(
            root, mode, latest, versions, base, resync, format_version, exists, said, tuple(entries), segment
        )

    if table is None or VERSION_PROPERTY not in table.metadata.properties:
        if table is not None and table.metadata.properties.get(SOURCE_PROPERTY) != root:
            raise ConfigError(
                f"target {options.target} already exists and was not converted from {root}: "
                "pick another target or drop it"
            )
        # A target this job created but never committed to (a failed first run) is reused.
        return plan("full", every(oldest), None, False, options.format_version, table is not None)
    props = table.metadata.properties
    if props.get(SOURCE_PROPERTY) != root:
        raise ConfigError(
            f"target {options.target} was converted from {props.get(SOURCE_PROPERTY)}, not {root}: "
            "pick the matching source or another target"
        )
    last = int(props[VERSION_PROPERTY])
    if options.mode == "full":
        if last == latest and _converted_as_asked(table.metadata, options, oldest):
            # The same command ran to completion (perhaps killed just after): its work is done.
            return plan("full", (), last, False, table.metadata.format_version, True, "already converted")
        raise ConfigError(
            f"target {options.target} already exists: use --mode incremental to bring it up to date, "
            "or drop it for a full conversion"
        )
    fv = table.metadata.format_version
    if last > latest:
        raise ConfigError(
            f"target {options.target} is at Delta version {last} but {root} only has up to {latest}: "
            "the source was replaced; convert it into a new target"
        )
    if last == latest:
        return plan("incremental", (), last, False, fv, True, "already up to date")
    first_kept = oldest_reconstructable(entries, root)
    if first_kept <= last:
        versions = every(last + 1)
        return plan("incremental", versions, last, False, fv, True)
    note = (
        f"the Delta log before version {first_kept} was cleaned up, so version {last} can no longer be "
        "read: re-synced from the target's own files"
    )
    return plan("incremental", every(first_kept), last, True, fv, True, note)


def _converted_as_asked(meta: TableMetadata, options: ConvertOptions, oldest: int) -> bool:
    """Whether a target holds what this full conversion would make of the source: same format
    version and, with all history, a snapshot for every version from the oldest on."""
    if meta.format_version != options.format_version:
        return False
    if options.history != "all":
        return True
    versions = {s.summary.get("tablekeeper.delta-version") for s in meta.snapshots}
    return all(str(v) in versions for v in range(oldest, int(meta.properties[VERSION_PROPERTY]) + 1))


# -----------------------------------------------------------------------------------------------
# Metadata evolution


def evolve(meta: TableMetadata, snap: DeltaSnapshot, timestamp_ms: int) -> tuple[MappedSchema, TableMetadata]:
    """The target's metadata with the Delta version's schema, partitioning and version recorded."""
    mapping, config = snap.column_mapping, snap.metadata.configuration
    mapped = map_schema(
        snap.schema,
        mapping,
        config,
        previous=meta.schema(),
        last_column_id=meta.last_column_id,
        format_version=meta.format_version,
    )
    try:
        updated = add_schema(meta, mapped.schema, timestamp_ms=timestamp_ms)
    except ConfigError:
        # An overwrite replaced a column by name with another type: only the name is shared.
        fv = meta.format_version
        last = meta.last_column_id
        mapped = map_schema(snap.schema, mapping, config, last_column_id=last, format_version=fv)
        try:
            updated = add_schema(meta, mapped.schema, timestamp_ms=timestamp_ms)
        except ConfigError as err:
            raise UnsupportedFeatureError(
                f"Delta version {snap.version} changes the schema in a way Iceberg cannot record "
                f"({err.message})"
            ) from err
    updated = add_partition_spec(
        updated, partition_spec(mapped, snap.partition_columns), timestamp_ms=timestamp_ms
    )
    names = mapped.name_mapping
    known = meta.properties.get(NAME_MAPPING_PROPERTY)
    if known:
        # Files of earlier versions keep the names they were written with.
        names = merge_name_mappings(names, parse_name_mapping(known))
    props = {NAME_MAPPING_PROPERTY: name_mapping_to_json(names), VERSION_PROPERTY: str(snap.version)}
    return mapped, set_properties(updated, props, timestamp_ms=timestamp_ms)


def _create_target(
    options: ConvertOptions, plan: ConvertPlan, catalog: Catalog, first: DeltaSnapshot
) -> None:
    mapped = map_schema(
        first.schema, first.column_mapping, first.metadata.configuration, format_version=plan.format_version
    )
    meta = new_table_metadata(
        schema=mapped.schema,
        location=catalog.default_table_location(options.target),
        timestamp_ms=int(time.time() * 1000),
        spec=partition_spec(mapped, first.partition_columns),
        properties={
            "gc.enabled": "false",
            NAME_MAPPING_PROPERTY: name_mapping_to_json(mapped.name_mapping),
            SOURCE_PROPERTY: plan.root,
        },
        format_version=plan.format_version,
    )
    catalog.create_table(options.target, meta)


# -----------------------------------------------------------------------------------------------
# Execution


@dataclass
class _Totals:
    snapshots: int = 0
    data_files: int = 0
    removed_data_files: int = 0
    delete_files: int = 0
    manifests: int = 0
    executors_used: bool = False
    last_snapshot_id: int | None = None


def _states(
    plan: ConvertPlan, options: ConvertOptions, spark: SparkSession | None
) -> Iterator[DeltaSnapshot]:
    engine = "spark" if options.engine == "spark" and spark is not None else "auto"
    if options.history == "all":
        # From the base (when readable) so each version is one commit applied to the one before.
        start = plan.base_version if plan.base_version is not None and not plan.resync else plan.versions[0]
        yield from history(plan.root, start=start, end=plan.latest_version, engine=engine)
        return
    if plan.base_version is not None and not plan.resync:
        yield load_snapshot(plan.root, version=plan.base_version, engine=engine, spark=spark)
    yield load_snapshot(plan.root, version=plan.latest_version, engine=engine, spark=spark)


def _version_change(
    snap: DeltaSnapshot, meta: TableMetadata, now: int, operation: str, **fields: Any
) -> SnapshotChange:
    """The snapshot change recording Delta version ``snap``: its metadata (schema, spec, name
    mapping, converted version) is applied in the same commit, on every attempt's base."""
    current = meta.current_snapshot()
    # Snapshot times follow the Delta commits but never go back, nor past the commit's own clock
    # (Java refuses metadata whose last update precedes its newest snapshot).
    stamp = min(max(snap.timestamp_ms, current.timestamp_ms if current else 0), now)
    return SnapshotChange(
        operation,
        prepare=lambda base, ts: evolve(base, snap, ts)[1],
        snapshot_timestamp_ms=stamp,
        summary=_summary(snap),
        **fields,
    )


@contextmanager
def _deletes_removed_on_failure(deletes: WrittenDeletes, location: str) -> Iterator[None]:
    try:
        yield
    except CommitStateUnknown:
        raise  # the snapshot may be live and reference the delete files: keep them
    except Exception:  # an interrupt may come after the swap: keep them then too
        FileIO.for_location(location).delete_many(list(deletes.paths))
        raise


def _summary(snap: DeltaSnapshot) -> dict[str, str]:
    summary = {
        "tablekeeper.delta-version": str(snap.version),
        "tablekeeper.delta-timestamp-ms": str(snap.timestamp_ms),
    }
    if snap.commit_info is not None and snap.commit_info.operation:
        summary["tablekeeper.delta-operation"] = snap.commit_info.operation
    return summary


def _uses_spark(options: ConvertOptions, files: int, spark: object) -> bool:
    if options.engine == "spark":
        if spark is None:
            raise ConfigError("--engine spark needs a Spark session")
        return True
    return options.engine == "auto" and spark is not None and files > DISTRIBUTE_ABOVE


def _commit_version(
    snap: DeltaSnapshot,
    diff: FileDiff,
    options: ConvertOptions,
    catalog: Catalog,
    spark: SparkSession | None,
    totals: _Totals,
    token: str,
) -> None:
    table = catalog.require(options.target)
    meta = table.metadata
    now = int(time.time() * 1000)
    mapped, preview = evolve(meta, snap, now)
    io = FileIO.for_location(snap.root)
    added = data_files(diff.added, snap, mapped, preview.default_spec_id, io)
    changed = data_files(
        [a for a in diff.dv_changed if a.deletion_vector], snap, mapped, preview.default_spec_id, io
    )
    with_dv = [
        *zip(diff.added, added, strict=True),
        *zip([a for a in diff.dv_changed if a.deletion_vector], changed, strict=True),
    ]
    deletes = delete_files(with_dv, snap.root, io, meta.location, meta.format_version, f"{token}-")
    new_files = [*added, *deletes.files]
    base_change = _version_change(
        snap,
        meta,
        now,
        diff.operation(),
        removed_paths=frozenset(diff.removed),
        removed_deletes_for=frozenset([*diff.removed, *(a.absolute_path for a in diff.dv_changed)]),
    )
    committer = Committer(catalog, options.target, file_prefix=token)
    distributed = _uses_spark(options, len(new_files), spark)
    with _deletes_removed_on_failure(deletes, meta.location):
        if distributed:
            from tablekeeper.spark.manifests import write_manifests_distributed

            assert spark is not None
            snapshot_id = new_snapshot_id()
            written = write_manifests_distributed(
                spark,
                new_files,
                table_location=meta.location,
                format_version=meta.format_version,
                specs=preview.specs_by_id(),
                schema=preview.schema(),
                snapshot_id=snapshot_id,
                name_prefix=f"{token}-",
            )
            change = replace(
                base_change, added_manifests=tuple(written), added_manifests_delta=SummaryDelta.of(new_files)
            )
            result = committer.commit_snapshot(change, snapshot_id=snapshot_id)
            totals.manifests += len(written)
            totals.executors_used = True
        else:
            result = committer.commit_snapshot(replace(base_change, added_files=tuple(new_files)))
            totals.manifests += len({(f.content == DATA, f.spec_id) for f in new_files})
    totals.snapshots += 1
    totals.data_files += len(added)
    totals.removed_data_files += len(diff.removed)
    totals.delete_files += len(deletes.files)
    totals.last_snapshot_id = result.snapshot.snapshot_id if result.snapshot else None
    log.info(
        "Delta version %d committed as snapshot %s (%s)",
        snap.version,
        totals.last_snapshot_id,
        diff.operation(),
    )


def _columns(files: pa.Table) -> pa.Table:
    return files.select(["absolute_path", "dv_id"])


def _distributed_full(plan: ConvertPlan, options: ConvertOptions, spark: SparkSession | None) -> bool:
    """A full, latest-only conversion whose files are built on the executors."""
    if spark is None or options.engine == "driver" or options.history != "latest":
        return False
    if plan.base_version is not None or plan.resync or not plan.versions:
        return False
    if options.engine == "spark":
        return True
    assert plan.latest_segment is not None
    return segment_bytes(plan.latest_segment) > DISTRIBUTE_LOG_BYTES


def _convert_on_executors(
    plan: ConvertPlan,
    options: ConvertOptions,
    catalog: Catalog,
    spark: SparkSession,
    totals: _Totals,
    token: str,
) -> int:
    """The latest version as one snapshot, data files built and their manifests written by the
    executors; returns the bytes the data files hold."""
    from tablekeeper.spark.convert_files import DataFileContext, task_count, write_data_manifests
    from tablekeeper.spark.delta_replay import spark_state

    io = FileIO.for_location(plan.root)
    assert plan.latest_segment is not None
    state = spark_state(spark, plan.root, plan.latest_segment, partitions=task_count(spark))
    snap = state.snapshot_without_files(0)
    snap = replace(snap, timestamp_ms=commit_time(io, snap, plan.log))
    if not catalog.table_exists(options.target):
        _create_target(options, plan, catalog, snap)
    meta = catalog.require(options.target).metadata
    now = int(time.time() * 1000)
    mapped, preview = evolve(meta, snap, now)
    snapshot_id, commit_uuid = new_snapshot_id(), new_commit_uuid(token)
    ctx = DataFileContext(
        struct=snap.schema,
        mapping=snap.column_mapping,
        mapped=mapped,
        partition_columns=snap.partition_columns,
        spec=preview.spec(preview.default_spec_id),
        schema=preview.schema(),
        format_version=meta.format_version,
        table_location=meta.location,
        snapshot_id=snapshot_id,
        commit_uuid=commit_uuid,
    )
    table_io = FileIO.for_location(meta.location)
    live = state.live_files()
    try:
        manifests, counts, with_dv, size = (
            write_data_manifests(live, ctx) if live is not None else ([], SummaryDelta(), [], 0)
        )
    except BaseException:
        # Tasks that finished left manifests behind; they all carry this commit's id.
        staged = [i.location for i in table_io.list(f"{meta.location}/metadata") if commit_uuid in i.location]
        table_io.delete_many(staged)
        raise
    deletes = delete_files(with_dv, plan.root, io, meta.location, meta.format_version, f"{token}-")
    change = _version_change(
        snap,
        meta,
        now,
        "overwrite" if deletes.files else "append",
        added_files=deletes.files,
        added_manifests=tuple(manifests),
        added_manifests_delta=counts,
    )
    with _deletes_removed_on_failure(deletes, meta.location):
        result = Committer(catalog, options.target, file_prefix=token).commit_snapshot(
            change, snapshot_id=snapshot_id
        )
    totals.snapshots += 1
    totals.data_files += counts.added_data_files
    totals.delete_files += len(deletes.files)
    totals.manifests += len(manifests) + (1 if deletes.files else 0)
    totals.executors_used = True
    totals.last_snapshot_id = result.snapshot.snapshot_id if result.snapshot else None
    return size


def execute_convert(
    plan: ConvertPlan, options: ConvertOptions, catalog: Catalog, spark: SparkSession | None = None
) -> dict[str, object]:
    """Convert the planned versions into a staged copy of the target and publish it in one
    catalog operation (``jobs.staging``): readers see the target before or after the run, never
    part of it, and a run that dies leaves files its staging journal names for the next."""
    base = catalog.require(options.target) if plan.target_exists else None
    with staged_run(catalog, options.target, base, JOB) as run:
        metrics = _convert(plan, options, run.table, spark, run.token, run.journal)
    metrics["resumed_journal"] = run.resumed
    return metrics


def _convert(
    plan: ConvertPlan,
    options: ConvertOptions,
    catalog: Catalog,
    spark: SparkSession | None,
    token: str,
    journal: JournalWriter,
) -> dict[str, object]:
    totals = _Totals()
    latest: DeltaSnapshot | None = None
    size: int | None = None
    if _distributed_full(plan, options, spark):
        assert spark is not None
        size = _convert_on_executors(plan, options, catalog, spark, totals, token)
    elif plan.versions:
        previous: pa.Table | None = None
        if plan.resync:
            previous = target_state(catalog.require(options.target))
        wanted = set(plan.versions)
        prev_version: int | None = None
        for snap in _states(plan, options, spark):
            if snap.version not in wanted:
                previous, prev_version = _columns(snap.files), snap.version
                continue
            if not catalog.table_exists(options.target):
                _create_target(options, plan, catalog, snap)
            # Tombstones describe one commit only when this state is one commit after the last.
            stepwise = prev_version is not None and snap.version == prev_version + 1
            diff = diff_files(previous, snap.files, snap.tombstones if stepwise else None)
            _commit_version(snap, diff, options, catalog, spark, totals, token)
            previous, prev_version, latest = _columns(snap.files), snap.version, snap
    return {
        "delta_version": plan.latest_version,
        "from_delta_version": plan.base_version,
        "versions_converted": (plan.latest_version - plan.base_version)
        if plan.base_version is not None
        else len(plan.versions),
        "snapshots_committed": totals.snapshots,
        "snapshot_id": totals.last_snapshot_id,
        "data_files": totals.data_files,
        "data_files_removed": totals.removed_data_files,
        "delete_files": totals.delete_files,
        "manifests": totals.manifests,
        "bytes_referenced": size
        if size is not None
        else (_bytes(latest.files) if latest is not None else None),
        "mode": plan.mode,
        "history": options.history,
        "resynced": plan.resync,
        "note": plan.note,
        "format_version": plan.format_version,
        "manifest_writer": "executors" if totals.executors_used else "driver",
    }


def _bytes(files: pa.Table) -> int:
    sizes: Iterable[int | None] = files.column("size").to_pylist()
    return sum(s or 0 for s in sizes)


def run_convert(options: ConvertOptions, catalog: Catalog, spark: SparkSession | None = None) -> JobResult:
    clock = JobClock()
    if not options.dry_run:
        return clock.result(JOB, options.target, dry_run=False, metrics=_run(options, catalog, spark))
    plan = plan_convert(options, catalog)
    metrics: dict[str, object] = {
        "delta_version": plan.latest_version,
        "from_delta_version": plan.base_version,
        "versions_to_convert": list(plan.versions),
        "mode": plan.mode,
        "resync": plan.resync,
        "note": plan.note,
        "format_version": plan.format_version,
    }
    if plan.versions:
        snap = load_snapshot(plan.root, version=plan.latest_version)
        without_dv = snap.files.column("dv_id").null_count
        metrics |= {
            "data_files": snap.num_files,
            "files_with_deletion_vectors": snap.num_files - without_dv,
            "bytes_referenced": _bytes(snap.files),
            "partition_columns": list(snap.partition_columns),
        }
    return clock.result(JOB, options.target, dry_run=True, metrics=metrics)


def _run(options: ConvertOptions, catalog: Catalog, spark: SparkSession | None) -> dict[str, object]:
    """Plan and convert; a target another writer changed while the run staged is planned again
    (the staged files are removed), up to the table's commit retries."""
    attempt = 0
    while True:
        plan = plan_convert(options, catalog)
        faults.kill_point("plan.done")
        try:
            return execute_convert(plan, options, catalog, spark)
        except CommitFailed as err:
            retries = 0
            if plan.target_exists:
                retries = RetryPolicy.from_metadata(catalog.require(options.target).metadata).num_retries
            if attempt >= retries:
                raise CommitConflict(
                    f"{options.target} kept changing while it was converted ({err.message}); run again"
                ) from err
            log.info("the target moved while staging (%s): converting again", err.message)
            attempt += 1
