"""Which position delete files rewrite-position-deletes rewrites, in which groups (Iceberg's
``rewrite_position_delete_files`` planning).

v2 tables: position delete files of one spec and partition are candidates when their size is
outside the desired range (under 75% or over 180% of the target, as Iceberg's size-based planner
decides), or all of them with ``rewrite_all``. Candidates are packed in order into groups of at
most ``max_group_size`` bytes; a group is rewritten when it has several files and at least
``min_input_files`` of them, or more bytes than one target file, or ``rewrite_all``.

v3 tables: every data file may have one deletion vector and no position delete file may apply
beside it, so every position delete file (a table upgraded from v2 keeps them) is planned: one
group per spec and partition, with the partition's live DVs, which the group merges into for the
data files its delete files name. A DV older than its data file, or a DV or a delete file naming
one data file from another partition, fails the plan as corrupt metadata (``DeleteIndex``):
readers disagree on what it deletes, so no rewrite of it could keep every reader's rows.

Every format the spec allows for position delete files (Parquet, ORC, Avro) is planned and read:
a delete file left out of a group would be shadowed by the DV the group writes for a data file it
names (a DV must hold every delete of the file's position delete files), and its rows come back.

Every group carries the partition's live data files with their data sequence numbers: an entry
``(file_path, pos)`` of a delete file is kept only when it applies now (its data file is live, in
the same partition, with a data sequence number at most the delete file's). Anything else is
dangling and dropped, so the rewritten files, which keep the group's largest data sequence
number as Iceberg's rewrite does, never start applying to rows they did not delete before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tablekeeper.errors import ConfigError, CorruptMetadataError
from tablekeeper.iceberg.content import DATA, POSITION_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.delete_index import DeleteIndex
from tablekeeper.iceberg.partitioning import partition_key

TARGET_FILE_SIZE = "write.delete.target-file-size-bytes"
DEFAULT_TARGET_FILE_SIZE = 64 * 1024 * 1024
DEFAULT_MIN_INPUT_FILES = 5
DEFAULT_MAX_GROUP_SIZE = 100 * 1024 * 1024 * 1024

Scope = tuple[int, tuple[Any, ...]]


@dataclass(frozen=True)
class DeletePlanOptions:
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_input_files: int = DEFAULT_MIN_INPUT_FILES
    rewrite_all: bool = False
    max_group_size: int = DEFAULT_MAX_GROUP_SIZE

    def __post_init__(self) -> None:
        if self.target_file_size < 1 or self.min_input_files < 1 or self.max_group_size < 1:
            raise ConfigError("target file size, min input files and max group size must be at least 1")

    @property
    def min_file_size(self) -> int:
        return int(self.target_file_size * 0.75)

    @property
    def max_file_size(self) -> int:
        return int(self.target_file_size * 1.8)

    def expected_output_files(self, size: int) -> int:
        return max(1, -(-size // self.target_file_size))


@dataclass(frozen=True)
class TrackedFile:
    """A delete file (or DV) as the plan saw it: the file and its data sequence number."""

    file: DataFile
    sequence_number: int


@dataclass(frozen=True)
class DeleteGroup:
    index: int
    spec_id: int
    partition: tuple[Any, ...]
    deletes: tuple[TrackedFile, ...]  # the position delete files the group replaces
    # The partition's live data files (path, data sequence number): what an entry may apply to.
    data_files: tuple[tuple[str, int], ...]
    # v3: the partition's live DVs; the group merges and replaces those of the files it names.
    dvs: tuple[TrackedFile, ...] = ()
    to_dvs: bool = False

    @property
    def input_size(self) -> int:
        return sum(d.file.file_size_in_bytes for d in self.deletes)

    @property
    def input_records(self) -> int:
        return sum(d.file.record_count for d in self.deletes)

    @property
    def sequence_number(self) -> int:
        """The data sequence number of the delete files this group writes (its inputs' largest)."""
        return max(d.sequence_number for d in self.deletes)


@dataclass(frozen=True)
class PositionDeletePlan:
    groups: tuple[DeleteGroup, ...]
    position_delete_files: int  # live position delete files (not DVs) in scope
    dvs: int  # live DVs

    @property
    def files(self) -> int:
        return sum(len(g.deletes) for g in self.groups)

    @property
    def bytes(self) -> int:
        return sum(g.input_size for g in self.groups)


def _seq(entry: ManifestEntry) -> int:
    if entry.sequence_number is None:
        raise CorruptMetadataError(f"{entry.data_file.file_path} has no data sequence number")
    return entry.sequence_number


def scope_of(f: DataFile) -> Scope:
    return (f.spec_id, partition_key(f.partition))


def _pack(files: Sequence[TrackedFile], max_size: int) -> list[list[TrackedFile]]:
    """Files in order into bins of at most ``max_size`` bytes (a larger file gets its own)."""
    bins: list[list[TrackedFile]] = []
    size = 0
    for f in files:
        n = f.file.file_size_in_bytes
        if not bins or size + n > max_size:
            bins.append([])
            size = 0
        bins[-1].append(f)
        size += n
    return bins


def _worth_it(files: Sequence[TrackedFile], options: DeletePlanOptions) -> bool:
    size = sum(f.file.file_size_in_bytes for f in files)
    several = len(files) > 1
    return (
        options.rewrite_all
        or (several and len(files) >= options.min_input_files)
        or (several and size > options.target_file_size)
        or size > options.max_group_size
    )


def plan_position_deletes(
    data: Iterable[ManifestEntry],
    deletes: Iterable[ManifestEntry],
    format_version: int,
    options: DeletePlanOptions,
    matches: Callable[[DataFile], bool] | None = None,
) -> PositionDeletePlan:
    """Groups of live position delete files to rewrite; ``matches`` (a delete file's partition
    against ``--where``) narrows the scope."""
    deletes = tuple(deletes)
    index = DeleteIndex(deletes, frozenset())
    live: dict[Scope, dict[str, int]] = {}
    for e in data:
        if e.data_file.content == DATA:
            live.setdefault(scope_of(e.data_file), {})[e.data_file.file_path] = _seq(e)
            if matches is None or matches(e.data_file):
                index.check(e)  # a DV or delete file naming it that readers disagree on: fails
    home = {path: scope for scope, files in live.items() for path in files}
    positions: dict[Scope, list[TrackedFile]] = {}
    dvs: dict[Scope, list[TrackedFile]] = {}
    counted = dv_count = 0
    seen_dv: set[str] = set()
    for e in deletes:
        f = e.data_file
        if f.content != POSITION_DELETES:
            continue
        if f.is_dv:
            dv_count += 1
            if f.referenced_data_file is None or f.referenced_data_file in seen_dv:
                raise CorruptMetadataError(
                    f"deletion vector in {f.file_path} names no data file, or one that has another DV"
                )
            seen_dv.add(f.referenced_data_file)
            target = home.get(f.referenced_data_file)
            if target is not None:  # else its data file is gone: it applies to nothing
                dvs.setdefault(target, []).append(TrackedFile(f, _seq(e)))
            continue
        if matches is not None and not matches(f):
            continue
        counted += 1
        positions.setdefault(scope_of(f), []).append(TrackedFile(f, _seq(e)))
    groups: list[DeleteGroup] = []
    for scope in sorted(positions, key=repr):
        files = sorted(positions[scope], key=lambda t: t.file.file_path)
        data_files = tuple(sorted(live.get(scope, {}).items()))
        if format_version >= 3:
            bins = [files]
        else:
            if not options.rewrite_all:
                files = [
                    t
                    for t in files
                    if not options.min_file_size <= t.file.file_size_in_bytes <= options.max_file_size
                ]
            bins = [b for b in _pack(files, options.max_group_size) if _worth_it(b, options)]
        for b in bins:
            groups.append(
                DeleteGroup(
                    index=len(groups),
                    spec_id=scope[0],
                    partition=b[0].file.partition,
                    deletes=tuple(b),
                    data_files=data_files,
                    dvs=_by_target(dvs.get(scope, [])) if format_version >= 3 else (),
                    to_dvs=format_version >= 3,
                )
            )
    return PositionDeletePlan(tuple(groups), counted, dv_count)


def _by_target(dvs: Iterable[TrackedFile]) -> tuple[TrackedFile, ...]:
    return tuple(sorted(dvs, key=lambda t: str(t.file.referenced_data_file)))
