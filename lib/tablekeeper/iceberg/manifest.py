"""Manifests and manifest lists (v1/v2/v3) as Iceberg Java writes them, read with inheritance.

Writing is pure (entries in, Avro bytes out) so Spark executors can write manifests in parallel;
the driver then writes the manifest list, where sequence numbers and v3 ``first_row_id`` ranges of
new manifests are assigned at commit time.
"""

from __future__ import annotations

import io
import json
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, NamedTuple

import fastavro

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.avro_encoder import Unencodable, write_container
from tablekeeper.iceberg.avro_schemas import (
    avro_name,
    iceberg_schema_json,
    manifest_entry_avro,
    manifest_entry_struct,
    manifest_file_avro,
    manifest_file_struct,
)
from tablekeeper.iceberg.bounds import PartitionBounds
from tablekeeper.iceberg.content import (
    ADDED,
    DATA,
    DELETED,
    EXISTING,
    MANIFEST_DATA,
    MANIFEST_DELETES,
    POSITION_DELETES,
    UNASSIGNED_SEQ,
    V1_BLOCK_SIZE,
    DataFile,
    FieldSummary,
    ManifestEntry,
    ManifestFile,
)
from tablekeeper.iceberg.conversions import native_to_value
from tablekeeper.iceberg.partitioning import PartitionSpec, partition_fields_to_json
from tablekeeper.iceberg.types import (
    DecimalType,
    IcebergType,
    PrimitiveType,
    Schema,
    StructType,
    schema_to_json,
)

AVRO_CODEC = "deflate"


# -----------------------------------------------------------------------------------------------
# Partition values: the project's Python representation <-> fastavro


def _to_avro_value(t: IcebergType, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(t, PrimitiveType) and t.name == "uuid":
        return value.bytes if isinstance(value, uuid.UUID) else bytes(value)
    if isinstance(t, DecimalType) and not isinstance(value, Decimal):
        return Decimal(value)
    return value


# -----------------------------------------------------------------------------------------------
# Writing manifests


def _int_map(values: Mapping[int, Any] | None) -> list[dict[str, Any]] | None:
    if values is None:
        return None
    return [{"key": k, "value": v} for k, v in sorted(values.items())]


def _data_file_record(
    f: DataFile, partition_fields: Sequence[tuple[str, IcebergType]], format_version: int
) -> dict[str, Any]:
    partition = {}
    for (name, t), value in zip(partition_fields, f.partition, strict=True):
        partition[name] = _to_avro_value(t, value)
    rec: dict[str, Any] = {
        "content": f.content,
        "file_path": f.file_path,
        "file_format": f.file_format.upper(),
        "partition": partition,
        "record_count": f.record_count,
        "file_size_in_bytes": f.file_size_in_bytes,
        "block_size_in_bytes": V1_BLOCK_SIZE,
        "column_sizes": _int_map(f.column_sizes),
        "value_counts": _int_map(f.value_counts),
        "null_value_counts": _int_map(f.null_value_counts),
        "nan_value_counts": _int_map(f.nan_value_counts),
        "lower_bounds": _int_map(f.lower_bounds),
        "upper_bounds": _int_map(f.upper_bounds),
        "key_metadata": f.key_metadata,
        "split_offsets": list(f.split_offsets) if f.split_offsets is not None else None,
        "equality_ids": list(f.equality_ids) if f.equality_ids is not None else None,
        "sort_order_id": f.sort_order_id,
    }
    if format_version >= 2:
        # Java nulls these by content; keep the same so readers see identical files.
        is_pos = f.content == POSITION_DELETES
        rec["referenced_data_file"] = f.referenced_data_file if is_pos else None
    if format_version >= 3:
        rec["first_row_id"] = f.first_row_id if f.content == DATA else None
        rec["content_offset"] = f.content_offset if f.content == POSITION_DELETES else None
        rec["content_size_in_bytes"] = f.content_size_in_bytes if f.content == POSITION_DELETES else None
    return rec


def _entry_record(
    e: ManifestEntry, partition_fields: Sequence[tuple[str, IcebergType]], format_version: int
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "status": e.status,
        "snapshot_id": e.snapshot_id,
        "data_file": _data_file_record(e.data_file, partition_fields, format_version),
    }
    if format_version >= 2:
        rec["sequence_number"] = e.sequence_number
        rec["file_sequence_number"] = e.file_sequence_number
    return rec


def _manifest_header(
    format_version: int, spec: PartitionSpec, schema: Schema, content: int
) -> tuple[StructType, dict[str, Any], dict[str, str]]:
    """The partition type, the entry Avro schema and the file metadata Java writes."""
    partition_type = spec.partition_type(schema)
    struct = manifest_entry_struct(format_version, partition_type)
    avro_schema = manifest_entry_avro(format_version, partition_type)
    metadata = {
        "schema": json.dumps(schema_to_json(schema), separators=(",", ":")),
        "partition-spec": json.dumps(partition_fields_to_json(spec), separators=(",", ":")),
        "partition-spec-id": str(spec.spec_id),
        "format-version": str(format_version),
    }
    if format_version >= 2:
        metadata["content"] = "deletes" if content == MANIFEST_DELETES else "data"
    metadata["iceberg.schema"] = json.dumps(iceberg_schema_json(struct), separators=(",", ":"))
    return partition_type, avro_schema, metadata


class _Tally:
    """Entry counts, least live sequence number and partition summaries of one manifest."""

    def __init__(self, partition_type: StructType, format_version: int) -> None:
        self.format_version = format_version
        self.summaries = PartitionBounds(partition_type)
        self.counts = {ADDED: [0, 0], EXISTING: [0, 0], DELETED: [0, 0]}
        self.min_seq: int | None = None

    def add(
        self, status: int, record_count: int, sequence_number: int | None, partition: Sequence[Any], path: str
    ) -> None:
        if status not in self.counts:
            raise CorruptMetadataError(f"manifest entry status {status} is not 0, 1 or 2")
        if status != ADDED and self.format_version > 1 and sequence_number is None:
            raise ValueError(f"{path}: EXISTING/DELETED entries need explicit sequence numbers")
        self.counts[status][0] += 1
        self.counts[status][1] += record_count
        self.summaries.update(partition)
        if status != DELETED and sequence_number is not None:
            low = self.min_seq
            self.min_seq = sequence_number if low is None else min(low, sequence_number)

    def manifest(
        self, path: str, length: int, spec: PartitionSpec, snapshot_id: int, content: int
    ) -> ManifestFile:
        v1 = self.format_version <= 1
        counts = self.counts
        return ManifestFile(
            manifest_path=path,
            manifest_length=length,
            partition_spec_id=spec.spec_id,
            added_snapshot_id=snapshot_id,
            content=content,
            sequence_number=0 if v1 else UNASSIGNED_SEQ,
            min_sequence_number=0 if v1 else (self.min_seq if self.min_seq is not None else UNASSIGNED_SEQ),
            added_files_count=counts[ADDED][0],
            existing_files_count=counts[EXISTING][0],
            deleted_files_count=counts[DELETED][0],
            added_rows_count=counts[ADDED][1],
            existing_rows_count=counts[EXISTING][1],
            deleted_rows_count=counts[DELETED][1],
            partitions=tuple(FieldSummary(*f) for f in self.summaries.build()),
        )


def write_manifest(
    path: str,
    entries: Iterable[ManifestEntry],
    *,
    format_version: int,
    spec: PartitionSpec,
    schema: Schema,
    snapshot_id: int,
    content: int = MANIFEST_DATA,
) -> tuple[bytes, ManifestFile]:
    """Avro bytes of one manifest and its manifest-list row (sequence numbers unassigned if new).

    ``snapshot_id`` is the snapshot the manifest is written for; ADDED entries of that snapshot may
    leave their sequence numbers null to inherit them at commit.
    """
    partition_type, avro_schema, metadata = _manifest_header(format_version, spec, schema, content)
    partition_fields = [(avro_name(pf.name), pf.type) for pf in partition_type.fields]
    tally = _Tally(partition_type, format_version)
    checked: list[ManifestEntry] = []
    for e in entries:
        f = e.data_file
        tally.add(e.status, f.record_count, e.sequence_number, f.partition, f.file_path)
        checked.append(e)
    # Cycle: the entry encoder reads this module's models and constants.
    from tablekeeper.iceberg.entry_encoder import compile_entry_encoder

    entry_encoder = compile_entry_encoder(avro_schema)
    data = (
        write_container(avro_schema, checked, metadata=metadata, codec=AVRO_CODEC, encoder=entry_encoder)
        if entry_encoder is not None
        else None
    )
    if data is None:
        records = [_entry_record(e, partition_fields, format_version) for e in checked]
        buf = io.BytesIO()
        fastavro.writer(buf, avro_schema, records, codec=AVRO_CODEC, metadata=metadata)
        data = buf.getvalue()
    return data, tally.manifest(path, len(data), spec, snapshot_id, content)


class EncodedEntry(NamedTuple):
    """One manifest entry already encoded as its Avro record, with what the manifest-list row
    needs from it: entries travel between processes as these (a rewrite's shuffle), and a named
    tuple pickles at a fraction of a dataclass's cost."""

    status: int
    record_count: int
    sequence_number: int | None
    partition: tuple[Any, ...]
    path: str
    record: bytes


def entry_encoder(
    format_version: int, spec: PartitionSpec, schema: Schema, content: int = MANIFEST_DATA
) -> Callable[[ManifestEntry], EncodedEntry]:
    """Encodes entries for a manifest of ``spec``; the bytes are those ``write_manifest`` writes."""
    partition_type, avro_schema, _ = _manifest_header(format_version, spec, schema, content)
    from tablekeeper.iceberg.entry_encoder import compile_entry_encoder

    compiled = compile_entry_encoder(avro_schema)
    partition_fields = [(avro_name(pf.name), pf.type) for pf in partition_type.fields]
    parsed = fastavro.parse_schema(avro_schema)

    def encode(e: ManifestEntry) -> EncodedEntry:
        buf = bytearray()
        try:
            if compiled is None:
                raise Unencodable()
            compiled(buf, e)
            record = bytes(buf)
        except Unencodable:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, _entry_record(e, partition_fields, format_version))
            record = out.getvalue()
        f = e.data_file
        return EncodedEntry(e.status, f.record_count, e.sequence_number, f.partition, f.file_path, record)

    return encode


def write_encoded_manifest(
    path: str,
    entries: Iterable[EncodedEntry],
    *,
    format_version: int,
    spec: PartitionSpec,
    schema: Schema,
    snapshot_id: int,
    content: int = MANIFEST_DATA,
) -> tuple[bytes, ManifestFile]:
    """``write_manifest`` for entries ``entry_encoder`` encoded (for the same table and spec)."""
    partition_type, avro_schema, metadata = _manifest_header(format_version, spec, schema, content)
    tally = _Tally(partition_type, format_version)
    records: list[bytes] = []
    for e in entries:
        tally.add(e.status, e.record_count, e.sequence_number, e.partition, e.path)
        records.append(e.record)
    data = write_container(
        avro_schema, records, metadata=metadata, codec=AVRO_CODEC, encoder=bytearray.extend
    )
    assert data is not None  # the codec is one write_container writes, and bytes always encode
    return data, tally.manifest(path, len(data), spec, snapshot_id, content)


# -----------------------------------------------------------------------------------------------
# Manifest lists


@dataclass(frozen=True)
class ManifestListResult:
    data: bytes
    manifests: tuple[ManifestFile, ...]
    first_row_id: int | None  # v3: the snapshot's first-row-id
    added_rows: int | None  # v3: the id range the list assigned (Java's added-rows)


def assign_for_commit(
    manifests: Sequence[ManifestFile],
    *,
    format_version: int,
    snapshot_id: int,
    sequence_number: int,
    next_row_id: int | None,
) -> tuple[tuple[ManifestFile, ...], int | None]:
    """Give new manifests the commit's sequence number and v3 data manifests their row-id range."""
    out = []
    cursor = next_row_id
    for manifest in manifests:
        m = manifest
        if m.sequence_number == UNASSIGNED_SEQ:
            if m.added_snapshot_id != snapshot_id:
                raise ValueError(f"{m.manifest_path} is unassigned but was written for another snapshot")
            min_seq = sequence_number if m.min_sequence_number == UNASSIGNED_SEQ else m.min_sequence_number
            m = replace(m, sequence_number=sequence_number, min_sequence_number=min_seq)
        if format_version >= 3 and m.content == MANIFEST_DATA and m.first_row_id is None:
            assert cursor is not None, "v3 commits need the table's next-row-id"
            added, existing = m.added_rows_count, m.existing_rows_count
            if added is None or existing is None:
                raise CorruptMetadataError(
                    f"{m.manifest_path} has no row counts (v1 manifest): rewrite it before assigning row ids"
                )
            m = replace(m, first_row_id=cursor)
            cursor += added + existing
        elif m.content == MANIFEST_DELETES and m.first_row_id is not None:
            m = replace(m, first_row_id=None)
        out.append(m)
    return tuple(out), cursor


def _summary_record(s: FieldSummary) -> dict[str, Any]:
    return {
        "contains_null": s.contains_null,
        "contains_nan": s.contains_nan,
        "lower_bound": s.lower_bound,
        "upper_bound": s.upper_bound,
    }


def write_manifest_list(
    manifests: Sequence[ManifestFile],
    *,
    format_version: int,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    next_row_id: int | None = None,
) -> ManifestListResult:
    assigned, cursor = assign_for_commit(
        manifests,
        format_version=format_version,
        snapshot_id=snapshot_id,
        sequence_number=sequence_number,
        next_row_id=next_row_id,
    )
    records = []
    for m in assigned:
        rec: dict[str, Any] = {
            "manifest_path": m.manifest_path,
            "manifest_length": m.manifest_length,
            "partition_spec_id": m.partition_spec_id,
            "content": m.content,
            "sequence_number": m.sequence_number,
            "min_sequence_number": m.min_sequence_number,
            "added_snapshot_id": m.added_snapshot_id,
            "added_files_count": m.added_files_count,
            "existing_files_count": m.existing_files_count,
            "deleted_files_count": m.deleted_files_count,
            "added_rows_count": m.added_rows_count,
            "existing_rows_count": m.existing_rows_count,
            "deleted_rows_count": m.deleted_rows_count,
            "partitions": None if m.partitions is None else [_summary_record(s) for s in m.partitions],
            "key_metadata": m.key_metadata,
            "first_row_id": m.first_row_id,
        }
        records.append(rec)
    metadata = {
        "snapshot-id": str(snapshot_id),
        # Java writes String.valueOf(null) when there is no parent.
        "parent-snapshot-id": str(parent_snapshot_id) if parent_snapshot_id is not None else "null",
    }
    if format_version >= 2:
        metadata["sequence-number"] = str(sequence_number)
    if format_version >= 3:
        metadata["first-row-id"] = str(next_row_id)
    metadata["format-version"] = str(format_version)
    struct = manifest_file_struct(format_version)
    metadata["iceberg.schema"] = json.dumps(iceberg_schema_json(struct), separators=(",", ":"))
    buf = io.BytesIO()
    fastavro.writer(buf, manifest_file_avro(format_version), records, codec=AVRO_CODEC, metadata=metadata)
    if format_version >= 3:
        assert next_row_id is not None and cursor is not None
        return ManifestListResult(buf.getvalue(), assigned, next_row_id, cursor - next_row_id)
    return ManifestListResult(buf.getvalue(), assigned, None, None)


# -----------------------------------------------------------------------------------------------
# Reading (by field id, so renamed Avro fields from old writers still resolve)


def open_avro(data: bytes, what: str, blocks: bool = False) -> Any:
    """A record reader over ``data`` (a block reader with ``blocks``), failing as corrupt metadata."""
    try:
        return (fastavro.block_reader if blocks else fastavro.reader)(io.BytesIO(data))
    except Exception as err:  # fastavro raises ValueError/EOFError/SchemaParseException alike
        raise CorruptMetadataError(
            f"{what} is not a readable Avro file ({err.__class__.__name__}: {err})"
        ) from err


def count_entries(data: bytes, source: str) -> int:
    """Entries in a manifest from its Avro block headers alone (no record is decoded)."""
    try:
        return sum(block.num_records for block in open_avro(data, f"manifest {source}", blocks=True))
    except (ValueError, EOFError, zlib.error) as err:
        what = err.__class__.__name__
        raise CorruptMetadataError(f"manifest {source} is truncated or corrupt ({what})") from err


def id_names(record_schema: Mapping[str, Any]) -> dict[int, str]:
    return {int(f["field-id"]): f["name"] for f in record_schema.get("fields", []) if "field-id" in f}


def record_type(avro_type: Any) -> Mapping[str, Any]:
    if isinstance(avro_type, list):
        avro_type = next(t for t in avro_type if t != "null")
    if not isinstance(avro_type, Mapping):
        raise CorruptMetadataError("manifest schema has an unexpected nested type")
    return avro_type


def _map(value: Any) -> dict[int, Any] | None:
    if value is None:
        return None
    if isinstance(value, dict):  # maps written as Avro maps (string keys)
        return {int(k): v for k, v in value.items()}
    return {int(kv["key"]): kv["value"] for kv in value}


def read_manifest_list(data: bytes, source: str = "manifest list") -> list[ManifestFile]:
    reader = open_avro(data, source)
    names = id_names(reader.writer_schema)
    version = int(reader.metadata.get("format-version", "1")) if reader.metadata else 1

    def get(rec: Mapping[str, Any], fid: int, default: Any = None) -> Any:
        name = names.get(fid)
        return rec.get(name, default) if name is not None else default

    out = []
    try:
        for rec in reader:
            parts = get(rec, 507)
            out.append(
                ManifestFile(
                    manifest_path=str(get(rec, 500)),
                    manifest_length=int(get(rec, 501)),
                    partition_spec_id=int(get(rec, 502)),
                    added_snapshot_id=int(get(rec, 503)),
                    content=int(get(rec, 517, MANIFEST_DATA)),
                    sequence_number=int(get(rec, 515, 0)),
                    min_sequence_number=int(get(rec, 516, 0)),
                    added_files_count=get(rec, 504),
                    existing_files_count=get(rec, 505),
                    deleted_files_count=get(rec, 506),
                    added_rows_count=get(rec, 512),
                    existing_rows_count=get(rec, 513),
                    deleted_rows_count=get(rec, 514),
                    partitions=None
                    if parts is None
                    else tuple(
                        FieldSummary(
                            p["contains_null"],
                            p.get("contains_nan"),
                            p.get("lower_bound"),
                            p.get("upper_bound"),
                        )
                        for p in parts
                    ),
                    key_metadata=get(rec, 519),
                    first_row_id=get(rec, 520) if version >= 3 else None,
                )
            )
    except (ValueError, EOFError, KeyError, TypeError, IndexError, UnicodeDecodeError, zlib.error) as err:
        raise CorruptMetadataError(f"{source} is truncated or corrupt ({err.__class__.__name__})") from err
    return out


def read_manifest(
    data: bytes,
    manifest: ManifestFile,
    partition_type: StructType,
    *,
    committed: bool = True,
) -> list[ManifestEntry]:
    """Entries of one manifest with snapshot-id, sequence-number and v3 first_row_id inheritance."""
    source = manifest.manifest_path
    reader = open_avro(data, f"manifest {source}")
    top = id_names(reader.writer_schema)
    df_schema = record_type(next(f["type"] for f in reader.writer_schema["fields"] if f.get("field-id") == 2))
    df_names = id_names(df_schema)
    part_schema = record_type(next(f["type"] for f in df_schema["fields"] if f.get("field-id") == 102))
    part_names = id_names(part_schema)
    part_fields = [(pf, part_names.get(pf.id)) for pf in partition_type.fields]
    spec_id = manifest.partition_spec_id
    next_row = manifest.first_row_id
    out = []
    try:
        for rec in reader:
            raw = rec[top[2]]

            def g(fid: int, default: Any = None, raw: Mapping[str, Any] = raw) -> Any:
                name = df_names.get(fid)
                return raw.get(name, default) if name is not None else default

            part_rec = raw[df_names[102]] or {}
            partition = tuple(
                None if name is None else native_to_value(pf.type, part_rec.get(name))
                for pf, name in part_fields
            )
            status = int(rec[top[0]])
            content = int(g(134, DATA))
            snapshot_id = rec.get(top.get(1, ""))
            seq = rec.get(top.get(3, ""))
            file_seq = rec.get(top.get(4, ""))
            if snapshot_id is None:
                snapshot_id = manifest.added_snapshot_id
            inherit = status == ADDED or manifest.sequence_number == 0
            if seq is None and inherit:
                seq = manifest.sequence_number
            if file_seq is None and inherit:
                file_seq = manifest.sequence_number
            first_row_id = g(142)
            if content == DATA:
                if next_row is None:
                    if committed:
                        first_row_id = None
                elif status != DELETED and first_row_id is None:
                    first_row_id = next_row
                    next_row += int(g(103))
            split = g(132)
            eq = g(135)
            data_file = DataFile(
                content=content,
                file_path=str(g(100)),
                file_format=str(g(101)).upper(),
                partition=partition,
                record_count=int(g(103)),
                file_size_in_bytes=int(g(104)),
                spec_id=spec_id,
                column_sizes=_map(g(108)),
                value_counts=_map(g(109)),
                null_value_counts=_map(g(110)),
                nan_value_counts=_map(g(137)),
                lower_bounds=_map(g(125)),
                upper_bounds=_map(g(128)),
                key_metadata=g(131),
                split_offsets=None if split is None else tuple(split),
                equality_ids=None if eq is None else tuple(eq),
                sort_order_id=g(140),
                first_row_id=first_row_id,
                referenced_data_file=g(143),
                content_offset=g(144),
                content_size_in_bytes=g(145),
            )
            out.append(ManifestEntry(status, int(snapshot_id), data_file, seq, file_seq))
    except (ValueError, EOFError, KeyError, TypeError, IndexError, UnicodeDecodeError, zlib.error) as err:
        raise CorruptMetadataError(
            f"manifest {source} is truncated or corrupt ({err.__class__.__name__})"
        ) from err
    return out
