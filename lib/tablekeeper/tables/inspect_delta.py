"""``tablekeeper inspect --format delta``: a Delta snapshot as JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson

from tablekeeper.delta.snapshot import DeltaSnapshot


def inspect_delta(snapshot: DeltaSnapshot, with_files: bool = True) -> dict[str, Any]:
    p = snapshot.protocol
    out: dict[str, Any] = {
        "table": snapshot.root,
        "format": "delta",
        "version": snapshot.version,
        "timestamp_ms": snapshot.timestamp_ms,
        "checkpoint_version": snapshot.checkpoint_version,
        "protocol": {
            "min_reader_version": p.min_reader_version,
            "min_writer_version": p.min_writer_version,
            "reader_features": sorted(p.effective_reader_features),
            "writer_features": sorted(p.effective_writer_features),
        },
        "metadata_id": snapshot.metadata.id,
        "schema": orjson.loads(snapshot.metadata.schema_string) if snapshot.metadata.schema_string else None,
        "partition_columns": list(snapshot.partition_columns),
        "configuration": dict(snapshot.metadata.configuration),
        "column_mapping_mode": snapshot.column_mapping.mode,
        "num_files": snapshot.num_files,
        "num_tombstones": snapshot.tombstones.num_rows,
        "txns": {k: asdict(v) for k, v in snapshot.txns.items()},
        "domains": sorted(snapshot.domains),
    }
    if with_files:
        files = []
        for f in snapshot.add_files():
            dv = f.deletion_vector
            files.append(
                {
                    "path": f.path,
                    "absolute_path": f.absolute_path,
                    "size": f.size,
                    "modification_time": f.modification_time,
                    "partition_values": dict(f.partition_values),
                    "stats": orjson.loads(f.stats) if f.stats else None,
                    "deletion_vector": None if dv is None else {**asdict(dv), "unique_id": dv.unique_id},
                    "base_row_id": f.base_row_id,
                    "default_row_commit_version": f.default_row_commit_version,
                }
            )
        out["files"] = files
    return out
