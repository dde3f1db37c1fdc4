"""Which data files rewrite-equality-deletes resolves, in which groups, and which equality delete
files the resolving commit may remove.

An equality delete file applies to a data file by the spec's scan-planning rules
(``iceberg.delete_index``): the data file's data sequence number strictly lower, the same spec and
partition unless the delete file's spec is unpartitioned (a global delete). Every live data file
some equality delete applies to is a target; the targets of one spec and partition form groups
(at most ``max_group_files`` each), one Spark task apiece. A task finds the rows of each target the
equality deletes remove and writes them as positions: one deletion vector per data file on v3,
merged with the DV and position delete files that already apply to it (a DV holds all of them, so
it must not shadow any), or position delete files on v2.

An equality delete file is removed by the commit that resolves it only when every live data file
it applies to is resolved by this run, in that commit or an earlier one. Data files a later
commit adds under an older data sequence number (a rewrite that keeps its starting sequence
number) come from files live when the rewrite started; those are resolved here, and a rewrite of
a file given new deletes since its start fails its own validation (Iceberg's and tablekeeper's
compaction both check), so no row the delete removed comes back. A delete file that applies to
files outside the run (``--where`` left their partitions out) stays, and the result says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tablekeeper.errors import ConfigError, CorruptMetadataError
from tablekeeper.iceberg.content import DATA, EQUALITY_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.delete_index import DeleteIndex, FieldLookup
from tablekeeper.iceberg.position_delete_plan import Scope, scope_of

DEFAULT_MAX_GROUP_FILES = 100


@dataclass(frozen=True)
class Target:
    """A live data file some equality deletes apply to, with every delete that applies to it."""

    data: ManifestEntry
    equalities: tuple[ManifestEntry, ...]
    dv: ManifestEntry | None = None  # the DV that applies (merged into the new one)
    positions: tuple[ManifestEntry, ...] = ()  # position delete files that apply

    @property
    def file(self) -> DataFile:
        return self.data.data_file

    @property
    def sequence_number(self) -> int:
        return _seq(self.data)


@dataclass(frozen=True)
class EqualityGroup:
    index: int
    spec_id: int
    partition: tuple[Any, ...]
    targets: tuple[Target, ...]

    @property
    def data_bytes(self) -> int:
        return sum(t.file.file_size_in_bytes for t in self.targets)


@dataclass(frozen=True)
class KeptDelete:
    """An equality delete file the run leaves in place, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class EqualityDeletePlan:
    groups: tuple[EqualityGroup, ...]
    equality_deletes: tuple[ManifestEntry, ...]  # every live equality delete file
    # Equality delete file path -> the groups that must be committed before it may go (empty:
    # it applies to no live data file).
    removable: Mapping[str, frozenset[int]]
    kept: tuple[KeptDelete, ...]

    @property
    def target_files(self) -> int:
        return sum(len(g.targets) for g in self.groups)

    @property
    def data_bytes(self) -> int:
        return sum(g.data_bytes for g in self.groups)


def _seq(entry: ManifestEntry) -> int:
    if entry.sequence_number is None:
        raise CorruptMetadataError(f"{entry.data_file.file_path} has no data sequence number")
    return entry.sequence_number


def plan_equality_deletes(
    data: Iterable[ManifestEntry],
    deletes: Sequence[ManifestEntry],
    unpartitioned: frozenset[int],
    *,
    fields: FieldLookup | None = None,
    matches: Callable[[DataFile], bool] | None = None,
    max_group_files: int = DEFAULT_MAX_GROUP_FILES,
) -> EqualityDeletePlan:
    """``unpartitioned``: the spec ids whose equality deletes are global; ``fields``: the table's
    fields by id, so a delete Iceberg Java's planning skips for a data file by their statistics
    is not resolved into it either (``DeleteIndex``); ``matches``: the data files
    whose partitions the run may resolve (None: all)."""
    if max_group_files < 1:
        raise ConfigError("the number of data files per group must be at least 1")
    equalities = tuple(e for e in deletes if e.data_file.content == EQUALITY_DELETES)
    for e in equalities:
        if not e.data_file.equality_ids:
            raise CorruptMetadataError(f"equality delete file {e.data_file.file_path} has no equality ids")
    if not equalities:
        return EqualityDeletePlan((), (), {}, ())
    # Fails on a DV or a delete file naming a data file that readers disagree on (corrupt).
    index = DeleteIndex(deletes, unpartitioned, fields)
    by_scope: dict[Scope, list[Target]] = {}
    # Equality delete file -> the data files it applies to (None: one the run leaves out).
    applies_to: dict[str, list[str | None]] = {e.data_file.file_path: [] for e in equalities}
    for entry in data:
        f = entry.data_file
        if f.content != DATA:
            continue
        inside = matches is None or matches(f)
        applied = index.for_data_file(entry, check=inside)  # outside the run: read, not rewritten
        if not applied.equalities:
            continue
        for e in applied.equalities:
            applies_to[e.data_file.file_path].append(f.file_path if inside else None)
        if not inside:
            continue
        by_scope.setdefault(scope_of(f), []).append(
            Target(entry, applied.equalities, applied.dv, applied.positions)
        )
    groups: list[EqualityGroup] = []
    group_of: dict[str, int] = {}
    for (spec_id, _), targets in sorted(by_scope.items(), key=lambda kv: repr(kv[0])):
        ordered = sorted(targets, key=lambda t: t.file.file_path)
        for start in range(0, len(ordered), max_group_files):
            chunk = tuple(ordered[start : start + max_group_files])
            g = EqualityGroup(len(groups), spec_id, chunk[0].file.partition, chunk)
            groups.append(g)
            for t in chunk:
                group_of[t.file.file_path] = g.index
    removable: dict[str, frozenset[int]] = {}
    kept: list[KeptDelete] = []
    for e in equalities:
        path = e.data_file.file_path
        files = applies_to[path]
        outside = sum(1 for f in files if f is None)
        if outside:
            kept.append(
                KeptDelete(path, f"applies to {outside} data file(s) in partitions left out (--where)")
            )
            continue
        removable[path] = frozenset(group_of[f] for f in files if f is not None)
    return EqualityDeletePlan(tuple(groups), equalities, removable, tuple(kept))
