"""Which delete files apply to which data file: the spec's scan-planning rules.

- A deletion vector applies to the data file it names (``referenced_data_file``) when the data
  file's data sequence number is at most the DV's and the partitions are equal. One that fails
  either test does not apply to that file: it is ignored, not an error (spec). Where a DV
  applies, position delete files do not: a DV holds every earlier position delete of its file.
- A position delete file applies when the data file's data sequence number is at most the delete
  file's, the partitions (spec and values) are equal, and the delete file may name the data file:
  its ``referenced_data_file``, or its ``file_path`` column bounds, when it has them, must allow it.
- An equality delete file applies when the data file's data sequence number is strictly less than
  the delete file's and the partitions are equal, or the delete file's spec is unpartitioned
  (a global equality delete).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.content import EQUALITY_DELETES, POSITION_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.partitioning import partition_key

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

    def __init__(self, deletes: Iterable[ManifestEntry], unpartitioned_specs: frozenset[int]) -> None:
        self._dvs: dict[str, ManifestEntry] = {}
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

    @classmethod
    def for_specs(cls, deletes: Iterable[ManifestEntry], spec_fields: Mapping[int, int]) -> DeleteIndex:
        """``spec_fields``: the number of partition fields of each spec id."""
        return cls(deletes, frozenset(sid for sid, n in spec_fields.items() if n == 0))

    def for_data_file(self, entry: ManifestEntry) -> AppliedDeletes:
        f = entry.data_file
        seq = _seq(entry)
        scope = (f.spec_id, partition_key(f.partition))
        dv = self._dvs.get(f.file_path)
        if dv is not None and (
            _seq(dv) < seq or (dv.data_file.spec_id, partition_key(dv.data_file.partition)) != scope
        ):
            dv = None  # older than the file, or in another spec or partition: it does not apply
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
        return AppliedDeletes(dv, positions, equalities)
