"""Inventory reports as the stores' services write them, for tests: S3 Inventory (CSV gzipped
without a header and URL-encoded keys, ORC, Parquet; manifest.json and manifest.checksum under
<prefix>/<source bucket>/<config>/<time>/, data files under <config>/data/), Storage Insights
(<config>_<time>_<n>.csv|.parquet shards and <config>_<time>_manifest.json) and Azure blob
inventory (<yyyy>/<mm>/<dd>/<hh-mm-ss>/<rule>/ with <rule>-manifest.json, its .checksum, and
<rule>_<n>.csv|.parquet with a header row; names start with the container).

Each takes the objects to list as ``Listed`` rows and writes through tablekeeper's FileIO to the
store the destination names.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import quote_plus

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import orc

from tablekeeper.io import FileIO


@dataclass(frozen=True)
class Listed:
    """One object as an inventory lists it: its key (blob name) in its bucket, size and time."""

    bucket: str
    key: str
    size: int
    mtime_ms: int
    latest: bool = True
    delete_marker: bool = False


def listing(io: FileIO, root: str, bucket: str, prefix: str = "") -> list[Listed]:
    """Every object under ``root``/``prefix`` as the store lists it now (``root`` is
    ``scheme://authority``)."""
    out = []
    for info in io.list(f"{root}/{prefix}".rstrip("/")):
        key = info.location[len(root) + 1 :]
        out.append(Listed(bucket, key, info.size, info.mtime_ms))
    return out


def _iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    )


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _timestamps(rows: Sequence[Listed]) -> pa.Array:
    return pa.array([r.mtime_ms for r in rows], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))


def write_s3(
    fileio: FileIO,
    destination: str,  # s3://bucket/prefix
    source_bucket: str,
    rows: Sequence[Listed],
    fmt: str,  # CSV | ORC | Parquet
    created_ms: int,
    *,
    config: str = "daily",
    files: int = 2,
    versioned: bool = False,
) -> str:
    """An S3 Inventory report of ``rows`` in ``files`` data files; returns its manifest."""
    bucket = destination.split("://", 1)[1].split("/", 1)[0]
    base = f"{destination.rstrip('/')}/{source_bucket}/{config}"
    run = datetime.fromtimestamp(created_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H-%MZ")
    names = ["Bucket", "Key", "Size", "LastModifiedDate"]
    if versioned:
        names[2:2] = ["VersionId", "IsLatest", "IsDeleteMarker"]
    entries = []
    for n in range(files):
        chunk = list(rows[n::files])
        if fmt == "CSV":
            lines = []
            for r in chunk:
                cells = [r.bucket, quote_plus(r.key, safe="/"), str(r.size), _iso(r.mtime_ms)]
                if versioned:
                    cells[2:2] = ["v1", str(r.latest).lower(), str(r.delete_marker).lower()]
                lines.append(",".join(f'"{c}"' for c in cells))
            data, suffix = gzip.compress(("\n".join(lines) + "\n").encode()), "csv.gz"
        else:
            columns = {
                "bucket": pa.array([r.bucket for r in chunk], pa.string()),
                "key": pa.array([r.key for r in chunk], pa.string()),
                "size": pa.array([r.size for r in chunk], pa.int64()),
                "last_modified_date": _timestamps(chunk),
            }
            if versioned:
                columns["is_latest"] = pa.array([r.latest for r in chunk])
                columns["is_delete_marker"] = pa.array([r.delete_marker for r in chunk])
            table = pa.table(columns)
            sink = io.BytesIO()
            if fmt == "ORC":
                orc.write_table(
                    table.set_column(3, "last_modified_date", _timestamps(chunk).cast(pa.timestamp("ns"))),
                    sink,
                    compression="zlib",
                )
                suffix = "orc"
            else:
                pq.write_table(table, sink, compression="snappy")
                suffix = "parquet"
            data = sink.getvalue()
        key = f"{base}/data/{run}-{n:04d}.{suffix}"
        fileio.write(key, data)
        entries.append(
            {"key": key.split(f"://{bucket}/", 1)[1], "size": len(data), "MD5checksum": _md5(data)}
        )
    if fmt == "CSV":
        schema = ", ".join(names)
    elif fmt == "ORC":
        kinds = {"Bucket": "string", "Key": "string", "Size": "bigint", "LastModifiedDate": "timestamp"}
        schema = (
            "struct<"
            + ",".join(
                f"{_snake(n)}:{kinds.get(n, 'boolean' if n.startswith('Is') else 'string')}" for n in names
            )
            + ">"
        )
    else:
        kinds = {
            "Bucket": "required binary",
            "Key": "required binary",
            "Size": "optional int64",
            "LastModifiedDate": "optional int64",
        }
        schema = (
            "message s3.inventory { "
            + " ".join(
                f"{kinds.get(n, 'optional boolean' if n[:2] == 'Is' else 'optional binary')} {_snake(n)};"
                for n in names
            )
            + " }"
        )
    manifest = {
        "sourceBucket": source_bucket,
        "destinationBucket": f"arn:aws:s3:::{bucket}",
        "version": "2016-11-30",
        "creationTimestamp": str(created_ms),
        "fileFormat": fmt,
        "fileSchema": schema,
        "files": entries,
    }
    body = json.dumps(manifest, indent=2).encode()
    fileio.write(f"{base}/{run}/manifest.json", body)
    fileio.write(f"{base}/{run}/manifest.checksum", _md5(body).encode())
    return f"{base}/{run}/manifest.json"


def _snake(name: str) -> str:
    return {
        "LastModifiedDate": "last_modified_date",
        "VersionId": "version_id",
        "IsLatest": "is_latest",
        "IsDeleteMarker": "is_delete_marker",
    }.get(name, name.lower())


def write_gcs(
    fileio: FileIO,
    destination: str,
    source_bucket: str,
    rows: Sequence[Listed],
    fmt: str,
    created_ms: int,
    *,
    shards: int = 2,
    config: str = "2f1ac2d4-8d0c-4c8b-9bde-5d4d1b0e6a11",
) -> str:
    """A Storage Insights report (CSV with a header, or Parquet) of ``rows``; returns its manifest."""
    snapshot = datetime.fromtimestamp(created_ms / 1000, timezone.utc)
    stem = f"{destination.rstrip('/')}/{config}_{snapshot.strftime('%Y-%m-%dT%H:%M')}_"
    fields = ["project", "bucket", "name", "size", "timeCreated", "updated", "storageClass"]
    names = []
    for n in range(shards):
        chunk = list(rows[n::shards])
        if fmt == "csv":
            lines = [",".join(fields)]
            for r in chunk:
                cells = [
                    "analytics",
                    r.bucket,
                    r.key,
                    str(r.size),
                    _iso(r.mtime_ms),
                    _iso(r.mtime_ms),
                    "STANDARD",
                ]
                lines.append(",".join(f'"{c}"' if "," in c else c for c in cells))
            data = ("\n".join(lines) + "\n").encode()
        else:
            sink = io.BytesIO()
            pq.write_table(
                pa.table(
                    {
                        "project": ["analytics"] * len(chunk),
                        "bucket": [r.bucket for r in chunk],
                        "name": [r.key for r in chunk],
                        "size": pa.array([r.size for r in chunk], pa.int64()),
                        "timeCreated": _timestamps(chunk),
                        "updated": _timestamps(chunk),
                        "storageClass": ["STANDARD"] * len(chunk),
                    }
                ),
                sink,
            )
            data = sink.getvalue()
        name = f"{n}.{fmt}"
        fileio.write(stem + name, data)
        names.append(stem.rsplit("/", 1)[1] + name)
    options = (
        {"csv_options": {"record_separator": "\n", "delimiter": ",", "header_required": True}}
        if fmt == "csv"
        else {"parquet_options": {}}
    )
    manifest = {
        "report_config": {
            "name": f"projects/analytics/locations/us/reportConfigs/{config}",
            **options,
            "object_metadata_report_options": {
                "metadata_fields": fields,
                "storage_filters": {"bucket": source_bucket},
                "storage_destination_options": {"bucket": destination.split("://", 1)[1].split("/", 1)[0]},
            },
        },
        "records_processed": len(rows),
        "snapshot_time": snapshot.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "shard_count": shards,
        "report_shards_file_names": names,
    }
    fileio.write(stem + "manifest.json", json.dumps(manifest).encode())
    return stem + "manifest.json"


def write_azure(
    fileio: FileIO,
    container_root: str,
    endpoint: str,
    rows: Sequence[Listed],
    fmt: str,
    created_ms: int,
    *,
    rule: str = "tables",
    files: int = 2,
    prefixes: Sequence[str] = (),
    status: str = "Succeeded",
) -> str:
    """An Azure blob inventory run (its rows' ``bucket`` is the container) under the destination
    container at ``container_root``; returns its manifest."""
    started = datetime.fromtimestamp(created_ms / 1000, timezone.utc)
    folder = f"{started.strftime('%Y/%m/%d/%H-%M-%S')}/{rule}"
    fields = ["Name", "Creation-Time", "Last-Modified", "Content-Length", "BlobType", "AccessTier"]
    entries = []
    for n in range(files):
        chunk = list(rows[n::files])
        if fmt == "csv":
            lines = [",".join(fields)]
            for r in chunk:
                t = (
                    started.fromtimestamp(r.mtime_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[
                        :-3
                    ]
                    + "Z"
                )
                lines.append(",".join([f'"{r.bucket}/{r.key}"', t, t, str(r.size), "BlockBlob", "Hot"]))
            data = ("\n".join(lines) + "\n").encode()
        else:
            sink = io.BytesIO()
            pq.write_table(
                pa.table(
                    {
                        "Name": [f"{r.bucket}/{r.key}" for r in chunk],
                        "Creation-Time": _timestamps(chunk),
                        "Last-Modified": _timestamps(chunk),
                        "Content-Length": pa.array([r.size for r in chunk], pa.int64()),
                        "BlobType": ["BlockBlob"] * len(chunk),
                        "AccessTier": ["Hot"] * len(chunk),
                    }
                ),
                sink,
            )
            data = sink.getvalue()
        blob = f"{folder}/{rule}_{n + 1}.{fmt}"
        fileio.write(f"{container_root}/{blob}", data)
        entries.append({"blob": blob, "size": len(data)})
    manifest = {
        "destinationContainer": container_root.split("://", 1)[1].split("@", 1)[0],
        "endpoint": endpoint,
        "files": entries,
        "inventoryCompletionTime": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inventoryStartTime": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ruleDefinition": {
            "filters": {
                "blobTypes": ["blockBlob"],
                "includeBlobVersions": False,
                "includeSnapshots": False,
                "prefixMatch": list(prefixes),
            },
            "format": fmt,
            "objectType": "blob",
            "schedule": "daily",
            "schemaFields": fields,
        },
        "ruleName": rule,
        "status": status,
        "summary": {"objectCount": len(rows), "totalObjectSize": sum(r.size for r in rows)},
        "version": "1.0",
    }
    body = json.dumps(manifest).encode()
    fileio.write(f"{container_root}/{folder}/{rule}-manifest.json", body)
    fileio.write(f"{container_root}/{folder}/{rule}-manifest.checksum", _md5(body).encode())
    return f"{container_root}/{folder}/{rule}-manifest.json"
