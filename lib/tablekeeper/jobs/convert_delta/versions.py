"""convert-delta, one Delta version at a time: options, plan, and the snapshot each version becomes.

A version's snapshot is built from the difference between two Delta states and committed (to the
staged target, ``commit.staged``) together with the schema, spec and ``tablekeeper.delta.version``
it reaches; data files get their metrics from Delta stats, deletion vectors become v3 DVs or v2
position delete files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from tablekeeper import clock
from tablekeeper.catalog import Catalog
from tablekeeper.commit import Committer, SnapshotChange, SummaryDelta
from tablekeeper.commit.added_manifests import added_delta, write_added_manifests
from tablekeeper.delta.diff import FileDiff
from tablekeeper.delta.file_columns import added_files
from tablekeeper.delta.models import AddFile
from tablekeeper.delta.segment import LogEntry, LogSegment
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta.to_iceberg import (
    MappedSchema,
    map_schema,
    partition_spec,
    zoneless_partition_columns,
)
from tablekeeper.delta.values import writer_zone
from tablekeeper.errors import (
    CommitStateUnknown,
    ConfigError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.entry_columns import AddedFiles
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.name_mapping import merge_name_mappings, name_mapping_to_json, parse_name_mapping
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.updates import (
    add_partition_spec,
    add_schema,
    new_snapshot_id,
    new_table_metadata,
    set_properties,
)
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.context import options_from_args
from tablekeeper.jobs.convert_delta.delta_files import WrittenDeletes, data_files, delete_files
from tablekeeper.jobs.convert_delta.lineage import (
    CARRIED,
    FRESH,
    ROW_IDS_PROPERTY,
    Lineage,
    check_files,
    ids_handed_out_elsewhere,
    plan_lineage,
)
from tablekeeper.jobs.convert_delta.rewrite import (
    REWRITTEN_PROPERTY,
    in_live_partitions,
    in_place_unreadable,
    live_paths,
    retyped_ids,
    rewriter_for,
    widened_after,
)
from tablekeeper.jobs.convert_delta.verify import check_mode

log = logging.getLogger(__name__)

# The snapshot summary key naming the Delta version a snapshot holds.
DELTA_VERSION_SUMMARY = "tablekeeper.delta-version"

JOB = "convert-delta"
SOURCE_PROPERTY = "tablekeeper.delta.source"
VERSION_PROPERTY = "tablekeeper.delta.version"
# The --history a full conversion created the target with: with "all", versions missing below
# the oldest snapshot were expired (Delta's VACUUM), not skipped.
HISTORY_PROPERTY = "tablekeeper.delta.history"
# The writer's zone a target's zone-less timestamp partition values were read in (absent: UTC):
# fixed by the first conversion, so later runs cannot mix two readings of the same values.
ZONE_PROPERTY = "tablekeeper.delta.partition-timezone"
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
DISTRIBUTE_ABOVE = 50_000


@dataclass(frozen=True)
class ConvertDeltaOptions:
    source: str
    target: str
    mode: str = "full"
    history: str = "latest"
    format_version: int = 2
    dry_run: bool = False
    # driver: manifests written by this process; spark: by the executors; auto: spark above
    # DISTRIBUTE_ABOVE files when a session is at hand.
    engine: str = "auto"
    # off, metadata (live rows per partition from both sides' metadata, every version) or rows
    # (also counted through Spark on both sides).
    verify: str = "off"
    catalog: str | None = None
    # The IANA zone of the Spark session that wrote zone-less timestamp partition values (Delta's
    # log does not record it); None: read them as UTC, and say so in the result.
    partition_timezone: str | None = None
    # The catalogs file's default for it (delta-partition-timezone), for a target not yet converted.
    default_partition_timezone: str | None = None
    # Rewrite into the target the data files Iceberg readers could not read (files without
    # nested field ids, columns widened beyond Iceberg's promotions); without it they are refused.
    rewrite_unreadable_files: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ConvertDeltaOptions:
        # The catalogs file's default is set when the job runs (jobs.convert_delta.run).
        return options_from_args(cls, args, internal=("default_partition_timezone",))

    def __post_init__(self) -> None:
        check_mode(self.verify)
        if self.mode not in ("full", "incremental"):
            raise ConfigError(f"--mode {self.mode!r} is not full or incremental")
        if self.history not in ("latest", "all"):
            raise ConfigError(f"--history {self.history!r} is not latest or all")
        if self.engine not in ("auto", "driver", "spark"):
            raise ConfigError(f"--engine {self.engine!r} is not auto, driver or spark")
        if self.format_version not in (2, 3):
            raise ConfigError(f"--format-version {self.format_version} is not 2 or 3")
        for zone in (self.partition_timezone, self.default_partition_timezone):
            if zone is not None:
                writer_zone(zone)

    @property
    def partition_zone(self) -> dt.tzinfo | None:
        return None if self.partition_timezone is None else writer_zone(self.partition_timezone)


def with_partition_zone(options: ConvertDeltaOptions, target: TableMetadata | None) -> ConvertDeltaOptions:
    """The options with the zone this run reads zone-less timestamp partition values in: a
    converted target's own (the one its first conversion used, absent: UTC), which a stated zone
    must match; for a new target the stated zone, else the catalog's default, else none (UTC)."""
    stated = options.partition_timezone
    if target is not None and VERSION_PROPERTY in target.properties:
        recorded = target.properties.get(ZONE_PROPERTY)
        if stated is not None and stated != recorded:
            was = f"--partition-timezone {recorded}" if recorded else "no --partition-timezone (UTC)"
            raise ConfigError(
                f"target {options.target} was converted with {was}: run with that zone, or convert "
                f"into a new target to read the partition values in {stated}"
            )
        return replace(options, partition_timezone=recorded)
    if stated is None:
        return replace(options, partition_timezone=options.default_partition_timezone)
    return options


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


# -----------------------------------------------------------------------------------------------
# Metadata evolution


def evolve(
    meta: TableMetadata, snap: DeltaSnapshot, timestamp_ms: int, rewrite: bool = False
) -> tuple[MappedSchema, TableMetadata]:
    """The target's metadata with the Delta version's schema, partitioning and version recorded;
    ``rewrite``: columns some files hold unreadably are allowed (those files get rewritten)."""
    mapping, config = snap.column_mapping, snap.metadata.configuration
    known = meta.properties.get(NAME_MAPPING_PROPERTY)
    mapped = map_schema(
        snap.schema,
        mapping,
        config,
        previous=meta.schema(),
        previous_names=parse_name_mapping(known) if known else None,
        last_column_id=meta.last_column_id,
        format_version=meta.format_version,
        rewrite_unreadable=rewrite,
    )
    # A column widened beyond Iceberg's promotions keeps its id: every file the new schema reads
    # holding the old type is rewritten (convert_rewrite), and older snapshots keep their schema.
    try:
        updated = add_schema(meta, mapped.schema, timestamp_ms=timestamp_ms, retyped=retyped_ids(mapped))
    except ConfigError:
        # An overwrite replaced a column by name with another type: only the name is shared.
        fv = meta.format_version
        last = meta.last_column_id
        mapped = map_schema(
            snap.schema, mapping, config, last_column_id=last, format_version=fv, rewrite_unreadable=rewrite
        )
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
    if known:
        # Files of earlier versions keep the names they were written with: dropped columns'.
        # Under column mapping a column's one name in any file is its physical name, so the
        # names a target written before listed beside it (logical ones) are not carried on.
        names = merge_name_mappings(names, parse_name_mapping(known), keep_former_names=not mapping.enabled)
    props = {NAME_MAPPING_PROPERTY: name_mapping_to_json(names), VERSION_PROPERTY: str(snap.version)}
    return mapped, set_properties(updated, props, timestamp_ms=timestamp_ms)


def create_target(
    options: ConvertDeltaOptions, plan: ConvertPlan, catalog: Catalog, first: DeltaSnapshot
) -> None:
    mapped = map_schema(
        first.schema,
        first.column_mapping,
        first.metadata.configuration,
        format_version=plan.format_version,
        rewrite_unreadable=options.rewrite_unreadable_files,
    )
    meta = new_table_metadata(
        schema=mapped.schema,
        location=catalog.default_table_location(options.target),
        timestamp_ms=clock.now_ms(),
        spec=partition_spec(mapped, first.partition_columns),
        properties={
            "gc.enabled": "false",
            NAME_MAPPING_PROPERTY: name_mapping_to_json(mapped.name_mapping),
            SOURCE_PROPERTY: plan.root,
            HISTORY_PROPERTY: options.history,
            **({ZONE_PROPERTY: options.partition_timezone} if options.partition_timezone else {}),
        },
        format_version=plan.format_version,
    )
    catalog.create_table(options.target, meta)


# -----------------------------------------------------------------------------------------------
# Execution


@dataclass
class Totals:
    snapshots: int = 0
    data_files: int = 0
    removed_data_files: int = 0
    delete_files: int = 0
    manifests: int = 0
    executors_used: bool = False
    last_snapshot_id: int | None = None
    lineage: Lineage | None = None  # the last version's
    # Timestamp partition columns with zone-less values read as UTC because no zone was stated.
    zoneless: set[str] = field(default_factory=set)
    # Data files rewritten for Iceberg readers, and the files the run wrote for them.
    rewritten: int = 0
    created: list[str] = field(default_factory=list)


def version_change(
    snap: DeltaSnapshot,
    meta: TableMetadata,
    now: int,
    operation: str,
    lineage: Lineage | None = None,
    rewrite: bool = False,
    extra_properties: Mapping[str, str] | None = None,
    **fields: Any,
) -> SnapshotChange:
    """The snapshot change recording Delta version ``snap``: its metadata (schema, spec, name
    mapping, converted version, how row ids are assigned, ``extra_properties``) is applied in the
    same commit, on every attempt's base. Files carrying Delta's row ids need ``lineage``'s
    sequence numbers and next-row-id (``fields`` has their own sequence numbers). ``rewrite``:
    as ``evolve``'s."""
    properties: dict[str, str] = dict(extra_properties or {})
    if lineage is not None:
        properties[ROW_IDS_PROPERTY] = CARRIED if lineage.carry else FRESH
        if lineage.carry and lineage.high_water_mark is not None:
            fields |= {
                "sequence_number_at_least": snap.version,
                "next_row_id_at_least": lineage.high_water_mark + 1,
            }

    def prepare(base: TableMetadata, ts: int) -> TableMetadata:
        evolved = evolve(base, snap, ts, rewrite)[1]
        return set_properties(evolved, properties, timestamp_ms=ts) if properties else evolved

    current = meta.current_snapshot()
    # Snapshot times follow the Delta commits but never go back, nor past the commit's own clock
    # (Java refuses metadata whose last update precedes its newest snapshot).
    stamp = min(max(snap.timestamp_ms, current.timestamp_ms if current else 0), now)
    return SnapshotChange(
        operation,
        prepare=prepare,
        snapshot_timestamp_ms=stamp,
        summary=_summary(snap),
        **fields,
    )


@contextmanager
def deletes_removed_on_failure(deletes: WrittenDeletes, location: str) -> Iterator[None]:
    try:
        yield
    except CommitStateUnknown:
        raise  # the snapshot may be live and reference the delete files: keep them
    except Exception:  # an interrupt may come after the swap: keep them then too
        FileIO.for_location(location).delete_many(list(deletes.paths))
        raise


def _summary(snap: DeltaSnapshot) -> dict[str, str]:
    summary = {
        DELTA_VERSION_SUMMARY: str(snap.version),
        "tablekeeper.delta-timestamp-ms": str(snap.timestamp_ms),
    }
    if snap.commit_info is not None and snap.commit_info.operation:
        summary["tablekeeper.delta-operation"] = snap.commit_info.operation
    return summary


def uses_spark(options: ConvertDeltaOptions, files: int, spark: object) -> bool:
    if options.engine == "spark":
        if spark is None:
            raise ConfigError("--engine spark needs a Spark session")
        return True
    return options.engine == "auto" and spark is not None and files > DISTRIBUTE_ABOVE


def commit_version(
    snap: DeltaSnapshot,
    diff: FileDiff,
    options: ConvertDeltaOptions,
    catalog: Catalog,
    spark: SparkSession | None,
    totals: Totals,
    token: str,
    entries: Sequence[LogEntry] = (),
) -> None:
    table = catalog.require(options.target)
    meta = table.metadata
    now = clock.now_ms()
    rewrite = options.rewrite_unreadable_files
    mapped, preview = evolve(meta, snap, now, rewrite)
    rewriter = rewriter_for(meta, preview, mapped, snap.column_mapping.mode == "id", totals.created)
    io = FileIO.for_location(snap.root)
    # Files converted in place before a column was widened: rewritten, replacing the originals.
    redo: list[tuple[AddFile, DataFile]] = []
    if rewriter is not None and (why := widened_after(meta, mapped)):
        redo = in_place_unreadable(table, snap, rewriter, io, diff.removed, why[0])
    redone = {a.absolute_path for a, _ in redo}  # Delta paths; the target's files go
    foreign = ids_handed_out_elsewhere(meta, lambda s: DELTA_VERSION_SUMMARY in s.summary)
    lineage = plan_lineage(
        snap, meta.properties, bool(meta.snapshots), meta.format_version, foreign_ids=foreign
    )
    zone = options.partition_zone
    if zone is None:
        totals.zoneless.update(zoneless_columns(snap, diff.added_rows))
    # Delta files this version removes or changes the DV of, as the target references them.
    # Their deletes come from their Delta adds as of this version, like a new file's.
    dv_changed = [a for a in diff.dv_changed if a.absolute_path not in redone]
    live = live_paths(table, [*diff.removed, *(a.absolute_path for a in dv_changed)])
    removed = frozenset([*(live[p] for p in diff.removed), *(f.file_path for _, f in redo)])
    if rewriter is None and not diff.dv_changed and (lineage is None or not lineage.carry):
        files = added_files(
            diff.added_rows, snap.schema, snap.column_mapping, mapped, snap.partition_columns, zone
        )
        if files is not None:
            done = _commit_columns(
                snap, diff, files, lineage, catalog, options.target, token, (meta, preview), now, removed
            )
            if done is not None:
                totals.lineage = lineage
                totals.manifests += done[1]
                _counted(totals, snap, diff, files.num_files, 0, done[0])
                return
    added = data_files(diff.added, snap, mapped, preview.default_spec_id, io, zone)
    lineage = check_files(lineage, io, snap.root, entries, diff.added)
    before = totals.rewritten
    adds = list(diff.added)
    if rewriter is not None:
        added = rewriter.rewrite_unreadable(io, list(zip(diff.added, added, strict=True)))
        added += [rewriter.rewrite(io, a, f) for a, f in redo]
        adds += [a for a, _ in redo]
        totals.rewritten += rewriter.rewritten
        if rewriter.rewritten and lineage is not None and lineage.carry and lineage.materialized:
            # Delta's materialized row ids stay in the Delta files, not in their rewrites.
            lineage = Lineage(False, "data files were rewritten for Iceberg readers")
    own_sequence_numbers: dict[str, int] = {}
    if lineage is not None and lineage.carry:
        added = [replace(f, first_row_id=a.base_row_id) for a, f in zip(adds, added, strict=True)]
        own_sequence_numbers = {
            f.file_path: int(a.default_row_commit_version or 0) for a, f in zip(adds, added, strict=True)
        }
    totals.lineage = lineage
    with_new_dv = [a for a in dv_changed if a.deletion_vector]
    changed = in_live_partitions(
        table,
        [
            replace(f, file_path=live[f.file_path])
            for f in data_files(with_new_dv, snap, mapped, preview.default_spec_id, io, zone)
        ],
        preview.default_spec_id,
    )
    with_dv = [*zip(adds, added, strict=True), *zip(with_new_dv, changed, strict=True)]
    deletes = delete_files(with_dv, snap.root, io, meta.location, meta.format_version, f"{token}-")
    new_files = [*added, *deletes.files]
    operation = diff.operation()
    if redo and operation == "append":
        operation = "overwrite"  # files are replaced too (by their rewrites: no row changes)
    base_change = version_change(
        snap,
        meta,
        now,
        operation,
        lineage,
        rewrite,
        {REWRITTEN_PROPERTY: "true"} if totals.rewritten > before else None,
        data_sequence_numbers=own_sequence_numbers,
        removed_paths=removed,
        removed_deletes_for=frozenset([*removed, *(live[a.absolute_path] for a in dv_changed)]),
    )
    committer = Committer(catalog, options.target, file_prefix=token)
    distributed = uses_spark(options, len(new_files), spark)
    with deletes_removed_on_failure(deletes, meta.location):
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
                data_sequence_numbers=own_sequence_numbers,
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
    _counted(
        totals,
        snap,
        diff,
        len(added),
        len(deletes.files),
        result.snapshot.snapshot_id if result.snapshot else None,
    )


def _counted(
    totals: Totals, snap: DeltaSnapshot, diff: FileDiff, data: int, deletes: int, result_id: int | None
) -> None:
    totals.snapshots += 1
    totals.data_files += data
    totals.removed_data_files += len(diff.removed)
    totals.delete_files += deletes
    totals.last_snapshot_id = result_id
    log.info("Delta version %d committed as snapshot %s (%s)", snap.version, result_id, diff.operation())


def _commit_columns(
    snap: DeltaSnapshot,
    diff: FileDiff,
    files: AddedFiles,
    lineage: Lineage | None,
    catalog: Catalog,
    target: str,
    token: str,
    metadata: tuple[TableMetadata, TableMetadata],
    now: int,
    removed: frozenset[str],
) -> tuple[int, int] | None:
    """Commit a version whose new files came out as columns (no DVs, no carried row ids): their
    manifests are encoded from the columns, then committed like manifests written elsewhere.
    Returns the snapshot id and the number of manifests written, or ``None`` (nothing written or
    committed) when the entries need the per-entry writer. ``metadata``: the target's as loaded
    for this version, and its preview with the version's schema and spec."""
    meta, preview = metadata
    spec = preview.specs_by_id()[preview.default_spec_id]
    snapshot_id = new_snapshot_id()
    written = write_added_manifests(
        files,
        location=meta.location,
        format_version=meta.format_version,
        spec=spec,
        schema=preview.schema(),
        snapshot_id=snapshot_id,
        name_prefix=f"{token}-",
    )
    if written is None:
        return None  # the entries need the per-entry writer
    used = np.unique(files.partition_index)
    change = replace(
        version_change(
            snap,
            meta,
            now,
            diff.operation(),
            lineage,
            removed_paths=removed,
            removed_deletes_for=removed,
        ),
        added_manifests=tuple(written),
        added_manifests_delta=added_delta(files, written),
        added_manifests_partitions=frozenset(
            (spec.spec_id, partition_key(files.partitions[int(i)])) for i in used
        ),
    )
    result = Committer(catalog, target, file_prefix=token).commit_snapshot(change, snapshot_id=snapshot_id)
    return (result.snapshot.snapshot_id if result.snapshot else snapshot_id), len(written)


def zoneless_columns(snap: DeltaSnapshot, files: pa.Table) -> tuple[str, ...]:
    """The timestamp partition columns (logical names) with zone-less values among ``files``."""
    if "partition_values" not in files.column_names:
        return ()
    values = files.column("partition_values")
    return zoneless_partition_columns(values, snap.schema, snap.column_mapping, snap.partition_columns)


def assumed_zone(columns: Iterable[str]) -> str | None:
    """What the result says when zone-less timestamp partition values were read as UTC."""
    names = sorted(set(columns))
    if not names:
        return None
    return (
        f"UTC: timestamp partition column(s) {', '.join(names)} hold values without a zone, which "
        "Delta writes in the writer's Spark session zone and does not record; they were read as UTC. "
        "If that session ran in another zone, convert again with --partition-timezone <IANA zone> "
        "(or the catalog's delta-partition-timezone): --verify cannot see a shifted value"
    )


def columns(files: pa.Table) -> pa.Table:
    return files.select(["absolute_path", "dv_id"])
