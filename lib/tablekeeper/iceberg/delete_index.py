"""Which delete files apply to which data file: the spec's scan-planning rules.

- A deletion vector applies to the data file it names (``referenced_data_file``) when the data
  file's data sequence number is at most the DV's and the partitions are equal. Where a DV
  applies, position delete files do not: a DV holds every earlier position delete of its file.
- A position delete file applies when the data file's data sequence number is at most the delete
  file's, the partitions (spec and values) are equal, and the delete file may name the data file:
  its ``referenced_data_file``, or its ``file_path`` column bounds, when it has them, must allow it.
- A DV older than the live data file it names, or a DV or position delete file naming one live
  data file (``referenced_data_file``, or equal ``file_path`` bounds) that is not older than it
  but sits in another spec or partition, is corrupt metadata, and the lookup fails
  (``CorruptMetadataError``): readers disagree on it. The spec's wording leaves it unapplied;
  Iceberg Java looks such files up by path, fails the scan for a DV older than its data file, and
  up to 1.11 applies either kind whatever its partition (later versions fail the scan). A job that
  picked one reading would change what another engine reads.
- An equality delete file applies when the data file's data sequence number is strictly less than
  the delete file's and the partitions are equal, or the delete file's spec is unpartitioned
  (a global equality delete). Given the table's fields, it also needs what Iceberg Java's planning
  asks (``DeleteFileIndex.canContainEqDeletesForFile``): for each primitive equality column, the
  two files' null counts and value ranges must allow a common value. Java skips the delete file
  for a data file otherwise, so a reader never applies it there, whatever the rows hold: a NaN
  (left out of float bounds) or a value a file's partition tuple overrides. Applying it there
  anyway would change the rows Iceberg Spark reads.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.bounds import java_order
from tablekeeper.iceberg.content import EQUALITY_DELETES, POSITION_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.conversions import from_bytes
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.types import NestedField, PrimitiveType, Schema, walk_fields

# The position-delete file_path column: its bounds say which data files a delete file names.
DELETE_FILE_PATH_ID = 2147483546


@dataclass(frozen=True)
class AppliedDeletes:
    """The delete files one data file is read with."""

    dv: ManifestEntry | None = None
    positions: tuple[ManifestEntry, ...] = ()
    equalities: tuple[ManifestEntry, ...] = ()

    @property
    def files(self) -> tuple[ManifestEntry, ...]:
        return ((self.dv,) if self.dv is not None else ()) + self.positions + self.equalities

    @property
    def count(self) -> int:
        return len(self.files)


def _seq(entry: ManifestEntry) -> int:
    if entry.sequence_number is None:
        raise CorruptMetadataError(
            f"{entry.data_file.file_path} has no data sequence number after inheritance"
        )
    return entry.sequence_number


def referenced_file(delete: DataFile) -> str | None:
    """The one data file a position delete file names: its ``referenced_data_file``, or its
    ``file_path`` bounds when both are the same path. None when it may name several."""
    if delete.referenced_data_file is not None:
        return delete.referenced_data_file
    lower = (delete.lower_bounds or {}).get(DELETE_FILE_PATH_ID)
    if lower is None or lower != (delete.upper_bounds or {}).get(DELETE_FILE_PATH_ID):
        return None
    try:
        return lower.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _names(delete: DataFile, path: str) -> bool:
    """Whether a position delete file may hold positions of ``path``. Only a delete file that
    names one data file is ruled out; a range of paths is not trusted, since a pruned delete
    file would bring deleted rows back (bounds may be truncated or ordered by another engine's
    string order)."""
    target = referenced_file(delete)
    return target is None or target == path


def _check_scope(delete: ManifestEntry, data: DataFile, scope: tuple[int, tuple[object, ...]]) -> None:
    d = delete.data_file
    if (d.spec_id, partition_key(d.partition)) != scope:
        raise CorruptMetadataError(
            f"{d.file_path} deletes rows of {data.file_path} but is in another partition (spec "
            f"{d.spec_id} {d.partition}, the data file's spec {data.spec_id} {data.partition}): "
            "the table's metadata is corrupted (Iceberg Java 1.11 applies it, later versions refuse "
            "to scan the table); remove that delete file or roll back to a snapshot before it"
        )


FieldLookup = Callable[[int], NestedField | None]


def field_lookup(schemas: Iterable[Schema]) -> FieldLookup:
    """Fields by id over all of a table's schemas, the newest last (Java's ``Schema.indexFields``
    over them): an equality delete may name a column a later schema dropped."""
    fields: dict[int, NestedField] = {}
    for schema in schemas:
        fields.update((f.id, f) for f in walk_fields(schema.as_struct()))
    return fields.get


def _java_key(t: PrimitiveType) -> Callable[[Any], Any]:
    return java_order(t) or (lambda v: v)


def _count(counts: Mapping[int, int] | None, fid: int) -> int | None:
    return None if counts is None else counts.get(fid)


@dataclass(frozen=True)
class _Column:
    """One column's statistics in one file, as Java's planning reads them (bounds as sort keys
    in Java's order; None where a bound is unknown)."""

    has_null: bool
    all_null: bool
    none_null: bool
    lower: Any
    upper: Any


def _column(f: NestedField, file: DataFile) -> _Column:
    nulls, values = _count(file.null_value_counts, f.id), _count(file.value_counts, f.id)
    lower = upper = None
    if file.lower_bounds is not None and file.upper_bounds is not None:
        lo, hi = file.lower_bounds.get(f.id), file.upper_bounds.get(f.id)
        if lo is not None and hi is not None and isinstance(f.type, PrimitiveType):
            key = _java_key(f.type)
            try:
                lower, upper = key(from_bytes(f.type, lo)), key(from_bytes(f.type, hi))
            except (CorruptMetadataError, UnsupportedFeatureError, ValueError, TypeError, struct.error):
                lower = upper = None  # a bound this reader cannot order: it may match
    return _Column(
        has_null=not f.required and (nulls is None or nulls > 0),
        all_null=not f.required and nulls is not None and values is not None and nulls == values,
        none_null=f.required or (nulls is not None and nulls <= 0),
        lower=lower,
        upper=upper,
    )


def _disjoint(data: _Column, delete: _Column) -> bool:
    """Java's per-column test: True when no row of the data file can equal a delete row."""
    if data.has_null and delete.has_null:
        return False  # nulls are deleted, and the data holds some
    if (data.all_null and delete.none_null) or (delete.all_null and data.none_null):
        return True
    if data.lower is None or delete.lower is None:
        return False  # a bound unknown: it may match
    return bool(data.lower > delete.upper or delete.lower > data.upper)


@dataclass(frozen=True)
class _Scoped:
    """Delete entries of one (spec, partition), sorted by data sequence number."""

    seqs: list[int] = field(default_factory=list)
    entries: list[ManifestEntry] = field(default_factory=list)

    def add(self, entry: ManifestEntry) -> None:
        i = bisect.bisect_right(self.seqs, _seq(entry))
        self.seqs.insert(i, _seq(entry))
        self.entries.insert(i, entry)

    def from_seq(self, seq: int, strict: bool) -> list[ManifestEntry]:
        """Entries whose sequence number is >= seq (> seq when strict)."""
        i = bisect.bisect_right(self.seqs, seq) if strict else bisect.bisect_left(self.seqs, seq)
        return self.entries[i:]


class DeleteIndex:
    """The live delete files of a snapshot, indexed for lookups per data file."""

    def __init__(
        self,
        deletes: Iterable[ManifestEntry],
        unpartitioned_specs: frozenset[int],
        fields: FieldLookup | None = None,
    ) -> None:
        """``fields``: the table's fields by id, for Iceberg Java's pruning of equality deletes by
        the files' statistics (``_disjoint``); without it every equality delete in scope
        applies (a superset)."""
        self._fields = fields
        self._delete_stats: dict[str, dict[int, tuple[NestedField, _Column]]] = {}
        self._dvs: dict[str, ManifestEntry] = {}
        # Position delete files naming one data file, by that path: checked against its scope.
        self._named: dict[str, list[ManifestEntry]] = {}
        self._positions: dict[tuple[int, tuple[object, ...]], _Scoped] = {}
        self._equalities: dict[tuple[int, tuple[object, ...]], _Scoped] = {}
        self._global: _Scoped = _Scoped()
        for entry in deletes:
            f = entry.data_file
            scope = (f.spec_id, partition_key(f.partition))
            if f.content == POSITION_DELETES and f.is_dv:
                target = f.referenced_data_file
                if target is None:
                    raise CorruptMetadataError(f"deletion vector in {f.file_path} names no data file")
                if target in self._dvs:
                    raise CorruptMetadataError(f"{target} has two deletion vectors")
                self._dvs[target] = entry
            elif f.content == POSITION_DELETES:
                self._positions.setdefault(scope, _Scoped()).add(entry)
                named = referenced_file(f)
                if named is not None:
                    self._named.setdefault(named, []).append(entry)
            elif f.content == EQUALITY_DELETES:
                if f.spec_id in unpartitioned_specs:
                    self._global.add(entry)
                else:
                    self._equalities.setdefault(scope, _Scoped()).add(entry)
            else:
                raise CorruptMetadataError(f"{f.file_path} in a delete manifest has content {f.content}")

    @property
    def is_empty(self) -> bool:
        return not (self._dvs or self._positions or self._equalities or self._global.entries)

    def check(self, entry: ManifestEntry) -> None:
        """Fails (``CorruptMetadataError``) on a DV or a delete file naming ``entry``'s data file
        that readers disagree on (see the module's docstring)."""
        f = entry.data_file
        self._check(f, _seq(entry), (f.spec_id, partition_key(f.partition)))

    def _check(self, f: DataFile, seq: int, scope: tuple[int, tuple[object, ...]]) -> None:
        dv = self._dvs.get(f.file_path)
        if dv is not None:
            if _seq(dv) < seq:
                raise CorruptMetadataError(
                    f"deletion vector in {dv.data_file.file_path} is older (data sequence number "
                    f"{_seq(dv)}) than the data file it names, {f.file_path} ({seq}): the table's "
                    "metadata is corrupted (Iceberg Java refuses to scan it); remove that DV or roll "
                    "back to a snapshot before it"
                )
            _check_scope(dv, f, scope)
        else:
            for named in self._named.get(f.file_path, ()):
                if _seq(named) >= seq:
                    _check_scope(named, f, scope)

    def for_data_file(self, entry: ManifestEntry, *, check: bool = True) -> AppliedDeletes:
        """The delete files ``entry``'s data file is read with; ``check``: fail first on one
        readers disagree on (``check``)."""
        f = entry.data_file
        seq = _seq(entry)
        scope = (f.spec_id, partition_key(f.partition))
        if check:
            self._check(f, seq, scope)
        dv = self._dvs.get(f.file_path)
        positions: tuple[ManifestEntry, ...] = ()
        if dv is None and scope in self._positions:
            positions = tuple(
                d
                for d in self._positions[scope].from_seq(seq, strict=False)
                if _names(d.data_file, f.file_path)
            )
        equalities = tuple(self._global.from_seq(seq, strict=True))
        if scope in self._equalities:
            equalities += tuple(self._equalities[scope].from_seq(seq, strict=True))
        if self._fields is not None and equalities:
            equalities = self._prune(f, equalities, self._fields)
        return AppliedDeletes(dv, positions, equalities)

    def _prune(
        self, data: DataFile, equalities: tuple[ManifestEntry, ...], fields: FieldLookup
    ) -> tuple[ManifestEntry, ...]:
        """``equalities`` but those Java's planning skips for ``data``
        (``canContainEqDeletesForFile``: for some primitive equality column, the null counts or
        the value ranges rule out every common value), each file's statistics decoded once."""
        mine: dict[int, _Column] = {}
        kept = []
        for e in equalities:
            stats = self._delete_stats.get(e.data_file.file_path)
            if stats is None:
                stats = {}
                for fid in e.data_file.equality_ids or ():
                    found = fields(fid)
                    if found is not None and isinstance(found.type, PrimitiveType):
                        stats[fid] = (found, _column(found, e.data_file))
                self._delete_stats[e.data_file.file_path] = stats
            disjoint = False
            for fid, (found, theirs) in stats.items():
                ours = mine.get(fid)
                if ours is None:
                    ours = mine[fid] = _column(found, data)
                if _disjoint(ours, theirs):
                    disjoint = True
                    break
            if not disjoint:
                kept.append(e)
        return tuple(kept)
