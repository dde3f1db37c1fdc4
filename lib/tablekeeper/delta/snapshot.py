"""A Delta table's state at one version: protocol, metadata, live files (columnar) and more."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.delta.models import (
    AddFile,
    CommitInfo,
    DeletionVector,
    DomainMetadata,
    Metadata,
    Protocol,
    Txn,
)
from tablekeeper.delta.reconcile import Reconciled
from tablekeeper.delta.replay import NonFileState
from tablekeeper.delta.schema import ColumnMapping, DeltaStruct, column_mapping
from tablekeeper.delta.segment import LogSegment
from tablekeeper.errors import CorruptMetadataError


@dataclass(frozen=True, eq=False)
class DeltaSnapshot:
    root: str
    version: int
    protocol: Protocol
    metadata: Metadata
    files: pa.Table  # live adds, one row per logical file
    tombstones: pa.Table
    timestamp_ms: int
    txns: Mapping[str, Txn] = field(default_factory=dict)
    domains: Mapping[str, DomainMetadata] = field(default_factory=dict)
    commit_info: CommitInfo | None = None
    checkpoint_version: int | None = None
    engine: str = "pure"
    notes: tuple[str, ...] = ()  # how the state was rebuilt when the log needed a detour
    # Files and tombstones of some paths only (``restricted``): never the table's whole state.
    partial: bool = False

    @property
    def schema(self) -> DeltaStruct:
        return self.metadata.schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @property
    def column_mapping(self) -> ColumnMapping:
        return column_mapping(self.metadata.configuration, self.protocol.supports("columnMapping"))

    @property
    def row_tracking(self) -> RowTracking:
        return row_tracking(self)

    @property
    def num_files(self) -> int:
        return int(self.files.num_rows)

    def file_keys(self) -> frozenset[tuple[str, str | None]]:
        """(absolute decoded path, DV unique id) of every live file: the protocol's file identity."""
        paths = self.files.column("absolute_path").to_pylist()
        dvs = self.files.column("dv_id").to_pylist()
        return frozenset(zip(paths, dvs, strict=True))

    def add_files(self) -> Iterator[AddFile]:
        return add_files_of(self.files)

    def restricted(self, paths: Sequence[str]) -> DeltaSnapshot:
        """This state's live files and tombstones of the given absolute paths only (all the
        rest is the same): what a caller needs that knows which files it asks about."""
        wanted = pa.array(paths, pa.string())

        def keep(table: pa.Table) -> pa.Table:
            return table.filter(pc.is_in(table.column("absolute_path"), value_set=wanted))

        return replace(self, files=keep(self.files), tombstones=keep(self.tombstones), partial=True)


def add_files_of(files: pa.Table) -> Iterator[AddFile]:
    """Rows of a live-files table as AddFile models, a batch at a time."""
    for batch in files.to_batches(max_chunksize=65_536):
        for row in batch.to_pylist():
            yield _add_file(row)


def _pairs(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    return dict(value)


def add_file_from_row(row: Mapping[str, Any]) -> AddFile:
    """One live-files row (as a dict: Arrow ``to_pylist`` or Spark ``asDict``) as an AddFile."""
    return _add_file(row)


def _add_file(row: Mapping[str, Any]) -> AddFile:
    dv = row.get("dv")
    return AddFile(
        path=row["path"],
        absolute_path=row["absolute_path"],
        partition_values=_pairs(row.get("partition_values")) or {},
        size=int(row.get("size") or 0),
        modification_time=int(row.get("modification_time") or 0),
        data_change=bool(row.get("data_change")),
        # Checkpoints may carry only the typed stats_parsed column.
        stats=row.get("stats")
        or (_stats_json_from_parsed(row["stats_parsed"]) if row.get("stats_parsed") else None),
        tags=_pairs(row.get("tags")),
        deletion_vector=None
        if dv is None
        else DeletionVector(
            storage_type=dv["storageType"],
            path_or_inline_dv=dv["pathOrInlineDv"],
            size_in_bytes=int(dv["sizeInBytes"]),
            cardinality=int(dv["cardinality"]),
            offset=dv.get("offset"),
        ),
        base_row_id=row.get("base_row_id"),
        default_row_commit_version=row.get("default_row_commit_version"),
        clustering_provider=row.get("clustering_provider"),
    )


@dataclass(frozen=True)
class RowTracking:
    """Delta row tracking as the snapshot declares it (for v3 row lineage on conversion)."""

    supported: bool
    enabled: bool
    suspended: bool
    materialized_row_id_column: str | None
    materialized_row_commit_version_column: str | None
    high_water_mark: int | None


def row_tracking(snapshot: DeltaSnapshot) -> RowTracking:
    config = snapshot.metadata.configuration
    domain = snapshot.domains.get("delta.rowTracking")
    mark: int | None = None
    if domain is not None:
        try:
            value = orjson.loads(domain.configuration).get("rowIdHighWaterMark")
            mark = None if value is None else int(value)
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            mark = None
    return RowTracking(
        supported=snapshot.protocol.supports("rowTracking"),
        enabled=config.get("delta.enableRowTracking", "false").lower() == "true",
        suspended=config.get("delta.rowTrackingSuspended", "false").lower() == "true",
        materialized_row_id_column=config.get("delta.rowTracking.materializedRowIdColumnName"),
        materialized_row_commit_version_column=config.get(
            "delta.rowTracking.materializedRowCommitVersionColumnName"
        ),
        high_water_mark=mark,
    )


def _stats_json_from_parsed(parsed: Mapping[str, Any]) -> str:
    """``stats_parsed`` (typed, from a checkpoint) in the JSON form ``add.stats`` has."""

    def default(value: Any) -> Any:
        if isinstance(value, dt.datetime):
            return value.isoformat()
        if isinstance(value, dt.date):
            return value.isoformat()
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, bytes):
            return None
        raise TypeError(type(value).__name__)

    return orjson.dumps(dict(parsed), default=default).decode("utf-8")


def snapshot_from_replay(
    root: str, segment: LogSegment, state: NonFileState, reconciled: Reconciled, engine: str
) -> DeltaSnapshot:
    """The snapshot both replay engines build from their reconciled state (timestamp set later)."""
    if state.protocol is None or state.metadata is None:
        missing = "protocol" if state.protocol is None else "metaData"
        raise CorruptMetadataError(f"{root}: the log up to version {segment.version} has no {missing} action")
    return DeltaSnapshot(
        root=root,
        version=segment.version,
        protocol=state.protocol,
        metadata=state.metadata,
        files=reconciled.files,
        tombstones=reconciled.tombstones,
        timestamp_ms=0,
        txns=dict(state.txns),
        domains=dict(state.domains),
        commit_info=state.commit_infos.get(segment.version),
        checkpoint_version=segment.checkpoint.version if segment.checkpoint else None,
        engine=engine,
    )
