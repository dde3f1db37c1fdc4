"""Which data files compaction rewrites, in which groups: Iceberg's ``rewrite_data_files``
planning (bin-pack and sort share it), as a pure function of the live files and the options.

- A file is a candidate when it is smaller than ``min-file-size-bytes``, larger than
  ``max-file-size-bytes``, read with at least ``delete-file-threshold`` delete files, or has at
  least ``delete-ratio-threshold`` of its rows deleted by deletes naming it alone (DVs and
  single-file position deletes); with ``rewrite-all`` every file is.
- Candidates are grouped by their own spec and partition and packed in order into groups of at
  most ``max-file-group-size-bytes``. (Iceberg puts files of older specs into one group and writes
  them in the current spec; compact keeps each file's spec, so grouping by it is what lets a
  second run find nothing left to do.)
- A group is rewritten when it has enough files (more than one and at least
  ``min-input-files``), more than one file and more bytes than the target, more bytes than the
  maximum, or a file with too many deletes; with ``rewrite-all`` every group is.
Sizes are the data files' own sizes; delete files do not count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.content import POSITION_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.delete_index import AppliedDeletes, DeleteIndex, referenced_file
from tablekeeper.iceberg.partitioning import partition_key

TARGET_FILE_SIZE = "write.target-file-size-bytes"
DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024
DEFAULT_MAX_GROUP_SIZE = 100 * 1024 * 1024 * 1024
NO_DELETE_THRESHOLD = 2**31 - 1
SPLIT_OVERHEAD = 5 * 1024
# Compaction reads data files and equality deletes in Parquet, DVs in Puffin, and position delete
# files in every format the spec allows. A data file read with anything else is left as it is.
READABLE_FORMATS = frozenset({"PARQUET", "PUFFIN"})
POSITION_DELETE_FORMATS = frozenset({"PARQUET", "ORC", "AVRO"})
T = TypeVar("T")


@dataclass(frozen=True)
class RewriteOptions:
    target_file_size: int
    min_file_size: int
    max_file_size: int
    min_input_files: int = 5
    rewrite_all: bool = False
    max_file_group_size: int = DEFAULT_MAX_GROUP_SIZE
    delete_file_threshold: int = NO_DELETE_THRESHOLD
    delete_ratio_threshold: float = 0.3
    max_files_to_rewrite: int | None = None

    @classmethod
    def resolve(
        cls,
        properties: Mapping[str, str],
        *,
        target_file_size: int | None = None,
        min_file_size: int | None = None,
        max_file_size: int | None = None,
        **rest: object,
    ) -> RewriteOptions:
        """Options with Iceberg's defaults: the target from the table's
        ``write.target-file-size-bytes`` (else 512 MiB), minimum 75% and maximum 180% of it."""
        target = target_file_size
        if target is None:
            raw = properties.get(TARGET_FILE_SIZE)
            try:
                target = int(raw) if raw is not None else DEFAULT_TARGET_FILE_SIZE
            except ValueError:
                raise ConfigError(f"table property {TARGET_FILE_SIZE}={raw!r} is not a byte count") from None
        low = int(target * 0.75) if min_file_size is None else min_file_size
        high = int(target * 1.80) if max_file_size is None else max_file_size
        options = cls(target, low, high, **rest)  # type: ignore[arg-type]
        options.validate()
        return options

    def validate(self) -> None:
        if self.target_file_size <= 0:
            raise ConfigError(f"--target-file-size {self.target_file_size} must be positive")
        if not 0 <= self.min_file_size < self.target_file_size:
            raise ConfigError(
                f"--min-file-size {self.min_file_size} must be at least 0 and below the target "
                f"{self.target_file_size}"
            )
        if self.max_file_size <= self.target_file_size:
            raise ConfigError(
                f"--max-file-size {self.max_file_size} must be above the target {self.target_file_size}"
            )
        if self.min_input_files < 1:
            raise ConfigError(f"--min-input-files {self.min_input_files} must be at least 1")
        if self.max_file_group_size <= 0:
            raise ConfigError(f"--max-file-group-size {self.max_file_group_size} must be positive")
        if self.delete_file_threshold < 0:
            raise ConfigError(f"--delete-file-threshold {self.delete_file_threshold} must be at least 0")
        if not 0 < self.delete_ratio_threshold <= 1:
            raise ConfigError(f"--delete-ratio-threshold {self.delete_ratio_threshold} must be in (0, 1]")
        if self.max_files_to_rewrite is not None and self.max_files_to_rewrite < 1:
            raise ConfigError(f"--max-files-to-rewrite {self.max_files_to_rewrite} must be at least 1")

    @property
    def write_max_file_size(self) -> int:
        """The size at which a written file rolls over (between target and maximum)."""
        return int(self.target_file_size + (self.max_file_size - self.target_file_size) * 0.5)

    def expected_output_files(self, input_size: int) -> int:
        target = self.target_file_size
        if input_size < target:
            return 1
        ceil, floor = -(-input_size // target), input_size // target
        if input_size % target > self.min_file_size:
            return ceil  # the remainder makes a file of acceptable size
        if input_size // floor < min(1.1 * target, float(self.write_max_file_size)):
            return floor  # the remainder spreads over the other files
        return ceil

    def split_size(self, input_size: int) -> int:
        estimate = input_size // self.expected_output_files(input_size) + SPLIT_OVERHEAD
        return (
            self.target_file_size
            if estimate < self.target_file_size
            else min(estimate, self.write_max_file_size)
        )


@dataclass(frozen=True)
class FileTask:
    entry: ManifestEntry
    deletes: AppliedDeletes

    @property
    def file(self) -> DataFile:
        return self.entry.data_file

    @property
    def size(self) -> int:
        return self.entry.data_file.file_size_in_bytes


@dataclass(frozen=True)
class FileGroup:
    index: int  # 1-based over the plan
    partition_index: int  # 1-based within its partition
    spec_id: int
    partition: tuple[object, ...]  # in that spec
    tasks: tuple[FileTask, ...]
    expected_output_files: int
    split_size: int

    @property
    def input_size(self) -> int:
        return sum(t.size for t in self.tasks)

    @property
    def record_count(self) -> int:
        return sum(t.file.record_count for t in self.tasks)

    @property
    def delete_files(self) -> tuple[ManifestEntry, ...]:
        seen: dict[str, ManifestEntry] = {}
        for t in self.tasks:
            for d in t.deletes.files:
                seen.setdefault(d.data_file.file_path + f"@{d.data_file.content_offset}", d)
        return tuple(seen.values())


@dataclass(frozen=True)
class RewritePlan:
    groups: tuple[FileGroup, ...]
    planned_groups: int  # before --max-files-to-rewrite cut the list
    live_files: int
    skipped_files: int = 0  # not Parquet, or read with deletes that are not Parquet or Puffin

    @property
    def files(self) -> int:
        return sum(len(g.tasks) for g in self.groups)

    @property
    def bytes(self) -> int:
        return sum(g.input_size for g in self.groups)


def _file_scoped(delete: DataFile) -> bool:
    return delete.content == POSITION_DELETES and referenced_file(delete) is not None


def too_many_deletes(task: FileTask, options: RewriteOptions) -> bool:
    return task.deletes.count > 0 and task.deletes.count >= options.delete_file_threshold


def too_high_delete_ratio(task: FileTask, options: RewriteOptions) -> bool:
    rows = task.file.record_count
    if not task.deletes.count or rows <= 0:
        return False
    known = sum(d.data_file.record_count for d in task.deletes.files if _file_scoped(d.data_file))
    return min(known, rows) / rows >= options.delete_ratio_threshold


def delete_issue(task: FileTask, options: RewriteOptions) -> bool:
    return too_many_deletes(task, options) or too_high_delete_ratio(task, options)


def _task_size(task: Any) -> int:
    return int(task.size)


def is_candidate(task: FileTask, options: RewriteOptions) -> bool:
    size = task.size
    return size < options.min_file_size or size > options.max_file_size or delete_issue(task, options)


def worth_rewriting(files: int, size: int, delete_issue: bool, options: RewriteOptions) -> bool:
    """Whether a packed group of ``files`` files and ``size`` bytes is rewritten (health's
    estimate applies the same rule to sizes alone)."""
    return (
        (files > 1 and files >= options.min_input_files)
        or (files > 1 and size > options.target_file_size)
        or size > options.max_file_size
        or delete_issue
    )


def _keep(tasks: list[FileTask], options: RewriteOptions) -> bool:
    issue = any(delete_issue(t, options) for t in tasks)
    return worth_rewriting(len(tasks), sum(t.size for t in tasks), issue, options)


def pack(tasks: Iterable[T], max_size: int, size: Callable[[T], int] = _task_size) -> list[list[T]]:
    """Next-fit in the given order: one open group; a task that does not fit starts the next."""
    groups: list[list[T]] = []
    current: list[T] = []
    weight = 0
    for t in tasks:
        w = size(t)
        if current and weight + w > max_size:
            groups.append(current)
            current, weight = [], 0
        current.append(t)
        weight += w
    if current:
        groups.append(current)
    return groups


def readable(data: DataFile, deletes: AppliedDeletes) -> bool:
    """Whether compaction reads ``data`` and every delete file applied to it."""
    return (
        data.file_format.upper() in READABLE_FORMATS
        and all(e.data_file.file_format.upper() in READABLE_FORMATS for e in deletes.equalities)
        and (deletes.dv is None or deletes.dv.data_file.file_format.upper() in READABLE_FORMATS)
        and all(p.data_file.file_format.upper() in POSITION_DELETE_FORMATS for p in deletes.positions)
    )


def plan_rewrite(
    data: Iterable[ManifestEntry],
    deletes: DeleteIndex,
    options: RewriteOptions,
    matches: Callable[[ManifestEntry], bool] | None = None,
    scope: Callable[[DataFile], tuple[int, tuple[object, ...]]] | None = None,
) -> RewritePlan:
    """Groups to rewrite among the live ``data`` entries; ``matches`` keeps only files that may
    hold rows of the ``--where`` filter (a file is taken whole). Files are packed per ``scope``
    (spec id and partition values; by default the file's own)."""
    by_partition: dict[tuple[int, tuple[object, ...]], list[FileTask]] = {}
    values: dict[tuple[int, tuple[object, ...]], tuple[object, ...]] = {}
    live = skipped = 0
    for entry in data:
        live += 1
        if matches is not None and not matches(entry):
            continue
        task = FileTask(entry, deletes.for_data_file(entry))
        if not readable(entry.data_file, task.deletes):
            skipped += 1  # ORC and Avro data files (or equality deletes) are left as they are
            continue
        if not options.rewrite_all and not is_candidate(task, options):
            continue
        f = entry.data_file
        spec_id, partition = scope(f) if scope is not None else (f.spec_id, f.partition)
        key = (spec_id, partition_key(partition))
        by_partition.setdefault(key, []).append(task)
        values.setdefault(key, partition)  # the values (the key compares floats by bits)
    groups: list[FileGroup] = []
    planned = 0
    budget = options.max_files_to_rewrite
    for scope_key, tasks in by_partition.items():
        spec_id, partition = scope_key[0], values[scope_key]
        kept = [
            g for g in pack(tasks, options.max_file_group_size) if options.rewrite_all or _keep(g, options)
        ]
        for i, packed in enumerate(kept, start=1):
            planned += 1
            chosen = packed
            if budget is not None:
                if budget <= 0:
                    continue
                chosen = packed[:budget]  # not re-checked against the group rules, as in Iceberg
                budget -= len(chosen)
            size = sum(t.size for t in chosen)
            groups.append(
                FileGroup(
                    planned,
                    i,
                    spec_id,
                    partition,
                    tuple(chosen),
                    options.expected_output_files(size),
                    options.split_size(size),
                )
            )
    return RewritePlan(tuple(groups), planned, live, skipped)


def expected_files_after(plan: RewritePlan, live_files: int) -> int:
    """Live data files once every group is rewritten as planned."""
    return live_files - plan.files + sum(g.expected_output_files for g in plan.groups)
