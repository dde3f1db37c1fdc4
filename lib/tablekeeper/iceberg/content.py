"""The content of manifests and manifest lists: data and delete files, entries, manifest-list
rows and the constants that classify them (Iceberg's ``DataFile``, ``ManifestEntry``,
``ManifestFile``). Shared by the Avro reader/writer (``manifest``) and the compiled entry encoder
(``entry_encoder``), which both build on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Entry status
EXISTING, ADDED, DELETED = 0, 1, 2
# File content
DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2
# Manifest content
MANIFEST_DATA, MANIFEST_DELETES = 0, 1
# A manifest written before its commit has no sequence number yet (Java's UNASSIGNED_SEQ).
UNASSIGNED_SEQ = -1
# Java writes this constant into v1's required block_size_in_bytes.
V1_BLOCK_SIZE = 64 * 1024 * 1024


@dataclass(frozen=True)
class DataFile:
    content: int
    file_path: str
    file_format: str
    partition: tuple[Any, ...]
    record_count: int
    file_size_in_bytes: int
    spec_id: int = 0  # not written: the manifest's spec
    column_sizes: Mapping[int, int] | None = field(default=None, hash=False)
    value_counts: Mapping[int, int] | None = field(default=None, hash=False)
    null_value_counts: Mapping[int, int] | None = field(default=None, hash=False)
    nan_value_counts: Mapping[int, int] | None = field(default=None, hash=False)
    lower_bounds: Mapping[int, bytes] | None = field(default=None, hash=False)
    upper_bounds: Mapping[int, bytes] | None = field(default=None, hash=False)
    key_metadata: bytes | None = None
    split_offsets: tuple[int, ...] | None = None
    equality_ids: tuple[int, ...] | None = None
    sort_order_id: int | None = None
    first_row_id: int | None = None
    referenced_data_file: str | None = None
    content_offset: int | None = None
    content_size_in_bytes: int | None = None

    @property
    def is_dv(self) -> bool:
        return self.file_format.upper() == "PUFFIN"


@dataclass(frozen=True)
class ManifestEntry:
    status: int
    snapshot_id: int | None
    data_file: DataFile
    sequence_number: int | None = None  # data sequence number
    file_sequence_number: int | None = None

    @property
    def is_live(self) -> bool:
        return self.status != DELETED


@dataclass(frozen=True)
class FieldSummary:
    contains_null: bool
    contains_nan: bool | None = None
    lower_bound: bytes | None = None
    upper_bound: bytes | None = None


@dataclass(frozen=True)
class ManifestFile:
    manifest_path: str
    manifest_length: int
    partition_spec_id: int
    added_snapshot_id: int
    content: int = MANIFEST_DATA
    sequence_number: int = 0
    min_sequence_number: int = 0
    added_files_count: int | None = None
    existing_files_count: int | None = None
    deleted_files_count: int | None = None
    added_rows_count: int | None = None
    existing_rows_count: int | None = None
    deleted_rows_count: int | None = None
    partitions: tuple[FieldSummary, ...] | None = None
    key_metadata: bytes | None = None
    first_row_id: int | None = None

    def has_counts(self) -> bool:
        """Whether the list gives every file and row count (v1 lists may leave them null)."""
        counts = (
            self.added_files_count,
            self.existing_files_count,
            self.deleted_files_count,
            self.added_rows_count,
            self.existing_rows_count,
            self.deleted_rows_count,
        )
        return all(c is not None for c in counts)

    def has_live_files(self) -> bool:
        # Old v1 lists have no counts: they may hold anything.
        if self.added_files_count is None or self.existing_files_count is None:
            return True
        return self.added_files_count + self.existing_files_count > 0
