"""A table's state as of a snapshot: its manifests and live files, read through FileIO.

Used by every job to plan and by the commit layer to carry manifests forward.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from tablekeeper.errors import CorruptMetadataError, FileNotFound, UnsupportedFeatureError
from tablekeeper.iceberg.content import ADDED, DELETED, EXISTING, MANIFEST_DATA, ManifestEntry, ManifestFile
from tablekeeper.iceberg.delete_index import DeleteIndex
from tablekeeper.iceberg.health import Tally, new_tally
from tablekeeper.iceberg.manifest import read_manifest, read_manifest_list
from tablekeeper.iceberg.metadata import Snapshot, TableMetadata
from tablekeeper.iceberg.rewrite_plan import RewriteOptions
from tablekeeper.io import FileIO
from tablekeeper.io.uri import join_location


def metadata_directory(meta: TableMetadata) -> str:
    """Where the table's metadata files go: ``write.metadata.path`` when set, as Iceberg Java."""
    return meta.properties.get("write.metadata.path") or join_location(meta.location, "metadata")


def _read(io: FileIO, location: str, what: str) -> bytes:
    try:
        return io.read(location)
    except FileNotFound:
        raise CorruptMetadataError(
            f"{what} {location} is missing: the table's metadata references it"
        ) from None


def load_manifests(io: FileIO, snapshot: Snapshot | None) -> list[ManifestFile]:
    if snapshot is None:
        return []
    if snapshot.manifest_list is None:
        raise UnsupportedFeatureError(
            f"snapshot {snapshot.snapshot_id} embeds its manifests (pre-1.0 v1 layout): "
            "rewrite the table first"
        )
    return read_manifest_list(_read(io, snapshot.manifest_list, "manifest list"), snapshot.manifest_list)


def read_manifest_bytes(io: FileIO, manifest: ManifestFile) -> bytes:
    return _read(io, manifest.manifest_path, "manifest")


def read_entries(io: FileIO, meta: TableMetadata, manifest: ManifestFile) -> list[ManifestEntry]:
    spec = meta.spec(manifest.partition_spec_id)
    # Partition values are typed by the schema the spec was built on; the current schema keeps
    # every source field id (Iceberg never reuses ids), so its types resolve old specs too.
    ptype = spec.partition_type(meta.schema())
    return read_manifest(_read(io, manifest.manifest_path, "manifest"), manifest, ptype)


@dataclass(frozen=True)
class LiveFiles:
    data: tuple[ManifestEntry, ...]
    deletes: tuple[ManifestEntry, ...]


def iter_live_entries(io: FileIO, meta: TableMetadata, snapshot: Snapshot | None) -> Iterator[ManifestEntry]:
    for manifest in load_manifests(io, snapshot):
        if not manifest.has_live_files():
            continue
        for entry in read_entries(io, meta, manifest):
            if entry.is_live:
                yield entry


def live_files(io: FileIO, meta: TableMetadata, snapshot: Snapshot | None) -> LiveFiles:
    data: list[ManifestEntry] = []
    deletes: list[ManifestEntry] = []
    for manifest in load_manifests(io, snapshot):
        if not manifest.has_live_files():
            continue
        target = data if manifest.content == MANIFEST_DATA else deletes
        target.extend(e for e in read_entries(io, meta, manifest) if e.is_live)
    return LiveFiles(tuple(data), tuple(deletes))


def iter_entries(
    io: FileIO, meta: TableMetadata, manifests: Sequence[ManifestFile]
) -> Iterator[ManifestEntry]:
    """The live entries of ``manifests``, manifest by manifest."""
    for manifest in manifests:
        if manifest.has_live_files():
            yield from (e for e in read_entries(io, meta, manifest) if e.is_live)


def tally_manifests(
    io: FileIO,
    meta: TableMetadata,
    manifests: Sequence[ManifestFile],
    index: DeleteIndex,
    options: RewriteOptions,
) -> Tally:
    """One tally of the live data files of ``manifests`` (in this process)."""
    tally = new_tally(meta, options)
    if index.is_empty:
        for manifest in manifests:
            if manifest.has_live_files():
                ptype = meta.spec(manifest.partition_spec_id).partition_type(meta.schema())
                tally.add_sizes(read_manifest_bytes(io, manifest), manifest, ptype, options)
        return tally
    for entry in iter_entries(io, meta, manifests):
        tally.add_data(entry, index.for_data_file(entry), options)
    return tally


def with_counts(io: FileIO, meta: TableMetadata, manifests: Sequence[ManifestFile]) -> list[ManifestFile]:
    """``manifests`` with the file and row counts a v1 list may leave out (null means "assume
    non-zero" in the spec) taken from the manifest itself, so a plan and its checks can rely on them."""
    out: list[ManifestFile] = []
    for m in manifests:
        if m.has_counts():
            out.append(m)
            continue
        files = [0, 0, 0]  # by status: existing, added, deleted
        rows = [0, 0, 0]
        for e in read_entries(io, meta, m):
            files[e.status] += 1
            rows[e.status] += e.data_file.record_count
        out.append(
            replace(
                m,
                existing_files_count=files[EXISTING],
                added_files_count=files[ADDED],
                deleted_files_count=files[DELETED],
                existing_rows_count=rows[EXISTING],
                added_rows_count=rows[ADDED],
                deleted_rows_count=rows[DELETED],
            )
        )
    return out
