"""An object store's own inventory report as a table location's file list (``remove-orphans
--inventory``), instead of listing the location.

Three services write them, each with a manifest that names the report's data files:

- **S3 Inventory** (``manifest.json`` beside ``manifest.checksum``; data files in CSV, gzipped
  and without a header, keys URL-encoded; ORC; Parquet): the source bucket is in the manifest,
  the creation time is when the scan began, and each data file carries its MD5.
- **Google Cloud Storage Insights** inventory reports (``<config>_<time>_manifest.json`` beside
  its shards, CSV or Parquet): a report always covers a whole bucket.
- **Azure Storage blob inventory** (``<rule>-manifest.json`` beside ``<rule>-manifest.checksum``,
  CSV with a header row or Parquet): the rule's filters are in the manifest; names start with
  the container.

The manifest is read and judged here, before any row (``open_inventory``): a report not finished,
older than the run's cut-off, of another bucket, container or account, or filtered so that it may
miss part of the location is refused by name. Each data file is read whole by one task
(``read_part``), its checksum or size checked, and its rows streamed as a listing's ``FileInfo``:
only the current versions of objects under the scanned location, kept by a vectorised prefix test
before any row becomes a Python object, so a report of a whole bucket costs little per row that is
not the table's.

A report is older than the store: an object it lists may since be gone or rewritten under the same
name. The engines therefore look at each orphan once more before it is journaled
(``still_old``): only a file still there and still older than the cut-off is deleted. A file
written after the report is in no report, so never touched.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Literal
from urllib.parse import quote_plus, unquote_plus

import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.errors import UnusableInventory
from tablekeeper.files.orphans import CHANGED
from tablekeeper.io import FileIO
from tablekeeper.io.fileio import FileInfo
from tablekeeper.io.uri import AZURE_SCHEMES, location_to_path, strip_trailing_slash

Service = Literal["s3", "gcs", "azure"]
Format = Literal["csv", "parquet", "orc"]

_S3_MANIFEST = "manifest.json"
_S3_RUN = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z$")
_GCS_MANIFEST = re.compile(r"^(?P<config>.+)_(?P<time>[^_]+)_manifest\.json$")
_AZURE_MANIFEST = "-manifest.json"
_BATCH_ROWS = 65_536


@dataclass(frozen=True)
class Fields:
    """Where a report keeps what a listing needs, by the report's own column names."""

    key: str
    mtime: str
    size: str | None = None
    bucket: str | None = None
    latest: str | None = None  # false on an object's older versions
    deleted: str | None = None  # true on a delete marker or a deleted blob
    folder: str | None = None  # true on a directory of a hierarchical namespace
    snapshot: str | None = None  # set on a blob's snapshots

    def columns(self) -> list[str]:
        names = (self.key, self.mtime, self.size, self.bucket, self.latest, self.deleted)
        return [n for n in (*names, self.folder, self.snapshot) if n is not None]


@dataclass(frozen=True)
class Part:
    """One data file of a report."""

    location: str
    size: int | None = None
    md5: str | None = None  # hex


@dataclass(frozen=True)
class Inventory:
    """A report, judged: its data files and how to read them (pickled to executors)."""

    service: Service
    manifest: str
    created_ms: int
    file_format: Format
    fields: Fields
    parts: tuple[Part, ...]
    csv_columns: tuple[str, ...] = ()  # without a header row: every column, in order
    csv_header: bool = False
    csv_delimiter: str = ","
    gzipped: bool = False
    keys_encoded: bool = False  # S3's CSV: URL-encoded keys
    container: str | None = None  # Azure: names start with it
    rows_expected: int | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "manifest": self.manifest,
            "created": datetime.fromtimestamp(self.created_ms / 1000, timezone.utc).isoformat(),
            "format": self.file_format,
            "data_files": len(self.parts),
        }


@dataclass(frozen=True)
class Scope:
    """Which objects of a report are the scanned location's: the store root they are spelled
    under (``scheme://authority``), the bucket or container, and the key prefix."""

    root: str
    bucket: str
    prefix: str  # the location's key, ending "/"

    @classmethod
    def of(cls, location: str) -> Scope:
        parts = location_to_path(strip_trailing_slash(location))
        if parts.scheme in ("file", "") or not parts.authority:
            raise UnusableInventory(
                f"{location} is not in an object store: an inventory report lists a bucket; "
                "drop --inventory to list the location"
            )
        bucket = parts.authority.rpartition("@")[0] if parts.scheme in AZURE_SCHEMES else parts.authority
        root = location[: len(location) - len(parts.path)] if parts.path else location
        return cls(root.rstrip("/"), bucket, parts.path.strip("/") + "/")


def _refuse(inventory: str, why: str) -> UnusableInventory:
    return UnusableInventory(f"inventory {inventory} {why}")


def open_inventory(location: str, scope: Scope, cutoff_ms: int, io: FileIO | None = None) -> Inventory:
    """The report at ``location`` (its manifest, or the directory of one report or of a
    configuration's runs: the latest finished run), checked to cover ``scope`` and to be no
    older than ``cutoff_ms``."""
    io = io or FileIO.for_location(location)
    manifest = _find_manifest(io, strip_trailing_slash(location))
    try:
        body = json.loads(io.read(manifest))
    except ValueError as err:
        raise _refuse(manifest, f"is not JSON ({err}): name a report's manifest") from None
    if not isinstance(body, dict):
        raise _refuse(manifest, "is not a report manifest (a JSON object)")
    if "sourceBucket" in body:
        inventory = _s3(io, manifest, body, scope)
    elif "report_shards_file_names" in body or "shard_count" in body:
        inventory = _gcs(io, manifest, body, scope)
    elif "ruleDefinition" in body or "inventoryCompletionTime" in body:
        inventory = _azure(io, manifest, body, scope)
    else:
        raise _refuse(manifest, "is none of S3 Inventory's, Storage Insights' or Azure blob inventory's")
    if inventory.created_ms < cutoff_ms:
        raise _refuse(
            manifest,
            f"was taken at {_iso(inventory.created_ms)}, before the --older-than cut-off "
            f"{_iso(cutoff_ms)}: an object it lists as old may have been written again since; use a "
            "newer report or a longer --older-than",
        )
    for part in inventory.parts:
        size = io.file_info(part.location)
        if size is None:
            raise _refuse(manifest, f"names {part.location}, which is not there: the report is partial")
        if part.size is not None and size.size != part.size:
            raise _refuse(manifest, f"says {part.location} holds {part.size} bytes, not {size.size}")
    return inventory


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _find_manifest(io: FileIO, location: str) -> str:
    if location.endswith(".json"):
        return location
    files, dirs = io.list_dir(location)
    names = {f.location.rsplit("/", 1)[-1]: f.location for f in files}
    if _S3_MANIFEST in names:
        return names[_S3_MANIFEST]
    azure = [n for n in names if n.endswith(_AZURE_MANIFEST)]
    if len(azure) == 1:
        return names[azure[0]]
    gcs = sorted((_parse_time(m["time"]), n) for n in names if (m := _GCS_MANIFEST.match(n)) is not None)
    if gcs:
        return names[gcs[-1][1]]  # a configuration's runs share its directory: the latest
    # An S3 configuration's directory: one directory per run, named by its time.
    runs = sorted(d for d in dirs if _S3_RUN.match(d.rstrip("/").rsplit("/", 1)[-1]))
    for run in reversed(runs):
        checksum = strip_trailing_slash(run) + "/manifest.checksum"
        if io.exists(checksum):  # written last: the run is finished
            return strip_trailing_slash(run) + "/" + _S3_MANIFEST
    raise UnusableInventory(
        f"--inventory {location} holds no report manifest: name the manifest file (S3's manifest.json, "
        "Storage Insights' <config>_<time>_manifest.json, Azure's <rule>-manifest.json)"
    )


def _parse_time(text: str) -> int:
    """Milliseconds of an ISO-8601 time (UTC when it names no zone)."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return int(value.timestamp() * 1000)


def _sibling(manifest: str, name: str) -> str:
    return manifest.rsplit("/", 1)[0] + "/" + name


def _checksum(io: FileIO, manifest: str, checksum: str) -> None:
    """A manifest's MD5 file: present (written when the report is finished) and agreeing."""
    if not io.exists(checksum):
        raise _refuse(manifest, f"has no {checksum.rsplit('/', 1)[-1]}: the report is not finished")
    want = io.read(checksum).decode("ascii", "replace").strip().lower()
    if hashlib.md5(io.read(manifest), usedforsecurity=False).hexdigest() != want:
        raise _refuse(manifest, "does not match its checksum file: the report is partial or changed")


def _s3(io: FileIO, manifest: str, body: dict[str, Any], scope: Scope) -> Inventory:
    _checksum(io, manifest, _sibling(manifest, "manifest.checksum"))
    if body.get("sourceBucket") != scope.bucket:
        raise _refuse(manifest, f"lists bucket {body.get('sourceBucket')!r}, not {scope.bucket!r}")
    fmt = str(body.get("fileFormat", "")).lower()
    schema = str(body.get("fileSchema", ""))
    destination = str(body.get("destinationBucket", "")).removeprefix("arn:aws:s3:::")
    root = location_to_path(manifest)
    if fmt not in ("csv", "orc", "parquet") or not destination:
        raise _refuse(
            manifest, f"has fileFormat {fmt!r} or no destinationBucket: not an S3 Inventory manifest"
        )
    if fmt == "csv":
        columns = tuple(c.strip() for c in schema.split(","))
        fields = Fields("Key", "LastModifiedDate", "Size", "Bucket", "IsLatest", "IsDeleteMarker")
    else:
        columns = ()
        fields = Fields("key", "last_modified_date", "size", "bucket", "is_latest", "is_delete_marker")
    if columns:
        present = set(columns)
    elif fmt == "orc":  # struct<bucket:string,key:string,...>
        present = set(re.findall(r"(\w+):", schema))
    else:  # message s3.inventory { required binary bucket (UTF8); optional int64 size; ... }
        present = set(re.findall(r"(?:required|optional)\s+\w+\s+(\w+)", schema))
    fields = _present(fields, present, manifest)
    parts = tuple(
        Part(
            f"{root.scheme}://{destination}/{f['key']}",
            int(f["size"]),
            str(f.get("MD5checksum", "")).lower() or None,
        )
        for f in body.get("files", ())
    )
    return Inventory(
        "s3",
        manifest,
        int(body["creationTimestamp"]),
        fmt,  # type: ignore[arg-type]
        fields,
        parts,
        csv_columns=columns,
        gzipped=fmt == "csv",
        keys_encoded=fmt == "csv",
    )


def _present(fields: Fields, present: set[str] | None, manifest: str) -> Fields:
    """``fields`` without the optional columns a report does not have; the key and a time are
    required (an object of unknown age must never pass for old)."""
    if not present:  # not said: the data files' own columns decide (a required one missing fails)
        return fields
    for required in (fields.key, fields.mtime):
        if required not in present:
            raise _refuse(manifest, f"has no {required} field: add it to the report's configuration")

    def keep(name: str | None) -> str | None:
        return name if name in present else None

    return Fields(
        fields.key,
        fields.mtime,
        keep(fields.size),
        keep(fields.bucket),
        keep(fields.latest),
        keep(fields.deleted),
        keep(fields.folder),
        keep(fields.snapshot),
    )


def _gcs(io: FileIO, manifest: str, body: dict[str, Any], scope: Scope) -> Inventory:
    config = body.get("report_config") or {}
    shards = [str(n).rsplit("/", 1)[-1] for n in body.get("report_shards_file_names") or ()]
    count = body.get("shard_count")
    if count is not None and int(count) != len(shards):
        raise _refuse(manifest, f"names {len(shards)} shards of {count}: the report is partial")
    options = config.get("object_metadata_report_options") or {}
    bucket = (options.get("storage_filters") or {}).get("bucket")
    fields = Fields("name", "updated", "size", "bucket")
    wanted = options.get("metadata_fields")
    present = set(wanted) if wanted else None
    if bucket is not None and bucket != scope.bucket:
        raise _refuse(manifest, f"lists bucket {bucket!r}, not {scope.bucket!r}")
    if bucket is None and present is not None and "bucket" not in present:
        raise _refuse(manifest, "names no source bucket: add the bucket field to the report")
    if present is not None and "updated" not in present and "timeCreated" in present:
        fields = Fields("name", "timeCreated", "size", "bucket")
    fields = _present(fields, present, manifest)
    csv = config.get("csv_options")
    fmt: Format = (
        "parquet"
        if config.get("parquet_options") is not None or (shards and shards[0].endswith(".parquet"))
        else "csv"
    )
    snapshot = body.get("snapshot_time")
    if not snapshot:
        raise _refuse(manifest, "has no snapshot_time: not a Storage Insights manifest")
    return Inventory(
        "gcs",
        manifest,
        _parse_time(str(snapshot)),
        fmt,
        fields,
        tuple(Part(_sibling(manifest, s)) for s in shards),
        csv_header=bool((csv or {}).get("header_required", True)),
        csv_delimiter=str((csv or {}).get("delimiter") or ","),
        rows_expected=int(body["records_processed"]) if "records_processed" in body else None,
    )


def _azure(io: FileIO, manifest: str, body: dict[str, Any], scope: Scope) -> Inventory:
    rule = str(body.get("ruleName", ""))
    _checksum(io, manifest, manifest.removesuffix(".json") + ".checksum")
    status = str(body.get("status", ""))
    if status.lower() != "succeeded":
        raise _refuse(manifest, f"has status {status!r}: only a Succeeded run lists every blob")
    definition = body.get("ruleDefinition") or {}
    if str(definition.get("objectType", "blob")).lower() != "blob":
        raise _refuse(manifest, f"rule {rule!r} lists containers, not blobs")
    endpoint = str(body.get("endpoint", ""))
    account = re.sub(r"^\w+://", "", endpoint).split(".", 1)[0].split("/", 1)[0]
    table_account = _azure_account(scope.root)
    if table_account is not None and account and account != table_account:
        raise _refuse(manifest, f"lists account {account!r}, not {table_account!r}")
    filters = definition.get("filters") or {}
    path = f"{scope.bucket}/{scope.prefix}"
    included = filters.get("prefixMatch") or []
    if included and not any(path.startswith(p) for p in included):
        raise _refuse(manifest, f"rule {rule!r} lists only {included}, not all of {path}")
    excluded = [p for p in filters.get("excludePrefix") or [] if p.startswith(path) or path.startswith(p)]
    if excluded:
        raise _refuse(manifest, f"rule {rule!r} leaves out {excluded}, inside {path}")
    types = [str(t).lower() for t in filters.get("blobTypes") or ["blockblob"]]
    if "blockblob" not in types:
        raise _refuse(manifest, f"rule {rule!r} lists {types}, not block blobs")
    if filters.get("creationTime"):
        raise _refuse(manifest, f"rule {rule!r} lists blobs by creation time: it may miss older ones")
    schema = definition.get("schemaFields")
    fields = Fields(
        "Name",
        "Last-Modified",
        "Content-Length",
        latest="IsCurrentVersion",
        deleted="Deleted",
        folder="hdi_isfolder",
        snapshot="Snapshot",
    )
    if schema and "Last-Modified" not in schema and "Creation-Time" in schema:
        fields = replace(fields, mtime="Creation-Time")
    fields = _present(fields, set(schema) if schema else None, manifest)
    fmt = str(definition.get("format", "csv")).lower()
    if fmt not in ("csv", "parquet"):
        raise _refuse(manifest, f"has format {fmt!r}: only csv and parquet reports are written")
    destination = str(body.get("destinationContainer", ""))
    root = location_to_path(manifest)
    base = manifest[: len(manifest) - len(root.path)]
    container_root = _container_root(base, root.scheme, destination)
    parts = tuple(Part(f"{container_root}/{f['blob']}", int(f["size"])) for f in body.get("files", ()))
    started = body.get("inventoryStartTime")
    if not started:
        raise _refuse(manifest, "has no inventoryStartTime: not an Azure blob inventory manifest")
    summary = body.get("summary") or {}
    return Inventory(
        "azure",
        manifest,
        _parse_time(str(started)),
        fmt,  # type: ignore[arg-type]
        fields,
        parts,
        csv_header=True,
        container=scope.bucket,
        rows_expected=int(summary["objectCount"]) if "objectCount" in summary else None,
    )


def _azure_account(root: str) -> str | None:
    parts = location_to_path(root)
    if parts.scheme not in AZURE_SCHEMES:
        return None
    host = parts.authority.rpartition("@")[2]
    return host.split(".", 1)[0] or None


def _container_root(base: str, scheme: str, container: str) -> str:
    """The destination container's root, spelled as the manifest's own location."""
    if scheme in AZURE_SCHEMES:
        host = base.split("://", 1)[1].rpartition("@")[2].rstrip("/")
        return f"{scheme}://{container}@{host}"
    return base.rstrip("/")


# -- reading a data file (in a task) ---------------------------------------------------------------


def read_part(inventory: Inventory, part: Part, scope: Scope, io: FileIO | None = None) -> Iterator[FileInfo]:
    """The current objects under ``scope`` that one data file lists, as a listing yields them."""
    io = io or FileIO.for_location(part.location)
    data = io.read(part.location)
    if part.md5 is not None and hashlib.md5(data, usedforsecurity=False).hexdigest() != part.md5:
        raise _refuse(inventory.manifest, f"data file {part.location} does not match its MD5: it is partial")
    for batch in _batches(inventory, data):
        yield from _infos(inventory, batch, scope)


def _batches(inventory: Inventory, data: bytes) -> Iterator[pa.RecordBatch]:
    columns = inventory.fields.columns()
    if inventory.file_format == "parquet":
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(pa.BufferReader(data))
        yield from parquet.iter_batches(
            _BATCH_ROWS, columns=[c for c in columns if c in parquet.schema_arrow.names]
        )
    elif inventory.file_format == "orc":
        from pyarrow import orc

        reader = orc.ORCFile(pa.BufferReader(data))
        names = set(reader.schema.names)
        for stripe in range(reader.nstripes):
            read = reader.read_stripe(stripe, columns=[c for c in columns if c in names])
            yield from read.to_batches() if isinstance(read, pa.Table) else [read]
    else:
        yield from _csv_batches(inventory, data, columns)


def _csv_batches(inventory: Inventory, data: bytes, columns: list[str]) -> Iterator[pa.RecordBatch]:
    import csv

    import pyarrow.csv as pacsv

    raw = gzip.decompress(data) if inventory.gzipped or data[:2] == b"\x1f\x8b" else data
    if inventory.csv_header:
        first = raw[: raw.find(b"\n") if b"\n" in raw else len(raw)].decode("utf-8-sig").strip("\r")
        names = next(csv.reader([first], delimiter=inventory.csv_delimiter), [])
        read = pacsv.ReadOptions(autogenerate_column_names=False)
    else:
        names = list(inventory.csv_columns)
        read = pacsv.ReadOptions(column_names=names)
    for required in (inventory.fields.key, inventory.fields.mtime):
        if required not in names:
            raise _refuse(inventory.manifest, f"has no {required} column: add it to the report")
    wanted = [c for c in columns if c in names]
    reader = pacsv.open_csv(
        pa.BufferReader(raw),
        read_options=read,
        parse_options=pacsv.ParseOptions(delimiter=inventory.csv_delimiter, newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types={c: pa.string() for c in wanted}, include_columns=wanted, strings_can_be_null=True
        ),
    )
    yield from reader


def _flag(batch: pa.RecordBatch, name: str | None, default: bool) -> pa.Array:
    if name is None or name not in batch.schema.names:
        return pa.array([default] * batch.num_rows, pa.bool_())
    column = batch.column(name)
    if not pa.types.is_boolean(column.type):
        column = pc.equal(pc.utf8_lower(pc.cast(column, pa.string())), "true")
    return pc.fill_null(column, default)


def _prefix_variants(inventory: Inventory, scope: Scope) -> tuple[str, ...]:
    """The key prefix as the report spells it (S3's CSV: URL-encoded, '/' kept or not)."""
    prefix = f"{inventory.container}/{scope.prefix}" if inventory.container else scope.prefix
    if not inventory.keys_encoded:
        return (prefix,)
    return tuple(dict.fromkeys((prefix, quote_plus(prefix, safe="/"), quote_plus(prefix, safe=""))))


def _infos(inventory: Inventory, batch: pa.RecordBatch, scope: Scope) -> Iterator[FileInfo]:
    fields = inventory.fields
    for required in (fields.key, fields.mtime):
        if required not in batch.schema.names:
            raise _refuse(inventory.manifest, f"has no {required} column: add it to the report")
    keys = batch.column(fields.key)
    keep = None
    for variant in _prefix_variants(inventory, scope):
        hit = pc.starts_with(keys, variant)
        keep = hit if keep is None else pc.or_(keep, hit)
    assert keep is not None
    keep = pc.and_(pc.fill_null(keep, False), _flag(batch, fields.latest, True))
    for name in (fields.deleted, fields.folder):
        keep = pc.and_(keep, pc.invert(_flag(batch, name, False)))
    if fields.snapshot is not None and fields.snapshot in batch.schema.names:
        snap = pc.cast(batch.column(fields.snapshot), pa.string())
        keep = pc.and_(keep, pc.or_(pc.is_null(snap), pc.equal(snap, "")))
    if fields.bucket is not None and fields.bucket in batch.schema.names:
        keep = pc.and_(keep, pc.fill_null(pc.equal(batch.column(fields.bucket), scope.bucket), False))
    kept = batch.filter(keep)
    if kept.num_rows == 0:
        return
    mtimes = _millis(kept.column(fields.mtime)).to_pylist()
    sizes = (
        pc.cast(kept.column(fields.size), pa.int64()).to_pylist()
        if fields.size is not None and fields.size in kept.schema.names
        else [None] * kept.num_rows
    )
    skip = len(inventory.container) + 1 if inventory.container else 0
    for spelled, mtime, size in zip(kept.column(fields.key).to_pylist(), mtimes, sizes, strict=True):
        key = (unquote_plus(spelled) if inventory.keys_encoded else spelled)[skip:]
        if not key.startswith(scope.prefix) or key.endswith("/"):
            continue  # a spelling that only looked like the prefix; a directory marker
        # An unknown age or size must not pass for an old file: such a row is never an orphan.
        if mtime is None or size is None:
            continue
        yield FileInfo(f"{scope.root}/{key}", int(size), int(mtime))


def _millis(column: pa.Array) -> pa.Array:
    kind = column.type
    if pa.types.is_timestamp(kind):
        return pc.cast(pc.cast(column, pa.timestamp("ms", tz="UTC")), pa.int64())
    if pa.types.is_integer(kind):
        return column  # S3's Parquet as some tools write it: epoch milliseconds
    text = pc.cast(column, pa.string())
    return pc.cast(pc.cast(text, pa.timestamp("ms", tz="UTC")), pa.int64())


# -- before a delete ---------------------------------------------------------------------------------


def still_old(io: FileIO, location: str, cutoff_ms: int) -> bool:
    """Whether the file a report listed is still there and still older than the cut-off, by the
    store's own clock as a listing would say: a report is older than the store."""
    info = io.file_info(location)
    return info is not None and info.mtime_ms < cutoff_ms


def recheck(rows: Iterable[tuple[str, str, str, int]], cutoff_ms: int) -> Iterator[tuple[str, str, str, int]]:
    """Rows (status, path, key, size) of the unreferenced files a report listed, each file looked
    at again: one gone or written since gets the status ``changed`` (never deleted)."""
    io: FileIO | None = None
    for status, path, key, size in rows:
        io = io or FileIO.for_location(path)
        yield (status if still_old(io, path, cutoff_ms) else CHANGED), path, key, size
