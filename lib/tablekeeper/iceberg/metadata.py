"""Table metadata v1/v2/v3: parse every key, write in Iceberg Java's key order.

Tables written under the October-2024 row-lineage draft (a ``row-lineage`` boolean, ``next-row-id``
only when enabled) are read and normalised to the final v3 form: lineage is implied by version 3
and ``next-row-id`` is always present.
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.partitioning import (
    UNPARTITIONED,
    UNSORTED,
    PartitionSpec,
    SortOrder,
    partition_fields_to_json,
    partition_spec_from_json,
    partition_spec_to_json,
    sort_order_from_json,
    sort_order_to_json,
    spec_from_fields,
)
from tablekeeper.iceberg.types import Schema, schema_from_json, schema_to_json

log = logging.getLogger(__name__)

SUPPORTED_FORMAT_VERSIONS = (1, 2, 3)
MIN_ROW_LINEAGE_VERSION = 3
MAIN_BRANCH = "main"
# Properties Java derives from metadata and never persists.
RESERVED_PROPERTIES = frozenset(
    {
        "format-version",
        "uuid",
        "snapshot-count",
        "current-snapshot-id",
        "current-snapshot-summary",
        "current-snapshot-timestamp-ms",
        "current-schema",
        "default-partition-spec",
        "default-sort-order",
    }
)


@dataclass(frozen=True)
class SnapshotRef:
    snapshot_id: int
    type: str  # "branch" | "tag"
    min_snapshots_to_keep: int | None = None
    max_snapshot_age_ms: int | None = None
    max_ref_age_ms: int | None = None

    @property
    def is_branch(self) -> bool:
        return self.type == "branch"


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    timestamp_ms: int
    manifest_list: str | None
    sequence_number: int = 0
    parent_snapshot_id: int | None = None
    summary: Mapping[str, str] = field(default_factory=dict, hash=False)
    schema_id: int | None = None
    first_row_id: int | None = None
    added_rows: int | None = None
    key_id: str | None = None
    # v1 only: manifests embedded in the snapshot instead of a manifest list.
    manifests: tuple[str, ...] = ()

    @property
    def operation(self) -> str:
        # A summary without an operation is read as an overwrite (spec).
        return self.summary.get("operation", "overwrite")


@dataclass(frozen=True)
class SnapshotLogEntry:
    timestamp_ms: int
    snapshot_id: int


@dataclass(frozen=True)
class MetadataLogEntry:
    timestamp_ms: int
    metadata_file: str


@dataclass(frozen=True)
class BlobMetadata:
    type: str
    snapshot_id: int
    sequence_number: int
    fields: tuple[int, ...]
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class StatisticsFile:
    snapshot_id: int
    statistics_path: str
    file_size_in_bytes: int
    file_footer_size_in_bytes: int
    key_metadata: str | None = None
    blob_metadata: tuple[BlobMetadata, ...] = ()


@dataclass(frozen=True)
class PartitionStatisticsFile:
    snapshot_id: int
    statistics_path: str
    file_size_in_bytes: int


@dataclass(frozen=True)
class TableMetadata:
    format_version: int
    table_uuid: str
    location: str
    last_updated_ms: int
    last_column_id: int
    schemas: tuple[Schema, ...]
    current_schema_id: int
    partition_specs: tuple[PartitionSpec, ...]
    default_spec_id: int
    last_partition_id: int
    sort_orders: tuple[SortOrder, ...] = (UNSORTED,)
    default_sort_order_id: int = 0
    last_sequence_number: int = 0
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)
    current_snapshot_id: int | None = None
    snapshots: tuple[Snapshot, ...] = ()
    snapshot_log: tuple[SnapshotLogEntry, ...] = ()
    metadata_log: tuple[MetadataLogEntry, ...] = ()
    refs: Mapping[str, SnapshotRef] = field(default_factory=dict, hash=False)
    statistics: tuple[StatisticsFile, ...] = ()
    partition_statistics: tuple[PartitionStatisticsFile, ...] = ()
    next_row_id: int | None = None
    # Kept verbatim: tablekeeper neither reads nor writes encrypted tables' keys.
    encryption_keys: tuple[Mapping[str, Any], ...] = ()

    # -- lookups ------------------------------------------------------------------------------

    @property
    def row_lineage(self) -> bool:
        return self.format_version >= MIN_ROW_LINEAGE_VERSION

    def schema(self, schema_id: int | None = None) -> Schema:
        wanted = self.current_schema_id if schema_id is None else schema_id
        for s in self.schemas:
            if s.schema_id == wanted:
                return s
        raise CorruptMetadataError(f"table metadata has no schema with id {wanted}")

    def spec(self, spec_id: int | None = None) -> PartitionSpec:
        wanted = self.default_spec_id if spec_id is None else spec_id
        for s in self.partition_specs:
            if s.spec_id == wanted:
                return s
        raise CorruptMetadataError(f"table metadata has no partition spec with id {wanted}")

    def specs_by_id(self) -> dict[int, PartitionSpec]:
        return {s.spec_id: s for s in self.partition_specs}

    @property
    def unpartitioned_spec_ids(self) -> frozenset[int]:
        """The specs whose equality deletes are global: no field, or only void ones (a v1 table's
        dropped partition field stays as void), as Java's ``PartitionSpec.isUnpartitioned``."""
        return frozenset(s.spec_id for s in self.partition_specs if s.is_unpartitioned)

    def sort_order(self, order_id: int | None = None) -> SortOrder:
        wanted = self.default_sort_order_id if order_id is None else order_id
        for o in self.sort_orders:
            if o.order_id == wanted:
                return o
        raise CorruptMetadataError(f"table metadata has no sort order with id {wanted}")

    def snapshot(self, snapshot_id: int) -> Snapshot | None:
        return next((s for s in self.snapshots if s.snapshot_id == snapshot_id), None)

    def current_snapshot(self) -> Snapshot | None:
        return None if self.current_snapshot_id is None else self.snapshot(self.current_snapshot_id)

    def ref_snapshot(self, ref: str) -> Snapshot | None:
        target = self.refs.get(ref)
        if target is None:
            return self.current_snapshot() if ref == MAIN_BRANCH else None
        return self.snapshot(target.snapshot_id)

    def ancestors(self, snapshot_id: int | None) -> list[Snapshot]:
        """The snapshot and its parents, newest first, stopping where history was expired."""
        out: list[Snapshot] = []
        seen: set[int] = set()
        current = None if snapshot_id is None else self.snapshot(snapshot_id)
        while current is not None and current.snapshot_id not in seen:
            out.append(current)
            seen.add(current.snapshot_id)
            parent = current.parent_snapshot_id
            current = None if parent is None else self.snapshot(parent)
        return out

    def next_sequence_number(self) -> int:
        return self.last_sequence_number + 1 if self.format_version > 1 else 0

    @property
    def data_location(self) -> str:
        """Where new data files go: ``write.data.path``, else ``<location>/data``."""
        return (self.properties.get("write.data.path") or f"{self.location.rstrip('/')}/data").rstrip("/")

    def property_int(self, key: str, default: int) -> int:
        raw = self.properties.get(key)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise CorruptMetadataError(f"table property {key}={raw!r} is not an integer") from None

    def property_bool(self, key: str, default: bool) -> bool:
        raw = self.properties.get(key)
        return default if raw is None else raw.strip().lower() == "true"


# -----------------------------------------------------------------------------------------------
# Parsing


def _get(obj: Mapping[str, Any], key: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise CorruptMetadataError(f"table metadata is missing required key {key!r}") from None


def decode_metadata_bytes(data: bytes, source: str = "table metadata") -> str:
    # Decide by content, not by name: Java names gzip files three different ways.
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise CorruptMetadataError(f"{source} is gzip that is truncated or corrupt ({err})") from err
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptMetadataError(f"{source} is not UTF-8 JSON: the file is corrupt") from err


def parse_table_metadata(data: bytes | str, source: str = "table metadata") -> TableMetadata:
    text = decode_metadata_bytes(data, source) if isinstance(data, bytes) else data
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise CorruptMetadataError(
            f"{source} is not valid JSON (line {err.lineno} col {err.colno}: {err.msg}); "
            "the file is truncated or corrupt"
        ) from err
    if not isinstance(obj, dict):
        raise CorruptMetadataError(f"{source} is not a JSON object")
    try:
        return _metadata_from_obj(obj)
    except CorruptMetadataError as err:
        raise CorruptMetadataError(f"{source}: {err.message}") from err
    except (TypeError, ValueError, AttributeError) as err:
        raise CorruptMetadataError(f"{source}: malformed value ({err})") from err


def _metadata_from_obj(obj: Mapping[str, Any]) -> TableMetadata:
    version = _get(obj, "format-version")
    if not isinstance(version, int) or version not in SUPPORTED_FORMAT_VERSIONS:
        raise UnsupportedFeatureError(
            f"Iceberg format version {version} is not supported (tablekeeper reads 1 to 3): "
            "upgrade tablekeeper"
        )
    if "schemas" in obj:
        schemas = tuple(schema_from_json(s) for s in obj["schemas"])
        current_schema_id = int(_get(obj, "current-schema-id"))
    else:
        schema = schema_from_json(_get(obj, "schema"))
        schemas, current_schema_id = (schema,), schema.schema_id
    if version > 1:
        # Java refuses v2+ metadata without these; defaulting them would reuse sequence numbers.
        for key in (
            "last-sequence-number",
            "partition-specs",
            "default-spec-id",
            "last-partition-id",
            "sort-orders",
            "default-sort-order-id",
        ):
            _get(obj, key)
    if "partition-specs" in obj:
        specs = tuple(partition_spec_from_json(s) for s in obj["partition-specs"])
        default_spec_id = int(_get(obj, "default-spec-id"))
    else:
        specs = (spec_from_fields(0, obj.get("partition-spec", [])),)
        default_spec_id = 0
    last_partition_id = int(
        obj.get("last-partition-id", max((s.last_assigned_field_id() for s in specs), default=999))
    )
    sort_orders = tuple(sort_order_from_json(o) for o in obj.get("sort-orders", [])) or (UNSORTED,)
    snapshots = tuple(_snapshot_from_obj(s) for s in obj.get("snapshots") or [])
    current = obj.get("current-snapshot-id")
    current_id = None if current is None or int(current) == -1 else int(current)
    refs = {name: _ref_from_obj(r) for name, r in (obj.get("refs") or {}).items()}
    if not refs and current_id is not None:
        # v1 and early v2 metadata has no refs: main is implied by the current snapshot.
        refs = {MAIN_BRANCH: SnapshotRef(current_id, "branch")}
    next_row_id = obj.get("next-row-id")
    draft_flag = obj.get("row-lineage")
    if version >= MIN_ROW_LINEAGE_VERSION and next_row_id is None:
        # Draft tables without lineage enabled: final v3 starts id assignment at 0, like an upgrade.
        log.info("normalising draft row-lineage metadata (row-lineage=%s): next-row-id=0", draft_flag)
        next_row_id = 0
    if version < MIN_ROW_LINEAGE_VERSION:
        next_row_id = None
    meta = TableMetadata(
        format_version=version,
        table_uuid=str(obj.get("table-uuid") or ""),
        location=str(_get(obj, "location")),
        last_updated_ms=int(_get(obj, "last-updated-ms")),
        last_column_id=int(_get(obj, "last-column-id")),
        schemas=schemas,
        current_schema_id=current_schema_id,
        partition_specs=specs or (UNPARTITIONED,),
        default_spec_id=default_spec_id,
        last_partition_id=last_partition_id,
        sort_orders=sort_orders,
        default_sort_order_id=int(obj.get("default-sort-order-id", sort_orders[0].order_id)),
        last_sequence_number=int(obj.get("last-sequence-number", 0)) if version > 1 else 0,
        properties={str(k): str(v) for k, v in (obj.get("properties") or {}).items()},
        current_snapshot_id=current_id,
        snapshots=snapshots,
        snapshot_log=tuple(
            SnapshotLogEntry(int(e["timestamp-ms"]), int(e["snapshot-id"]))
            for e in obj.get("snapshot-log") or []
        ),
        metadata_log=tuple(
            MetadataLogEntry(int(e["timestamp-ms"]), str(e["metadata-file"]))
            for e in obj.get("metadata-log") or []
        ),
        refs=refs,
        statistics=tuple(_statistics_from_obj(s) for s in obj.get("statistics") or []),
        partition_statistics=tuple(
            PartitionStatisticsFile(
                int(s["snapshot-id"]), str(s["statistics-path"]), int(s["file-size-in-bytes"])
            )
            for s in obj.get("partition-statistics") or []
        ),
        next_row_id=None if next_row_id is None else int(next_row_id),
        encryption_keys=tuple(obj.get("encryption-keys") or ()),
    )
    if version > 1 and not meta.table_uuid:
        raise CorruptMetadataError(f"format version {version} metadata has no table-uuid")
    validate(meta)
    return meta


def _snapshot_from_obj(obj: Mapping[str, Any]) -> Snapshot:
    parent = obj.get("parent-snapshot-id")
    schema_id = obj.get("schema-id")
    first_row_id = obj.get("first-row-id")
    added_rows = obj.get("added-rows")
    return Snapshot(
        snapshot_id=int(_get(obj, "snapshot-id")),
        timestamp_ms=int(_get(obj, "timestamp-ms")),
        manifest_list=obj.get("manifest-list"),
        sequence_number=int(obj.get("sequence-number", 0)),
        parent_snapshot_id=None if parent is None else int(parent),
        summary={str(k): str(v) for k, v in (obj.get("summary") or {}).items()},
        schema_id=None if schema_id is None else int(schema_id),
        first_row_id=None if first_row_id is None else int(first_row_id),
        added_rows=None if added_rows is None else int(added_rows),
        key_id=obj.get("key-id"),
        manifests=tuple(obj.get("manifests") or ()),
    )


def _ref_from_obj(obj: Mapping[str, Any]) -> SnapshotRef:
    def opt(key: str) -> int | None:
        v = obj.get(key)
        return None if v is None else int(v)

    kind = str(_get(obj, "type")).lower()
    if kind not in ("branch", "tag"):
        raise CorruptMetadataError(f"ref type {kind!r} is neither branch nor tag")
    return SnapshotRef(
        snapshot_id=int(_get(obj, "snapshot-id")),
        type=kind,
        min_snapshots_to_keep=opt("min-snapshots-to-keep"),
        max_snapshot_age_ms=opt("max-snapshot-age-ms"),
        max_ref_age_ms=opt("max-ref-age-ms"),
    )


def _statistics_from_obj(obj: Mapping[str, Any]) -> StatisticsFile:
    return StatisticsFile(
        snapshot_id=int(obj["snapshot-id"]),
        statistics_path=str(obj["statistics-path"]),
        file_size_in_bytes=int(obj["file-size-in-bytes"]),
        file_footer_size_in_bytes=int(obj["file-footer-size-in-bytes"]),
        key_metadata=obj.get("key-metadata"),
        blob_metadata=tuple(
            BlobMetadata(
                type=str(b["type"]),
                snapshot_id=int(b["snapshot-id"]),
                sequence_number=int(b["sequence-number"]),
                fields=tuple(int(f) for f in b.get("fields", ())),
                properties={str(k): str(v) for k, v in (b.get("properties") or {}).items()},
            )
            for b in obj.get("blob-metadata") or []
        ),
    )


def validate(meta: TableMetadata) -> None:
    """Consistency checks Java also makes; any failure means the metadata cannot be trusted."""
    meta.schema()
    meta.spec()
    meta.sort_order()
    ids = {s.snapshot_id for s in meta.snapshots}
    if meta.current_snapshot_id is not None and meta.current_snapshot_id not in ids:
        raise CorruptMetadataError(f"current snapshot {meta.current_snapshot_id} is not in snapshots")
    for name, ref in meta.refs.items():
        if ref.snapshot_id not in ids:
            raise CorruptMetadataError(f"ref {name!r} points at missing snapshot {ref.snapshot_id}")
    main = meta.refs.get(MAIN_BRANCH)
    if main is not None and main.snapshot_id != meta.current_snapshot_id:
        raise CorruptMetadataError("refs.main and current-snapshot-id disagree")


# -----------------------------------------------------------------------------------------------
# Writing


def table_metadata_to_obj(meta: TableMetadata) -> dict[str, Any]:
    """The JSON object in Java's ``TableMetadataParser`` key order."""
    v = meta.format_version
    out: dict[str, Any] = {"format-version": v, "table-uuid": meta.table_uuid, "location": meta.location}
    if v > 1:
        out["last-sequence-number"] = meta.last_sequence_number
    out["last-updated-ms"] = meta.last_updated_ms
    out["last-column-id"] = meta.last_column_id
    if v == 1:
        out["schema"] = schema_to_json(meta.schema())
    out["current-schema-id"] = meta.current_schema_id
    out["schemas"] = [schema_to_json(s) for s in meta.schemas]
    if v == 1:
        out["partition-spec"] = partition_fields_to_json(meta.spec())
    out["default-spec-id"] = meta.default_spec_id
    out["partition-specs"] = [partition_spec_to_json(s) for s in meta.partition_specs]
    out["last-partition-id"] = meta.last_partition_id
    out["default-sort-order-id"] = meta.default_sort_order_id
    out["sort-orders"] = [sort_order_to_json(o) for o in meta.sort_orders]
    out["properties"] = {k: v for k, v in meta.properties.items() if k not in RESERVED_PROPERTIES}
    if meta.current_snapshot_id is not None:
        out["current-snapshot-id"] = meta.current_snapshot_id
    else:
        out["current-snapshot-id"] = None if v >= 3 else -1
    if v >= MIN_ROW_LINEAGE_VERSION:
        out["next-row-id"] = meta.next_row_id or 0
    if meta.encryption_keys:
        out["encryption-keys"] = [dict(k) for k in meta.encryption_keys]
    out["refs"] = {name: ref_to_obj(r) for name, r in meta.refs.items()}
    out["snapshots"] = [snapshot_to_obj(s, v) for s in meta.snapshots]
    out["statistics"] = [statistics_to_obj(s) for s in meta.statistics]
    out["partition-statistics"] = [
        {
            "snapshot-id": s.snapshot_id,
            "statistics-path": s.statistics_path,
            "file-size-in-bytes": s.file_size_in_bytes,
        }
        for s in meta.partition_statistics
    ]
    out["snapshot-log"] = [
        {"timestamp-ms": e.timestamp_ms, "snapshot-id": e.snapshot_id} for e in meta.snapshot_log
    ]
    out["metadata-log"] = [
        {"timestamp-ms": e.timestamp_ms, "metadata-file": e.metadata_file} for e in meta.metadata_log
    ]
    return out


def ref_to_obj(ref: SnapshotRef) -> dict[str, Any]:
    out: dict[str, Any] = {"snapshot-id": ref.snapshot_id, "type": ref.type}
    for key, value in (
        ("min-snapshots-to-keep", ref.min_snapshots_to_keep),
        ("max-snapshot-age-ms", ref.max_snapshot_age_ms),
        ("max-ref-age-ms", ref.max_ref_age_ms),
    ):
        if value is not None:
            out[key] = value
    return out


def snapshot_to_obj(s: Snapshot, format_version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s.sequence_number > 0:
        out["sequence-number"] = s.sequence_number
    out["snapshot-id"] = s.snapshot_id
    if s.parent_snapshot_id is not None:
        out["parent-snapshot-id"] = s.parent_snapshot_id
    out["timestamp-ms"] = s.timestamp_ms
    if s.summary:
        summary = {"operation": s.operation}
        summary.update({k: v for k, v in s.summary.items() if k != "operation"})
        out["summary"] = summary
    if s.manifest_list is not None:
        out["manifest-list"] = s.manifest_list
    elif s.manifests:
        out["manifests"] = list(s.manifests)
    if s.schema_id is not None:
        out["schema-id"] = s.schema_id
    if format_version >= MIN_ROW_LINEAGE_VERSION and s.first_row_id is not None:
        out["first-row-id"] = s.first_row_id
        if s.added_rows is not None:
            out["added-rows"] = s.added_rows
    if s.key_id is not None:
        out["key-id"] = s.key_id
    return out


def statistics_to_obj(s: StatisticsFile) -> dict[str, Any]:
    out: dict[str, Any] = {
        "snapshot-id": s.snapshot_id,
        "statistics-path": s.statistics_path,
        "file-size-in-bytes": s.file_size_in_bytes,
        "file-footer-size-in-bytes": s.file_footer_size_in_bytes,
    }
    if s.key_metadata is not None:
        out["key-metadata"] = s.key_metadata
    blobs = []
    for b in s.blob_metadata:
        blob: dict[str, Any] = {
            "type": b.type,
            "snapshot-id": b.snapshot_id,
            "sequence-number": b.sequence_number,
            "fields": list(b.fields),
        }
        if b.properties:
            blob["properties"] = dict(b.properties)
        blobs.append(blob)
    out["blob-metadata"] = blobs
    return out


def table_metadata_to_json(meta: TableMetadata) -> str:
    validate(meta)
    return json.dumps(table_metadata_to_obj(meta), separators=(",", ":"), ensure_ascii=False)


def table_metadata_to_bytes(meta: TableMetadata, gzip_codec: bool = False) -> bytes:
    data = table_metadata_to_json(meta).encode("utf-8")
    return gzip.compress(data, mtime=0) if gzip_codec else data


def with_changes(meta: TableMetadata, **changes: Any) -> TableMetadata:
    """``dataclasses.replace`` that re-validates, so no inconsistent metadata is ever built."""
    updated = replace(meta, **changes)
    validate(updated)
    return updated
