"""Pure metadata transitions: new tables, new snapshots, refs, properties, upgrades.

Every function takes the base metadata and returns new metadata; the caller supplies time and ids
(the format layer never reads the clock).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace

from tablekeeper.errors import CommitConflict, ConfigError, UnsupportedFeatureError
from tablekeeper.iceberg.metadata import (
    MAIN_BRANCH,
    MIN_ROW_LINEAGE_VERSION,
    MetadataLogEntry,
    PartitionStatisticsFile,
    Snapshot,
    SnapshotLogEntry,
    SnapshotRef,
    StatisticsFile,
    TableMetadata,
    validate,
)
from tablekeeper.iceberg.partitioning import UNPARTITIONED, UNSORTED, PartitionSpec, SortOrder
from tablekeeper.iceberg.transforms import parse_transform
from tablekeeper.iceberg.types import Schema, check_evolution, clashing_names

DEFAULT_PREVIOUS_VERSIONS_MAX = 100


def new_snapshot_id() -> int:
    # Java's recipe: XOR the halves of a random UUID, keep it positive.
    u = uuid.uuid4().int
    return ((u >> 64) ^ (u & 0xFFFFFFFFFFFFFFFF)) & 0x7FFFFFFFFFFFFFFF


def new_table_metadata(
    *,
    schema: Schema,
    location: str,
    timestamp_ms: int,
    spec: PartitionSpec = UNPARTITIONED,
    sort_order: SortOrder = UNSORTED,
    properties: Mapping[str, str] | None = None,
    format_version: int = 2,
    table_uuid: str | None = None,
) -> TableMetadata:
    if format_version not in (1, 2, 3):
        raise UnsupportedFeatureError(f"cannot create a format version {format_version} table: use 1, 2 or 3")
    _refuse_clashing_names(schema)
    props = {"write.parquet.compression-codec": "zstd", **(properties or {})}
    meta = TableMetadata(
        format_version=format_version,
        table_uuid=table_uuid or str(uuid.uuid4()),
        location=location.rstrip("/"),
        last_updated_ms=timestamp_ms,
        last_column_id=schema.highest_field_id(),
        schemas=(replace(schema, schema_id=0),),
        current_schema_id=0,
        partition_specs=(replace(spec, spec_id=0),),
        default_spec_id=0,
        last_partition_id=spec.last_assigned_field_id(),
        sort_orders=(sort_order,) if sort_order.is_unsorted else (UNSORTED, sort_order),
        default_sort_order_id=sort_order.order_id,
        last_sequence_number=0,
        properties=props,
        next_row_id=0 if format_version >= MIN_ROW_LINEAGE_VERSION else None,
    )
    validate(meta)
    return meta


def add_snapshot(
    meta: TableMetadata, snapshot: Snapshot, *, branch: str = MAIN_BRANCH, timestamp_ms: int
) -> TableMetadata:
    """Add a snapshot and move ``branch`` to it, with Java's sequence and row-id bookkeeping."""
    if meta.snapshot(snapshot.snapshot_id) is not None:
        raise ValueError(f"snapshot {snapshot.snapshot_id} already exists")
    if (
        meta.format_version > 1
        and snapshot.parent_snapshot_id is not None
        and snapshot.sequence_number <= meta.last_sequence_number
    ):
        raise ValueError("a new snapshot's sequence number must exceed last-sequence-number")
    next_row_id = meta.next_row_id
    if meta.format_version >= MIN_ROW_LINEAGE_VERSION:
        if snapshot.first_row_id is None or snapshot.added_rows is None:
            raise ValueError("v3 snapshots need first-row-id and added-rows")
        if snapshot.first_row_id < (meta.next_row_id or 0):
            raise ValueError("snapshot first-row-id is below the table's next-row-id")
        next_row_id = (meta.next_row_id or 0) + snapshot.added_rows
    refs = dict(meta.refs)
    old = refs.get(branch)
    if old is not None and not old.is_branch:
        raise ConfigError(f"{branch!r} is a tag, not a branch: commit to a branch")
    refs[branch] = (
        replace(old, snapshot_id=snapshot.snapshot_id) if old else SnapshotRef(snapshot.snapshot_id, "branch")
    )
    is_main = branch == MAIN_BRANCH
    updated = replace(
        meta,
        snapshots=(*meta.snapshots, snapshot),
        refs=refs,
        current_snapshot_id=snapshot.snapshot_id if is_main else meta.current_snapshot_id,
        snapshot_log=(
            (*meta.snapshot_log, SnapshotLogEntry(snapshot.timestamp_ms, snapshot.snapshot_id))
            if is_main
            else meta.snapshot_log
        ),
        last_sequence_number=max(meta.last_sequence_number, snapshot.sequence_number),
        last_updated_ms=max(timestamp_ms, meta.last_updated_ms),
        next_row_id=next_row_id,
    )
    validate(updated)
    return updated


def set_ref(meta: TableMetadata, name: str, ref: SnapshotRef, *, timestamp_ms: int) -> TableMetadata:
    if meta.snapshot(ref.snapshot_id) is None:
        raise ConfigError(f"snapshot {ref.snapshot_id} does not exist: pick one from the table's snapshots")
    if name == MAIN_BRANCH and not ref.is_branch:
        raise ConfigError("main must be a branch")
    refs = {**meta.refs, name: ref}
    changes: dict[str, object] = {"refs": refs, "last_updated_ms": max(timestamp_ms, meta.last_updated_ms)}
    if name == MAIN_BRANCH:
        changes["current_snapshot_id"] = ref.snapshot_id
        changes["snapshot_log"] = (*meta.snapshot_log, SnapshotLogEntry(timestamp_ms, ref.snapshot_id))
    updated = replace(meta, **changes)  # type: ignore[arg-type]
    validate(updated)
    return updated


def set_properties(
    meta: TableMetadata, updates: Mapping[str, str], removals: tuple[str, ...] = (), *, timestamp_ms: int
) -> TableMetadata:
    props = {k: v for k, v in meta.properties.items() if k not in removals}
    props.update(updates)
    return replace(meta, properties=props, last_updated_ms=max(timestamp_ms, meta.last_updated_ms))


def set_statistics(meta: TableMetadata, stats: StatisticsFile, *, timestamp_ms: int) -> TableMetadata:
    """Java's ``UpdateStatistics.setStatistics``: one statistics file per snapshot, a new one
    replacing the old in place (the old file is then unreferenced)."""
    if meta.snapshot(stats.snapshot_id) is None:
        # Expired by a concurrent commit after the sketches were computed.
        raise CommitConflict(
            f"snapshot {stats.snapshot_id} is no longer in the table: it was expired while its "
            "statistics were computed; run again"
        )
    kept = [s for s in meta.statistics if s.snapshot_id != stats.snapshot_id]
    at = next((i for i, s in enumerate(meta.statistics) if s.snapshot_id == stats.snapshot_id), len(kept))
    return replace(
        meta,
        statistics=(*kept[:at], stats, *kept[at:]),
        last_updated_ms=max(timestamp_ms, meta.last_updated_ms),
    )


def set_partition_statistics(
    meta: TableMetadata, stats: PartitionStatisticsFile, *, timestamp_ms: int
) -> TableMetadata:
    """Java's ``UpdatePartitionStatistics.setPartitionStatistics``: one partition statistics file
    per snapshot, a new one replacing the old in place (the old file is then unreferenced)."""
    if meta.snapshot(stats.snapshot_id) is None:
        raise CommitConflict(
            f"snapshot {stats.snapshot_id} is no longer in the table: it was expired while its "
            "partition statistics were computed; run again"
        )
    kept = [s for s in meta.partition_statistics if s.snapshot_id != stats.snapshot_id]
    at = next(
        (i for i, s in enumerate(meta.partition_statistics) if s.snapshot_id == stats.snapshot_id), len(kept)
    )
    return replace(
        meta,
        partition_statistics=(*kept[:at], stats, *kept[at:]),
        last_updated_ms=max(timestamp_ms, meta.last_updated_ms),
    )


def upgrade_format_version(meta: TableMetadata, target: int, *, timestamp_ms: int) -> TableMetadata:
    if target < meta.format_version:
        raise ConfigError(f"cannot downgrade format version {meta.format_version} to {target}")
    if target > 3:
        raise UnsupportedFeatureError(f"format version {target} is not supported: use 3 or lower")
    if target == meta.format_version:
        return meta
    return replace(
        meta,
        format_version=target,
        # Upgrading to v3 starts row-id assignment at 0; old snapshots keep null first-row-id.
        next_row_id=0 if target >= MIN_ROW_LINEAGE_VERSION else None,
        last_updated_ms=max(timestamp_ms, meta.last_updated_ms),
    )


def with_previous_metadata(meta: TableMetadata, base: TableMetadata, base_location: str) -> TableMetadata:
    """Record the file being replaced in metadata-log, trimmed to previous-versions-max."""
    # The new metadata's properties count: a commit lowering the limit trims at once (as Java).
    limit = max(1, meta.property_int("write.metadata.previous-versions-max", DEFAULT_PREVIOUS_VERSIONS_MAX))
    log = (*base.metadata_log, MetadataLogEntry(base.last_updated_ms, base_location))
    return replace(meta, metadata_log=log[-limit:])


def _refuse_clashing_names(schema: Schema) -> None:
    clashes = clashing_names(schema)
    if clashes:
        raise UnsupportedFeatureError(
            f"two fields would share the full name {clashes[0]!r} (a column whose name holds a dot "
            "beside a struct and its field): Iceberg readers cannot index such a schema; rename one"
        )


def add_schema(
    meta: TableMetadata,
    schema: Schema,
    *,
    timestamp_ms: int,
    set_current: bool = True,
    retyped: frozenset[int] = frozenset(),
) -> TableMetadata:
    """Evolve the schema: field ids keep compatible types (Iceberg's promotions), new ids only
    grow; ``retyped``: as ``check_evolution``'s."""
    problems = check_evolution(meta.schema(), schema, meta.format_version, retyped)
    if problems:
        raise ConfigError(f"schema change refused: {problems[0]}")
    _refuse_clashing_names(schema)
    existing = next((s for s in meta.schemas if s.fields == schema.fields), None)
    if existing is None:
        existing = replace(schema, schema_id=max(s.schema_id for s in meta.schemas) + 1)
        schemas = (*meta.schemas, existing)
    else:
        schemas = meta.schemas
    updated = replace(
        meta,
        schemas=schemas,
        current_schema_id=existing.schema_id if set_current else meta.current_schema_id,
        last_column_id=max(meta.last_column_id, existing.highest_field_id()),
        last_updated_ms=max(timestamp_ms, meta.last_updated_ms),
    )
    validate(updated)
    return updated


def add_partition_spec(
    meta: TableMetadata, spec: PartitionSpec, *, timestamp_ms: int, set_default: bool = True
) -> TableMetadata:
    """Evolve partitioning: an equivalent existing spec is reused; new fields get fresh field ids."""
    schema = meta.schema()
    for f in spec.fields:
        source = schema.find_type(f.source_id)
        if source is None:
            raise ConfigError(f"partition field {f.name!r} names source id {f.source_id}, not in the schema")
        if not parse_transform(f.transform).can_transform(source):
            raise ConfigError(f"transform {f.transform} cannot apply to {f.name!r} of type {source}")
    existing = next((s for s in meta.partition_specs if s.compatible_with(spec)), None)
    if existing is None:
        # Field ids are unique across a table's specs (v2): reuse the id of an identical field, else
        # take the next free one.
        known = {(f.source_id, f.transform): f.field_id for s in meta.partition_specs for f in s.fields}
        next_id = meta.last_partition_id + 1
        fields = []
        for f in spec.fields:
            fid = known.get((f.source_id, f.transform))
            if fid is None:
                fid, next_id = next_id, next_id + 1
            fields.append(replace(f, field_id=fid))
        existing = PartitionSpec(max(s.spec_id for s in meta.partition_specs) + 1, tuple(fields))
        specs = (*meta.partition_specs, existing)
    else:
        specs = meta.partition_specs
    updated = replace(
        meta,
        partition_specs=specs,
        default_spec_id=existing.spec_id if set_default else meta.default_spec_id,
        last_partition_id=max(meta.last_partition_id, existing.last_assigned_field_id()),
        last_updated_ms=max(timestamp_ms, meta.last_updated_ms),
    )
    validate(updated)
    return updated
