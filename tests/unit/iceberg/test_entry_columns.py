"""The column-at-a-time manifest writer against the per-entry writer: the same files must give the
same bytes (apart from each file's random sync marker) and the same manifest-list row."""

from __future__ import annotations

import io
import random
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from tablekeeper.iceberg import types as it
from tablekeeper.iceberg.avro_encoder import write_long
from tablekeeper.iceberg.content import ADDED, DATA, DataFile, ManifestEntry
from tablekeeper.iceberg.entry_columns import AddedFiles, MetricColumn, varints, write_added_manifest
from tablekeeper.iceberg.manifest import read_manifest, write_manifest
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import NestedField, Schema

SCHEMA = Schema(
    0,
    (
        NestedField(1, "id", it.LONG, True),
        NestedField(2, "name", it.STRING, False),
        NestedField(3, "day", it.DATE, False),
        NestedField(4, "score", it.DOUBLE, False),
        NestedField(5, "part", it.STRING, False),
        NestedField(6, "bucket", it.INT, False),
    ),
)
SPECS = {
    "unpartitioned": PartitionSpec(0, ()),
    "identity": PartitionSpec(
        1,
        (
            PartitionField(5, 1000, "part", "identity"),
            PartitionField(3, 1001, "day", "identity"),
            PartitionField(6, 1002, "bucket", "identity"),
        ),
    ),
}


def test_varints_match_the_scalar_writer() -> None:
    values = [0, 1, -1, 63, 64, -64, -65, 127, 128, 2**31, -(2**31), 2**63 - 1, -(2**63), 12_345_678_901]
    values += [random.Random(7).randrange(-(2**63), 2**63) for _ in range(200)]
    for v, got in zip(values, varints(np.array(values, np.int64)).to_pylist(), strict=True):
        buf = bytearray()
        write_long(buf, v)
        assert got == bytes(buf), v


def _files(n: int, rng: random.Random, spec: PartitionSpec) -> list[DataFile]:
    out = []
    for i in range(n):
        part: tuple[Any, ...] = ()
        if spec.fields:
            part = (
                rng.choice(["a", "b", None, "ü" * rng.randrange(0, 70)]),
                rng.choice([None, -3, 0, 19_000]),
                rng.choice([None, 1, -(2**31)]),
            )
        bounds = {
            1: (rng.randrange(-(2**63), 2**63).to_bytes(8, "little", signed=True)),
            2: b"x" * rng.randrange(0, 100),
            4: b"\x00" * 8,
        }
        kept_lower = {k: v for k, v in bounds.items() if rng.random() < 0.7}
        kept_upper = {k: v for k, v in bounds.items() if rng.random() < 0.7}
        nulls = {k: rng.randrange(0, 2**40) for k in (1, 2, 3, 4) if rng.random() < 0.6}
        out.append(
            DataFile(
                content=DATA,
                file_path=f"s3://bucket/t/data/{i:06d}-{'é' * rng.randrange(0, 40)}.parquet",
                file_format="PARQUET",
                partition=part,
                record_count=rng.randrange(0, 2**40),
                file_size_in_bytes=rng.randrange(0, 2**50),
                null_value_counts=nulls or None,
                lower_bounds=kept_lower or None,
                upper_bounds=kept_upper or None,
                spec_id=spec.spec_id,
            )
        )
    return out


def _columns(files: list[DataFile]) -> AddedFiles:
    distinct: dict[tuple[Any, ...], int] = {}
    index = np.array([distinct.setdefault(f.partition, len(distinct)) for f in files], np.int64)

    def metric(name: str, ids: tuple[int, ...], kind: pa.DataType) -> tuple[MetricColumn, ...]:
        cols = []
        for fid in ids:
            values = [(getattr(f, name) or {}).get(fid) for f in files]
            if any(v is not None for v in values):
                cols.append(MetricColumn(fid, pa.array(values, kind)))
        return tuple(cols)

    return AddedFiles(
        file_path=pa.array([f.file_path for f in files], pa.string()),
        record_count=pa.array([f.record_count for f in files], pa.int64()),
        file_size=pa.array([f.file_size_in_bytes for f in files], pa.int64()),
        partitions=tuple(distinct),
        partition_index=index,
        null_value_counts=metric("null_value_counts", (4, 1, 2, 3), pa.int64()),
        lower_bounds=metric("lower_bounds", (2, 1, 4), pa.binary()),
        upper_bounds=metric("upper_bounds", (1, 2, 4), pa.binary()),
    )


def _records(data: bytes) -> list[dict[str, Any]]:
    return list(fastavro.reader(io.BytesIO(data)))


def _without_sync(data: bytes) -> bytes:
    reader = fastavro.reader(io.BytesIO(data))
    header_end = data.index(reader._header["sync"]) + 16  # type: ignore[attr-defined]
    return data[: header_end - 16] + data[header_end:].replace(reader._header["sync"], b"SYNC")  # type: ignore[attr-defined]


@pytest.mark.parametrize("format_version", [1, 2, 3])
@pytest.mark.parametrize("spec_name", ["unpartitioned", "identity"])
@pytest.mark.parametrize("n", [0, 1, 7, 3_000])
def test_same_bytes_and_row_as_the_per_entry_writer(format_version: int, spec_name: str, n: int) -> None:
    spec = SPECS[spec_name]
    files = _files(n, random.Random(n * 31 + format_version), spec)
    path = "s3://bucket/t/metadata/m0.avro"
    want, want_row = write_manifest(
        path,
        [ManifestEntry(ADDED, 42, f, None, None) for f in files],
        format_version=format_version,
        spec=spec,
        schema=SCHEMA,
        snapshot_id=42,
    )
    got = write_added_manifest(
        path, _columns(files), format_version=format_version, spec=spec, schema=SCHEMA, snapshot_id=42
    )
    assert got is not None
    data, row = got
    assert _without_sync(data) == _without_sync(want)
    assert row == want_row
    partition_type = spec.partition_type(SCHEMA)
    read = read_manifest(data, row, partition_type, committed=False)
    assert [e.data_file for e in read] == [
        e.data_file for e in read_manifest(want, want_row, partition_type, committed=False)
    ]
    assert len(_records(data)) == n


def test_slices_cover_the_files_once() -> None:
    files = _files(50, random.Random(3), SPECS["identity"])
    cols = _columns(files)
    parts = [cols.slice(a, b) for a, b in ((0, 20), (20, 45), (45, 50))]
    assert sum(p.num_files for p in parts) == 50
    assert [p for s in parts for p in s.file_path.to_pylist()] == [f.file_path for f in files]


def test_a_type_it_does_not_write_hands_back() -> None:
    schema = Schema(0, (NestedField(1, "amount", it.DecimalType(38, 2), False),))
    spec = PartitionSpec(1, (PartitionField(1, 1000, "amount", "identity"),))
    cols = AddedFiles(
        pa.array(["p"]),
        pa.array([1], pa.int64()),
        pa.array([1], pa.int64()),
        ((None,),),
        np.zeros(1, np.int64),
    )
    # decimal partition values (fixed-size bytes of the unscaled value) are the per-entry writer's
    assert (
        write_added_manifest("m.avro", cols, format_version=2, spec=spec, schema=schema, snapshot_id=1)
        is None
    )
