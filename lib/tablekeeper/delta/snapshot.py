"""A Delta table's state at one version: protocol, metadata, live files (columnar) and more."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tablekeeper.delta.models import (
    AddFile,
    CommitInfo,
    DeletionVector,
    DomainMetadata,
    Metadata,
    Protocol,
    Txn,
)
from tablekeeper.delta.schema import ColumnMapping, DeltaStruct, column_mapping


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
    def num_files(self) -> int:
        return int(self.files.num_rows)

    def file_keys(self) -> frozenset[tuple[str, str | None]]:
        """(absolute decoded path, DV unique id) of every live file: the protocol's file identity."""
        paths = self.files.column("absolute_path").to_pylist()
        dvs = self.files.column("dv_id").to_pylist()
        return frozenset(zip(paths, dvs, strict=True))

    def add_files(self) -> Iterator[AddFile]:
        for row in self.files.to_pylist():
            yield _add_file(row)


def _pairs(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    return dict(value)


def _add_file(row: Mapping[str, Any]) -> AddFile:
    dv = row.get("dv")
    return AddFile(
        path=row["path"],
        absolute_path=row["absolute_path"],
        partition_values=_pairs(row.get("partition_values")) or {},
        size=int(row.get("size") or 0),
        modification_time=int(row.get("modification_time") or 0),
        data_change=bool(row.get("data_change")),
        stats=row.get("stats"),
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
