"""Planning a manifest rewrite (Iceberg's ``rewrite_manifests``), pure.

Which manifests of a snapshot are regrouped, into how many, and in what order: the live entries of
one spec's data (and, separately, delete) manifests, ordered by their partition tuple, cut into
``ceil(bytes / target)`` manifests, as Iceberg's Spark action plans it. Entries are carried as
EXISTING with their snapshot id, both sequence numbers and, on v3, their first_row_id written
explicitly, so no reader can tell the rewrite happened but by the manifest count.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tablekeeper.errors import ConfigError, CorruptMetadataError
from tablekeeper.iceberg.content import (
    EXISTING,
    MANIFEST_DATA,
    MANIFEST_DELETES,
    ManifestEntry,
    ManifestFile,
)
from tablekeeper.iceberg.partitioning import PartitionSpec

# Iceberg's commit.manifest.target-size-bytes default.
DEFAULT_TARGET_MANIFEST_SIZE = 8 * 1024 * 1024
CONTENT_NAMES = {MANIFEST_DATA: "data", MANIFEST_DELETES: "deletes"}


@dataclass(frozen=True)
class ContentRewrite:
    """The manifests of one content kind to regroup, and how many manifests they become."""

    content: int
    manifests: tuple[ManifestFile, ...]
    target_count: int

    @property
    def bytes(self) -> int:
        return sum(m.manifest_length for m in self.manifests)

    @property
    def live_entries(self) -> int:
        return sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in self.manifests)


@dataclass(frozen=True)
class ManifestRewritePlan:
    spec_id: int
    sort_positions: tuple[int, ...]  # partition tuple positions, in sort order
    target_size: int
    groups: tuple[ContentRewrite, ...]  # only the content kinds worth rewriting
    skipped: tuple[tuple[str, str], ...]  # (content, reason) for kinds left alone

    @property
    def rewritten(self) -> tuple[ManifestFile, ...]:
        return tuple(m for g in self.groups for m in g.manifests)

    @property
    def is_empty(self) -> bool:
        return not self.groups


def sort_positions(spec: PartitionSpec, sort_by: Sequence[str]) -> tuple[int, ...]:
    """Positions in the partition tuple to order entries by: ``sort_by`` (partition field names of
    ``spec``) first, then the spec's remaining fields, so ties still cluster."""
    names = [f.name for f in spec.fields]
    missing = [n for n in sort_by if n not in names]
    if missing:
        raise ConfigError(
            f"--sort-by {', '.join(missing)}: not a partition field of spec {spec.spec_id} "
            f"(its fields: {', '.join(names) or 'none, the spec is unpartitioned'})"
        )
    first = [names.index(n) for n in dict.fromkeys(sort_by)]
    return (*first, *(i for i in range(len(names)) if i not in first))


def plan_manifest_rewrite(
    manifests: Sequence[ManifestFile],
    *,
    spec: PartitionSpec,
    sort_by: Sequence[str] = (),
    target_size: int = DEFAULT_TARGET_MANIFEST_SIZE,
    rewrite_all: bool = False,
) -> ManifestRewritePlan:
    """Which manifests of ``spec`` to regroup. A content kind is rewritten when regrouping makes
    fewer manifests (so a second run finds nothing to do); ``rewrite_all`` rewrites it whenever
    it has more than one manifest or would be split, as Iceberg's action does."""
    if target_size < 1:
        raise ConfigError(f"target manifest size {target_size} must be positive")
    positions = sort_positions(spec, sort_by)
    groups: list[ContentRewrite] = []
    skipped: list[tuple[str, str]] = []
    for content in (MANIFEST_DATA, MANIFEST_DELETES):
        name = CONTENT_NAMES[content]
        matching = tuple(m for m in manifests if m.content == content and m.partition_spec_id == spec.spec_id)
        if not matching:
            skipped.append((name, f"no {name} manifests of spec {spec.spec_id}"))
            continue
        uncounted = [m.manifest_path for m in matching if m.added_files_count is None]
        if uncounted:
            raise CorruptMetadataError(
                f"manifest {uncounted[0]} has no file counts in its list: the table's manifest list is "
                "damaged or from a pre-1.0 writer"
            )
        total = sum(m.manifest_length for m in matching)
        target = max(1, math.ceil(total / target_size))
        live = sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in matching)
        target = min(target, max(1, live))
        fewer = len(matching) > target
        if rewrite_all and (len(matching) > 1 or target > 1):
            fewer = True
        if not fewer:
            skipped.append(
                (
                    name,
                    f"{len(matching)} {name} manifest(s) of {total} bytes are already at most "
                    f"{target} of the target size",
                )
            )
            continue
        groups.append(ContentRewrite(content, matching, target))
    return ManifestRewritePlan(spec.spec_id, positions, target_size, tuple(groups), tuple(skipped))


def _value_key(value: Any) -> tuple[Any, ...]:
    """An orderable key for one partition value: nulls first (as Spark's range sort), NaN after
    every number; values of one field share a type, so the rest compare directly."""
    if value is None:
        return (0,)
    if isinstance(value, float) and math.isnan(value):
        return (2,)
    if isinstance(value, uuid.UUID):
        return (1, value.bytes)
    return (1, value)


def partition_sort_key(partition: Sequence[Any], positions: Sequence[int]) -> tuple[Any, ...]:
    return tuple(_value_key(partition[i]) for i in positions)


def as_existing(entry: ManifestEntry) -> ManifestEntry:
    """A live entry carried into a new manifest: EXISTING, everything inherited made explicit.

    The reader has already resolved the snapshot id, both sequence numbers and the data file's
    first_row_id from the manifest they were inherited from."""
    if entry.sequence_number is None:
        raise CorruptMetadataError(
            f"entry for {entry.data_file.file_path} has no data sequence number to carry over"
        )
    return ManifestEntry(
        EXISTING, entry.snapshot_id, entry.data_file, entry.sequence_number, entry.file_sequence_number
    )


def new_manifest_path(table_location: str, name_prefix: str, index: int) -> str:
    """Where a rewrite writes its ``index``-th manifest (``name_prefix`` marks the run's files)."""
    return f"{table_location.rstrip('/')}/metadata/{name_prefix}{uuid.uuid4()}-m{index}.avro"


def split_evenly(items: Sequence[Any], parts: int) -> list[Sequence[Any]]:
    """``items`` cut into ``parts`` consecutive runs whose sizes differ by at most one."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out = []
    start = 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [p for p in out if len(p)]
