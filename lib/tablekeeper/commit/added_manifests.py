"""Manifests of added data files written from columns (``iceberg.entry_columns``), for a commit
that takes them as ``SnapshotChange.added_manifests``: convert-delta's driver and its tasks."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow.compute as pc

from tablekeeper.commit.summary import SummaryDelta
from tablekeeper.iceberg.content import ManifestFile
from tablekeeper.iceberg.entry_columns import AddedFiles, chunks, write_added_manifest
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.types import Schema
from tablekeeper.io import FileIO

# Entries per manifest: about the 8 MB Iceberg Java aims for.
FILES_PER_MANIFEST = 100_000


def write_added_manifests(
    files: AddedFiles,
    *,
    location: str,
    format_version: int,
    spec: PartitionSpec,
    schema: Schema,
    snapshot_id: int,
    name_prefix: str,
    per_manifest: int = FILES_PER_MANIFEST,
    threads: int = 2,
) -> list[ManifestFile] | None:
    """Manifests of at most ``per_manifest`` of ``files`` each, ``threads`` at a time (the
    encoding is Arrow and zlib work, outside the interpreter lock); names start with
    ``name_prefix`` so a failed run's manifests can be found. ``None`` (nothing left written)
    when the entries need the per-entry writer (e.g. a decimal partition); a failure removes what
    was written."""
    written: list[str] = []

    def one(bounds: tuple[int, int]) -> ManifestFile:
        path = f"{location.rstrip('/')}/metadata/{name_prefix}{uuid.uuid4()}-m0.avro"
        got = write_added_manifest(
            path,
            files.slice(*bounds),
            format_version=format_version,
            spec=spec,
            schema=schema,
            snapshot_id=snapshot_id,
        )
        if got is None:
            raise _PerEntry
        data, manifest = got
        FileIO.for_location(path).create_if_absent(path, data)
        written.append(path)
        return manifest

    try:
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            return list(pool.map(one, chunks(files.num_files, per_manifest)))
    except _PerEntry:
        FileIO.for_location(location).delete_many(list(written))
        return None
    except BaseException:
        FileIO.for_location(location).delete_many(list(written))
        raise


def added_delta(files: AddedFiles, manifests: list[ManifestFile]) -> SummaryDelta:
    """The snapshot summary's counts for ``files``, written as ``manifests``."""
    return SummaryDelta(
        added_data_files=files.num_files,
        added_records=sum(m.added_rows_count or 0 for m in manifests),
        added_files_size=int(pc.sum(files.file_size).as_py() or 0),
    )


class _PerEntry(Exception):
    """The manifest schema has a field or type the column encoder does not write."""
