"""A snapshot's partition statistics summed from its manifests, as Iceberg Java's
``PartitionStatsHandler.computeAndWriteStatsFile`` computes them without an earlier file.

Every manifest of the snapshot's list is read, each on its own (``collect`` keeps no state, so
callers may run it in threads), and the parts merged in list order (``rows``):

- a live entry (added or existing) counts its file: a data file's records, one file and its size;
  a position delete file's records and one file, or, for a deletion vector (a Puffin entry), its
  records and one DV; an equality delete file's records and one file;
- every entry, a deleted one too, makes its snapshot the partition's last update when that
  snapshot is newer (by timestamp, the first seen winning a tie) and still in the metadata, so a
  partition whose files were all removed by this snapshot keeps a row of zero counts, as Java's;
- ``total_record_count`` stays null: it needs the data read, and Java leaves it null too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.content import DATA, DELETED, EQUALITY_DELETES, POSITION_DELETES, ManifestFile
from tablekeeper.iceberg.conversions import native_to_value
from tablekeeper.iceberg.manifest import id_names, open_avro, record_type
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.partition_stats import PartitionStats, sort_key, unified_partition_type
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.types import IcebergType, StructType

# (spec id, the partition tuple of that spec as a key)
Key = tuple[int, tuple[Any, ...]]


class Counts:
    """One partition's running sums (mutable: one per partition and manifest, merged after)."""

    __slots__ = (
        "data_bytes",
        "data_files",
        "data_records",
        "dvs",
        "equality_files",
        "equality_records",
        "position_files",
        "position_records",
        "spec_id",
        "updated_at",
        "updated_by",
        "values",
    )

    def __init__(self, spec_id: int, values: tuple[Any, ...]) -> None:
        self.spec_id = spec_id
        self.values = values  # in the unified partition type's order
        self.data_records = self.data_files = self.data_bytes = 0
        self.position_records = self.position_files = 0
        self.equality_records = self.equality_files = self.dvs = 0
        self.updated_at: int | None = None
        self.updated_by: int | None = None

    def touch(self, snapshot_id: int, timestamp_ms: int) -> None:
        if self.updated_at is None or self.updated_at < timestamp_ms:
            self.updated_at, self.updated_by = timestamp_ms, snapshot_id

    def merge(self, other: Counts) -> None:
        self.data_records += other.data_records
        self.data_files += other.data_files
        self.data_bytes += other.data_bytes
        self.position_records += other.position_records
        self.position_files += other.position_files
        self.equality_records += other.equality_records
        self.equality_files += other.equality_files
        self.dvs += other.dvs
        if other.updated_at is not None and other.updated_by is not None:
            self.touch(other.updated_by, other.updated_at)


class PartitionStatsTally:
    """The table's unified partition type and, per spec, where its fields sit in it."""

    def __init__(self, meta: TableMetadata) -> None:
        self.partition_type: StructType = unified_partition_type(meta)
        self.format_version = meta.format_version
        schema = meta.schema()
        self._specs: dict[int, tuple[StructType, tuple[int | None, ...]]] = {}
        for spec in meta.partition_specs:
            ptype = spec.partition_type(schema)
            # For each unified field, its position in this spec's tuple (None: not in the spec).
            at = {f.id: i for i, f in enumerate(ptype.fields)}
            self._specs[spec.spec_id] = (ptype, tuple(at.get(f.id) for f in self.partition_type.fields))
        self._timestamps: Mapping[int, int] = {s.snapshot_id: s.timestamp_ms for s in meta.snapshots}

    def collect(self, data: bytes, manifest: ManifestFile) -> dict[Key, Counts]:
        """The sums of one manifest's entries, by partition."""
        source = manifest.manifest_path
        spec_id = manifest.partition_spec_id
        known = self._specs.get(spec_id)
        if known is None:
            raise CorruptMetadataError(
                f"manifest {source} has partition spec {spec_id}, which the table lacks"
            )
        ptype, positions = known
        reader = open_avro(data, f"manifest {source}")
        top = id_names(reader.writer_schema)
        df_schema = record_type(
            next(f["type"] for f in reader.writer_schema["fields"] if f.get("field-id") == 2)
        )
        df = id_names(df_schema)
        part_names = id_names(
            record_type(next(f["type"] for f in df_schema["fields"] if f.get("field-id") == 102))
        )
        fields: list[tuple[IcebergType, str | None]] = [
            (pf.type, part_names.get(pf.id)) for pf in ptype.fields
        ]
        status_name, snapshot_name, data_name = top[0], top.get(1), top[2]
        part_name, content_name, format_name = df[102], df.get(134), df[101]
        records_name, size_name = df[103], df[104]
        inherited, timestamps = manifest.added_snapshot_id, self._timestamps
        out: dict[Key, Counts] = {}
        try:
            for rec in reader:
                raw = rec[data_name]
                part_rec = raw[part_name] or {}
                values = tuple(
                    None if name is None else native_to_value(t, part_rec.get(name)) for t, name in fields
                )
                key = (spec_id, partition_key(values))
                counts = out.get(key)
                if counts is None:
                    unified = tuple(None if p is None else values[p] for p in positions)
                    counts = out[key] = Counts(spec_id, unified)
                if rec[status_name] != DELETED:
                    content = DATA if content_name is None else raw.get(content_name, DATA)
                    records = int(raw[records_name])
                    if content == DATA:
                        counts.data_records += records
                        counts.data_files += 1
                        counts.data_bytes += int(raw[size_name])
                    elif content == POSITION_DELETES:
                        counts.position_records += records
                        if str(raw[format_name]).upper() == "PUFFIN":
                            counts.dvs += 1
                        else:
                            counts.position_files += 1
                    elif content == EQUALITY_DELETES:
                        counts.equality_records += records
                        counts.equality_files += 1
                    else:
                        raise CorruptMetadataError(f"manifest {source} has an entry of content {content}")
                snapshot_id = rec.get(snapshot_name) if snapshot_name is not None else None
                if snapshot_id is None:
                    snapshot_id = inherited
                at = timestamps.get(snapshot_id)
                if at is not None:  # an expired snapshot updates nothing, as in Java
                    counts.touch(snapshot_id, at)
        except CorruptMetadataError:
            raise
        except (ValueError, EOFError, KeyError, TypeError, IndexError, UnicodeDecodeError) as err:
            raise CorruptMetadataError(
                f"manifest {source} is truncated or corrupt ({err.__class__.__name__})"
            ) from err
        return out

    def rows(self, parts: Iterable[Mapping[Key, Counts]]) -> tuple[PartitionStats, ...]:
        """The parts merged (in the order given) into rows sorted as the spec asks; empty when no
        manifest had an entry (Java then writes no file)."""
        merged: dict[Key, Counts] = {}
        for part in parts:
            for key, counts in part.items():
                have = merged.get(key)
                if have is None:
                    merged[key] = counts
                else:
                    have.merge(counts)
        names = [f.name for f in self.partition_type.fields]
        ordered = sorted(merged.values(), key=lambda c: sort_key(self.partition_type, c.values, c.spec_id))
        return tuple(
            PartitionStats(
                partition=dict(zip(names, c.values, strict=True)),
                spec_id=c.spec_id,
                data_record_count=c.data_records,
                data_file_count=c.data_files,
                total_data_file_size_in_bytes=c.data_bytes,
                position_delete_record_count=c.position_records,
                position_delete_file_count=c.position_files,
                equality_delete_record_count=c.equality_records,
                equality_delete_file_count=c.equality_files,
                total_record_count=None,
                last_updated_at=c.updated_at,
                last_updated_snapshot_id=c.updated_by,
                dv_count=c.dvs,
            )
            for c in ordered
        )
