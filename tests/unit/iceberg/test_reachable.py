"""Large manifests are read in slices (Avro blocks by index) by several tasks: together the
slices must give exactly the live files of the whole manifest, each once."""

from __future__ import annotations

import io

import fastavro
import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.content import (
    ADDED,
    DATA,
    DELETED,
    EXISTING,
    POSITION_DELETES,
    DataFile,
    ManifestEntry,
)
from tablekeeper.iceberg.reachable import DATA_FILE, POSITION_DELETE_FILE, live_files
from tests.unit.iceberg.test_manifest import SNAPSHOT_ID, write


def _entries(n: int) -> list[ManifestEntry]:
    statuses = (ADDED, EXISTING, DELETED)
    out = []
    for i in range(n):
        f = DataFile(
            content=DATA,
            file_path=f"s3://b/t/data/part-{i:06d}-a-long-name-to-fill-blocks.parquet",
            file_format="PARQUET",
            partition=(),
            record_count=i + 1,
            file_size_in_bytes=1000 + i,
        )
        out.append(ManifestEntry(statuses[i % 3], SNAPSHOT_ID, f, 1, 1))
    return out


@pytest.fixture(scope="module")
def manifest() -> bytes:
    from tablekeeper.iceberg.partitioning import PartitionSpec

    data, _ = write(_entries(12000), 2, spec=PartitionSpec(0))
    blocks = sum(1 for _ in fastavro.block_reader(io.BytesIO(data)))
    assert blocks >= 5, "the manifest must span several Avro blocks for slicing to mean anything"
    return data


@pytest.mark.parametrize("parts", [1, 2, 3, 5, 64])
def test_slices_partition_the_live_files(manifest: bytes, parts: int) -> None:
    whole = live_files(manifest, "m")
    assert len(whole) == 8000  # ADDED and EXISTING, not DELETED
    assert all(f.kind == DATA_FILE for f in whole)
    sliced = [f for part in range(parts) for f in live_files(manifest, "m", part, parts)]
    assert sorted(sliced, key=lambda f: f.path) == sorted(whole, key=lambda f: f.path)
    assert len({f.path for f in sliced}) == len(sliced)


def test_delete_files_keep_their_kind_in_slices() -> None:
    from tablekeeper.iceberg.partitioning import PartitionSpec

    entries = [
        ManifestEntry(
            ADDED,
            SNAPSHOT_ID,
            DataFile(
                content=POSITION_DELETES,
                file_path=f"/t/d-{i}.parquet",
                file_format="PARQUET",
                partition=(),
                record_count=1,
                file_size_in_bytes=7,
            ),
            1,
            1,
        )
        for i in range(10)
    ]
    data, _ = write(entries, 2, spec=PartitionSpec(0))
    assert {f.kind for f in live_files(data, "m", 0, 2) + live_files(data, "m", 1, 2)} == {
        POSITION_DELETE_FILE
    }


def test_bad_slices_and_bytes_are_refused(manifest: bytes) -> None:
    with pytest.raises(ValueError):
        live_files(manifest, "m", 2, 2)
    with pytest.raises(CorruptMetadataError, match="manifest m"):
        live_files(b"not avro", "m", 0, 2)
    with pytest.raises(CorruptMetadataError, match="not readable"):
        live_files(manifest[: len(manifest) // 2], "m", 1, 2)
