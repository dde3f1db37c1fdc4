"""Live-row counts of convert-delta --verify: partitions told apart by bits, delete files counted
against their partition, and manifests counted as written only when the file read back holds
every entry."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tablekeeper.errors import CorruptMetadataError, VerificationFailed
from tablekeeper.iceberg.content import ADDED, DATA, POSITION_DELETES, DataFile, ManifestEntry, ManifestFile
from tablekeeper.iceberg.manifest import count_entries, write_manifest
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import DOUBLE, LONG, NestedField, Schema
from tablekeeper.row_counts import manifest_counts, stats_record_count, written_counts

SCHEMA = Schema(schema_id=0, fields=(NestedField(1, "id", LONG), NestedField(2, "x", DOUBLE)))
SPEC = PartitionSpec(0, (PartitionField(2, 1000, "x", "identity"),))
SNAPSHOT = 42


def data_file(root: Path, n: int, x: float, rows: int, content: int = DATA) -> DataFile:
    return DataFile(
        content=content,
        file_path=f"{root}/data/{n}.parquet",
        file_format="PARQUET",
        partition=(x,),
        record_count=rows,
        file_size_in_bytes=100,
        spec_id=SPEC.spec_id,
    )


def written(root: Path, files: list[DataFile], content: int = 0) -> ManifestFile:
    path = f"{root}/metadata/m-{content}.avro"
    data, manifest = write_manifest(
        path,
        [ManifestEntry(ADDED, SNAPSHOT, f) for f in files],
        format_version=2,
        spec=SPEC,
        schema=SCHEMA,
        snapshot_id=SNAPSHOT,
        content=content,
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data)
    return manifest


@pytest.mark.parametrize(
    ("stats", "rows"),
    [
        ('{"numRecords":12,"minValues":{}}', 12),
        (' { "numRecords" : 9 }', 9),
        # A column named numRecords is not the file's count.
        ('{"minValues":{"numRecords":3},"numRecords" : 7}', 7),
        ('{"minValues":{"numRecords":3}}', None),
        ('{"minValues":{}}', None),
        ("not json", None),
        (None, None),
    ],
)
def test_record_count_from_the_stats_text(stats: str | None, rows: int | None) -> None:
    assert stats_record_count(stats) == rows


def test_nan_and_signed_zero_partitions_count_apart(tmp_path: Path) -> None:
    files = [
        data_file(tmp_path, 1, float("nan"), 5),
        data_file(tmp_path, 2, float("nan"), 6),
        data_file(tmp_path, 3, -0.0, 7),
        data_file(tmp_path, 4, 0.0, 8),
    ]
    manifest = written(tmp_path, files)
    counts = written_counts(manifest, files)
    # Two NaN files share a partition (a tuple key would keep them apart: NaN != NaN); the zeros do not.
    assert sorted(counts.values()) == [7, 8, 11]
    assert counts == manifest_counts(manifest, SPEC.partition_type(SCHEMA))


def test_delete_files_count_against_their_partition(tmp_path: Path) -> None:
    data = [data_file(tmp_path, 1, 1.5, 10)]
    deletes = [data_file(tmp_path, 2, 1.5, 3, content=POSITION_DELETES)]
    data_counts = written_counts(written(tmp_path, data), data)
    delete_counts = written_counts(written(tmp_path, deletes, content=1), deletes)
    assert list(data_counts.values()) == [10] and list(delete_counts.values()) == [-3]
    assert data_counts.keys() == delete_counts.keys()


def test_a_manifest_that_lost_entries_fails_verification(tmp_path: Path) -> None:
    files = [data_file(tmp_path, n, 2.5, 10) for n in range(3)]
    manifest = written(tmp_path, files[:2])
    assert count_entries(Path(manifest.manifest_path).read_bytes(), "m") == 2
    with pytest.raises(VerificationFailed, match="holds 2 entries, 3 were written"):
        written_counts(manifest, files)


def test_a_truncated_manifest_fails_closed(tmp_path: Path) -> None:
    long_name = "x" * 300
    files = [data_file(tmp_path, n, 2.5, 10) for n in range(50)]
    files = [replace(f, file_path=f"{tmp_path}/{long_name}{n}") for n, f in enumerate(files)]
    manifest = written(tmp_path, files)
    path = Path(manifest.manifest_path)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(CorruptMetadataError, match=r"corrupt|holds"):
        written_counts(manifest, files)
