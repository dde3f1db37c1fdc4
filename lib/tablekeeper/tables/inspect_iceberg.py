"""``tablekeeper inspect``: a table's metadata tables (as Iceberg names them) as JSON."""

from __future__ import annotations

from typing import Any

from tablekeeper.catalog import LoadedTable
from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.content import ManifestEntry, ManifestFile
from tablekeeper.iceberg.conversions import to_json
from tablekeeper.iceberg.metadata import Snapshot, table_metadata_to_obj
from tablekeeper.iceberg.types import UNKNOWN
from tablekeeper.tables.iceberg import load_manifests, read_entries

SECTIONS = ("metadata", "snapshots", "refs", "manifests", "files")
STATUS = {0: "EXISTING", 1: "ADDED", 2: "DELETED"}


def _snapshot(s: Snapshot) -> dict[str, Any]:
    return {
        "snapshot_id": s.snapshot_id,
        "parent_id": s.parent_snapshot_id,
        "committed_at_ms": s.timestamp_ms,
        "sequence_number": s.sequence_number,
        "operation": s.operation,
        "manifest_list": s.manifest_list,
        "schema_id": s.schema_id,
        "first_row_id": s.first_row_id,
        "added_rows": s.added_rows,
        "summary": dict(s.summary),
    }


def _manifest(m: ManifestFile) -> dict[str, Any]:
    return {
        "path": m.manifest_path,
        "length": m.manifest_length,
        "partition_spec_id": m.partition_spec_id,
        "content": m.content,
        "sequence_number": m.sequence_number,
        "min_sequence_number": m.min_sequence_number,
        "added_snapshot_id": m.added_snapshot_id,
        "added_data_files_count": m.added_files_count,
        "existing_data_files_count": m.existing_files_count,
        "deleted_data_files_count": m.deleted_files_count,
        "added_rows_count": m.added_rows_count,
        "existing_rows_count": m.existing_rows_count,
        "deleted_rows_count": m.deleted_rows_count,
        "first_row_id": m.first_row_id,
    }


def _file(entry: ManifestEntry, partition_names: list[tuple[str, Any]]) -> dict[str, Any]:
    f = entry.data_file
    return {
        "status": STATUS.get(entry.status, str(entry.status)),
        "snapshot_id": entry.snapshot_id,
        "sequence_number": entry.sequence_number,
        "file_sequence_number": entry.file_sequence_number,
        "content": f.content,
        "file_path": f.file_path,
        "file_format": f.file_format,
        "spec_id": f.spec_id,
        "partition": {
            name: (None if value is None or t == UNKNOWN else to_json(t, value))
            for (name, t), value in zip(partition_names, f.partition, strict=False)
        },
        "record_count": f.record_count,
        "file_size_in_bytes": f.file_size_in_bytes,
        "first_row_id": f.first_row_id,
        "referenced_data_file": f.referenced_data_file,
        "content_offset": f.content_offset,
        "content_size_in_bytes": f.content_size_in_bytes,
    }


def inspect_table(table: LoadedTable, what: str = "all", snapshot_id: int | None = None) -> dict[str, Any]:
    if what not in (*SECTIONS, "all"):
        raise ConfigError(f"--what {what!r} is not one of {', '.join((*SECTIONS, 'all'))}")
    meta = table.metadata
    snapshot = meta.current_snapshot() if snapshot_id is None else meta.snapshot(snapshot_id)
    if snapshot_id is not None and snapshot is None:
        known = ", ".join(str(s.snapshot_id) for s in meta.snapshots[-5:]) or "none"
        raise ConfigError(f"snapshot {snapshot_id} is not in {table.identifier} (latest: {known})")
    out: dict[str, Any] = {
        "table": table.identifier,
        "metadata_location": table.metadata_location,
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
    }
    wanted = SECTIONS if what == "all" else (what,)
    if "metadata" in wanted:
        out["metadata"] = table_metadata_to_obj(meta)
    if "snapshots" in wanted:
        out["snapshots"] = [_snapshot(s) for s in meta.snapshots]
    if "refs" in wanted:
        out["refs"] = {
            name: {
                "type": r.type,
                "snapshot_id": r.snapshot_id,
                "min_snapshots_to_keep": r.min_snapshots_to_keep,
                "max_snapshot_age_ms": r.max_snapshot_age_ms,
                "max_ref_age_ms": r.max_ref_age_ms,
            }
            for name, r in meta.refs.items()
        }
    if "manifests" in wanted or "files" in wanted:
        manifests = load_manifests(table.io, snapshot)
        if "manifests" in wanted:
            out["manifests"] = [_manifest(m) for m in manifests]
        if "files" in wanted:
            schema = meta.schema()
            files: list[dict[str, Any]] = []
            for m in manifests:
                ptype = meta.spec(m.partition_spec_id).partition_type(schema)
                names = [(f.name, f.type) for f in ptype.fields]
                files.extend(_file(e, names) for e in read_entries(table.io, meta, m) if e.is_live)
            out["files"] = files
    return out
