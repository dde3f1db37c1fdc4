"""What a table's live files look like, summed in one pass over its manifest entries, and how many
files compaction would leave: the figures ``health`` reports and bases its advice on.

A ``Tally`` keeps no entry: counts, a size histogram, and per partition only the sizes of the
files compaction would take (a signed 64-bit integer each, negative when the file is taken for its
deletes), so a table of a million files costs megabytes. Tallies of manifests read apart (on
executors) merge in manifest order, which keeps the packing order ``plan_rewrite`` sees.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.content import (
    DATA,
    DELETED,
    EQUALITY_DELETES,
    POSITION_DELETES,
    ManifestEntry,
    ManifestFile,
)
from tablekeeper.iceberg.conversions import json_value, native_to_value
from tablekeeper.iceberg.delete_index import AppliedDeletes
from tablekeeper.iceberg.manifest import id_names, open_avro, record_type
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.rewrite_plan import (
    READABLE_FORMATS,
    FileTask,
    RewriteOptions,
    delete_issue,
    is_candidate,
    pack,
    readable,
    worth_rewriting,
)
from tablekeeper.iceberg.types import StructType

# Upper bounds of the size histogram as fractions of the target file size; the last two buckets
# are the files compaction leaves alone (min..max) and the ones it splits (above max).
_FRACTIONS = (1 / 1024, 1 / 64, 1 / 8, 1 / 2)
Scope = tuple[int, tuple[object, ...]]


def new_tally(meta: TableMetadata, options: RewriteOptions) -> Tally:
    """An empty tally of ``meta``'s files, grouping compaction candidates as compact does by
    default: into the current spec's partitions."""
    spec = meta.spec(meta.default_spec_id)
    ids = [f.field_id for f in spec.fields]
    coerce: dict[int, tuple[int | None, ...]] = {}
    for other in meta.partition_specs:
        if other.spec_id != spec.spec_id:
            own = {pf.field_id: i for i, pf in enumerate(other.fields)}
            coerce[other.spec_id] = tuple(own.get(i) for i in ids)
    return Tally(histogram_bounds(options), spec.spec_id, coerce)


def histogram_bounds(options: RewriteOptions) -> tuple[int, ...]:
    """Bucket upper bounds (exclusive) in bytes; the buckets past the last bound hold the rest."""
    fixed = [max(1, int(options.target_file_size * f)) for f in _FRACTIONS]
    bounds = sorted({*fixed, options.min_file_size, options.max_file_size + 1})
    return tuple(bounds)


class Tally:
    """Live data and delete files summed; ``merge`` adds a tally of later manifests."""

    __slots__ = (
        "bounds",
        "candidates",
        "coerce",
        "data_bytes",
        "data_files",
        "data_records",
        "delete_bytes",
        "dv_files",
        "equality_delete_files",
        "equality_delete_rows",
        "histogram",
        "partition_values",
        "position_delete_files",
        "position_deleted_rows",
        "skipped_files",
        "small_by_partition",
        "small_bytes",
        "small_files",
        "target_spec",
    )

    def __init__(
        self,
        bounds: tuple[int, ...],
        target_spec: int = 0,
        coerce: Mapping[int, tuple[int | None, ...]] | None = None,
    ) -> None:
        self.bounds = bounds
        self.target_spec = target_spec
        # Spec id -> positions of the target spec's fields in that spec's tuples (compaction packs
        # files of older specs with those of the partition they are rewritten into).
        self.coerce = dict(coerce or {})
        self.data_files = self.data_bytes = self.data_records = 0
        self.small_files = self.small_bytes = self.skipped_files = 0
        self.histogram = [[0, 0] for _ in range(len(bounds) + 1)]  # [files, bytes] per bucket
        self.position_delete_files = self.dv_files = self.equality_delete_files = 0
        self.delete_bytes = self.position_deleted_rows = self.equality_delete_rows = 0
        self.small_by_partition: dict[Scope, list[int]] = {}  # [files, bytes]
        # Sizes of the files compaction takes, in entry order; negative: taken for its deletes.
        self.candidates: dict[Scope, array[int]] = {}
        self.partition_values: dict[Scope, tuple[int, tuple[object, ...]]] = {}

    def _scope(self, spec_id: int, partition: tuple[object, ...], own: Scope) -> Scope:
        positions = self.coerce.get(spec_id)
        if positions is None:
            return own
        values = tuple(None if i is None else partition[i] for i in positions)
        return (self.target_spec, partition_key(values))

    def _bucket(self, size: int) -> int:
        for i, bound in enumerate(self.bounds):
            if size < bound:
                return i
        return len(self.bounds)

    def add_data(self, entry: ManifestEntry, deletes: AppliedDeletes, options: RewriteOptions) -> None:
        f = entry.data_file
        if f.content != DATA:
            return
        size = f.file_size_in_bytes
        self.data_files += 1
        self.data_bytes += size
        self.data_records += f.record_count
        bucket = self.histogram[self._bucket(size)]
        bucket[0] += 1
        bucket[1] += size
        key: Scope = (f.spec_id, partition_key(f.partition))
        if size < options.min_file_size:
            self.small_files += 1
            self.small_bytes += size
            small = self.small_by_partition.setdefault(key, [0, 0])
            small[0] += 1
            small[1] += size
            self.partition_values.setdefault(key, (f.spec_id, f.partition))
        if not readable(f, deletes):
            self.skipped_files += 1
            return
        task = FileTask(entry, deletes)
        if is_candidate(task, options):
            key = self._scope(f.spec_id, f.partition, key)
            sizes = self.candidates.get(key)
            if sizes is None:
                sizes = self.candidates[key] = array("q")
            sizes.append(-size - 1 if delete_issue(task, options) else size)

    def add_sizes(
        self, manifest: bytes, source: ManifestFile, ptype: StructType, options: RewriteOptions
    ) -> None:
        """The live data files of one manifest, read for their sizes only: the path for tables
        without delete files, where no file is taken for its deletes (a third of the full read)."""
        reader = open_avro(manifest, f"manifest {source.manifest_path}")
        top = id_names(reader.writer_schema)
        df_schema = record_type(
            next(f["type"] for f in reader.writer_schema["fields"] if f.get("field-id") == 2)
        )
        df = id_names(df_schema)
        part_names = id_names(
            record_type(next(f["type"] for f in df_schema["fields"] if f.get("field-id") == 102))
        )
        fields = [(pf.type, part_names.get(pf.id)) for pf in ptype.fields]
        status_name, data_name, part_name = top[0], top[2], df[102]
        content_name, format_name, size_name, records_name = df.get(134), df[101], df[104], df[103]
        spec_id, low, high = source.partition_spec_id, options.min_file_size, options.max_file_size
        bucket, bounds, histogram = self._bucket, self.bounds, self.histogram
        small_by_partition, candidates, values = (
            self.small_by_partition,
            self.candidates,
            self.partition_values,
        )
        try:
            for rec in reader:
                if rec[status_name] == DELETED:
                    continue
                raw = rec[data_name]
                if content_name is not None and raw.get(content_name, DATA) != DATA:
                    continue
                size = raw[size_name]
                part_rec = raw[part_name] or {}
                partition = tuple(
                    None if name is None else native_to_value(t, part_rec.get(name)) for t, name in fields
                )
                key: Scope = (spec_id, partition_key(partition))
                self.data_files += 1
                self.data_bytes += size
                self.data_records += raw[records_name]
                counts = histogram[bucket(size) if size < bounds[-1] else len(bounds)]
                counts[0] += 1
                counts[1] += size
                if size < low:
                    self.small_files += 1
                    self.small_bytes += size
                    small = small_by_partition.get(key)
                    if small is None:
                        small = small_by_partition[key] = [0, 0]
                        values[key] = (spec_id, partition)
                    small[0] += 1
                    small[1] += size
                if str(raw[format_name]).upper() not in READABLE_FORMATS:
                    self.skipped_files += 1
                elif size < low or size > high:
                    key = self._scope(spec_id, partition, key)
                    sizes = candidates.get(key)
                    if sizes is None:
                        sizes = candidates[key] = array("q")
                    sizes.append(size)
        except (ValueError, EOFError, KeyError, TypeError, IndexError, UnicodeDecodeError, zlib.error) as err:
            raise CorruptMetadataError(
                f"manifest {source.manifest_path} is truncated or corrupt ({err.__class__.__name__})"
            ) from err

    def add_delete(self, entry: ManifestEntry) -> None:
        f = entry.data_file
        # A DV is one blob of a shared Puffin file: its own length, not the file's.
        self.delete_bytes += (f.content_size_in_bytes or 0) if f.is_dv else f.file_size_in_bytes
        if f.content == POSITION_DELETES:
            if f.is_dv:
                self.dv_files += 1
            else:
                self.position_delete_files += 1
            self.position_deleted_rows += f.record_count
        elif f.content == EQUALITY_DELETES:
            self.equality_delete_files += 1
            self.equality_delete_rows += f.record_count

    def merge(self, other: Tally) -> None:
        for name in (
            "data_files",
            "data_bytes",
            "data_records",
            "small_files",
            "small_bytes",
            "skipped_files",
            "position_delete_files",
            "dv_files",
            "equality_delete_files",
            "delete_bytes",
            "position_deleted_rows",
            "equality_delete_rows",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in zip(self.histogram, other.histogram, strict=True):
            mine[0] += theirs[0]
            mine[1] += theirs[1]
        for key, (files, size) in other.small_by_partition.items():
            small = self.small_by_partition.setdefault(key, [0, 0])
            small[0] += files
            small[1] += size
        for key, sizes in other.candidates.items():
            self.candidates.setdefault(key, array("q")).extend(sizes)
        for key, values in other.partition_values.items():
            self.partition_values.setdefault(key, values)


@dataclass(frozen=True)
class CompactionEstimate:
    files: int  # data files compaction would rewrite
    bytes: int
    groups: int
    output_files: int  # the files it would write were they sized by their input bytes
    live_files: int

    @property
    def files_after(self) -> int:
        return self.live_files - self.files + self.output_files


def _size(signed: int) -> int:
    return -signed - 1 if signed < 0 else signed


def estimate_compaction(tally: Tally, options: RewriteOptions) -> CompactionEstimate:
    """What ``plan_rewrite`` would plan on these files with these options, from the sizes alone."""
    files = size = groups = outputs = 0
    for sizes in tally.candidates.values():
        for group in pack(sizes, options.max_file_group_size, _size):
            group_size = sum(_size(s) for s in group)
            issue = any(s < 0 for s in group)
            if not worth_rewriting(len(group), group_size, issue, options):
                continue
            files += len(group)
            size += group_size
            groups += 1
            outputs += options.expected_output_files(group_size)
    return CompactionEstimate(files, size, groups, outputs, tally.data_files)


def histogram_rows(tally: Tally) -> list[dict[str, int | None]]:
    """The histogram as rows of (from, below, files, bytes); ``below`` None for the last bucket."""
    rows: list[dict[str, int | None]] = []
    low = 0
    for i, (files, size) in enumerate(tally.histogram):
        high = tally.bounds[i] if i < len(tally.bounds) else None
        rows.append({"from_bytes": low, "below_bytes": high, "files": files, "bytes": size})
        low = high or low
    return rows


def top_small_partitions(
    tally: Tally, names: Mapping[int, tuple[str, ...]], limit: int = 10
) -> list[dict[str, object]]:
    """The partitions holding the most small files, their values by partition field name."""
    ranked = sorted(tally.small_by_partition.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))[:limit]
    rows: list[dict[str, object]] = []
    for key, (files, size) in ranked:
        spec_id, values = tally.partition_values[key]
        fields = names.get(spec_id, ())
        rows.append(
            {
                "spec_id": spec_id,
                "partition": {n: json_value(v) for n, v in zip(fields, values, strict=False)},
                "small_files": files,
                "small_bytes": size,
            }
        )
    return rows


def tally_entries(
    data: Iterable[tuple[ManifestEntry, AppliedDeletes]],
    deletes: Iterable[ManifestEntry],
    options: RewriteOptions,
) -> Tally:
    """A tally of live entries (each data entry with the deletes that apply to it)."""
    tally = Tally(histogram_bounds(options))
    for entry, applied in data:
        tally.add_data(entry, applied, options)
    for entry in deletes:
        tally.add_delete(entry)
    return tally
